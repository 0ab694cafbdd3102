"""A stream of chat chunks as the Responses API's event sequence.

Pure: ``ResponseEvents`` is fed the chat chunks' JSON objects one at a time and returns
the events' bytes (``event: <type>`` and ``data: <json>``, each with its
``sequence_number``): ``response.created``, ``response.in_progress``, then per output
item ``response.output_item.added``, its content (``response.content_part.added``,
``response.output_text.delta`` ... ``.done``, ``response.content_part.done``; or
``response.function_call_arguments.delta`` ... ``.done``; or
``response.reasoning_text.delta`` ... ``.done``), ``response.output_item.done``, and
last ``response.completed`` (``response.incomplete`` when the answer was cut at the token
limit, ``response.failed`` when the stream carried an error), with usage.
One item is open at a time: a new one closes the one before.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.doors.chat_stream import plain_text
from app.doors.responses import reply

_TEXT_PART = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
_DELTA = b"response.output_text.delta"
_DELTA_HEAD = b"event: " + _DELTA + b'\ndata: {"type":"' + _DELTA + b'","sequence_number":'
_DELTA_TAIL = b',"logprobs":[]}\n\n'


class ResponseEvents:
    """The events of one streamed response, built from its chat chunks."""

    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response  # the skeleton (``reply.skeleton``)
        self.sequence = 0
        self.items: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the item being streamed
        self.texts: list[str] = []  # the open item's text or arguments so far
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool-call index -> its item
        self.finish: str | None = None
        self.usage: Any = None
        self.proxy: dict[str, Any] = {}  # the chat answer's proxy fields
        self.final: dict[str, Any] | None = None  # the whole response, once ended
        self._where = b""  # the open item's place in a delta event's JSON (``take_bytes``)

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def start(self) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        return self._event("response.created", response=self.response) + self._event(
            "response.in_progress", response=self.response
        )

    def take_bytes(self, payload: bytes) -> bytes:
        """``take`` for a chunk's JSON bytes; a chunk that brings text alone, the common
        one, is read for its text alone (``plain_text``)."""
        text = plain_text(payload)
        if text is None:
            return self.take(orjson.loads(payload))
        if not text or self.final is not None:
            return b""
        if self.open is None or self.open["type"] != "message":
            return self._text("message", text)
        # the hot path (one per token): the event's bytes put together, not a dict dumped
        self.texts.append(text)
        self.sequence += 1
        number, text_json = self.sequence - 1, orjson.dumps(text)
        return b"%s%d%s%s%s" % (_DELTA_HEAD, number, self._where, text_json, _DELTA_TAIL)

    def take(self, chunk: dict[str, Any]) -> bytes:
        """The events one chat chunk brings (an error chunk: ``response.failed``)."""
        if self.final is not None:  # failed already
            return b""
        if isinstance(error := chunk.get("error"), dict):
            return self.failed(error)
        self.proxy |= {k: chunk[k] for k in reply.PROXY_FIELDS if k in chunk}
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            return b""
        choice = choices[0]
        out = b""
        delta = choice.get("delta") or {}
        if isinstance(thought := delta.get("reasoning_content"), str) and thought:
            out += self._text("reasoning", thought)
        if isinstance(text := delta.get("content"), str) and text:
            out += self._text("message", text)
        for call in delta.get("tool_calls") or []:
            out += self._call(call)
        if choice.get("finish_reason"):
            self.finish = choice["finish_reason"]
        return out

    def _text(self, kind: str, text: str) -> bytes:
        out = b""
        if self.open is None or self.open["type"] != kind:
            out += self._close()
            if kind == "message":
                item = reply.message_item("", reply.new_id("msg"), "in_progress")
            else:
                item = {**reply.reasoning_item("", reply.new_id("rs")), "content": []}
            out += self._add(item)
            part = _TEXT_PART if kind == "message" else {"type": "reasoning_text", "text": ""}
            out += self._event("response.content_part.added", **self._at(), part=part)
        self.texts.append(text)
        if not text:
            return out
        if kind == "reasoning":
            return out + self._event("response.reasoning_text.delta", **self._at(), delta=text)
        # the hot path (one per token): the event's bytes put together, not a dict dumped
        self.sequence += 1
        number = self.sequence - 1
        text_json = orjson.dumps(text)
        return b"%s%s%d%s%s%s" % (out, _DELTA_HEAD, number, self._where, text_json, _DELTA_TAIL)

    def _call(self, call: dict[str, Any]) -> bytes:
        out = b""
        index = call.get("index", 0)
        function = call.get("function") or {}
        if index not in self.calls:
            out += self._close()
            item = reply.call_item(
                call.get("id") or reply.new_id("call"),
                function.get("name") or "",
                "",
                reply.new_id("fc"),
                "in_progress",
            )
            self.calls[index] = item
            out += self._add(item)
        item = self.calls[index]
        if isinstance(fragment := function.get("arguments"), str) and fragment:
            if item is self.open:
                self.texts.append(fragment)
            else:  # a late fragment of a call already closed
                item["arguments"] += fragment
            at = {"item_id": item["id"], "output_index": self.items.index(item)}
            out += self._event("response.function_call_arguments.delta", **at, delta=fragment)
        return out

    def _add(self, item: dict[str, Any]) -> bytes:
        self.items.append(item)
        self.open, self.texts = item, []
        where = {"item_id": item["id"], "output_index": len(self.items) - 1, "content_index": 0}
        self._where = b"," + orjson.dumps(where)[1:-1] + b',"delta":'
        return self._event(
            "response.output_item.added", output_index=len(self.items) - 1, item=dict(item)
        )

    def _at(self) -> dict[str, Any]:
        assert self.open is not None
        return {"item_id": self.open["id"], "output_index": len(self.items) - 1, "content_index": 0}

    def _close(self) -> bytes:
        """The events that end the open item (none open: none)."""
        item = self.open
        if item is None:
            return b""
        whole, out = "".join(self.texts), b""
        at = self._at()
        if item["type"] == "function_call":
            item["arguments"] = whole
            del at["content_index"]
            out += self._event("response.function_call_arguments.done", **at, arguments=whole)
        elif item["type"] == "message":
            part = {**_TEXT_PART, "text": whole}
            item["content"] = [part]
            out += self._event("response.output_text.done", **at, text=whole, logprobs=[])
            out += self._event("response.content_part.done", **at, part=part)
        else:
            part = {"type": "reasoning_text", "text": whole}
            item["content"] = [part]
            out += self._event("response.reasoning_text.done", **at, text=whole)
            out += self._event("response.content_part.done", **at, part=part)
        item["status"] = reply.item_status(self.finish)
        self.open, self.texts = None, []
        output_index = self.items.index(item)
        return out + self._event("response.output_item.done", output_index=output_index, item=item)

    def end(self) -> bytes:
        """The open item closed, then ``response.completed`` (or ``.incomplete``)."""
        if self.final is not None:  # failed already
            return b""
        out = b"" if self.items else self._text("message", "")  # an empty answer: its item
        out += self._close()
        response = reply.with_report(self.response, self.proxy)
        self.final = reply.finished(response, self.items, self.finish, self.usage)
        kind = (
            "response.incomplete" if self.final["status"] == "incomplete" else "response.completed"
        )
        return out + self._event(kind, response=self.final)

    def failed(self, error: dict[str, Any]) -> bytes:
        """``response.failed`` with the error (the open item left as it was)."""
        code = error.get("code") or error.get("type") or "server_error"
        failure = {"code": str(code), "message": str(error.get("message") or "upstream error")}
        self.final = dict(self.response, status="failed", error=failure, output=self.items)
        self.open = None
        return self._event("response.failed", response=self.final)
