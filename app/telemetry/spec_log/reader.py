"""Reading a speculation log back: each line parsed and checked against seed 000's format.

The tools that read the log (``specproxy analyze``, ``specproxy calibrate``) share this
reader so that a line one of them accepts, the other accepts too, and a bad line is named
the same way (its 1-based number and the field at fault) by both. The file is streamed one
line at a time: memory does not grow with the log.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from app.routing.signals import OUT_OF_TIME

_MISSING = object()


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that cannot be analysed: its 1-based number and why."""

    line_no: int
    reason: str
    # invalid JSON on a last line with no newline: a line still being written, or cut off
    # when the writer stopped (a tool that refuses bad lines skips this one)
    truncated: bool = False


def iter_entries(path: str | Path) -> Iterator[tuple[int, dict[str, Any]] | BadLine]:
    """Each non-blank line as ``(line_no, entry)`` or a ``BadLine``, read lazily one at a time.

    Raises ``OSError`` when the file cannot be opened or read.
    """
    with open(path, "rb") as lines:
        for line_no, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                yield BadLine(line_no, f"invalid JSON ({exc})", not raw.endswith(b"\n"))
                continue
            problem = entry_problem(obj)
            yield (line_no, obj) if problem is None else BadLine(line_no, problem)


def stop_of(entry: dict[str, Any]) -> str | None:
    """The line's ``draft.stop_reason``, except that a stream's draft stopped at its
    first-token budget (logged as ``n_max``, with ``first_token_budget`` among its
    ``reasons``) is told apart as ``first_token_budget``: the token budget did not cut it."""
    stop = entry["draft"].get("stop_reason")
    reasons = entry.get("reasons")
    if stop == "n_max" and isinstance(reasons, list) and OUT_OF_TIME in reasons:
        return OUT_OF_TIME
    return stop if isinstance(stop, str) else None


def entry_problem(obj: object) -> str | None:
    """What makes a parsed line unusable (a missing or ill-typed field), or None."""
    if not isinstance(obj, dict):
        return f"not a JSON object (got {_json_type(obj)})"
    draft = obj.get("draft", _MISSING)
    if not isinstance(draft, dict):
        return _wrong("draft", draft, "an object")
    n = draft.get("n", _MISSING)
    if not _is_count(n):
        return _wrong("draft.n", n, "a non-negative integer")
    tokens = draft.get("tokens", _MISSING)
    if not isinstance(tokens, list):
        return _wrong("draft.tokens", tokens, "a list")
    for i, token in enumerate(tokens):
        if not isinstance(token, dict):
            return _wrong(f"draft.tokens[{i}]", token, "an object")
        for key in ("p", "entropy"):
            value = token.get(key, _MISSING)
            if not _is_number(value):
                return _wrong(f"draft.tokens[{i}].{key}", value, "a number")
    stop = draft.get("stop_reason")
    if stop is not None and not isinstance(stop, str):
        return _wrong("draft.stop_reason", stop, "a string")
    verify = obj.get("verify", _MISSING)
    if verify is _MISSING:
        return "missing field 'verify' (null when the draft was not verified)"
    if verify is not None:
        if not isinstance(verify, dict):
            return _wrong("verify", verify, "an object or null")
        accepted = verify.get("n_accepted", _MISSING)
        if not _is_count(accepted):
            return _wrong("verify.n_accepted", accepted, "a non-negative integer")
        if accepted > n:
            return f"verify.n_accepted ({accepted}) exceeds draft.n ({n})"
    timing = obj.get("timing")
    if timing is not None:
        if not isinstance(timing, dict):
            return _wrong("timing", timing, "an object")
        for key in ("t_draft_us", "t_verify_us"):
            value = timing.get(key)
            if value is not None and not (_is_number(value) and value >= 0):
                return _wrong(f"timing.{key}", value, "a non-negative number or null")
    for key in ("context_type", "outcome"):
        value = obj.get(key)
        if value is not None and not isinstance(value, str):
            return _wrong(key, value, "a string")
    spec = obj.get("server_spec")
    if spec is not None:
        if not isinstance(spec, dict):
            return _wrong("server_spec", spec, "an object or null")
        for key in ("draft_n", "draft_n_accepted"):
            value = spec.get(key, _MISSING)
            if not _is_count(value):
                return _wrong(f"server_spec.{key}", value, "a non-negative integer")
    return None


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number")


def _wrong(name: str, value: object, expected: str) -> str:
    if value is _MISSING:
        return f"missing field '{name}'"
    shown = orjson.dumps(value).decode()
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"field '{name}' should be {expected}, got {shown}"
