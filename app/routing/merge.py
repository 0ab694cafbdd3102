"""Merging a verified draft: does it agree, and which answer to serve. Pure functions.

The draft is served only when it agrees with the verified answer: by its facts
(``app.routing.agreement``, ``agreement: facts``) or, the seed's way, by surface
similarity over ``min_confidence`` (``agreement: similarity``). Answers with tool calls
agree when they make the same calls (``same_calls``), and JSON output (a JSON
``response_format``) when it holds the same value: a value that differs is a wrong
answer however alike its text looks. Similarity is always reported; it is taken over
the text and the calls written canonically.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from app.routing.agreement import agree
from app.routing.tool_calls import ToolCall, calls_text, same_calls
from app.vocabulary import AgreementMode


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
    """``agreement``: whether the draft's facts agree with the verified answer (in either
    mode: the learner's label); None when it could not be judged (cut short, or it broke
    the request's contract)."""

    use_draft: bool
    similarity: float
    reason: str
    agreement: bool | None = None


def merge(
    draft: str,
    verified: str,
    *,
    draft_complete: bool,
    min_confidence: float,
    mode: AgreementMode = AgreementMode.SIMILARITY,
    prompt: str = "",
    draft_calls: tuple[ToolCall, ...] = (),
    verified_calls: tuple[ToolCall, ...] = (),
    violation: str | None = None,
    json_output: bool = False,
) -> MergeResult:
    """Serve the draft only when it is complete, keeps the request's contract (no
    ``violation``), and makes the same tool calls as, holds the same JSON value as
    (``json_output``), or agrees with the verified answer (by ``mode``; ``prompt`` is
    the question, whose words are not claims)."""
    score = similarity(
        f"{draft} {calls_text(draft_calls)}".strip(),
        f"{verified} {calls_text(verified_calls)}".strip(),
        draft_complete=draft_complete,
    )
    if not draft_complete:
        return MergeResult(False, score, "draft_truncated")
    if violation is not None:
        return MergeResult(False, score, violation)
    if draft_calls or verified_calls:
        same = same_calls(draft_calls, verified_calls)
        return MergeResult(same, score, "same_tool_calls" if same else "tool_calls_differ", same)
    if json_output and (values := _json_values(draft, verified)) is not None:
        same = values[0] == values[1]
        return MergeResult(same, score, "same_json" if same else "json_differs", same)
    # The facts decide ``agreement`` (the learner's label) in either mode; ``mode`` decides
    # what is served.
    found = agree(draft, verified, prompt=prompt)
    if mode is AgreementMode.FACTS:
        return MergeResult(found.agrees, score, found.reason, found.agrees)
    if score >= min_confidence:
        return MergeResult(True, score, "similar_to_verified", found.agrees)
    return MergeResult(False, score, "differs_from_verified", found.agrees)


def _json_values(draft: str, verified: str) -> tuple[Any, Any] | None:
    """Both answers' JSON values, or None if either is not JSON (then they are compared
    as text)."""
    try:
        return orjson.loads(draft), orjson.loads(verified)
    except orjson.JSONDecodeError:
        return None
