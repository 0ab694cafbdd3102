"""What kind of request this is (seed 001's heuristics): code, math, json, list or prose. Pure."""

from __future__ import annotations

import re
from typing import Any

from app.vocabulary import ContextType

_CODE_CHARS = frozenset("{}()[];:")
_MATH_MARKERS = (
    "∑",
    "∀",
    "∃",
    "→",
    "⇒",
    "∫",
    "therefore",
    "proof",
    "equation",
    "integral",
    "derivative",
    "solve",
    "calculate",
)


class _Words:
    """A case-insensitive search for whole words. Case-insensitive matching folds case
    character by character; on ASCII text, matching the lowered text case-sensitively
    finds the same words at a fraction of the cost, so only other text pays for folding."""

    __slots__ = ("folded", "lower")

    def __init__(self, pattern: str) -> None:
        self.lower = re.compile(pattern)
        self.folded = re.compile(pattern, re.IGNORECASE)

    def found(self, text: str, lowered: str) -> bool:
        """Whether ``text`` (``lowered`` is ``text.lower()``) has one of the words."""
        if text.isascii():
            return self.lower.search(lowered) is not None
        return self.folded.search(text) is not None


_CODE_WORDS = _Words(
    r"\b(def|class|function|return|import|python|javascript|typescript|rust|golang|java|sql|"
    r"regex|code|script|compile|bash)\b"
)
_LIST_WORDS = _Words(r"\b(list|bullet points?|enumerate|steps)\b")
_JSON_WORD = re.compile(r"\bjson\b")
_ARITHMETIC = re.compile(r"\d\s*[-+*/^=]\s*\d")
_LIST_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+", re.MULTILINE)


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last user message (content parts joined)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return content or ""
    return ""


def classify(text: str, *, json_mode: bool = False) -> ContextType:
    """The request's context type; ``json_mode`` when the client asked for a JSON response."""
    stripped = text.strip()
    lowered = stripped.lower()
    if json_mode or stripped.startswith("{") or '"type":' in stripped or _JSON_WORD.search(lowered):
        return ContextType.JSON
    code_chars = sum(map(stripped.count, _CODE_CHARS))  # C-speed, on every request
    if (
        "```" in stripped
        or _CODE_WORDS.found(stripped, lowered)
        or (stripped and code_chars > 0.05 * len(stripped))
    ):
        return ContextType.CODE
    if any(m in lowered for m in _MATH_MARKERS) or _ARITHMETIC.search(stripped):
        return ContextType.MATH
    if len(_LIST_LINE.findall(stripped)) >= 2 or _LIST_WORDS.found(stripped, lowered):
        return ContextType.LIST
    return ContextType.PROSE
