"""A key's budget and rate window are the fleet's: two real proxy processes sharing a real
redis-server. A rate of 10 a minute admits 10 requests across both replicas, not 20; a
daily budget spent through one replica is refused by the other (``on_budget: refuse``) or
served there by the local model alone with no cloud call (``local``), for the official
openai SDK streamed and not; Redis holds no key material; Redis gone fails no request."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx
import openai
import pytest

from app.keys import Caller
from app.keys.admission import kid_of
from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.keys.test_limits_api import ASK, CLOUD, LOCAL, PRICEY, a_fresh_minute, key
from tests.state.test_redis_fleet import cloud_calls, fleet_config, replicas
from tests.support.proxy import deep_merge, wait_for
from tests.support.redis_server import RedisServer, redis_server

pytestmark = pytest.mark.process

SECRETS = {
    "SK_FLEET_PACED": "sk-fleet-paced-0123456789",
    "SK_FLEET_SPENDER": "sk-fleet-spender-0123456789",
    "SK_FLEET_SAVER": "sk-fleet-saver-0123456789",
}
KEYS = [
    key("paced", "SK_FLEET_PACED", rpm=10),
    key("spender", "SK_FLEET_SPENDER", budget_usd_day=0.001),
    key("saver", "SK_FLEET_SAVER", budget_usd_day=0.001, on_budget="local"),
]


@pytest.fixture
def redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        monkeypatch.setenv("REDIS_URL", server.url)
        for name, secret in SECRETS.items():
            monkeypatch.setenv(name, secret)
        yield server


def post(url: str, secret: str, headers: dict[str, str]) -> int:
    auth = {"Authorization": f"Bearer {SECRETS[secret]}", **headers}
    answer = httpx.post(
        f"{url}/v1/chat/completions", json={"messages": ASK}, headers=auth, timeout=15
    )
    return answer.status_code


def spent_today(redis: RedisServer, name: str) -> float:
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    raw = redis.client().get(f"specproxy:limits:{kid_of(Caller(name, name))}:d:{day}")
    return float(raw) if raw is not None else 0.0


def everything_in(redis: RedisServer) -> list[bytes]:
    """Every key name and value under any key (strings, sorted sets, hashes)."""
    client, found = redis.client(), []
    for name in client.scan_iter("*"):
        found.append(name)
        kind = client.type(name)
        if kind == b"string":
            found.append(client.get(name) or b"")
        elif kind == b"zset":
            found += client.zrange(name, 0, -1)
        elif kind == b"hash":
            for field, value in client.hgetall(name).items():
                found += [field, value]
    return found


@pytest.mark.slow
def test_one_budget_and_one_rate_window_across_the_fleet(
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    redis: RedisServer,
    tmp_path: Path,
) -> None:
    config = deep_merge(
        fleet_config(local, cloud),
        {"server": {"keys": KEYS}, "models": {"cerebras": {"price": PRICEY}}},
    )
    with replicas(config, tmp_path, n=2) as fleet:
        a, b = (url for url, _ in fleet)
        # (1) 10 a minute, 20 asked at once through both replicas: 10 answered, 10 refused
        a_fresh_minute()
        with ThreadPoolExecutor(20) as pool:
            asked = [pool.submit(post, (a, b)[i % 2], "SK_FLEET_PACED", LOCAL) for i in range(20)]
            statuses = Counter(f.result(timeout=30) for f in asked)
        assert statuses == {200: 10, 429: 10}
        # (2) a day's budget spent through A: B refuses the key
        assert post(a, "SK_FLEET_SPENDER", CLOUD) == 200
        wait_for(lambda: spent_today(redis, "spender") > 0.001, timeout=10)
        refused = httpx.post(
            f"{b}/v1/chat/completions",
            json={"messages": ASK},
            headers={"Authorization": f"Bearer {SECRETS['SK_FLEET_SPENDER']}"},
            timeout=15,
        )
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "budget_exceeded"
        assert int(refused.headers["retry-after"]) > 0
        # (3) spent through A with on_budget local: B answers from the local model, marked,
        # streamed and not, and the cloud hears nothing more of this key
        assert post(a, "SK_FLEET_SAVER", CLOUD) == 200
        wait_for(lambda: spent_today(redis, "saver") > 0.001, timeout=10)
        calls = cloud_calls(cloud)
        client = openai.OpenAI(base_url=f"{b}/v1", api_key=SECRETS["SK_FLEET_SAVER"], max_retries=0)
        whole = client.chat.completions.with_raw_response.create(model="cerebras", messages=ASK)  # type: ignore[arg-type]
        assert whole.headers["x-budget"] == "exhausted" and whole.headers["x-model-used"] == "local"
        assert whole.parse().choices[0].message.content
        with client.chat.completions.with_streaming_response.create(
            model="specproxy",
            messages=ASK,  # type: ignore[arg-type]
            stream=True,
        ) as streamed:
            assert streamed.headers["x-budget"] == "exhausted"
            assert "".join(c.choices[0].delta.content or "" for c in streamed.parse() if c.choices)
        assert cloud_calls(cloud) == calls
        # (4) no key material in Redis: not in a key's name, not in a value
        stored = b"\n".join(everything_in(redis))
        for secret in SECRETS.values():
            assert secret.encode() not in stored
        limits = [n for n in redis.client().scan_iter("*:limits:*")]
        assert limits and not [
            n for n in limits if b"paced" in n or b"spender" in n or b"saver" in n
        ]
        # (5) Redis gone: no request fails; each replica counts on its own meanwhile
        redis.stop()
        assert [post(a, "SK_FLEET_SAVER", LOCAL) for _ in range(2)] == [200, 200]
        assert post(b, "SK_FLEET_SPENDER", LOCAL) == 200  # its spend is Redis': unknown here
        auth = {"Authorization": f"Bearer {SECRETS['SK_FLEET_SAVER']}"}
        status = httpx.get(f"{a}/stats", headers=auth, timeout=5).json()["limits"]["store"]
        assert status["backend"] == "redis" and not status["redis"]["connected"]
        assert status["local_counts"] >= 1 and status["odd_values"] == 0
        for _, log in fleet:  # one line per outage, not one per request
            assert log.read_text().count("redis unreachable for key limits") == 1
