"""Managed keys across two real proxy replicas sharing a real redis-server.

A key made through replica A is served by B; rotated or revoked through A, its old key
is refused by B within one second (each replica follows Redis' pub/sub; no request
waits on Redis). The admin API refuses both replicas' callers without the admin key,
and no key ever shows in Redis (names or values), the logs, /stats, /metrics or the
spec log.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_lib

from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.support.processes import main_process
from tests.support.proxy import proxy_config, wait_for
from tests.support.redis_server import RedisServer, redis_server
from tests.support.tiers import process_fixture

ADMIN_KEY = "sk-admin-fleet-0a1b2c3d4e5f"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
ASK = {"messages": [{"role": "user", "content": "Say hello"}]}  # speculative: spec-logged
WITHIN_S = 1.0  # a change through one replica holds in the others within this


@process_fixture
def redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        monkeypatch.setenv("REDIS_URL", server.url)  # the replicas' ${REDIS_URL}
        monkeypatch.setenv("ADMIN_KEY", ADMIN_KEY)  # their ${ADMIN_KEY}
        yield server


def config(local: FakeLlamaServer, cloud: FakeCerebras, spec_log: Path) -> dict[str, Any]:
    return proxy_config(
        local.url,
        cloud.url,
        server={"admin_key": "${ADMIN_KEY}"},
        state={"backend": "redis", "redis_url": "${REDIS_URL}", "sync_every_s": 0.2},
        logging={"spec_log_file": str(spec_log)},
    )


def chat(url: str, key: str) -> int:
    headers = {"Authorization": f"Bearer {key}"}
    response = httpx.post(f"{url}/v1/chat/completions", json=ASK, headers=headers, timeout=15)
    return response.status_code


def admin(url: str, method: str, path: str = "", **kwargs: Any) -> httpx.Response:
    headers = kwargs.pop("headers", ADMIN)
    return httpx.request(method, f"{url}/admin/keys{path}", headers=headers, timeout=10, **kwargs)


def within(condition: Callable[[], bool], seconds: float = WITHIN_S) -> float:
    """Poll ``condition`` until it holds; how long that took (fails after ``seconds``)."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < seconds, f"not within {seconds} s"
        time.sleep(0.01)
    return time.monotonic() - start


def everything_in(client: redis_lib.Redis) -> str:
    """Every key name and value in Redis, as text."""
    seen = []
    for name in client.scan_iter("*"):
        kind = client.type(name).decode()
        value: Any = kind
        if kind == "string":
            value = client.get(name)
        elif kind == "hash":
            value = client.hgetall(name)
        elif kind == "zset":
            value = client.zrange(name, 0, -1, withscores=True)
        elif kind == "set":
            value = client.smembers(name)
        elif kind == "list":
            value = client.lrange(name, 0, -1)
        seen.append(f"{name!r} {value!r}")
    return "\n".join(seen)


