"""The numbers in a drafted answer, written as digits or as words.

The numeric judge reads one number out of free text ("The answer is forty-two."); this
module finds every number there, in order, so the judge can pick the first or the last.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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
