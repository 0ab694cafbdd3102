"""The ``ChatUpstream`` facade over its layers, against raw loopback servers: what it
records about the upstream's health and what a broken stream does to the breaker."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from app.config import ModelConfig
from app.errors import UpstreamError, UpstreamTransportError
from app.upstreams import ChatUpstream, Completion, build_upstream, create_client
from app.upstreams.base import Chunk, error_message
from tests.upstreams.raw_server import STREAM_CUT_SHORT, raw_upstream

ANSWER = orjson.dumps({"choices": [{"message": {"content": "Hi"}, "finish_reason": "stop"}]})
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(ANSWER),
    ANSWER,
)


def test_public_names_stay_importable() -> None:
    assert ChatUpstream and Completion and build_upstream and create_client and Chunk
    assert error_message({"message": "m"}) == ("m", None)


async def _calls(urls: list[str], stream: bool) -> tuple[list[Any], ChatUpstream]:
    """One call per URL through one upstream (base_url switched between them)."""
    config = ModelConfig(provider="openai", model="m", base_url=urls[0])
    outcomes: list[Any] = []
    async with create_client(config) as client:
        upstream = build_upstream("up", config, client)
        for url in urls:
            upstream.base_url = url
            try:
                if stream:
                    outcomes.append([b async for b in upstream.stream({"messages": []})])
                else:
                    outcomes.append(await upstream.complete({"messages": []}))
            except UpstreamError as error:
                outcomes.append(error)
            outcomes.append((upstream.last_error, upstream.last_ok_at))
    return outcomes, upstream


@pytest.mark.process
def test_last_error_is_kept_until_a_success() -> None:
    with raw_upstream(b"") as dropping, raw_upstream(OK) as answering:
        outcomes, _ = asyncio.run(_calls([dropping.url, answering.url], stream=False))
    failed, (last_error, last_ok_at), answer, (cleared, ok_at) = outcomes
    assert isinstance(failed, UpstreamTransportError) and last_error == failed.message
    assert last_ok_at is None
    assert isinstance(answer, Completion) and answer.text == "Hi"
    assert cleared is None and ok_at is not None


@pytest.mark.process
@pytest.mark.parametrize("stream", [False, True])
def test_a_broken_stream_counts_against_the_breaker(stream: bool) -> None:
    with raw_upstream(STREAM_CUT_SHORT) as cut:
        outcomes, upstream = asyncio.run(_calls([cut.url], stream=stream))
    error, (last_error, _) = outcomes
    assert isinstance(error, UpstreamError) and last_error == error.message
    assert error.kind == ("stream" if stream else "transport")
    # 2xx headers reset the count; the body that broke after them counts once.
    failures = upstream.status()["circuit"]["consecutive_failures"]
    assert failures == (1 if stream else 0)
