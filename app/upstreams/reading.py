"""One reader of an upstream's stream: what each chunk adds, typed, and the counts.

A stream is read for three ends (the relay passes it on, the draft and the hedge
assemble it), and each needs the same counts: chunks that brought text, chunks that
brought tool-call fragments, the usage when it comes, llama-server's draft counters. They
are kept here, once; ``take`` hands back the chunk's ``Delta`` (``app.chat_completion``)
and its ``finish_reason`` for the caller's own use. A content chunk passed on unread (its
raw bytes) is counted by ``take_unread`` without parsing it.
"""

from __future__ import annotations

import time
from typing import Any

from app.chat_completion import Delta
from app.sse import ToolCallDeltas, carries_text
from app.upstreams.parsing import add_counts, draft_counters

_NO_DELTA = Delta()


class StreamReader:
    """The counts of one stream, kept as its chunks are taken."""

    def __init__(self) -> None:
        self.content_chunks = 0  # chunks whose delta brought text (an unread one counts)
        self.tool_call_deltas = 0  # chunks whose delta brought tool-call fragments
        self.token_chunks = 0  # chunks that brought either (a chunk is about a token)
        self.completion_tokens: int | None = None  # the upstream's usage, when it came
        self.prompt_tokens = 0
        self.speculation: dict[str, int] | None = None  # llama-server's draft counters
        self.first_token_at: float | None = None  # perf_counter when text first came
        self.text: list[str] = []
        self.tool_calls = ToolCallDeltas()  # the calls streamed so far

    def take_unread(self, payload: bytes) -> None:
        """Count a content chunk passed on as its raw payload."""
        self.content_chunks += 1
        self.token_chunks += 1
        if self.first_token_at is None and carries_text(payload):
            self.first_token_at = time.perf_counter()

    def take_totals(self, chunk: dict[str, Any]) -> None:
        """Keep a chunk's usage and draft counters (they may come after the finish)."""
        if usage := chunk.get("usage"):
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
            self.prompt_tokens = usage.get("prompt_tokens") or self.prompt_tokens
        if "timings" in chunk:
            self.speculation = add_counts(self.speculation, draft_counters(chunk["timings"]))

    def take(self, chunk: dict[str, Any]) -> tuple[Delta, str | None]:
        """Read a parsed chunk: its totals, then its delta, counted; returns the delta and
        the choice's ``finish_reason``."""
        self.take_totals(chunk)
        choices = chunk.get("choices")
        if not choices:
            return _NO_DELTA, None
        choice = choices[0]
        raw = choice.get("delta") or {}
        content, calls = raw.get("content"), raw.get("tool_calls")
        has_calls = "tool_calls" in raw
        if content:
            self.text.append(content)
            self.content_chunks += 1
        if has_calls:
            self.tool_calls.add(calls)
            self.tool_call_deltas += 1
        if content or has_calls:
            self.token_chunks += 1
            if self.first_token_at is None:
                self.first_token_at = time.perf_counter()
        delta = Delta(content=content, tool_calls=calls) if content or has_calls else _NO_DELTA
        return delta, choice.get("finish_reason")
