"""What one answer asserts: the facts ``app.routing.agreement`` compares. Pure.

An answer's facts are its fenced code (normalised), a leading yes/no, a negation, its
numbers with their units, and its key terms: the words that are not stop words and not
already in the question (``question_words``), the names and identifiers among them
marked. Words are folded (case, accents, a possessive or plural ``s``, a light stem).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from app.evaluation.answer_numbers import numbers as _numbers

FENCE = re.compile(r"```[^\n]*\n(.*?)(?:```|$)", re.DOTALL)
_LINE_COMMENT = re.compile(r"(?m)(?:#|//|--).*$")
_WORD = re.compile(r"[^\W_](?:[\w'.\-]*[^\W_])?")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:\.\w+|\(\)|_\w+)+|[a-z]+[A-Z]\w*")
POLAR = {"yes": True, "true": True, "correct": True, "no": False, "false": False}
_POLAR_OTHER = {"incorrect": False, "wrong": False, "right": True}
_NEGATION = frozenset({"not", "never", "cannot", "neither", "nor", "none", "nothing", "no"})
_UNITS = {
    "%": "percent",
    "percent": "percent",
    "km": "km",
    "kilometer": "km",
    "kilometre": "km",
    "m": "m",
    "meter": "m",
    "metre": "m",
    "cm": "cm",
    "centimeter": "cm",
    "centimetre": "cm",
    "mm": "mm",
    "kg": "kg",
    "kilogram": "kg",
    "g": "g",
    "gram": "g",
    "l": "l",
    "liter": "l",
    "litre": "l",
    "ml": "ml",
    "s": "s",
    "sec": "s",
    "second": "s",
    "min": "min",
    "minute": "min",
    "h": "h",
    "hr": "h",
    "hour": "h",
    "day": "day",
    "week": "week",
    "month": "month",
    "year": "year",
    "°c": "c",
    "celsius": "c",
    "°f": "f",
    "fahrenheit": "f",
    "mile": "mile",
    "foot": "ft",
    "feet": "ft",
    "ft": "ft",
    "inch": "in",
    "pound": "lb",
    "lb": "lb",
    "dollar": "usd",
    "$": "usd",
}
_DIGITS = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?!\d)")
_UNIT_AFTER = re.compile(r"\s*(%|°[cf]|[a-z]+)", re.IGNORECASE)
# Words that carry no fact of their own, in answers of any subject.
_STOP_WORDS = """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during each few
    for from further had has have having he her here hers herself him himself his how i if
    in into is it its itself just let me more most my myself of off on once only or other
    our ours out over own same she should so some such than that the their theirs them then
    there these they this those through to too under until up very was we were what when
    where which while who whom why will with would you your yours answer answers called
    known named means mean equal equals equally result total get gets got called example
    sure here's it's that's there's well okay ok note simply basically actually indeed
    approximately about roughly exactly around nearly usually often generally typically
    one's the's is's following given using use used make makes made course believe think
guess suppose say says said certainly definitely probably likely perhaps maybe hope
please let's here there yes no not true false correct incorrect right wrong never"""
STOP = frozenset(_STOP_WORDS.split())


@dataclass(frozen=True, slots=True)
class Facts:
    """What one answer asserts, beyond what its question already said."""

    code: str | None
    polarity: bool | None  # a leading yes/no (true/false); None: not a yes/no answer
    negated: bool
    numbers: tuple[tuple[float, str], ...]  # (value, unit or ""), in order
    terms: frozenset[str]  # key words, folded
    names: frozenset[str]  # the terms that are names, numbers or identifiers
    answer_words: frozenset[str]  # every word that is not a stop word, the question's too
    all_words: frozenset[str]  # every word, folded
    words: int  # how many words it has


def facts(text: str, context: frozenset[str] = frozenset()) -> Facts:
    """The facts ``text`` asserts that ``context`` (the question's folded words) lacks."""
    code = _code(text)
    prose = FENCE.sub(" ", text)
    words = [w.lower() for w in _WORD.findall(prose)]
    polarity = next((POLAR[w] for w in words[:3] if w in POLAR), None)
    if polarity is None and words and words[0] in _POLAR_OTHER:
        polarity = _POLAR_OTHER[words[0]]
    negated = any(w in _NEGATION or w.endswith("n't") for w in words[1:] if w not in POLAR)
    folded = {fold(w) for w in words}
    asked = _context_numbers(context)
    terms = frozenset(
        t for t in folded if t not in context and t not in STOP and not _is_number_word(t)
    )
    names = frozenset(
        fold(w) for w in (*_capitalised(prose), *_IDENTIFIER.findall(prose)) if fold(w) in terms
    )
    return Facts(
        code=code,
        polarity=polarity,
        negated=negated,
        answer_words=frozenset(t for t in folded if t not in STOP and not _is_number_word(t)),
        all_words=frozenset(folded),
        words=len(words),
        numbers=tuple(n for n in _numbers_with_units(prose) if n[0] not in asked),
        terms=terms,
        names=names,
    )


def _numbers_with_units(text: str) -> list[tuple[float, str]]:
    """Each number in ``text`` (digits or words), with the unit written right after it
    when it is written in digits ("5 km", "50%")."""
    units: dict[float, list[str]] = {}
    for match in _DIGITS.finditer(text):
        value = float(match.group(0).replace(",", ""))
        units.setdefault(value, []).append(_unit_after(text, match.end()))
    return [(value, units[value].pop(0) if units.get(value) else "") for value in _numbers(text)]


def _unit_after(text: str, end: int) -> str:
    match = _UNIT_AFTER.match(text, end)
    return _UNITS.get(_singular(match.group(1).lower()), "") if match else ""


def _code(text: str) -> str | None:
    """The text's fenced code, normalised; None when it has none."""
    blocks = FENCE.findall(text)
    if not blocks:
        return None
    code = _LINE_COMMENT.sub("", "\n".join(blocks)).replace("'", '"')
    return " ".join(code.split())


@lru_cache(maxsize=256)
def question_words(prompt: str) -> frozenset[str]:
    return frozenset(fold(w.lower()) for w in _WORD.findall(prompt)) | frozenset(
        f"#{value}" for value in _numbers(prompt)
    )


def _context_numbers(context: frozenset[str]) -> set[float]:
    return {float(t[1:]) for t in context if t.startswith("#")}


def _capitalised(text: str) -> list[str]:
    """Capitalised words not at the start of a sentence (names, places)."""
    return re.findall(r"(?<![.!?:\n]\s)(?<!^)(?<=\s)[A-Z][\w\-]+", text)


def _is_number_word(term: str) -> bool:
    return bool(_numbers(term)) or term.replace(".", "").replace(",", "").isdigit()


@lru_cache(maxsize=4096)
def fold(word: str) -> str:
    """Lower case, accents away, a possessive or plural ``s`` away."""
    plain = unicodedata.normalize("NFKD", word.lower())
    plain = "".join(c for c in plain if not unicodedata.combining(c)).strip(".'-")
    if plain.endswith("'s"):
        plain = plain[:-2]
    return _singular(plain)


def _singular(word: str) -> str:
    """A light stem: "cities" -> "city", "plants" -> "plant", "landed" -> "land"."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    for suffix in ("ing", "ed"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word
