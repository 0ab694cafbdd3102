"""The cache in Redis (``state.backend: redis``, a real redis-server): an answer kept
through one replica is served by another, under hashed key names with the cache's TTL,
and a Redis gone is a miss, never an error."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from redis import asyncio as aioredis

from app.cache.backends import RedisBackend
from app.config import StateConfig
from tests.fakes import FakeCerebras, Reply
from tests.support.proxy import CLOUD_KEY, MakeProxy, chat_bodies, wait_for
from tests.support.redis_server import RedisServer, redis_server
from tests.support.tiers import process_fixture

pytestmark = pytest.mark.process
ASK = {"model": "cerebras", "messages": [{"role": "user", "content": "Name the red planet"}]}


@process_fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


def test_an_answer_kept_through_one_replica_is_served_by_another(
    make_proxy: MakeProxy, cloud: FakeCerebras, redis: RedisServer
) -> None:
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "REDIS_URL": redis.url}
    over = {
        "cache": {"enabled": True, "audit_rate": 0, "max_age_s": 600},
        "state": {"backend": "redis", "redis_url": "${REDIS_URL}", "key_prefix": "t1"},
    }
    cloud.enqueue(Reply("Mars."))
    with (
        make_proxy(env=env, api_key="sk-tenant-secret", **over) as a,
        make_proxy(env=env, api_key="sk-tenant-secret", **over) as b,
    ):
        first = a.http.post("/v1/chat/completions", json=ASK)
        assert first.headers["x-cache"] == "miss"
        wait_for(lambda: a.stats()["cache"]["entries"] == 2)
        hit = b.http.post("/v1/chat/completions", json=ASK)
        assert hit.headers["x-cache"] == "hit"
        assert hit.json()["choices"][0]["message"]["content"] == "Mars."
        assert len(chat_bodies(cloud)) == 1
        other = b.http.post(
            "/v1/chat/completions", json=ASK, headers={"Authorization": "Bearer sk-other"}
        )
        assert other.headers["x-cache"] == "miss"  # another tenant, the same Redis

        with redis.client() as client:
            names = [n.decode() for n in client.scan_iter("t1:cache:e:*")]
            assert len(names) >= 2
            for name in names:
                assert "secret" not in name and "red planet" not in name.lower()
                assert 0 < client.ttl(name) <= 600
        assert b.stats()["cache"]["bytes"] > 0

        redis.stop()  # gone: a miss, and the cloud answers
        cloud.enqueue(Reply("Mars, again."))
        down = a.http.post("/v1/chat/completions", json=ASK)
        assert down.status_code == 200 and down.headers["x-cache"] == "miss"
        assert down.json()["choices"][0]["message"]["content"] == "Mars, again."


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_redis_store_bounds_bytes_and_age(redis: RedisServer) -> None:
    clock = Clock()

    async def scenario() -> list[object]:
        client = aioredis.Redis(port=redis.port, socket_timeout=2)
        store = RedisBackend(client, "t2", max_bytes=30, max_age_s=10, clock=clock)
        seen: list[object] = []
        for i, key in enumerate("abc"):
            clock.now = 1000.0 + i
            await store.put(key, key.encode() * 10)
        await store.put("a", b"A" * 10)  # a rewrite: counted once, and now the newest
        seen.append(store.usage())
        clock.now = 1003.0
        await store.put("d", b"d" * 10)  # over the bound: the oldest (b) goes
        seen.append([await store.get(k) for k in "abcd"])
        seen.append(store.usage())
        clock.now = 1012.5  # a and c (stored at 1002) are past their age, d (1003) is not
        await store.put("e", b"e" * 5)
        seen.append([await store.get(k) for k in "acde"])
        seen.append(store.usage())
        await store.close()
        return seen

    usage, found, after, aged, last = asyncio.run(scenario())
    assert usage == (3, 30)
    assert found == [b"A" * 10, None, b"c" * 10, b"d" * 10]
    assert after == (3, 30)
    assert aged == [None, None, b"d" * 10, b"e" * 5]
    assert last == (2, 15)


def test_an_outage_is_logged_once_not_once_per_call(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The soak's 10 s without Redis once logged 190 lines of the Responses door's store."""
    state = StateConfig(backend="redis", redis_url=SecretStr(redis.url), timeout_s=0.5)

    async def scenario() -> tuple[bytes | None, bytes | None]:
        store = RedisBackend.of(state, "t3", 1000, 60, "stored responses")
        await store.put("a", b"A")
        redis.stop()
        for key in "bcde":
            await store.put(key, key.encode())
            assert await store.get("a") is None  # a miss, never an error
        redis.start()
        await store.put("f", b"F")
        found = await store.get("a"), await store.get("f")
        await store.close()
        return found

    with caplog.at_level(logging.WARNING, logger="specproxy.state"):
        # a Redis started again without persistence has lost "a"; it keeps "f"
        assert asyncio.run(scenario()) == (None, b"F")
    lines = [r.getMessage().split(" (", 1)[0].split(" after")[0] for r in caplog.records]
    assert sorted(lines) == [  # each once, look-ups and writes apart
        "redis is back for stored responses",
        "redis is back for stored responses",
        "redis unreachable for stored responses",
        "redis unreachable for stored responses",
    ]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert said.count("(look-ups)") == 2 and said.count("(writes)") == 2


def test_a_redis_that_refuses_writes_alone_is_one_outage_of_the_writes(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Full (``noeviction`` at its ``maxmemory``): look-ups answer, writes fail. Once, each
    request logged the writes' outage and the look-ups' recovery."""
    state = StateConfig(backend="redis", redis_url=SecretStr(redis.url), timeout_s=0.5)

    async def scenario() -> list[bytes | None]:
        store = RedisBackend.of(state, "t4", 1000, 60, "the answer cache")
        await store.put("a", b"A")
        with redis.client() as admin:
            admin.config_set("maxmemory-policy", "noeviction")
            admin.config_set("maxmemory", 1)
        found = []
        for key in "bcd":
            await store.put(key, key.encode())
            found.append(await store.get("a"))
        with redis.client() as admin:
            admin.config_set("maxmemory", 0)
        await store.close()
        return found

    with caplog.at_level(logging.WARNING, logger="specproxy.state"):
        assert asyncio.run(scenario()) == [b"A"] * 3  # read as ever
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("redis unreachable for the answer cache (writes) (")
