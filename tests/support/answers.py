"""Reply texts that steer the speculative pipeline down each path, and readers of its answers.

A stand-in that drafts ``GOOD_DRAFT`` is served as is; ``HEDGED`` carries
uncertainty markers, so it is verified: ``CLOUD_SAME`` is close enough for the
draft to be served, ``CLOUD_OTHER`` is not. ``LONG`` fills a 32-token draft
budget, so the draft is truncated.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

GOOD_DRAFT = "Hello! I am a small local model and I am happy to help you today."
HEDGED = "I think the answer is four, but maybe it is not exactly four at all."
CLOUD_SAME = "I think the answer is four, but maybe it is not exactly four at all!"
CLOUD_OTHER = "Two plus two equals 4. This is basic arithmetic, true in every base above four."
LONG = " ".join(["Machine learning fits models to data so they can predict new cases."] * 4)


def spec(body: Any) -> dict[str, Any]:
    """The ``speculative_decoding`` block of an answer (a dict or an openai response)."""
    data = body if isinstance(body, dict) else body.to_dict()
    return data["speculative_decoding"]  # type: ignore[no-any-return]


def collect(chunks: Iterable[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The streamed content and the chunk that carried finish_reason."""
    parts, final = [], {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            parts.append(choice["delta"].get("content") or "")
            if choice.get("finish_reason"):
                final = chunk
    return "".join(parts), final
