"""Stored responses in Redis (``state.backend: redis``): one replica keeps, another reads,
continues and deletes; per API key; no key or text in Redis's key names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.proxy import CLOUD_KEY, MakeProxy
from tests.support.redis_server import RedisServer, redis_server
from tests.support.tiers import process_fixture

pytestmark = pytest.mark.process
LOCAL = {"X-Routing-Strategy": "local_only"}
SECRET = "sk-tenant-secret"


@process_fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


def test_a_response_stored_by_one_replica_is_read_by_another(
    make_proxy: MakeProxy, redis: RedisServer
) -> None:
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "REDIS_URL": redis.url}
    state = {"backend": "redis", "redis_url": "${REDIS_URL}", "key_prefix": "r1"}
    with (
        make_proxy(env=env, api_key=SECRET, state=state) as a,
        make_proxy(env=env, api_key=SECRET, state=state) as b,
    ):
        ask = {"input": "Name the red planet"}
        created = a.http.post("/v1/responses", json=ask, headers=LOCAL).json()
        path = f"/v1/responses/{created['id']}"
        assert b.http.get(path).json()["output"] == created["output"]
        follow = {"input": "and its moons?", "previous_response_id": created["id"]}
        assert b.http.post("/v1/responses", json=follow, headers=LOCAL).status_code == 200
        other = {"Authorization": "Bearer sk-other"}
        assert b.http.get(path, headers=other).status_code == 404
        with redis.client() as client:
            names = [n.decode() for n in client.scan_iter("r1:responses:*")]
            assert names
            for name in names:
                assert "secret" not in name and created["id"] not in name
                assert "red planet" not in name.lower()
        assert b.http.delete(path).status_code == 200
        assert a.http.get(path).status_code == 404
