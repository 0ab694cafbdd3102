"""Server-sent events: encoding, and replaying a finished completion as chunks."""

from __future__ import annotations

import re
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"
_WORDS = re.compile(r"\s*\S+|\s+$")


class DataLines:
    """The ``data:`` payloads of an event stream, fed in blocks cut anywhere.

    Blank separators, comments and ``event:`` lines are dropped; a line longer
    than ``limit`` bytes is an error (a broken or hostile upstream).
    """

    def __init__(self, limit: int = 1 << 20) -> None:
        self.limit = limit
        self._rest = b""

    def feed(self, block: bytes) -> list[bytes]:
        lines = (self._rest + block).split(b"\n")
        self._rest = lines.pop()
        if len(self._rest) > self.limit:
            raise ValueError(f"an event line over {self.limit} bytes")
        return [line[5:].strip() for line in lines if line.startswith(b"data:")]


_NOT_FINISHED = b'"finish_reason":null'


def passes_unread(payload: bytes) -> bool:
    """Whether a chunk can be relayed without parsing it: it finishes nothing
    (``"finish_reason":null``) and carries no usage and no error.

    A quote cannot stand unescaped inside a JSON string, so these byte patterns
    match keys, never generated text. Other spellings (a space after the colon)
    are simply parsed.
    """
    return _NOT_FINISHED in payload and b'"usage"' not in payload and b'"error"' not in payload


def event(payload: dict[str, Any]) -> bytes:
    """One ``data:`` event."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _pieces(message: str, logprobs: list[dict[str, Any]] | None) -> list[tuple[str, Any]]:
    """Split the answer into chunk texts: the model's own tokens when they add up to it."""
    if logprobs and "".join(str(e.get("token", "")) for e in logprobs) == message:
        return [(str(e["token"]), e) for e in logprobs]
    return [(p, None) for p in _WORDS.findall(message)] or [("", None)]


def completion_to_chunks(
    body: dict[str, Any], *, with_logprobs: bool, include_usage: bool, extra: dict[str, Any]
) -> list[dict[str, Any]]:
    """A non-streaming completion as the chunk sequence a streaming call would give.

    ``extra`` (``model_used``, ``speculative_decoding``) goes on the chunk that
    carries ``finish_reason``; usage follows in its own chunk when asked for.
    """
    choice = body["choices"][0]
    message = (choice.get("message") or {}).get("content") or ""
    logprobs = (choice.get("logprobs") or {}).get("content")
    head = {
        "id": body.get("id", "chatcmpl-specproxy"),
        "object": "chat.completion.chunk",
        "created": body.get("created", 0),
        "model": body.get("model", ""),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, lp: Any = None) -> dict[str, Any]:
        c: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if with_logprobs:
            c["logprobs"] = {"content": [lp]} if lp else None
        return {**head, "choices": [c]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": text}, lp=lp) for text, lp in _pieces(message, logprobs)]
    chunks.append({**chunk({}, choice.get("finish_reason") or "stop"), **extra})
    if include_usage and body.get("usage"):
        chunks.append({**head, "choices": [], "usage": body["usage"]})
    return chunks
