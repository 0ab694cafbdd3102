"""The four judge checks, each deciding one answer under a spec already validated.

Kept apart from validation (``app.evaluation.specs``) so that an item can check its spec
once, when it is built, and then judge many answers without checking it again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from app.evaluation.answer_numbers import first_number, last_number
from app.evaluation.normalise import normalise
from app.evaluation.specs import compile_regex


def _phrase_in(needle: str, haystack: str) -> bool:
    """Whole-word/phrase match, so 'cat' is not found in 'concatenate'."""
    return re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", haystack) is not None


def _judge_exact(answer: str, spec: Mapping[str, Any]) -> bool:
    got = normalise(answer)
    return any(got == normalise(expected) for expected in spec["answers"])


def _judge_contains(answer: str, spec: Mapping[str, Any]) -> bool:
    got = normalise(answer)
    hits = (_phrase_in(normalise(expected), got) for expected in spec["answers"])
    return all(hits) if spec.get("all", False) else any(hits)


def _judge_regex(answer: str, spec: Mapping[str, Any]) -> bool:
    return compile_regex(spec["pattern"], spec.get("flags", "")).search(answer) is not None


def _judge_numeric(answer: str, spec: Mapping[str, Any]) -> bool:
    number = first_number(answer) if spec.get("pick") == "first" else last_number(answer)
    if number is None:
        return False
    tolerance = float(spec.get("tolerance", 0))
    # A hair of slack so 0.1 + 0.2 style float noise never flips an exact-integer verdict.
    return abs(number - float(spec["value"])) <= tolerance + 1e-9 * max(1.0, abs(number))


_CHECKS: dict[str, Callable[[str, Mapping[str, Any]], bool]] = {
    "exact": _judge_exact,
    "contains": _judge_contains,
    "regex": _judge_regex,
    "numeric": _judge_numeric,
}


def check(answer: str, spec: Mapping[str, Any]) -> bool:
    """True when ``answer`` is correct under ``spec``, which must already be valid."""
    return _CHECKS[spec["type"]](answer, spec)
