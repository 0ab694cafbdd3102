"""``specproxy calibrate``: the spill threshold that sends a target share of drafts to the cloud.

    specproxy calibrate --target-cloud-rate 0.3 [--config config.yaml] [--dry-run] [--json]
                        LOG [LOG ...]

RouteLLM's ``calibrate_threshold`` on the user's own traffic: every speculation-log line
(``app.telemetry.spec_log``) with ``features`` is rescored by the config's current scorer
(not its logged ``spill_score``, so a new policy or scorer file can be calibrated on old
traffic); drafts cut at their token budget (``n_max``) or aborted (``p_min``) score
``inf``, as the proxy sends them to the cloud whatever the threshold. The threshold is
``app.evaluation.metrics.threshold_for_cloud_share`` of those scores: the target is a
budget, never exceeded on the log. It is written, rounded up to 6 decimals (rounding down
could push the share past the target), as ``speculative_decoding.spill_threshold`` into
the config, every other byte of which is kept.

Lines without ``features`` (logged before they were) are skipped and counted. Exit codes:
0 done; 1 the config was not rewritten: the target is unreachable (the forced share alone
exceeds it; the report says what would help) or the file could not be rewritten (left as
it was); 2 a usage, config or log error.

Pure core, thin edges: ``effective_score``, ``calibrate`` and ``set_spill_threshold`` are
pure; ``read_log``, ``write_config`` and ``main`` do the I/O.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from app.config import ConfigError, PolicyName, load_settings
from app.evaluation.metrics import cloud_share_at, threshold_for_cloud_share
from app.routing.scorer import Scorer, load_scorer
from app.telemetry.spec_log.reader import BadLine, iter_entries
from app.tools import parse_or_exit_code, write_stdout

PROG = "specproxy calibrate"
FORCED_STOPS = frozenset({"n_max", "p_min"})  # the proxy sends these drafts to the cloud
DIGITS = 6
UNSET = "(unset)"  # context type of lines without one
SECTION = "speculative_decoding"
KEY = "spill_threshold"
COMMENT_TAG = "# specproxy calibrate:"


class CalibrateError(Exception):
    """A problem that stops the command; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


# -- pure core ------------------------------------------------------------------


def effective_score(stop_reason: object, features: Mapping[str, float], scorer: Scorer) -> float:
    """The score the proxy acts on: ``inf`` for a cut or aborted draft, else the scorer's."""
    if stop_reason in FORCED_STOPS:
        return math.inf
    return scorer.score(features)


def round_up(value: float, digits: int = DIGITS) -> float:
    """The smallest number with ``digits`` decimals that is >= ``value``."""
    rounded = round(value, digits)
    if rounded < value:
        rounded = round(rounded + 10.0**-digits, digits)
    return rounded


@dataclass(frozen=True, slots=True)
class Calibration:
    """The chosen threshold and what it does on the log."""

    threshold: float  # in [0, 1], DIGITS decimals: what goes into the config
    achieved: float  # cloud share on the log at ``threshold``
    forced_share: float  # share cut or aborted: cloud whatever the threshold
    unreachable: bool  # the forced share alone exceeds the target


def calibrate(scores: Sequence[float], target: float) -> Calibration:
    """The threshold sending the largest share <= ``target`` of ``scores`` to the cloud.

    Forced drafts score ``inf``. When they alone exceed the target it cannot be met: the
    threshold is 1.0 (every scored draft local). Otherwise the unrounded threshold is the
    highest score kept local, and rounding it up keeps the same split unless two scores lie
    within 1e-6 of each other (then a few more stay local, never more go to the cloud).
    """
    raw = threshold_for_cloud_share(scores, target)
    forced_share = sum(s == math.inf for s in scores) / len(scores)
    unreachable = raw == math.inf  # only an inf group can be what first overflows here
    # Scores are probabilities: clamping to the config's range [0, 1] changes no split,
    # except that -inf ("all fits") becomes 0.0, which keeps a score of exactly 0.0 local.
    threshold = 1.0 if unreachable else min(1.0, round_up(max(0.0, raw)))
    return Calibration(threshold, cloud_share_at(scores, threshold), forced_share, unreachable)


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


