"""A client that goes away: the upstream calls made for it are cancelled at once, whether
the proxy's own protocol tells the request (as ``main.py`` serves it) or a watcher task
reads the disconnect (uvicorn's stock protocol, as any other ASGI server serves it)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.fakes import FakeLlamaServer, Reply
from tests.support.answers import LONG
from tests.support.proxy import MakeProxy, Proxy, wait_for

ASK = [{"role": "user", "content": "Tell me a long story"}]


@pytest.fixture(params=["specproxy_protocol", "stock_uvicorn"])
def proxy(make_proxy: MakeProxy, request: pytest.FixtureRequest) -> Iterator[Proxy]:
    with make_proxy(stock_uvicorn=request.param == "stock_uvicorn") as running:
        yield running


@pytest.mark.parametrize("model", ["local", "auto"])
def test_disconnect_while_waiting_cancels_the_upstream_call(
    proxy: Proxy, local: FakeLlamaServer, model: str
) -> None:
    local.enqueue(Reply(LONG, delay=30))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{proxy.url}/v1/chat/completions",
            timeout=httpx.Timeout(5, read=0.5),
            json={"model": model, "messages": ASK},
        )
    wait_for(lambda: local.in_flight == 0, timeout=3)  # the proxy hung up on the upstream
    wait_for(lambda: proxy.stats()["runtime"]["in_flight"] == 0, timeout=3)
    assert proxy.stats()["requests"]["by_outcome"] == {"client_disconnected": 1}


def test_disconnect_mid_stream_closes_the_upstream_stream(
    proxy: Proxy, local: FakeLlamaServer
) -> None:
    local.enqueue(Reply(LONG, chunk_delay=0.1))
    body = {"model": "local", "messages": ASK, "stream": True}
    with httpx.stream("POST", f"{proxy.url}/v1/chat/completions", json=body, timeout=5) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        assert local.in_flight == 1
    wait_for(lambda: local.in_flight == 0, timeout=3)
    wait_for(lambda: proxy.stats()["runtime"]["in_flight"] == 0, timeout=3)
    assert proxy.stats()["requests"]["by_outcome"] == {"client_disconnected": 1}
