"""A streamed hedge against the Cerebras stand-in on loopback: what it keeps and hands on."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from app.config import ModelConfig
from app.errors import UpstreamRejected
from app.pipeline.hedge import Hedge
from app.upstreams import build_upstream, create_client
from tests.fakes import FakeCerebras, Reply
from tests.support.chunks import text_of
from tests.support.fake_upstream import FakeUpstream
from tests.support.proxy import CLOUD_KEY

ANSWER = "Tides come from the Moon's pull on the oceans, twice a day."
BODY = {"messages": [{"role": "user", "content": "Explain tides"}]}


def test_a_relayed_hedge_lets_each_batch_go_once_handed_on(cloud: FakeCerebras) -> None:
    """Until the proxy commits to the stream every batch is kept (it may be relayed from
    the start); once followed, a batch is let go as it is handed on, and the whole answer
    is still there for the comparison."""
    release = threading.Event()
    cloud.enqueue(Reply(ANSWER, hold=release, hold_after=4))  # role + 3 tokens, then held
    config = ModelConfig(
        provider="cerebras", model="gpt-oss-120b", base_url=cloud.url, api_key=CLOUD_KEY
    )

    async def relay() -> tuple[int, list[Any], int, list[Any], str, int]:
        async with create_client(config) as client:
            hedge = Hedge.stream(build_upstream("cerebras", config, client), BODY)
            never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            assert await hedge.flowing_or(never)
            async with asyncio.timeout(10):
                while hedge.tokens_sent < 3:  # the held stream's first events, all read
                    await asyncio.sleep(0.01)
            kept = hedge.buffered
            opened = await hedge.live()
            after_follow = hedge.buffered
            release.set()
            rest = [chunk async for batch in opened.rest for chunk in batch]
            answer = await hedge.answer()
            return kept, opened.first, after_follow, rest, answer.text, hedge.buffered

    kept, first, after_follow, rest, answer, at_end = asyncio.run(relay())
    assert kept >= 1 and text_of([first]) != ""  # kept for the replay, then replayed
    assert after_follow == 0 and at_end == 0  # handed on: let go
    assert text_of([first]) + text_of([rest]) == ANSWER == answer


def test_a_followed_hedge_over_the_fake_upstream_needs_no_socket() -> None:
    """The same hand-over against the queue-backed fake: held after its first batches by an
    event, followed, then let go."""
    release = asyncio.Event()
    cloud = FakeUpstream("cerebras", speaks="cerebras", wait_for=release, hold_after=4)
    cloud.enqueue(ANSWER)

    async def relay() -> tuple[int, str, str, str]:
        hedge = Hedge.stream(cloud, BODY)
        for _ in range(50):  # role + 3 tokens read, then held by the fake: no clock involved
            await asyncio.sleep(0)
        assert hedge.tokens_sent == 3
        kept = hedge.buffered
        opened = await hedge.live()
        release.set()
        rest = [chunk async for batch in opened.rest for chunk in batch]
        answer = await hedge.answer()
        return kept, text_of([opened.first, rest]), answer.text, answer.upstream

    assert asyncio.run(relay()) == (4, ANSWER, ANSWER, "cerebras")
    assert cloud.history[0]["stream"] is True and cloud.in_flight == 0


def test_a_hedge_whose_cloud_fails_before_any_chunk_raises_its_error_on_live() -> None:
    cloud = FakeUpstream("cerebras", speaks="cerebras")
    cloud.enqueue(cloud.error("429"))

    async def live() -> None:
        hedge = Hedge.stream(cloud, BODY)
        await hedge.live()

    with pytest.raises(UpstreamRejected, match="HTTP 429"):
        asyncio.run(live())
