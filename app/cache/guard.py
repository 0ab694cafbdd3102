"""The fact guard of near hits: two questions that read alike may only share an answer when
every fact in them is the same. Pure.

A near hit is a question that differs from a stored one in case, spacing, spacing around
punctuation or its final punctuation (``normalize``). That is not enough: folding case
joins ``'ABC'`` with ``'abc'``, folding spaces joins ``12, 5`` with ``12,5``. So
``same_facts`` also asks that every number (``12.5`` is not ``125``, ``-3`` is not ``3``),
every negation (not, no, never, n't, without ...), every quoted literal (to the letter,
case included) and every named term (a capitalised word, compared case-insensitively) of
one text is in the other. ``near_match`` is both: "12 times 7" never answers "12 times 8".
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

_SPACE = re.compile(r"\s+")
_AROUND_PUNCT = re.compile(r"\s*([^\w\s])\s*")
_FINAL_PUNCT = re.compile(r"[\s.!?;:,…]+$")
# a number: digits with their decimal or thousands marks, and a sign that is not a hyphen
_NUMBER = re.compile(r"(?<![\w.])[-+−]?\d+(?:[.,]\d+)*|(?<=\w)\d+(?:[.,]\d+)*")
_NEGATIONS = frozenset(
    {
        "not",
        "no",
        "never",
        "without",
        "none",
        "nobody",
        "nothing",
        "nowhere",
        "neither",
        "nor",
        "cannot",
        "non",
    }
)
_TOKEN = re.compile(r"[^\W_][\w'’-]*")
_NT = re.compile(r"n['’]t\b", re.IGNORECASE)
_QUOTED = re.compile(
    r"\"([^\"]+)\"|“([^”]+)”|‘([^’]+)’|`([^`]+)`|(?<![\w'])'([^']+)'(?![\w'])|«([^»]+)»"
)


def normalize(text: str) -> str:
    """The question as a near hit compares it: Unicode-compatible form, case folded,
    whitespace collapsed, no spaces around punctuation, no final punctuation."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    collapsed = _SPACE.sub(" ", folded).strip()
    tight = _AROUND_PUNCT.sub(r"\1", collapsed)
    return _FINAL_PUNCT.sub("", tight)


@dataclass(frozen=True, slots=True)
class TextFacts:
    """What a question asserts that a near hit must keep."""

    numbers: tuple[str, ...]  # in order, as written (``1,000`` and ``1000`` differ)
    negations: tuple[str, ...]  # sorted, folded (``n't`` for every contraction)
    quoted: tuple[str, ...]  # in order, to the letter
    names: frozenset[str]  # capitalised words, folded
    words: frozenset[str]  # every word, folded


def text_facts(text: str) -> TextFacts:
    """The numbers, negations, quoted literals, names and words of ``text``."""
    text = unicodedata.normalize("NFKC", text)
    numbers = tuple(m.replace("−", "-").lstrip("+") for m in _NUMBER.findall(text))
    tokens = [t.rstrip("'’-") for t in _TOKEN.findall(text)]
    words = [t.casefold() for t in tokens]
    negations = Counter(w for w in words if w in _NEGATIONS)
    negations["n't"] += len(_NT.findall(text))
    quoted = tuple(next(g for g in m.groups() if g is not None) for m in _QUOTED.finditer(text))
    names = frozenset(t.casefold() for t in tokens if t[0].isupper())
    return TextFacts(
        numbers=numbers,
        negations=tuple(sorted(negations.elements())),
        quoted=quoted,
        names=names,
        words=frozenset(words),
    )


def same_facts(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` hold the same numbers, negations and quoted literals, and
    each one's named terms appear (case aside) among the other's words."""
    fa, fb = text_facts(a), text_facts(b)
    return (
        fa.numbers == fb.numbers
        and fa.negations == fb.negations
        and fa.quoted == fb.quoted
        and fa.names <= fb.words
        and fb.names <= fa.words
    )


def near_match(a: str, b: str) -> bool:
    """Whether a stored question ``a`` may answer ``b``: alike once normalized, same facts."""
    return normalize(a) == normalize(b) and same_facts(a, b)