# -- reading the log --------------------------------------------------------------


@dataclass(slots=True)
class Samples:
    """The effective scores of the usable log lines and how the lines were counted."""

    scores: list[float] = field(default_factory=list)
    contexts: list[str] = field(default_factory=list)
    lines: int = 0
    skipped: int = 0
    stop_reasons: Counter[str] = field(default_factory=Counter)


def read_log(paths: Sequence[str], scorer: Scorer) -> Samples:
    """Rescore every usable line of the logs; CalibrateError naming ``FILE:LINE`` on a bad one."""
    samples = Samples()
    for path in paths:
        try:
            for item in iter_entries(path):
                samples.lines += 1
                if isinstance(item, BadLine):
                    raise CalibrateError(f"{path}:{item.line_no}: {item.reason}")
                line_no, entry = item
                features = entry.get("features")
                if features is None:
                    samples.skipped += 1
                    continue
                problem = _features_problem(features, scorer)
                if problem is not None:
                    raise CalibrateError(f"{path}:{line_no}: {problem}")
                stop = entry["draft"].get("stop_reason")
                samples.scores.append(effective_score(stop, features, scorer))
                samples.contexts.append(entry.get("context_type") or UNSET)
                if stop in FORCED_STOPS:
                    samples.stop_reasons[stop] += 1
        except OSError as exc:
            raise CalibrateError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return samples


def _features_problem(features: object, scorer: Scorer) -> str | None:
    if not isinstance(features, dict):
        return f"field 'features' should be an object or null, got {orjson.dumps(features)!r}"
    for name in scorer.features:
        value = features.get(name)
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            return (
                f"features.{name} (read by scorer {scorer.name!r}) is missing or not a "
                "number: the line comes from another version of specproxy"
            )
    return None


# -- reporting --------------------------------------------------------------------


def report(
    *,
    paths: Sequence[str],
    samples: Samples,
    target: float,
    result: Calibration,
    old_threshold: float,
    old_source: str,
    config: str,
    written: bool,
) -> dict[str, Any]:
    """Every figure of a run as plain JSON data (shares in 0..1)."""
    lines = Counter(samples.contexts)
    cloud = Counter(
        ctx for ctx, s in zip(samples.contexts, samples.scores, strict=True) if s > result.threshold
    )
    return {
        "files": list(paths),
        "lines": samples.lines,
        "used": len(samples.scores),
        "skipped_no_features": samples.skipped,
        "target_cloud_rate": target,
        "achieved_cloud_rate": result.achieved,
        "forced_share": result.forced_share,
        "forced": dict(sorted(samples.stop_reasons.items())),
        "unreachable": result.unreachable,
        "old_threshold": old_threshold,
        "old_threshold_source": old_source,
        "new_threshold": result.threshold,
        "by_context_type": {
            ctx: {"lines": n, "cloud_rate": cloud[ctx] / n} for ctx, n in sorted(lines.items())
        },
        "config": config,
        "written": written,
    }


def render_text(data: dict[str, Any]) -> str:
    """The report for a person."""
    pct = _pct
    forced = ", ".join(f"{n} {stop}" for stop, n in data["forced"].items()) or "none"
    out = [
        f"{PROG}: spill_threshold for a {pct(data['target_cloud_rate'])} cloud rate",
        f"  logs:             {', '.join(data['files'])}",
        f"  lines read:       {data['lines']}",
        f"  used:             {data['used']}",
        f"  skipped:          {data['skipped_no_features']} (no features: logged by an older "
        "version)",
        f"  target:           {pct(data['target_cloud_rate'])}",
        f"  achieved:         {pct(data['achieved_cloud_rate'])} of {data['used']} drafts",
        f"  forced to cloud:  {pct(data['forced_share'])} ({forced}: cut or aborted drafts)",
        f"  threshold:        {format_threshold(data['old_threshold'])} "
        f"({data['old_threshold_source']}) -> {format_threshold(data['new_threshold'])}",
        "",
        f"  {'context type':<16}{'lines':>8}{'cloud':>10}",
    ]
    out += [
        f"  {ctx:<16}{row['lines']:>8}{pct(row['cloud_rate']):>10}"
        for ctx, row in data["by_context_type"].items()
    ]
    out.append("")
    value = format_threshold(data["new_threshold"])
    if data["written"]:
        out.append(f"wrote {SECTION}.{KEY}: {value} to {data['config']}")
    else:
        out.append(f"dry run: {data['config']} left as it was ({KEY} would be {value})")
    return "\n".join(out) + "\n"


