"""D12: a circuit or rate budget adopted through Redis is bounded by this replica's own
configuration and clock: an ``open_until`` a day ahead (a replica whose clock runs fast)
or numbers ``seen`` an hour in the future are not believed; an opening within the local
cool-down is adopted, and the error says another replica opened it, not that failures
happened here (a real redis-server, the proxy's own sync)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import CLOUD_OTHER, HEDGED, spec
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, wait_for
from tests.support.redis_server import RedisServer, redis_server

ASK = {"messages": [{"role": "user", "content": "Say hello"}]}
CLOUD = {"X-Routing-Strategy": "cerebras_only"}
PREFIX = "d12"


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


def circuit(proxy: Proxy) -> dict:
    return proxy.stats()["features"]["upstreams"]["cerebras"]["circuit"]  # type: ignore[no-any-return]


def synced(proxy: Proxy) -> float:
    return float(proxy.stats()["state"]["redis"]["last_ok"] or 0)


def test_adopted_circuit_and_budget_are_bounded_by_the_local_config(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, redis: RedisServer
) -> None:
    local.default = Reply(HEDGED)  # every draft is doubted: budget and circuit decide
    cloud.default = Reply(CLOUD_OTHER)
    now = time.time()
    spent = {"requests": 0, "requests_reset_s": 86400, "seen_wall": now + 3600}
    with redis.client() as client:
        client.hset(f"{PREFIX}:circuit:cerebras", "fast", orjson.dumps({"open_until": now + 86400}))
        client.hset(f"{PREFIX}:budget:cerebras", "fast", orjson.dumps(spent))
    state = {
        "backend": "redis",
        "redis_url": "${REDIS_URL}",
        "key_prefix": PREFIX,
        "sync_every_s": 0.1,
        "timeout_s": 0.5,
    }
    breaker = {"circuit_breaker": {"failures": 5, "cooldown_s": 60}}
    with make_proxy(
        state=state,
        models={"cerebras": breaker},
        env={"CEREBRAS_API_KEY": CLOUD_KEY, "REDIS_URL": redis.url},
    ) as proxy:
        first = synced(proxy)
        wait_for(lambda: synced(proxy) > first > 0, timeout=10)  # a whole sync since
        assert circuit(proxy)["state"] == "closed"
        answer = proxy.http.post("/v1/chat/completions", json=ASK).json()
        assert spec(answer)["spilled_over"] is True  # verified: the skewed budget ignored
        assert proxy.http.post("/v1/chat/completions", json=ASK, headers=CLOUD).status_code == 200

        # Within the local cool-down (plus the skew allowed): adopted, capped at 60 s.
        with redis.client() as client:
            until = orjson.dumps({"open_until": time.time() + 62})
            client.hset(f"{PREFIX}:circuit:cerebras", "fast", until)
        wait_for(lambda: circuit(proxy)["state"] == "open", timeout=10)
        assert circuit(proxy)["retry_in_s"] <= 60
        refused = proxy.http.post("/v1/chat/completions", json=ASK, headers=CLOUD)
    message = refused.json()["error"]["message"]
    assert "opened by another replica" in message
    assert "consecutive failures" not in message
