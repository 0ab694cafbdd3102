"""How a stream of server-sent events is written: Starlette's ``StreamingResponse`` on the
standard edge, ``EventStream`` on the lean one.

``StreamingResponse`` starts a task group of two more tasks per stream to watch for the
client's disconnect (uvicorn speaks ASGI 2.3, so it does); ``EventStream`` writes in the
request's own task and learns of a hang-up as a waiting answer does
(``app.edge.disconnect``). A stream is the proxy's longest-lived object: less per stream
is less memory at a thousand open ones and less work per event.

Either way the stream's generator is started before the head goes out: its own cleanup
(its request's count and record, the upstream's stream closed) runs on ``aclose`` only
once it has started, and a client may leave while the head is on its way. The proxy's
streams have their first chunk at hand when they are returned, so this waits for nothing.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping

from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from app.edge.disconnect import unless_disconnected

EVENT_STREAM = "text/event-stream"


async def standard_stream(chunks: AsyncGenerator[bytes], headers: Mapping[str, str]) -> Response:
    """Server-sent events as Starlette writes them (the standard edge); the stream is
    closed however the writing ends, even when the writing never began."""
    first = await anext(chunks, None)
    return StreamingResponse(
        _resumed(first, chunks),
        headers=headers,
        media_type=EVENT_STREAM,
        background=BackgroundTask(_close, chunks),  # runs after a hang-up too
    )


async def _close(chunks: AsyncGenerator[bytes]) -> None:
    # A coroutine function: Starlette runs any other callable (``chunks.aclose`` is a
    # builtin method) in a thread, where the coroutine it returns is never awaited.
    await chunks.aclose()


async def _resumed(first: bytes | None, chunks: AsyncGenerator[bytes]) -> AsyncGenerator[bytes]:
    if first is not None:
        yield first
        async for chunk in chunks:
            yield chunk


async def lean_stream(chunks: AsyncGenerator[bytes], headers: Mapping[str, str]) -> Response:
    """Server-sent events written by ``EventStream`` (the lean edge)."""
    return EventStream(chunks, headers)


class EventStream(Response):
    """Server-sent events written straight to the server, one write per chunk; the stream
    is closed (its upstream calls with it) however the writing ends."""

    media_type = EVENT_STREAM

    def __init__(self, chunks: AsyncGenerator[bytes], headers: Mapping[str, str]) -> None:
        self.chunks = chunks
        self.status_code = 200
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await unless_disconnected(scope, receive, self._write(send))

    async def _write(self, send: Send) -> None:
        try:
            first = await anext(self.chunks, None)  # before the head (see above)
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
