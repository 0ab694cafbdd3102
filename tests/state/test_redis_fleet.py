"""Three real proxy processes sharing state through a real redis-server.

A cloud budget spent through one replica is seen by the others, a circuit opened
by one is open in all, /stats → fleet adds up every replica's requests exactly,
and killing Redis mid-run fails no request: the replicas carry on alone, say so,
and share again when it returns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.fakes.script import Reply
from tests.support.processes import main_process
from tests.support.proxy import deep_merge, proxy_config, wait_for
from tests.support.redis_server import RedisServer, redis_server

ASK = {"messages": [{"role": "user", "content": "Say hello"}]}
CLOUD = {"X-Routing-Strategy": "cerebras_only"}


def fleet_config(local: FakeLlamaServer, cloud: FakeCerebras, **over: Any) -> dict[str, Any]:
    return proxy_config(
        local.url,
        cloud.url,
        models={"cerebras": {"circuit_breaker": {"failures": 2, "cooldown_s": 120}}},
        state={
            "backend": "redis",
            "redis_url": "${REDIS_URL}",
            "sync_every_s": 0.2,
            "timeout_s": 0.3,
            "replica_ttl_s": 5,
        },
        **over,
    )


@contextmanager
def replicas(
    config: dict[str, Any], tmp_path: Path, n: int = 3
) -> Iterator[list[tuple[str, Path]]]:
    """``n`` proxy processes with this config: (url, log file) each; a learner's files go
    in a directory of each replica's own, so only Redis can carry labels between them."""
    with ExitStack() as stack:
        found = []
        for i in range(n):
            directory = tmp_path / f"replica{i}"
            directory.mkdir()
            own = config
            if "learning" in config:
                own = deep_merge(config, {"learning": {"state_dir": str(directory / "state")}})
            _, url = stack.enter_context(main_process(own, directory))
            found.append((url, directory / "proxy.log"))
        yield found


def stats(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/stats", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def chat(url: str, headers: dict[str, str] | None = None) -> int:
    response = httpx.post(f"{url}/v1/chat/completions", json=ASK, headers=headers, timeout=15)
    return response.status_code


def cloud_calls(cloud: FakeCerebras) -> int:
    return sum(r.path.endswith("/chat/completions") for r in cloud.requests)


def circuit(url: str) -> dict[str, Any]:
    return stats(url)["features"]["upstreams"]["cerebras"]["circuit"]  # type: ignore[no-any-return]


def summed_requests(urls: list[str]) -> dict[str, Any]:
    """The replicas' own ``requests`` sections added up, field by field."""
    total: dict[str, Any] = {}
    for url in urls:
        for key, value in stats(url)["requests"].items():
            if isinstance(value, dict):
                total[key] = dict(Counter(total.get(key, {})) + Counter(value))
            else:
                total[key] = total.get(key, 0) + value
    return total


def fleet_matches(urls: list[str], url: str) -> bool:
    """Whether ``url``'s fleet view lists every replica and adds up their requests exactly."""
    fleet = stats(url)["fleet"]
    expected = summed_requests(urls)
    got = {
        key: {k: v for k, v in value.items() if v} if isinstance(value, dict) else value
        for key, value in fleet["requests"].items()
    }
    return len(fleet["replicas"]) == len(urls) and got == expected


@pytest.fixture
def redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        monkeypatch.setenv("REDIS_URL", server.url)  # the replicas' ${REDIS_URL}
        yield server


@pytest.mark.slow
def test_budget_circuit_and_totals_are_the_fleets(
    local: FakeLlamaServer, cloud: FakeCerebras, redis: RedisServer, tmp_path: Path
) -> None:
    with replicas(fleet_config(local, cloud), tmp_path) as fleet:
        urls = [url for url, _ in fleet]
        a, b, c = urls
        # (1) a cloud answer through A reports less budget left: B and C hold it too
        cloud.rate_limits["x-ratelimit-remaining-tokens-minute"] = "1234"
        assert chat(a, CLOUD) == 200
        for url in (b, c):
            wait_for(
                lambda url=url: (
                    stats(url)["features"]["upstreams"]["cerebras"]["rate_limit"][
                        "remaining_tokens_minute"
                    ]
                    == 1234
                ),
                timeout=10,
            )
        # (4) every replica's /stats → fleet adds up all three replicas' requests exactly
        for url, n in ((a, 3), (b, 2), (c, 1)):
            assert [chat(url) for _ in range(n)] == [200] * n
        for url in urls:
            wait_for(lambda url=url: fleet_matches(urls, url), timeout=10)
        assert stats(b)["fleet"]["requests"]["total"] == 7
        assert {r["id"] for r in stats(a)["fleet"]["replicas"]} == {
            r["id"] for r in stats(c)["fleet"]["replicas"]
        }
        # (2) failures through A open its circuit: B and C hold it open and spare the cloud
        cloud.enqueue(Reply(status=500), Reply(status=500))
        assert [chat(a, CLOUD), chat(a, CLOUD)] == [502, 502]
        assert circuit(a)["state"] == "open"
        for url in (b, c):
            wait_for(lambda url=url: circuit(url)["state"] == "open", timeout=10)
            assert circuit(url)["retry_in_s"] > 100  # A's cool-down, not a fresh one
        before = cloud_calls(cloud)
        assert [chat(b, CLOUD), chat(c, CLOUD)] == [503, 503]
        assert chat(b) == 200  # the speculative strategy serves the draft, marked degraded
        assert cloud_calls(cloud) == before


@pytest.mark.slow
def test_killing_redis_fails_no_request_and_the_fleet_recovers(
    local: FakeLlamaServer, cloud: FakeCerebras, redis: RedisServer, tmp_path: Path
) -> None:
    with replicas(fleet_config(local, cloud), tmp_path) as fleet:
        urls = [url for url, _ in fleet]
        assert [chat(url) for url in urls] == [200] * 3
        for url in urls:
            wait_for(lambda url=url: fleet_matches(urls, url), timeout=10)
        redis.stop()
        assert [chat(url, headers) for url in urls for headers in (None, CLOUD)] == [200] * 6
        for url in urls:
            wait_for(lambda url=url: not stats(url)["state"]["redis"]["connected"], timeout=10)
            seen = stats(url)
            assert seen["state"]["redis"]["error"]
            assert "redis unreachable" in seen["fleet"]["warning"]
            assert [r["this"] for r in seen["fleet"]["replicas"]] == [True]
            assert seen["fleet"]["requests"] == seen["requests"]  # its own state only
        assert [chat(url) for url in urls] == [200] * 3
        redis.start()  # empty: the replicas publish everything again
        for url in urls:
            wait_for(lambda url=url: stats(url)["state"]["redis"]["connected"], timeout=10)
            wait_for(lambda url=url: fleet_matches(urls, url), timeout=10)
            assert stats(url)["fleet"]["warning"] is None
        assert stats(urls[0])["fleet"]["requests"]["total"] == 12
    for _, log in fleet:  # one line per outage, not one per failed sync
        text = log.read_text()
        assert text.count("redis unreachable for shared state") == 1, text
        assert text.count("redis is back for shared state") == 1, text
        assert "csk-test" not in text
