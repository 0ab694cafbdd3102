"""D18: a pool's members with equal load take turns: ten sequential requests to a pool of
two local servers (``base_urls``) go five to each, streamed or not (the first member took
all ten before)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes import FakeLlamaServer, serve
from tests.support.proxy import MakeProxy, chat_bodies
from tests.support.tiers import process_fixture

ASK = [{"role": "user", "content": "Say hello"}]


@process_fixture
def second_local() -> Iterator[FakeLlamaServer]:
    fake = FakeLlamaServer()
    with serve(fake.app) as url:
        fake.url = url
        yield fake


@pytest.mark.parametrize("stream", [False, True])
def test_sequential_calls_to_an_idle_pool_take_turns(
    make_proxy: MakeProxy, local: FakeLlamaServer, second_local: FakeLlamaServer, stream: bool
) -> None:
    pool = {"local": {"base_url": None, "base_urls": [local.url, second_local.url]}}
    with make_proxy(models=pool) as proxy:
        for _ in range(10):
            response = proxy.http.post(
                "/v1/chat/completions",
                json={"messages": ASK, "stream": stream},
                headers={"X-Routing-Strategy": "local_only"},
            )
            assert response.status_code == 200, response.text
    assert (len(chat_bodies(local)), len(chat_bodies(second_local))) == (5, 5)
