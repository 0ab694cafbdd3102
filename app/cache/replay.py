"""A kept answer sent again, and a fresh answer caught on its way out.

``replayed`` gives the entry's completion a fresh ``id`` and ``created`` and sends it as
the client asked: JSON, or a stream (role chunk, content chunks, finish chunk, a usage
chunk when ``stream_options.include_usage``, ``[DONE]``) through the proxy's own
replaying writer (``app.wire.reply``), with ``model_used`` the model that first answered
and ``X-Cache: hit``. ``Caught`` keeps what a fresh answer sent: a whole one's bytes, or
a stream's chunks put back together as the completion they make (``CompletionAssembler``).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from app.cache.entry import Entry, keepable, served_body
from app.chat_completion import CHUNK_DECODER, Chunk
from app.protocol import ChatCompletionRequest
from app.sse import CompletionAssembler, DataLines
from app.wire import JSONReply, Reply, SpeculationReport, StreamReply, reply

HIT_REASONS = ("cache_hit",)


def replayed(entry: Entry, request: ChatCompletionRequest, *, speculative: bool) -> Reply:
    """The entry's answer for this request, fresh id and time, ``X-Cache: hit``."""
    body = {
        **entry.body,
        "id": f"chatcmpl-{os.urandom(12).hex()}",
        "created": int(time.time()),
    }
    report = SpeculationReport(reasons=list(HIT_REASONS)) if speculative else None
    out = reply(body, request, entry.model_used, report, from_draft=False)
    out.headers["X-Cache"] = "hit"
    return out


@dataclass(slots=True, eq=False)
class Caught:
    """What a fresh answer sent the client, kept while it goes (at most ``limit`` bytes)."""

    limit: int
    content: bytes | None = None  # a whole answer's JSON
    assembler: CompletionAssembler | None = None  # a stream's chunks, put together
    too_big: bool = False
    _lines: DataLines = field(default_factory=DataLines)
    _seen: int = 0

    def catch(self, out: Reply, result: str) -> Reply:
        """``out`` with its ``X-Cache`` header, its content kept as it goes."""
        out.headers["X-Cache"] = result
        if isinstance(out, JSONReply):
            self.content = out.content if len(out.content) <= self.limit else None
            return out
        self.assembler = CompletionAssembler()
        return StreamReply(self._tee(out.chunks), out.headers, out.relay)

    async def _tee(self, chunks: AsyncGenerator[bytes]) -> AsyncGenerator[bytes]:
        try:
            async for data in chunks:
                self._keep(data)
                yield data
        finally:
            await chunks.aclose()

    def _keep(self, data: bytes) -> None:
        if self.too_big or self.assembler is None:
            return
        self._seen += len(data)
        if self._seen > self.limit:
            self.too_big = True
            return
        try:
            for payload in self._lines.feed(data):
                if payload and payload != b"[DONE]":
                    typed = CHUNK_DECODER.decode(payload)
                    if typed.error is msgspec.UNSET:
                        self.assembler.add(Chunk(payload, typed))
        except (ValueError, TypeError, AttributeError, msgspec.MsgspecError):
            self.too_big = True  # not a stream the cache can read back: not kept

    def body(self) -> dict[str, Any] | None:
        """The completion the client got, without the proxy's fields; None if unkeepable."""
        if self.content is not None:
            return served_body(self.content)
        if self.assembler is None or self.too_big or not self.assembler.head:
            return None
        body = self.assembler.completion()
        choice = body["choices"][0]
        if not choice["logprobs"]["content"]:
            choice["logprobs"] = None
        return body if keepable(body) else None
