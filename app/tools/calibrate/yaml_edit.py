"""Setting ``speculative_decoding.spill_threshold`` in the user's config, every other byte kept.

The config is the user's file, comments and layout included, so it is edited as text, not
dumped from a parsed tree: ``set_spill_threshold`` is the pure text edit; ``edit_is_exact``
checks that the edit parses to the old tree with only that value changed; ``write_config``
writes atomically and checks the file again after, restoring it when the check fails.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

from app.tools.calibrate.core import DIGITS, CalibrateError

SECTION = "speculative_decoding"
KEY = "spill_threshold"
COMMENT_TAG = "# specproxy calibrate:"


def format_threshold(value: float) -> str:
    """``value`` as a YAML float with at most DIGITS decimals (PyYAML reads ``1e-06`` as text)."""
    text = f"{value:.{DIGITS}f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


_HEADER = re.compile(rf"^{SECTION}[ \t]*:(?P<rest>.*)$")
_KEY_LINE = re.compile(
    rf"^(?P<indent>[ \t]*){KEY}(?P<sep>[ \t]*:[ \t]*)(?P<value>[^#]*?)[ \t]*(?P<comment>#.*)?$"
)


def set_spill_threshold(text: str, value_text: str, comment: str) -> str:
    """``text`` with ``speculative_decoding.spill_threshold: value_text``; every other byte kept.

    Replaces the key's value where it is (keeping the line's own comment, but replacing an
    earlier calibrate comment with ``comment``), else inserts the key right after the block's
    header at the block's indentation, else appends the block. ValueError when the block
    is written inline (``speculative_decoding: {...}``): that is for a person to edit.
    """
    lines = text.splitlines(keepends=True)
    newline = _newline_of(lines)
    header = next((i for i, line in enumerate(lines) if _HEADER.match(_body(line))), None)
    if header is None:
        out = text
        if out and not out.endswith(("\n", "\r")):
            out += newline
        if out.strip() and not out.endswith(newline * 2):
            out += newline  # a blank line before the new block, as between the others
        nested = _default_indent(lines)
        return f"{out}{SECTION}:{newline}{nested}{KEY}: {value_text}  {comment}{newline}"

    match = _HEADER.match(_body(lines[header]))
    assert match is not None
    rest = match.group("rest").strip()
    if rest and not rest.startswith("#"):
        raise ValueError(f"{SECTION} is written inline; set {KEY}: {value_text} in it by hand")

    end = header + 1
    indent: str | None = None
    for end in range(header + 1, len(lines) + 1):
        if end == len(lines):
            break
        body = _body(lines[end])
        stripped = body.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if body[0] not in " \t":
            break  # the next top-level key
        if indent is None:
            indent = body[: len(body) - len(body.lstrip(" \t"))]

    replaced = False
    for i in range(header + 1, end):
        body = _body(lines[i])
        key = _KEY_LINE.match(body)
        if key is None or key.group("indent") != indent:
            continue
        replaced = True
        lines[i] = _replaced_key_line(key, value_text, comment) + lines[i][len(body) :]
    if replaced:
        return "".join(lines)

    if not lines[header].endswith(("\n", "\r")):
        lines[header] += newline  # the header was the file's last line
    indent = indent if indent is not None else _default_indent(lines)
    lines.insert(header + 1, f"{indent}{KEY}: {value_text}  {comment}{newline}")
    return "".join(lines)


def _replaced_key_line(key: re.Match[str], value_text: str, comment: str) -> str:
    sep = key.group("sep") if key.group("value") else ": "
    head = f"{key.group('indent')}{KEY}{sep}{value_text}"
    old_comment = key.group("comment")
    if old_comment is None:
        return f"{head}  {comment}"
    # Keep a comment's column (aligned comments stay aligned) when the new value fits.
    gap = " " * max(1, key.start("comment") - len(head))
    kept = comment if old_comment.startswith(COMMENT_TAG) else old_comment
    return f"{head}{gap}{kept}"


def _body(line: str) -> str:
    return line.rstrip("\r\n")


def _newline_of(lines: Sequence[str]) -> str:
    for line in lines:
        if line.endswith("\r\n"):
            return "\r\n"
        if line.endswith("\n"):
            return "\n"
    return "\n"


def _default_indent(lines: Iterable[str]) -> str:
    """The indentation the file's first nested line uses (two spaces when it has none)."""
    for line in lines:
        body = _body(line)
        if body.strip() and not body.strip().startswith("#") and body[0] in " \t":
            return body[: len(body) - len(body.lstrip(" \t"))]
    return "  "


def edit_is_exact(old_text: str, new_text: str, value: float) -> bool:
    """Whether ``new_text`` parses to ``old_text``'s tree with only spill_threshold = ``value``."""
    try:
        old, new = yaml.safe_load(old_text), yaml.safe_load(new_text)
    except yaml.YAMLError:
        return False
    if not isinstance(new, dict) or not isinstance(new.get(SECTION), dict):
        return False
    if new[SECTION].get(KEY) != value:
        return False
    old = dict(old) if isinstance(old, dict) else {}
    old_section = old.get(SECTION)
    new = dict(new)
    new[SECTION] = {k: v for k, v in new[SECTION].items() if k != KEY}
    if isinstance(old_section, dict):
        old[SECTION] = {k: v for k, v in old_section.items() if k != KEY}
    elif old_section is None:
        old[SECTION] = {}  # an absent or empty block: the edit may have created it
    return bool(old == new)


def write_config(path: Path, value: float, comment: str) -> None:
    """Set spill_threshold in the config file atomically, keeping every other byte.

    The edit is checked twice: in memory before writing (nothing else may change) and on
    disk after (the file must read back with the value); a failed check leaves the file
    as it was. CalibrateError (exit 1) when it cannot be done.
    """
    path = Path(os.path.realpath(path))  # replace a symlink's target, not the link
    try:
        with open(path, encoding="utf-8", newline="") as src:  # newline="": keep \r\n
            original = src.read()
    except OSError as exc:
        raise CalibrateError(f"cannot read {path}: {exc.strerror or exc}", 1) from exc
    value_text = format_threshold(value)
    by_hand = f"set {SECTION}.{KEY}: {value_text} in {path} by hand"
    try:
        edited = set_spill_threshold(original, value_text, comment)
    except ValueError as exc:
        raise CalibrateError(f"cannot edit {path}: {exc}", 1) from exc
    if not edit_is_exact(original, edited, float(value_text)):
        raise CalibrateError(f"cannot edit {path} safely (unusual layout); {by_hand}", 1)
    try:
        _atomic_write(path, edited)
        with open(path, encoding="utf-8", newline="") as back:
            readback = back.read()
    except OSError as exc:
        raise CalibrateError(f"cannot write {path}: {exc.strerror or exc}; {by_hand}", 1) from exc
    if readback != edited or not edit_is_exact(original, readback, float(value_text)):
        try:
            _atomic_write(path, original)
        except OSError as exc:
            raise CalibrateError(
                f"{path} did not read back as written and could not be restored "
                f"({exc.strerror or exc}); check it, then {by_hand}",
                1,
            ) from exc
        raise CalibrateError(f"{path} did not read back as written; restored it; {by_hand}", 1)


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to a temp file beside ``path`` and rename it over: never half-written."""
    mode = path.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
