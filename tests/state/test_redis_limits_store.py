"""The keys' counters in a real redis-server (``app.keys.counters.RedisStore``) under the
limits (``app.keys.admission.Limits``): many requests at once from several clients (as
several processes would be) admit exactly the limit; slots are freed and a dead one's
lease runs out; what is read back from Redis is validated; Redis down falls back to
this process's own counts without failing a request."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from app.config import StateConfig
from app.errors import ProxyError
from app.keys import Caller, KeyPolicy
from app.keys.admission import Limits, kid_of
from app.keys.limits import Windows
from app.vocabulary import Strategy
from tests.keys.test_limits import NOON
from tests.support.redis_server import RedisServer, redis_server

pytestmark = pytest.mark.process


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


def limits_on(redis: RedisServer, clock: float = NOON) -> Limits:
    """A process's limits over the fleet's Redis (its own client, as each process has)."""
    state = StateConfig(backend="redis", redis_url=SecretStr(redis.url), timeout_s=0.5)
    return Limits.build(state, [redis.url], clock=lambda: clock)


async def ask(limits: Limits, who: Caller, rid: str) -> str:
    try:
        ticket = await limits.admit(who, Strategy.SPECULATIVE, "hello", rid)
    except ProxyError as exc:
        return exc.code or ""
    return "local" if ticket.local else "ok"


def test_requests_at_once_from_three_processes_admit_exactly_the_limit(
    redis: RedisServer,
) -> None:
    who = Caller("team", "team", policy=KeyPolicy(rpm=7, max_concurrent=5))

    async def go() -> Counter[str]:
        fleet = [limits_on(redis) for _ in range(3)]
        got = await asyncio.gather(*(ask(fleet[i % 3], who, f"r{i}") for i in range(30)))
        for limits in fleet:
            await limits.close()
        return Counter(got)

    # 5 slots: the 5 admitted hold them (none ends), so rpm's 7 is never reached
    assert asyncio.run(go()) == {"ok": 5, "rate_limit_exceeded": 25}
    client = redis.client()
    kid = kid_of(who)
    assert int(client.get(f"specproxy:limits:{kid}:r:{int(NOON // 60)}") or 0) == 5
    assert client.zcard(f"specproxy:limits:{kid}:slots") == 5


def test_a_finished_request_frees_its_slot_and_is_charged(redis: RedisServer) -> None:
    who = Caller("team", "team", policy=KeyPolicy(max_concurrent=1, budget_usd_day=0.5))

    async def go() -> list[str]:
        limits = limits_on(redis)
        first = await limits.admit(who, Strategy.SPECULATIVE, "hello", "r1")
        refused = await ask(limits, who, "r2")
        limits.release(first)
        limits.charge(who, 10, 0.75)
        await asyncio.gather(*limits.store.tasks)  # type: ignore[attr-defined]
        after = await ask(limits, who, "r3")
        await limits.close()
        return [refused, after]

    assert asyncio.run(go()) == ["rate_limit_exceeded", "budget_exceeded"]
    day = Windows.at(NOON).day
    assert float(redis.client().get(f"specproxy:limits:{kid_of(who)}:d:{day}") or 0) == 0.75


def test_odd_values_in_redis_are_read_as_nothing_and_counted(redis: RedisServer) -> None:
    who = Caller("team", "team", policy=KeyPolicy(budget_usd_day=0.5, budget_usd_month=0.5))
    windows = Windows.at(NOON)
    client = redis.client()
    client.set(f"specproxy:limits:{kid_of(who)}:d:{windows.day}", b"nan")
    client.set(f"specproxy:limits:{kid_of(who)}:m:{windows.month}", b"-3")

    async def go() -> tuple[str, dict[str, object]]:
        limits = limits_on(redis)
        got = await ask(limits, who, "r1")
        status = limits.status()
        await limits.close()
        return got, status

    got, status = asyncio.run(go())
    assert got == "ok"  # neither odd value spent the budget
    assert status["store"]["odd_values"] == 2  # type: ignore[index]


def test_redis_down_counts_in_this_process_and_fails_nothing(redis: RedisServer) -> None:
    who = Caller("team", "team", policy=KeyPolicy(rpm=2, budget_usd_day=1.0))
    redis.stop()

    async def go() -> tuple[list[str], dict[str, object]]:
        limits = limits_on(redis)
        got = [await ask(limits, who, f"r{i}") for i in range(3)]
        limits.charge(who, 5, 0.01)  # kept in this process's view
        status = limits.status()
        await limits.close()
        return got, status

    got, status = asyncio.run(go())
    assert got == ["ok", "ok", "rate_limit_exceeded"]  # the local view still limits
    store = status["store"]
    assert store["local_counts"] == 3 and not store["redis"]["connected"]  # type: ignore[index]


def test_a_charge_on_an_odd_value_leaves_redis_in_use(redis: RedisServer) -> None:
    who = Caller("team", "team", policy=KeyPolicy(rpm=5, budget_usd_day=1.0))
    windows = Windows.at(NOON)
    redis.client().set(f"specproxy:limits:{kid_of(who)}:d:{windows.day}", b"not a number")

    async def go() -> dict[str, object]:
        limits = limits_on(redis)
        limits.charge(who, 0, 0.25)  # Redis refuses INCRBYFLOAT on it
        await asyncio.gather(*limits.store.tasks)  # type: ignore[attr-defined]
        assert await ask(limits, who, "r1") == "ok"
        status = limits.status()
        await limits.close()
        return status

    store = asyncio.run(go())["store"]
    assert store["odd_values"] == 2  # type: ignore[index]  # the refused charge, the read
    assert store["local_counts"] == 0 and store["redis"]["connected"]  # type: ignore[index]
    month = redis.client().get(f"specproxy:limits:{kid_of(who)}:m:{windows.month}")
    assert float(month or 0) == 0.25  # the rest of the charge was done