def _pct(share: float) -> str:
    return f"{100 * share:.2f}%"


def unreachable_warning(data: dict[str, Any]) -> str:
    """Why the target cannot be met and what would help."""
    forced = data["forced"]
    hint = "raise speculative_decoding.max_draft_tokens so fewer drafts are cut at the budget"
    if forced.get("p_min"):
        hint += (
            ", or abort fewer drafts early (raise abort_min_score, lower "
            "abort_min_token_prob, or set early_abort: false)"
        )
    return (
        f"target cloud rate {_pct(data['target_cloud_rate'])} is unreachable: "
        f"{_pct(data['forced_share'])} of the logged drafts were cut or aborted "
        f"({', '.join(f'{n} {stop}' for stop, n in forced.items())}) and go to the cloud "
        f"whatever the threshold; {KEY} left as it was; {hint}"
    )


# -- writing the config -----------------------------------------------------------


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


# -- command line -----------------------------------------------------------------


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a share in [0, 1], not {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Set speculative_decoding.spill_threshold so that the target share of the "
        "logged drafts goes to the cloud (RouteLLM's calibrate_threshold on your traffic).",
    )
    parser.add_argument(
        "--target-cloud-rate",
        type=_share,
        required=True,
        metavar="SHARE",
        help="share of drafts to send to the cloud, in [0, 1] (e.g. 0.3)",
    )
    parser.add_argument("--config", default="config.yaml", help="config to read and update")
    parser.add_argument("--dry-run", action="store_true", help="report only; leave the config")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "logs", nargs="+", metavar="LOG", help="speculation log(s) (logging.spec_log_file, ...)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; 0 done, 1 config not rewritten, 2 usage, config or log error."""
    args = parse_or_exit_code(_parser(), argv)
    if isinstance(args, int):
        return args
    try:
        return _run(args)
    except CalibrateError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.code


def _run(args: argparse.Namespace) -> int:
    try:
        spec = load_settings(args.config, env=dict(os.environ)).speculative_decoding
    except ConfigError as exc:
        raise CalibrateError(f"config error: {exc}") from exc
    if spec.policy is PolicyName.SEED:
        raise CalibrateError(
            f"{args.config}: policy is seed, which has no score to threshold; set "
            f"{SECTION}.policy: combined (or confidence) first"
        )
    scorer_source = spec.scorer_file or spec.policy.value
    try:
        scorer = load_scorer(scorer_source)
    except ValueError as exc:
        raise CalibrateError(str(exc)) from exc

    samples = read_log(args.logs, scorer)
    if not samples.scores:
        why = (
            f"all {samples.lines} lines lack features (logged by an older version)"
            if samples.lines
            else "no log lines (empty files?)"
        )
        raise CalibrateError(f"nothing to calibrate on: {why}")
    target = args.target_cloud_rate
    result = calibrate(samples.scores, target)

    # An unreachable target leaves the config alone: 1.0 would change every answer and
    # still miss the target.
    written = not args.dry_run and not result.unreachable
    if written:
        comment = f"{COMMENT_TAG} target {target:g} on {len(samples.scores)} requests"
        write_config(Path(args.config), result.threshold, comment)
    old, source = (
        (spec.spill_threshold, "config")
        if spec.spill_threshold is not None
        else (scorer.threshold, f"scorer {scorer.name!r} default")
    )
    data = report(
        paths=args.logs,
        samples=samples,
        target=target,
        result=result,
        old_threshold=old,
        old_source=source,
        config=args.config,
        written=written,
    )
    if result.unreachable:
        print(f"{PROG}: {unreachable_warning(data)}", file=sys.stderr)
    if args.json:
        write_stdout(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        write_stdout(render_text(data))
    return 1 if result.unreachable else 0


if __name__ == "__main__":
    sys.exit(main())
