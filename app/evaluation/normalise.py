"""Normalisation of a drafted answer, so judging does not hinge on its wrapping.

Models wrap short answers in markdown, quotes and trailing punctuation; the exact and
contains judges compare answers only after ``normalise`` has taken that noise away.
"""

from __future__ import annotations

import unicodedata

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
