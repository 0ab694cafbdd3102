"""``EventStream`` and the standard edge's ``StreamingResponse``: the stream's generator is
started before the head goes out, so its own cleanup (the request's count and record, the
upstream's stream closed) runs however the writing ends, even when it never began."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from app.edge import StreamFactory
from app.edge.stream import EventStream, lean_stream, standard_stream


def test_a_client_gone_while_the_head_goes_out_still_runs_the_streams_cleanup() -> None:
    cleaned: list[str] = []
    sent: list[bytes] = []

    async def chunks() -> AsyncGenerator[bytes]:
        try:
            yield b"data: 1\n\n"
            yield b"data: 2\n\n"
        finally:
            cleaned.append("closed")

    async def scenario() -> None:
        head_going = asyncio.Event()

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                head_going.set()
                await asyncio.Event().wait()  # a client that reads nothing: cancelled below
            sent.append(message.get("body", b""))

        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()  # no disconnect message: the test cancels instead
            return {"type": "http.disconnect"}

        writing = asyncio.create_task(EventStream(chunks(), {})({"type": "http"}, receive, send))
        await head_going.wait()
        writing.cancel()
        await asyncio.gather(writing, return_exceptions=True)

    asyncio.run(scenario())
    assert cleaned == ["closed"] and sent == []


@pytest.mark.parametrize("stream", [lean_stream, standard_stream], ids=["lean", "standard"])
def test_a_client_gone_before_the_head_is_written_still_runs_the_streams_cleanup(
    stream: StreamFactory,
) -> None:
    cleaned: list[str] = []

    async def chunks() -> AsyncGenerator[bytes]:
        try:
            yield b"data: 1\n\n"
            yield b"data: 2\n\n"
        finally:
            cleaned.append("closed")

    async def scenario() -> list[str]:
        sent: list[str] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message["type"])
            if message["type"] == "http.response.start":
                await asyncio.Event().wait()  # a client that reads nothing

        async def receive() -> dict[str, Any]:
            return {"type": "http.disconnect"}  # gone already, as uvicorn reports it

        response = await stream(chunks(), {})
        scope = {"type": "http", "asgi": {"spec_version": "2.3"}}  # uvicorn's
        await response(scope, receive, send)
        assert cleaned == ["closed"]  # at once, not when the loop shuts down
        return sent

    assert asyncio.run(scenario()) in ([], ["http.response.start"])
