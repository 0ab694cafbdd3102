"""A client that goes away cancels its request, whether it waits for an answer or a stream.

Once a chat request's body has been read, the next ASGI message can only be the
disconnect. specproxy's own server protocol (``app.api.http_limits``) tells a request
so itself: it puts a ``Hangup`` in each request's scope and, when the connection is
lost before the answer is complete, cancels the task registered there, with no task
or wait per request. Under any other ASGI server, ``unless_disconnected`` runs one
watcher task beside the work to read that message. ``EventStream`` writes a stream
the same way. Starlette's ``StreamingResponse`` would start a task group of two more
tasks per stream to watch for the same message (uvicorn speaks ASGI 2.3, so it does),
and a stream is the proxy's longest-lived object: less per stream is less memory at a
thousand open ones and less work per event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Mapping
from typing import Any, TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

T = TypeVar("T")

HANGUP = "specproxy.hangup"  # the scope key of a request's ``Hangup``


class Hangup:
    """Set by the server in a request's scope: the task to cancel if the client hangs up
    before its answer is complete, and whether it has; and whether the request's whole
    body has arrived (``arrived``: reading it cannot wait, so it needs no timer)."""

    __slots__ = ("arrived", "gone", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.gone = False
        self.arrived = False

    def hang_up(self) -> None:
        """The client is gone: cancel the task waiting for it, if any (once)."""
        if self.gone:
            return
        self.gone = True
        if self.task is not None:
            self.task.cancel()


async def unless_disconnected(scope: Scope, receive: Receive, work: Awaitable[T]) -> T | None:
    """Await ``work`` in this task; if the client disconnects first, cancel it, return None."""
    task = asyncio.current_task()
    assert task is not None
    hangup: Hangup | None = scope.get(HANGUP)
    if hangup is None:
        hangup = Hangup()
        watcher = asyncio.get_running_loop().create_task(_watch(receive, hangup))
    else:
        watcher = None
    hangup.task = task
    if hangup.gone:
        task.cancel()  # gone before it got here: as a watcher would have found at once
    try:
        return await work
    except asyncio.CancelledError:
        if not hangup.gone or task.uncancel() > 0:
            raise  # not the client's doing (shutdown): stay cancelled
        return None
    finally:
        hangup.task = None
        if watcher is not None:
            watcher.cancel()


async def _watch(receive: Receive, hangup: Hangup) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    hangup.hang_up()


class EventStream(Response):
    """Server-sent events written straight to the server, one write per chunk; the stream
    is closed (its upstream calls with it) however the writing ends."""

    media_type = "text/event-stream"

    def __init__(self, chunks: AsyncGenerator[bytes], headers: Mapping[str, str]) -> None:
        self.chunks = chunks
        self.status_code = 200
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await unless_disconnected(scope, receive, self._write(send))

    async def _write(self, send: Send) -> None:
        try:
            # The first chunk before the head: a generator's own cleanup (its request's
            # count and record) runs on ``aclose`` only once it has started. The proxy's
            # streams have their first chunk at hand when they are returned.
            first = await anext(self.chunks, None)
            await self._start(send)
            if first is not None:
                await send({"type": "http.response.body", "body": first, "more_body": True})
                async for chunk in self.chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.chunks.aclose()

    async def _start(self, send: Send) -> None:
        """Send the head; its encoded headers are let go, not kept for the stream's life."""
        headers, self.raw_headers = self.raw_headers, []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
