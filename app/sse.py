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


class CompletionAssembler:
    """Builds the non-streaming body of a streamed completion, chunk by chunk.

    The inverse of ``completion_to_chunks`` for one choice: content and logprob entries are
    concatenated, ``finish_reason``, ``usage`` and llama-server's ``timings`` are kept, so a
    draft read as a stream can be judged and served like one read whole.
    """

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.text: list[str] = []
        self.logprobs: list[dict[str, Any]] = []
        self.finish_reason: str | None = None
        self.extra: dict[str, Any] = {}  # usage, timings

    def add(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """Take one parsed chunk; returns the logprob entries it brought."""
        if not self.head:
            self.head = {k: chunk[k] for k in ("id", "created", "model") if k in chunk}
        for key in ("usage", "timings"):
            if chunk.get(key):
                self.extra[key] = chunk[key]
        choices = chunk.get("choices") or ()
        if not choices:
            return []
        choice = choices[0]
        if piece := (choice.get("delta") or {}).get("content"):
            self.text.append(piece)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        entries: list[dict[str, Any]] = (choice.get("logprobs") or {}).get("content") or []
        self.logprobs += entries
        return entries

    def completion(self, finish_reason: str | None = None) -> dict[str, Any]:
        """The body so far; ``finish_reason`` overrides the stream's (e.g. an aborted draft)."""
        message = {"role": "assistant", "content": "".join(self.text)}
        choice = {
            "index": 0,
            "message": message,
            "logprobs": {"content": self.logprobs},
            "finish_reason": finish_reason or self.finish_reason,
        }
        return {"object": "chat.completion", **self.head, "choices": [choice], **self.extra}
