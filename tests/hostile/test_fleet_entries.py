"""D11: malformed rate-budget and circuit entries in Redis (a string where a number
belongs, NaN, a missing field, not JSON) are skipped and counted, never adopted: every
request and /metrics go on (a real redis-server, the proxy's own sync)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import CLOUD_OTHER, HEDGED, spec
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, wait_for
from tests.support.redis_server import RedisServer, redis_server

ASK = {"messages": [{"role": "user", "content": "Say hello"}]}
PREFIX = "d11"


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


def fleet_state(redis: RedisServer) -> dict[str, object]:
    return {
        "state": {
            "backend": "redis",
            "redis_url": "${REDIS_URL}",
            "key_prefix": PREFIX,
            "sync_every_s": 0.1,
            "timeout_s": 0.5,
        },
        "env": {"CEREBRAS_API_KEY": CLOUD_KEY, "REDIS_URL": redis.url},
    }


def skipped(proxy: Proxy) -> int:
    return int(proxy.stats()["state"].get("skipped_entries", 0))


def test_malformed_budget_and_circuit_entries_are_skipped_and_counted(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, redis: RedisServer
) -> None:
    local.default = Reply(HEDGED)  # every draft is doubted: the budget is consulted
    cloud.default = Reply(CLOUD_OTHER)
    now = time.time()
    with redis.client() as client:
        client.hset(
            f"{PREFIX}:budget:cerebras",
            mapping={
                "text": f'{{"tokens": "abc", "requests": "0", "seen_wall": {now + 1}}}',
                "nan": f'{{"tokens": NaN, "seen_wall": {now + 1}}}',
                "huge": f'{{"tokens": 1e400, "seen_wall": {now + 1}}}',
                "unseen": '{"tokens": 5}',
                "wall": '{"tokens": 5, "seen_wall": "now"}',
                "junk": "not json",
            },
        )
        client.hset(
            f"{PREFIX}:circuit:cerebras",
            mapping={"text": '{"open_until": "tomorrow"}', "list": "[1, 2]"},
        )
    with make_proxy(**fleet_state(redis)) as proxy:
        wait_for(lambda: skipped(proxy) >= 16, timeout=10)  # two syncs' worth at least
        response = proxy.http.post("/v1/chat/completions", json=ASK)
        assert response.status_code == 200, response.text
        assert spec(response.json())["spilled_over"] is True  # verified: no odd budget
        assert proxy.http.get("/metrics").status_code == 200
        upstream = proxy.stats()["features"]["upstreams"]["cerebras"]
    assert upstream["circuit"]["state"] == "closed"
    budget = upstream["rate_limit"]
    assert all(
        isinstance(budget[k], float | int | None)
        for k in ("remaining_tokens_minute", "remaining_requests_day")
    )
