"""The transport layer: the error-mapping table, and aiohttp failures from real loopback
servers arriving as the proxy's errors with the right kind (what /stats counts)."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import openai
import pytest

from app.config import ModelConfig
from app.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamTransportError,
    UpstreamUnavailable,
)
from app.upstreams.deadlines import Deadlines
from app.upstreams.transport import ERRORS, Response, Transport, create_client, translate
from tests.support.proxy import MakeProxy, dead_url
from tests.upstreams.raw_server import CUT_SHORT, STREAM_CUT_SHORT, raw_upstream

ASK = [{"role": "user", "content": "Explain tides"}]


@pytest.mark.parametrize(
    ("exc", "mid_stream", "expected", "kind", "message"),
    [
        (aiohttp.ServerTimeoutError(), False, UpstreamTimeout, "timeout", "x: timed out ("),
        (aiohttp.SocketTimeoutError(), True, UpstreamTimeout, "timeout", "x: timed out ("),
        (aiohttp.ServerDisconnectedError(), False, UpstreamTransportError, "transport", "x ("),
        (aiohttp.ClientPayloadError(), False, UpstreamTransportError, "transport", "x ("),
        (aiohttp.ClientPayloadError(), True, UpstreamError, "stream", "x ("),
        (aiohttp.ClientOSError(), True, UpstreamError, "stream", "x ("),
    ],
)
def test_error_table(
    exc: aiohttp.ClientError, mid_stream: bool, expected: type, kind: str, message: str
) -> None:
    error = translate("up", exc, "x", mid_stream=mid_stream)
    assert type(error) is expected and error.kind == kind
    assert error.message == f"up: {message}{type(exc).__name__})"


def test_every_row_is_reachable() -> None:
    # First match wins: a row shadowed by an earlier, broader one would never apply.
    caught = [row[0] for row in ERRORS]
    for i, later in enumerate(caught):
        assert not any(issubclass(later, earlier) for earlier in caught[:i]), later


async def _post(url: str, *, first_byte_s: float = 5.0) -> Response:
    config = ModelConfig(provider="openai", model="m", base_url=url)
    async with create_client(config) as client:
        transport = Transport("up", client, first_byte_s)
        response = await transport.post(f"{url}/v1/chat/completions", b"{}", {})
        response.release()
        return response


def test_refused_connection_is_unavailable() -> None:
    with pytest.raises(UpstreamUnavailable, match=r"up: cannot connect \(ClientConnectorError"):
        asyncio.run(_post(dead_url()))


@pytest.mark.process
def test_dropped_connection_is_retried_once_then_a_transport_error() -> None:
    with raw_upstream(b"") as upstream, pytest.raises(UpstreamTransportError) as caught:
        asyncio.run(_post(upstream.url))
    assert caught.value.kind == "transport"
    assert caught.value.detail == "connection dropped before a response (ServerDisconnectedError)"
    assert isinstance(caught.value.__cause__, aiohttp.ServerDisconnectedError)
    assert upstream.requests == 2  # the one immediate retry on a fresh connection


@pytest.mark.process
def test_garbled_answer_is_a_transport_error() -> None:
    with raw_upstream(b"garbage\r\n\r\n") as upstream, pytest.raises(UpstreamTransportError) as c:
        asyncio.run(_post(upstream.url))
    assert c.value.detail == "cannot connect (ClientResponseError)"


async def _read(url: str, *, streamed: bool, limit: int = 1 << 20) -> bytes:
    config = ModelConfig(provider="openai", model="m", base_url=url)
    async with create_client(config) as client:
        response = await Transport("up", client, 5.0).post(f"{url}/v1/chat/completions", b"", {})
        if not streamed:
            return await response.read(limit)
        try:
            blocks = [await response.next_block()]
            while blocks[-1]:
                blocks.append(await response.next_block())
            return b"".join(blocks)
        finally:
            response.release()


@pytest.mark.process
def test_answer_cut_short_is_a_transport_error() -> None:
    with raw_upstream(CUT_SHORT) as upstream, pytest.raises(UpstreamTransportError) as caught:
        asyncio.run(_read(upstream.url, streamed=False))
    assert caught.value.detail == "reading the answer (ClientPayloadError)"


@pytest.mark.process
def test_an_answer_over_the_limit_is_a_protocol_error_not_held_in_memory() -> None:
    body = b"x" * 5000
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with raw_upstream(answer) as upstream:
        assert asyncio.run(_read(upstream.url, streamed=False, limit=5000)) == body
        with pytest.raises(UpstreamProtocolError) as caught:
            asyncio.run(_read(upstream.url, streamed=False, limit=4999))
    assert caught.value.detail == "answer over 4999 bytes"


@pytest.mark.process
def test_stream_cut_short_is_a_broken_stream() -> None:
    with raw_upstream(STREAM_CUT_SHORT) as upstream, pytest.raises(UpstreamError) as caught:
        asyncio.run(_read(upstream.url, streamed=True))
    assert type(caught.value) is UpstreamError and caught.value.kind == "stream"
    assert caught.value.detail == "stream broke (ClientPayloadError)"


def test_generic_transport_failure_is_not_counted_as_stream(make_proxy: MakeProxy) -> None:
    with raw_upstream(b"") as upstream, make_proxy(local_url=upstream.url) as proxy:
        with pytest.raises(openai.APIStatusError) as caught:
            proxy.openai.chat.completions.create(model="local", messages=ASK)
        stats = proxy.stats()
    assert caught.value.status_code == 502
    assert "local: connection dropped before a response" in caught.value.message
    assert stats["upstream_errors"] == {"local:transport": 1}


async def _post_held(first_byte_s: float, total_s: float) -> None:
    """A stream POSTed to a server that takes the connection and never answers, under a
    call deadline of ``total_s``."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        config = ModelConfig(provider="openai", model="m", base_url=url)
        message = f"no answer within {total_s:g} s"
        deadlines = Deadlines(total_s, lambda: UpstreamTimeout("up", message))
        async with create_client(config) as client:
            deadline = deadlines.start()
            async with deadline:
                await Transport("up", client, first_byte_s).post(f"{url}/v1", b"{}", {}, deadline)


@pytest.mark.process
def test_a_streams_first_byte_window_bounds_the_wait_for_its_headers() -> None:
    with pytest.raises(UpstreamTimeout, match=r"up: no response within 0\.05 s"):
        asyncio.run(_post_held(first_byte_s=0.05, total_s=30))


@pytest.mark.process
def test_the_calls_deadline_bounds_it_when_it_ends_first() -> None:
    with pytest.raises(UpstreamTimeout, match=r"up: no answer within 0\.05 s"):
        asyncio.run(_post_held(first_byte_s=30, total_s=0.05))
