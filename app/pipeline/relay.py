"""Passing an upstream's stream on to the client, and what it showed on the way.

``Upstream.open_stream`` waits for the first chunk, so an upstream that fails at once
is still an HTTP error for the client. ``StreamRelay`` yields the stream's bytes as
they arrive, holding back only the finishing chunk (llama-server sends ``usage``
in a later ``choices: []`` chunk, and the counts belong in the proxy's fields);
when it is done it tells what it saw (text, tool calls, token count, llama-server's
draft counters, the failure that cut it) and ``ending(fields)`` writes the held chunk
with the proxy's fields. The orchestrator reads the result: nothing calls back up.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any

from app.errors import UpstreamError
from app.pipeline.wire import add_speculation
from app.sse import DONE, ToolCallDeltas, carries_text, event
from app.upstreams import OpenStream, Upstream
from app.upstreams.base import Chunk

_CHUNK_FIELDS = frozenset(
    {"id", "object", "created", "model", "system_fingerprint", "choices", "usage"}
)


class StreamRelay:
    """One upstream stream passed on; after ``chunks()`` it tells what it saw.

    Chunks that came unread (bytes) are passed on as they came; they count as one
    token each only if the stream breaks before its usage.
    """

    def __init__(self, stream: OpenStream, *, keep_usage: bool) -> None:
        self.stream = stream
        self.keep_usage = keep_usage
        self.error: UpstreamError | None = None  # what cut the stream, if anything
        self.speculation: dict[str, int] | None = None  # llama-server's draft counters
        self.tool_calls = ToolCallDeltas()  # the calls streamed so far
        self._text: list[str] = []
        self._n_content = 0
        self._reported: int | None = None
        self.prompt_tokens = 0  # the upstream's usage, when it sent one
        self.first_token_at: float | None = None  # perf_counter when text first went out
        self._held: dict[str, Any] | None = None
        self._tail: list[bytes] = []

    @property
    def upstream(self) -> Upstream:
        """The upstream whose stream this is."""
        return self.stream.upstream

    @property
    def text(self) -> str:
        """The content streamed so far."""
        return "".join(self._text)

    @property
    def n_tokens(self) -> int:
        """Tokens generated: the upstream's usage, else one per content chunk."""
        return self._reported or self._n_content

    @property
    def estimated(self) -> bool:
        """No usage came: ``n_tokens`` counts chunks and the prompt is unknown."""
        return self._reported is None

    async def chunks(self) -> AsyncGenerator[bytes]:
        """The stream up to its finishing chunk, one write per network read; a failure
        (or a stream that ends without ``finish_reason``) ends it and is kept in ``error``."""
        try:
            batch: list[Chunk] | None = self.stream.first
            self.stream.first = []  # an open stream keeps no batch it has passed on
            while batch is not None:
                out = self._take(batch)
                del batch  # not kept while the next one is awaited
                if out:
                    yield out
                batch = await anext(self.stream.rest, None)
            if self._held is None:
                # [DONE] is optional (Cerebras), so only a missing finish_reason shows a cut.
                raise UpstreamError(self.upstream.name, "stream ended before finish_reason")
        except UpstreamError as exc:
            self.error = exc
        finally:
            await self.stream.rest.aclose()

    def ending(self, fields: dict[str, Any]) -> bytes:
        """The held finishing chunk with the proxy's ``fields``, what followed it, ``[DONE]``."""
        assert self._held is not None, "the stream has not finished"
        return b"".join([event({**self._held, **fields}), *self._tail, DONE])

    def _take(self, batch: list[Chunk]) -> bytes:
        """Read one batch; returns what can go out now."""
        out: list[bytes] = []
        for chunk in batch:
            if isinstance(chunk, bytes):
                self._n_content += 1
                if self.first_token_at is None and carries_text(chunk):
                    self.first_token_at = time.perf_counter()
                (out if self._held is None else self._tail).append(b"data: " + chunk + b"\n\n")
                continue
            if usage := chunk.get("usage"):
                self._reported = usage.get("completion_tokens", self._reported)
                self.prompt_tokens = usage.get("prompt_tokens") or self.prompt_tokens
            if "timings" in chunk:
                self.speculation = add_speculation(self.speculation, chunk)
            choices = chunk.get("choices") or []
            if self._held is not None:
                if choices or self.keep_usage:
                    self._tail.append(event(chunk))
                else:  # a usage chunk only the proxy asked for: keep its extras
                    extras = {k: v for k, v in chunk.items() if k not in _CHUNK_FIELDS}
                    self._held = {**self._held, **extras}
                continue
            delta = (choices[0].get("delta") or {}) if choices else {}
            if piece := delta.get("content"):
                self._text.append(piece)
                self._n_content += 1
            if "tool_calls" in delta:
                self.tool_calls.add(delta["tool_calls"])
                self._n_content += 1
            if self.first_token_at is None and (delta.get("content") or "tool_calls" in delta):
                self.first_token_at = time.perf_counter()
            if choices and choices[0].get("finish_reason"):
                self._held = chunk
            else:
                out.append(event(chunk))
        return b"".join(out)
