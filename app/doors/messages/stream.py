"""A stream of chat chunks as Messages' server-sent events.

``message_start`` and a ``ping`` first; then per content block ``content_block_start``,
its deltas (``text_delta``, or ``input_json_delta`` carrying a tool call's argument
fragments in the order they came) and ``content_block_stop``; at the end
``message_delta`` (stop_reason, usage, the proxy's report under ``specproxy``) and
``message_stop``. An error chunk becomes an ``error`` event and ends the stream.
Each chat tool call (by its ``index``) is one tool_use block: fragments of two calls
are never mixed, however finely the upstream cut them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

import orjson

from app.doors.chat_stream import ChatPayloads, plain_text
from app.doors.messages.answer import (
    EXTRA,
    matched_stop,
    message_id,
    stop_reason,
    unechoed,
    usage,
)
from app.doors.messages.errors import anthropic_error, error_body
from app.doors.messages.ids import tool_use_id
from app.errors import ProxyError, UpstreamProtocolError

JSON = dict[str, Any]
_PROXY_FIELDS = ("model_used", "speculative_decoding")
_TEXT_DELTA = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_TEXT_FIELD = b',"delta":{"type":"text_delta","text":'


def sse(kind: str, data: JSON) -> bytes:
    """One event: ``event: <type>`` and its ``data:`` line."""
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class MessageEvents:
    """The Messages events for one answer, fed its chat chunks in order."""

    def __init__(self, model: str, stops: Sequence[str] = (), prefill: str = "") -> None:
        self.model = model
        self.stops = stops  # the client's stop_sequences
        # the client's prefill while the answer may still be repeating it, and the text
        # held back meanwhile (``unechoed``, over deltas cut anywhere)
        self.echo = prefill
        self.held = ""
        self.keep = max(map(len, stops), default=0)  # the text's tail kept to match them
        self.tail = ""
        self.stop_sequence: str | None = None
        self.id = message_id()
        self.blocks = 0  # content blocks started
        self.open: int | None = None  # the open block's index
        self.open_text = False  # the open block is text (else a tool_use)
        self.tools: dict[int, int] = {}  # chat tool-call index -> its block's index
        self.stop_reason: str | None = None
        self.usage: JSON = {}
        self.extra: JSON = {}
        self.done = False  # ended (message_stop or error): nothing more is said

    def start(self) -> bytes:
        """``message_start`` and a ``ping``."""
        message: JSON = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return sse("message_start", {"type": "message_start", "message": message}) + sse(
            "ping", {"type": "ping"}
        )

    def chunk(self, chunk: JSON) -> bytes:
        """The events one chat chunk makes (none for a role-only or empty one)."""
        if self.done:
            return b""
        if isinstance(error := chunk.get("error"), dict):
            return self.error(ProxyError(str(error.get("message") or "upstream error")))
        if isinstance(used := chunk.get("usage"), dict):
            self.usage = used
        if "model_used" in chunk:  # the finishing chunk's: the proxy's fields
            self.extra |= {k: chunk[k] for k in _PROXY_FIELDS if k in chunk}
        out = bytearray()
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            return bytes(out)
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        if isinstance(text := delta.get("content"), str):
            out += self.text(text)
        calls = delta.get("tool_calls")
        if self.echo and (calls or choice.get("finish_reason") is not None):
            out += self._settle()  # no more text to come first: what was held goes out
        for i, call in enumerate(calls if isinstance(calls, list) else ()):
            if isinstance(call, dict):
                out += self._tool(i, call)
        if (reason := stop_reason(choice.get("finish_reason"))) is not None:
            self.stop_reason = reason
            self.stop_sequence = matched_stop(choice, self.tail, self.stops)
        return bytes(out)

    def text(self, text: str) -> bytes:
        """The events of a chunk's text (``plain_text``: a chunk that brings text alone)."""
        if self.done or not text:
            return b""
        if self.echo and not (text := self._unecho(text)):
            return b""
        if self.keep:
            self.tail = (self.tail + text)[-self.keep :]
        return self._text(text)

    def end(self) -> bytes:
        """The open block's stop, ``message_delta`` and ``message_stop`` (once)."""
        if self.done:
            return b""
        out = self._settle()
        self.done = True
        reason = self.stop_reason or "end_turn"
        stopped = None
        if reason == "end_turn" and self.tools:
            reason = "tool_use"
        elif reason == "end_turn" and self.stop_sequence is not None:
            reason, stopped = "stop_sequence", self.stop_sequence
        delta: JSON = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": stopped},
            "usage": usage(self.usage),
        }
        if self.extra:
            delta[EXTRA] = self.extra
        stop = sse("message_stop", {"type": "message_stop"})
        return out + self._close() + sse("message_delta", delta) + stop

    def error(self, exc: ProxyError) -> bytes:
        """An ``error`` event, which ends the stream."""
        if self.done:
            return b""
        self.done = True
        return sse("error", error_body(anthropic_error(exc)))

    def _settle(self) -> bytes:
        """The watch for the prefill's repeat ends: the text held back goes out (an answer
        that repeated only part of the prefill keeps that part)."""
        held, self.echo, self.held = self.held, "", ""
        return self.text(held)

    def _unecho(self, text: str) -> str:
        seen = self.held + text
        if self.echo.startswith(seen) and len(seen) < len(self.echo):
            self.held = seen  # still repeating the prefill: nothing to say yet
            return ""
        echo, self.echo, self.held = self.echo, "", ""
        return unechoed(seen, echo)

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        index, self.open, self.open_text = self.open, None, False
        return sse("content_block_stop", {"type": "content_block_stop", "index": index})

    def _begin(self, block: JSON, *, text: bool) -> bytes:
        out = self._close()
        self.open, self.open_text = self.blocks, text
        self.blocks += 1
        start = {"type": "content_block_start", "index": self.open, "content_block": block}
        return out + sse("content_block_start", start)

    def _text(self, text: str) -> bytes:
        out = b""
        if self.open is None or not self.open_text:
            out = self._begin({"type": "text", "text": ""}, text=True)
        # the hot path (one per token): the event's bytes put together, not a dict dumped
        index = self.blocks - 1  # the open text block is the last begun
        return b"%s%s%d%s%s}}\n\n" % (out, _TEXT_DELTA, index, _TEXT_FIELD, orjson.dumps(text))

    def _tool(self, position: int, call: JSON) -> bytes:
        index = call.get("index", position)
        index = index if isinstance(index, int) else position
        out = b""
        if index not in self.tools:
            head = call.get("function")
            name = head.get("name") if isinstance(head, dict) else None
            block = {
                "type": "tool_use",
                "id": tool_use_id(call.get("id") if isinstance(call.get("id"), str) else None),
                "name": name if isinstance(name, str) else "",
                "input": {},
            }
            out = self._begin(block, text=False)
            self.tools[index] = self.blocks - 1
        function = call.get("function")
        fragment = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(fragment, str) or not fragment:
            return out
        # a fragment of a call already closed (an upstream interleaving calls) still goes
        # to that call's own block: clients gather deltas by index
        delta = {"type": "input_json_delta", "partial_json": fragment}
        event = {"type": "content_block_delta", "index": self.tools[index], "delta": delta}
        return out + sse("content_block_delta", event)


async def message_events(
    chunks: AsyncGenerator[bytes], events: MessageEvents
) -> AsyncGenerator[bytes]:
    """The chat reply's server-sent events (``data:`` lines, cut anywhere) as Messages
    events; the chat stream is closed however this one ends (the client left too)."""
    payloads = ChatPayloads()
    try:
        yield events.start()
        async for block in chunks:
            out = bytearray()
            for payload in payloads.feed(block):
                if payload == b"[DONE]":
                    continue
                if (text := plain_text(payload)) is not None:  # most chunks: one token more
                    out += events.text(text)
                    continue
                try:
                    chunk = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    out += events.error(UpstreamProtocolError("proxy", "an unreadable chunk"))
                    continue
                if isinstance(chunk, dict):
                    out += events.chunk(chunk)
            if out:
                yield bytes(out)
        yield events.end()
    except ProxyError as exc:
        yield events.error(exc)
    finally:
        await chunks.aclose()
