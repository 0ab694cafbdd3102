"""The lean edge's server protocol: the HTTP-layer limits uvicorn's httptools protocol
lacks, at the connection.

A request head must arrive within ``head_timeout_s`` (else 408 and the connection
closes: silent sockets and slowloris heads are let go), be at most
``max_header_bytes`` and ``max_headers`` lines (else 431, before a large header is
buffered whole). The body's own deadline is the app's (``read_json``); idle
keep-alive and the connection cap are uvicorn's settings, on either edge.

The protocol also tells a request that its client hung up (``app.edge.disconnect.Hangup``
in its scope), so the app needs no task per request to watch for it.

It subclasses uvicorn's ``HttpToolsProtocol`` and reads its ``cycle``: internals, which
is why pyproject.toml bounds uvicorn below its next minor version.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config import HttpLimits
from app.edge.disconnect import HANGUP, Hangup

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class _Head:
    """Where the current request head stands on one connection."""

    __slots__ = ("bytes", "reading", "refused", "since", "timer")

    def __init__(self) -> None:
        self.reading = False  # a head is being received
        self.since = 0.0  # when it began (loop time): its deadline counts from there
        self.bytes = 0
        # Armed only for a head still incomplete once a read has been parsed: one that
        # came whole in one read (nearly all of them) costs no timer.
        self.timer: asyncio.TimerHandle | None = None
        self.refused = False  # answered with 408/431 and closing


class GuardedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol that times and measures each request head, and
    refuses one that is too slow or too large."""

    # uvicorn takes a protocol class (pickled by name into worker processes), not an
    # instance: the limits in force are set on the class once, at start.
    limits: ClassVar[HttpLimits] = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # One attribute, not four: past 30 attributes an instance's dict stops sharing its
        # keys with the class's other instances, ~1.5 KB more per connection.
        self._head = _Head()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_started()
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        head = self._head
        if head.refused:
            return  # answered and closing: nothing more is parsed
        if head.reading:
            end = data.find(b"\r\n\r\n")
            head.bytes += len(data) if end < 0 else end
            if head.bytes > self.limits.max_header_bytes:
                self._refuse(431, f"request head over {self.limits.max_header_bytes} bytes")
                return
        super().data_received(data)
        if head.reading and head.timer is None:
            self._arm_head_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[HANGUP] = Hangup()  # type: ignore[literal-required]
        if not self._head.reading:  # the next request on a kept-alive connection
            self._head_started()

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        if len(self.headers) > self.limits.max_headers:
            self._refuse(431, f"more than {self.limits.max_headers} header lines")

    def on_headers_complete(self) -> None:
        self._head_done()
        if not self._head.refused:  # a refused request never reaches the app
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._head.refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._head.refused:
            super().on_message_complete()
            self.scope[HANGUP].arrived = True  # type: ignore[literal-required]

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_done()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.scope[HANGUP].hang_up()  # type: ignore[literal-required]
        super().connection_lost(exc)

    def _head_started(self) -> None:
        head = self._head
        head.reading, head.bytes, head.since = True, 0, self.loop.time()

    def _arm_head_timer(self) -> None:
        when = self._head.since + self.limits.head_timeout_s
        self._head.timer = self.loop.call_at(when, self._refuse, 408, "request head too slow")

    def _head_done(self) -> None:
        head = self._head
        head.reading = False
        if head.timer is not None:
            head.timer.cancel()
            head.timer = None

    def _refuse(self, status: int, message: str) -> None:
        self._head_done()
        if self._head.refused or self.transport.is_closing():
            return
        self._head.refused = True
        body = message.encode()
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s"
            % (status, _REASONS[status], len(body), body)
        )
        self.transport.close()
