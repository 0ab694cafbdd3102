"""A client that goes away cancels its request, whether it waits for an answer or a stream.

Once a chat request's body has been read, the next ASGI message can only be the
disconnect. ``unless_disconnected`` runs a piece of work in the request's own task
with one watcher beside it; ``EventStream`` writes a stream the same way.
Starlette's ``StreamingResponse`` would start a task group of two more tasks per
stream to watch for the same message (uvicorn speaks ASGI 2.3, so it does), and a
stream is the proxy's longest-lived object: less per stream is less memory at a
thousand open ones and less work per event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Mapping
from typing import TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

T = TypeVar("T")


async def unless_disconnected(receive: Receive, work: Awaitable[T]) -> T | None:
    """Await ``work`` in this task; if the client disconnects first, cancel it, return None."""
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        task.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if not gone or task.uncancel() > 0:
            raise  # not the client's doing (shutdown): stay cancelled
        return None
    finally:
        watcher.cancel()


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
        await unless_disconnected(receive, self._write(send))

    async def _write(self, send: Send) -> None:
        try:
            await self._start(send)
            async for chunk in self.chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.chunks.aclose()

    async def _start(self, send: Send) -> None:
        """Send the head; its encoded headers are let go, not kept for the stream's life."""
        headers, self.raw_headers = self.raw_headers, []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