@pytest.mark.slow
def test_keys_made_rotated_and_revoked_through_one_replica_hold_in_the_other(
    local: FakeLlamaServer, cloud: FakeCerebras, redis: RedisServer, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        replicas = []
        for name in ("a", "b"):
            directory = tmp_path / name
            directory.mkdir()
            tree = config(local, cloud, directory / "spec.jsonl")
            proc, url = stack.enter_context(main_process(tree, directory, "--log-level", "DEBUG"))
            replicas.append((proc, url, directory))
        (_, a, _), (proc_b, b, _) = replicas

        # Made through A: served by B (and A).
        made = admin(a, "POST", json={"name": "search", "team": "retrieval"})
        assert made.status_code == 201, made.text
        key, key_id = made.json()["key"], made.json()["id"]
        within(lambda: chat(b, key) == 200)
        assert chat(a, key) == 200
        watcher = admin(b, "POST", json={"name": "watcher"}).json()["key"]  # made through B
        within(lambda: chat(a, watcher) == 200)
        assert [k["name"] for k in admin(b, "GET").json()["data"]] == ["search", "watcher"]

        # Rotated through A: B refuses the old key and takes the new one within a second.
        rotated = admin(a, "POST", f"/{key_id}/rotate").json()["key"]
        within(lambda: chat(b, key) == 401 and chat(b, rotated) == 200)

        # A reload of B keeps the keys (they live in Redis and in B's view, not its config).
        os.kill(proc_b.pid, signal.SIGHUP)
        stats_b = {"Authorization": f"Bearer {watcher}"}
        wait_for(
            lambda: httpx.get(f"{b}/stats", headers=stats_b).json()["config_version"] == 2,
            timeout=15,
        )
        assert chat(b, rotated) == 200

        # The admin API refuses callers without the admin key, on both replicas.
        for url in (a, b):
            for headers in ({}, {"Authorization": f"Bearer {watcher}"}):
                assert admin(url, "GET", headers=headers).status_code == 401
                assert admin(url, "DELETE", f"/{key_id}", headers=headers).status_code == 401
        assert chat(b, rotated) == 200

        # Revoked through A: refused by B within a second.
        assert admin(a, "DELETE", f"/{key_id}").status_code == 200
        took = within(lambda: chat(b, rotated) == 401)
        assert chat(a, rotated) == 401
        assert took < WITHIN_S

        # No key, made or rotated (nor the admin key), anywhere it could leak.
        secrets = [key, rotated, watcher, ADMIN_KEY]
        surfaces = {"redis": everything_in(redis.client())}
        for i, (_, url, directory) in enumerate(replicas):
            for path in ("/stats", "/metrics"):
                response = httpx.get(f"{url}{path}", headers=stats_b, timeout=10)
                assert response.status_code == 200
                surfaces[f"{path} {i}"] = response.text
            spec_log = directory / "spec.jsonl"
            wait_for(lambda spec_log=spec_log: spec_log.exists() and spec_log.stat().st_size > 0)
            surfaces[f"spec log {i}"] = spec_log.read_text()
    for i, (_, _, directory) in enumerate(replicas):
        surfaces[f"log {i}"] = (directory / "proxy.log").read_text()
    assert "watcher" in surfaces["redis"]  # the keys are there (by their hashes)
    assert "(watcher) created" in surfaces["log 1"]
    assert surfaces["spec log 0"].strip() and surfaces["spec log 1"].strip()
    for where, text in surfaces.items():
        for secret in secrets:
            assert secret not in text, f"a key in {where}"


@pytest.mark.slow
def test_odd_entries_are_skipped_and_redis_down_refuses_changes_not_requests(
    local: FakeLlamaServer, cloud: FakeCerebras, redis: RedisServer, tmp_path: Path
) -> None:
    client = redis.client()
    odd = {
        "key_junk": b"not json",
        "key_nan": b'{"id":"key_nan","hash":"00","created_at":1,"rotated_at":null,'
        b'"settings":{"name":"x"}}',
        "key_rpm": b'{"id":"key_rpm","hash":"' + b"a" * 64 + b'","created_at":1,'
        b'"rotated_at":null,"settings":{"name":"x","rpm":"fast"}}',
    }
    client.hset("specproxy:keys", mapping=odd)
    with main_process(config(local, cloud, tmp_path / "spec.jsonl"), tmp_path) as (_, url):
        made = admin(url, "POST", json={"name": "ok"}).json()
        key = made["key"]
        headers = {"Authorization": f"Bearer {key}"}
        state = httpx.get(f"{url}/stats", headers=headers).json()["state"]["keys"]
        assert state["backend"] == "redis" and state["managed"] == 1
        assert state["skipped_entries"] == len(odd)
        assert [k["id"] for k in admin(url, "GET").json()["data"]] == [made["id"]]

        redis.stop()
        refused = admin(url, "POST", json={"name": "later"})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "key_store_unavailable"
        assert admin(url, "DELETE", f"/{made['id']}").status_code == 503
        assert chat(url, key) == 200  # the view stays as last read: requests go on

        redis.start()  # empty (nothing saved): the key it held is gone
        within(lambda: chat(url, key) == 401, seconds=10)
        again = admin(url, "POST", json={"name": "later"})
        assert again.status_code == 201 and chat(url, again.json()["key"]) == 200
    text = (tmp_path / "proxy.log").read_text()
    assert text.count("redis unreachable for keys") == 1, text
