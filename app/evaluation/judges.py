"""Judges: decide whether a drafted answer is correct for one evaluation item. Pure.

The evaluation harness drafts every prompt on the local model and asks a judge whether the
draft is right. Judges are deliberately simple, deterministic string/number checks (no model
in the loop), so a quality-vs-cloud-share curve is reproducible and cheap to recompute.

Spec shapes (the ``judge`` field of an item):

- ``{"type": "exact", "answers": [...]}``: normalised answer equals a normalised answer.
- ``{"type": "contains", "answers": [...], "all": false}``: any (or all) answers appear in the
  normalised answer as whole words/phrases.
- ``{"type": "regex", "pattern": "...", "flags": "i"}``: ``re.search`` on the raw answer.
- ``{"type": "numeric", "value": 42, "tolerance": 0, "pick": "last"}``: the last (or, with
  ``"pick": "first"``, the first) number in the answer is within ``tolerance`` (absolute) of
  ``value``.
"""

from __future__ import annotations

import copy
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

KINDS: frozenset[str] = frozenset({"fact", "arithmetic", "code", "reasoning", "open"})
JUDGE_TYPES: frozenset[str] = frozenset({"exact", "contains", "regex", "numeric"})

# ---------------------------------------------------------------------------- normalisation

# Punctuation that carries meaning at the edge of a short answer ("C#", "50%") is kept.
_KEEP_AT_EDGE = frozenset("#%")


def _strippable(char: str) -> bool:
    """Whitespace, Unicode punctuation (bar ``#``/``%``) and markdown backticks are noise."""
    if char.isspace() or char == "`":
        return True
    return unicodedata.category(char).startswith("P") and char not in _KEEP_AT_EDGE


def _is_sign(text: str, index: int) -> bool:
    """A leading ``-`` directly before a digit is a minus sign, not a markdown bullet."""
    return text[index] == "-" and index + 1 < len(text) and text[index + 1].isdigit()


def normalise(text: str) -> str:
    """Lowercase, collapse inner whitespace, strip surrounding whitespace and punctuation.

    Models wrap short answers in noise ("**Paris**.", "`len`", "  Paris!\\n"); judging must
    not depend on it. A leading minus sign before a digit survives so "-5" stays negative.
    """
    text = " ".join(text.lower().split())
    start, end = 0, len(text)
    while start < end and _strippable(text[start]) and not _is_sign(text, start):
        start += 1
    while end > start and _strippable(text[end - 1]):
        end -= 1
    return text[start:end]


# ---------------------------------------------------------------------------------- numbers

_UNITS: dict[str, int] = {
    word: value
    for value, word in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
        ]
    )
}
_TENS: dict[str, int] = {
    word: 10 * value
    for value, word in enumerate(
        ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"], start=2
    )
}
_SCALES: dict[str, int] = {"hundred": 100, "thousand": 1_000, "million": 1_000_000}
_NEGATORS = frozenset({"minus", "negative"})

_DIGIT_NUMBER = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+"
_TOKEN = re.compile(rf"(?P<num>(?<![\w.])[-\u2212]?(?:{_DIGIT_NUMBER}))|(?P<word>[a-z]+)")
# Between the words of one written-out number only spaces or a single hyphen may appear.
_WORD_GAP = re.compile(r"\s*-?\s*")


def _parse_digits(token: str) -> float:
    """'1,000.5' -> 1000.5; '−3' (Unicode minus) -> -3."""
    return float(token.replace(",", "").replace("\u2212", "-"))


def _can_follow(previous: str | None, word: str) -> bool:
    """Grammar of written-out numbers: 'forty two', 'two hundred and five', not 'five six'."""
    if previous is None:
        return word in _UNITS or word in _TENS
    if word in _SCALES:
        return previous not in _SCALES or _SCALES[previous] < _SCALES[word]
    if previous in _TENS:
        return word in _UNITS and 0 < _UNITS[word] < 10
    return previous in _SCALES and (word in _UNITS or word in _TENS) and word != "zero"


