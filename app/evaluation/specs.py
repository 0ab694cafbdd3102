"""Judge specs: what a well-formed ``judge`` field of an evaluation item looks like.

Specs are checked when a dataset loads, so a broken item fails the load rather than one
answer mid-run; checking lives apart from judging so that a spec is checked only once.

Spec shapes:

- ``{"type": "exact", "answers": [...]}``: normalised answer equals a normalised answer.
- ``{"type": "contains", "answers": [...], "all": false}``: any (or all) answers appear in the
  normalised answer as whole words/phrases.
- ``{"type": "regex", "pattern": "...", "flags": "i"}``: ``re.search`` on the raw answer.
- ``{"type": "numeric", "value": 42, "tolerance": 0, "pick": "last"}``: the last (or, with
  ``"pick": "first"``, the first) number in the answer is within ``tolerance`` (absolute) of
  ``value``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from app.evaluation.normalise import normalise

JUDGE_TYPES: frozenset[str] = frozenset({"exact", "contains", "regex", "numeric"})


def require(condition: bool, message: str) -> None:
    """Raise ValueError(message) unless ``condition`` holds."""
    if not condition:
        raise ValueError(message)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_keys(spec: Mapping[str, Any], allowed: set[str]) -> None:
    """Unknown keys are typos ('answer' for 'answers'); refuse rather than ignore them."""
    extra = sorted(set(spec) - allowed)
    require(not extra, f"judge {spec['type']!r}: unknown key(s) {extra}")


def _check_answers(spec: Mapping[str, Any]) -> None:
    answers: Any = spec.get("answers")
    require(
        isinstance(answers, list | tuple) and len(answers) > 0,
        f"judge {spec['type']!r}: 'answers' must be a non-empty list of strings",
    )
    for answer in answers:
        require(
            isinstance(answer, str) and normalise(answer) != "",
            f"judge {spec['type']!r}: answer {answer!r} is not a non-blank string",
        )


_REGEX_FLAGS: dict[str, re.RegexFlag] = {
    "i": re.IGNORECASE,
    "m": re.MULTILINE,
    "s": re.DOTALL,
    "x": re.VERBOSE,
}


@lru_cache(maxsize=1024)
def compile_regex(pattern: str, flags: str) -> re.Pattern[str]:
    """The compiled pattern with its flags; ValueError names a bad flag or pattern.

    Cached per (pattern, flags): the harness judges thousands of answers.
    """
    combined = re.RegexFlag(0)
    for flag in flags:
        require(flag in _REGEX_FLAGS, f"judge 'regex': unknown flag {flag!r} (use i, m, s, x)")
        combined |= _REGEX_FLAGS[flag]
    try:
        return re.compile(pattern, combined)
    except re.error as exc:
        raise ValueError(f"judge 'regex': bad pattern {pattern!r}: {exc}") from exc


def validate_spec(spec: Mapping[str, Any]) -> None:
    """Raise ValueError naming the problem if ``spec`` is not a well-formed judge spec.

    Run at load time so a broken item fails the dataset load, not one answer mid-run.
    """
    require(isinstance(spec, Mapping), f"judge spec must be an object, got {type(spec).__name__}")
    kind = spec.get("type")
    require(kind in JUDGE_TYPES, f"unknown judge type {kind!r} (use {sorted(JUDGE_TYPES)})")
    if kind == "exact":
        _check_keys(spec, {"type", "answers"})
        _check_answers(spec)
    elif kind == "contains":
        _check_keys(spec, {"type", "answers", "all"})
        _check_answers(spec)
        require(isinstance(spec.get("all", False), bool), "judge 'contains': 'all' must be bool")
    elif kind == "regex":
        _check_keys(spec, {"type", "pattern", "flags"})
        pattern, flags = spec.get("pattern"), spec.get("flags", "")
        require(isinstance(pattern, str) and pattern != "", "judge 'regex': 'pattern' missing")
        require(isinstance(flags, str), "judge 'regex': 'flags' must be a string")
        compile_regex(pattern, flags)
    else:
        _check_keys(spec, {"type", "value", "tolerance", "pick"})
        require(
            spec.get("pick", "last") in ("first", "last"),
            "judge 'numeric': 'pick' must be 'first' or 'last'",
        )
        require(_is_number(spec.get("value")), "judge 'numeric': 'value' must be a number")
        tolerance = spec.get("tolerance", 0)
        require(
            _is_number(tolerance) and tolerance >= 0,
            "judge 'numeric': 'tolerance' must be a non-negative number",
        )
