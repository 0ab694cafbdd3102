"""``EventStream``: the stream's generator is started before anything else is awaited, so
its own cleanup (the request's count and record, the upstream's stream closed) runs
however the writing ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from app.edge.stream import EventStream


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