def _words_value(words: Sequence[str]) -> int:
    """Value of a grammatical run of number words ('two hundred and five' -> 205)."""
    total, current = 0, 0
    for word in words:
        if word in _UNITS:
            current += _UNITS[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current = (current or 1) * 100
        else:
            total += (current or 1) * _SCALES[word]
            current = 0
    return total + current


def _word_run(tokens: list[re.Match[str]], start: int, text: str) -> tuple[int, list[str]]:
    """Collect the number words from ``tokens[start]`` on; returns (next index, words)."""
    words: list[str] = []
    index = start
    while index < len(tokens):
        word = tokens[index].group("word")
        if word == "and" and words and words[-1] == "hundred" and index + 1 < len(tokens):
            nxt = tokens[index + 1].group("word")
            if nxt is not None and _can_follow("hundred", nxt):
                index += 1
                continue
        if word is None or not _can_follow(words[-1] if words else None, word):
            break
        if words and not _WORD_GAP.fullmatch(text[tokens[index - 1].end() : tokens[index].start()]):
            break
        words.append(word)
        index += 1
    return index, words


def numbers(text: str) -> list[float]:
    """Every number in ``text`` in order, as digits ('1,000', '-3.5') or words ('forty-two').

    Thousands separators must be well formed ('1,000' is 1000, '1,2' is 1 then 2).
    'minus'/'negative' before a written-out number negate it.
    """
    lowered = text.lower()
    tokens = list(_TOKEN.finditer(lowered))
    found: list[float] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.group("num") is not None:
            found.append(_parse_digits(token.group("num")))
            index += 1
            continue
        after, words = _word_run(tokens, index, lowered)
        if words:
            value = _words_value(words)
            negated = index > 0 and tokens[index - 1].group("word") in _NEGATORS
            found.append(float(-value if negated else value))
            index = after
        else:
            index += 1
    return found


def first_number(text: str) -> float | None:
    """The first number in ``text`` (see ``numbers``), or None when there is none."""
    found = numbers(text)
    return found[0] if found else None


def last_number(text: str) -> float | None:
    """The last number in ``text`` (see ``numbers``), or None when there is none.

    The numeric judge's default, as in GSM8K-style scoring: an answer that restates the
    question before its result ("9 + 8 = 17") ends with the result.
    """
    found = numbers(text)
    return found[-1] if found else None


# ----------------------------------------------------------------------------- validation


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_keys(spec: Mapping[str, Any], allowed: set[str]) -> None:
    """Unknown keys are typos ('answer' for 'answers'); refuse rather than ignore them."""
    extra = sorted(set(spec) - allowed)
    _require(not extra, f"judge {spec['type']!r}: unknown key(s) {extra}")


def _check_answers(spec: Mapping[str, Any]) -> None:
    answers: Any = spec.get("answers")
    _require(
        isinstance(answers, list | tuple) and len(answers) > 0,
        f"judge {spec['type']!r}: 'answers' must be a non-empty list of strings",
    )
    for answer in answers:
        _require(
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
def _compile(pattern: str, flags: str) -> re.Pattern[str]:
    """Compile once per (pattern, flags): the harness judges thousands of answers."""
    combined = re.RegexFlag(0)
    for flag in flags:
        _require(flag in _REGEX_FLAGS, f"judge 'regex': unknown flag {flag!r} (use i, m, s, x)")
        combined |= _REGEX_FLAGS[flag]
    try:
        return re.compile(pattern, combined)
    except re.error as exc:
        raise ValueError(f"judge 'regex': bad pattern {pattern!r}: {exc}") from exc


def validate_spec(spec: Mapping[str, Any]) -> None:
    """Raise ValueError naming the problem if ``spec`` is not a well-formed judge spec.

    Run at load time so a broken item fails the dataset load, not one answer mid-run.
    """
    _require(isinstance(spec, Mapping), f"judge spec must be an object, got {type(spec).__name__}")
    kind = spec.get("type")
    _require(kind in JUDGE_TYPES, f"unknown judge type {kind!r} (use {sorted(JUDGE_TYPES)})")
    if kind == "exact":
        _check_keys(spec, {"type", "answers"})
        _check_answers(spec)
    elif kind == "contains":
        _check_keys(spec, {"type", "answers", "all"})
        _check_answers(spec)
        _require(isinstance(spec.get("all", False), bool), "judge 'contains': 'all' must be bool")
    elif kind == "regex":
        _check_keys(spec, {"type", "pattern", "flags"})
        pattern, flags = spec.get("pattern"), spec.get("flags", "")
        _require(isinstance(pattern, str) and pattern != "", "judge 'regex': 'pattern' missing")
        _require(isinstance(flags, str), "judge 'regex': 'flags' must be a string")
        _compile(pattern, flags)
    else:
        _check_keys(spec, {"type", "value", "tolerance", "pick"})
        _require(
            spec.get("pick", "last") in ("first", "last"),
            "judge 'numeric': 'pick' must be 'first' or 'last'",
        )
        _require(_is_number(spec.get("value")), "judge 'numeric': 'value' must be a number")
        tolerance = spec.get("tolerance", 0)
        _require(
            _is_number(tolerance) and tolerance >= 0,
            "judge 'numeric': 'tolerance' must be a non-negative number",
        )


# ---------------------------------------------------------------------------------- judges


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
    return _compile(spec["pattern"], spec.get("flags", "")).search(answer) is not None


def _judge_numeric(answer: str, spec: Mapping[str, Any]) -> bool:
    number = first_number(answer) if spec.get("pick") == "first" else last_number(answer)
    if number is None:
        return False
    tolerance = float(spec.get("tolerance", 0))
    # A hair of slack so 0.1 + 0.2 style float noise never flips an exact-integer verdict.
    return abs(number - float(spec["value"])) <= tolerance + 1e-9 * max(1.0, abs(number))


_JUDGES: dict[str, Callable[[str, Mapping[str, Any]], bool]] = {
    "exact": _judge_exact,
    "contains": _judge_contains,
    "regex": _judge_regex,
    "numeric": _judge_numeric,
}


def judge(answer: str, spec: Mapping[str, Any]) -> bool:
    """True when ``answer`` is correct under ``spec``; ValueError when the spec is malformed.

    Checks ``spec`` on every call; ``EvalItem.passes`` judges with a spec checked once.
    """
    validate_spec(spec)
    return _JUDGES[spec["type"]](answer, spec)


# ---------------------------------------------------------------------------------- items


@dataclass(frozen=True, slots=True)
class EvalItem:
    """One evaluation prompt with its judge and a reference answer that passes the judge.

    The judge spec is validated when the item is built (ValueError when it is malformed),
    not again for each answer judged; it must not be changed afterwards.
    """

    id: str
    kind: str
    prompt: str
    judge: Mapping[str, Any] = field(hash=False)
    reference: str

    def __post_init__(self) -> None:
        validate_spec(self.judge)

    def passes(self, answer: str) -> bool:
        """Judge ``answer`` against this item's spec."""
        return _JUDGES[self.judge["type"]](answer, self.judge)


_ITEM_KEYS = frozenset({"id", "kind", "prompt", "judge", "reference"})


def _parse_item(raw: object) -> EvalItem:
    """Check one decoded JSON value and build the item; ValueError says what is wrong."""
    _require(isinstance(raw, dict), "expected a JSON object")
    assert isinstance(raw, dict)
    missing = sorted(_ITEM_KEYS - set(raw))
    extra = sorted(set(raw) - _ITEM_KEYS)
    _require(not missing, f"missing key(s) {missing}")
    _require(not extra, f"unknown key(s) {extra}")
    for key in ("id", "kind", "prompt", "reference"):
        _require(isinstance(raw[key], str) and raw[key].strip() != "", f"{key!r} must be text")
    _require(raw["kind"] in KINDS, f"unknown kind {raw['kind']!r} (use {sorted(KINDS)})")
    # A copy, so the spec validated when the item is built stays the item's own.
    spec = copy.deepcopy(raw["judge"])
    item = EvalItem(raw["id"], raw["kind"], raw["prompt"], spec, raw["reference"])
    _require(item.passes(item.reference), f"reference does not pass its own judge: {item.id}")
    return item


def load_items(lines: Iterable[str]) -> list[EvalItem]:
    """Parse and validate JSONL lines (blank lines skipped) into items, ids unique.

    Takes lines rather than a path so callers choose the I/O and tests need no files.
    Raises ``ValueError("line N: ...")`` (1-based) on the first bad line.
    """
    items: list[EvalItem] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = _parse_item(json.loads(line))
            _require(item.id not in seen, f"duplicate id {item.id!r}")
        except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
            raise ValueError(f"line {number}: {exc}") from exc
        seen.add(item.id)
        items.append(item)
    return items
