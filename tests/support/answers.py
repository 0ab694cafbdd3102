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


def collect_calls(
    chunks: Iterable[dict[str, Any]],
) -> tuple[str, list[dict[str, str]], str | None, dict[str, Any]]:
    """A stream's content, its tool calls put back together from ``delta.tool_calls``
    (``{id, name, arguments}`` by index), its finish_reason and the chunk carrying it."""
    text, calls, finish, final = [], {}, None, {}
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text.append(delta.get("content") or "")
            for tc in delta.get("tool_calls") or []:
                call = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                call["id"] = tc.get("id") or call["id"]
                function = tc.get("function") or {}
                call["name"] = function.get("name") or call["name"]
                call["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                finish, final = choice["finish_reason"], chunk
    return "".join(text), [calls[i] for i in sorted(calls)], finish, final
