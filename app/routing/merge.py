"""Merging a verified draft: similarity, and which answer to serve. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process


def similarity(draft: str, verified: str, *, draft_complete: bool) -> float:
    """How alike the two answers are, 0..1 (rapidfuzz ratio on normalised text).

    A truncated draft is compared with the same-length start of the verified
    answer: it can only be judged on the part it got to write.
    """
    a, b = _normalise(draft), _normalise(verified)
    if not draft_complete:
        b = b[: len(a)]
    if not a and not b:
        return 1.0
    return fuzz.ratio(a, b) / 100.0


def _normalise(text: str) -> str:
    """Lower case, punctuation to spaces, whitespace runs folded."""
    return " ".join(default_process(text).split())


@dataclass(frozen=True, slots=True)
class MergeResult:
    use_draft: bool
    similarity: float
    reason: str


def merge(draft: str, verified: str, *, draft_complete: bool, min_confidence: float) -> MergeResult:
    """Serve the draft only when it is complete and close enough to the verified answer."""
    score = similarity(draft, verified, draft_complete=draft_complete)
    if not draft_complete:
        return MergeResult(False, score, "draft_truncated")
    if score >= min_confidence:
        return MergeResult(True, score, "similar_to_verified")
    return MergeResult(False, score, "differs_from_verified")
