"""Stream chunks for tests that hand the readers chunks of their own making."""

from __future__ import annotations

from typing import Any

import orjson

from app.chat_completion import CHUNK_DECODER, Chunk


def read(payload: dict[str, Any]) -> Chunk:
    """``payload`` as ``ChunkParser`` hands a read chunk on: its bytes and what it says."""
    raw = orjson.dumps(payload)
    return Chunk(raw, CHUNK_DECODER.decode(raw))


def text_of(batches: list[list[Chunk]]) -> str:
    """The content a stream's batches brought."""
    deltas = (c.typed.delta for b in batches for c in b if c.typed and c.typed.delta)
    return "".join(d.content or "" for d in deltas)
