"""The learner's Redis store against a real redis-server: shared labels, one lead, and
catching up after an outage; plus the state section of the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import ConfigError, settings_from_mapping
from app.learning.labels import Label
from app.learning.shared_store import SharedLearningStore
from app.learning.store import LearningStore
from app.routing.scorer import load_scorer
from app.state import redis_client
from app.state.health import RedisHealth
from tests.support.proxy import CLOUD_KEY, proxy_config
from tests.support.redis_server import RedisServer, redis_server


def label(i: int) -> Label:
    return Label(features={"x": float(i)}, ngrams=(), context_type="chat", agreed=bool(i % 2))


def store(server: RedisServer, directory: Path, replica: str) -> SharedLearningStore:
    settings = settings_from_mapping(
        proxy_config("http://l", "http://c", state={"backend": "redis", "redis_url": "${R}"}),
        env={"CEREBRAS_API_KEY": CLOUD_KEY, "R": server.url},
    )
    local = LearningStore(directory / replica, max_labels=100)
    health = RedisHealth([], "learning")
    return SharedLearningStore(
        local, redis_client(settings.state, asyncio=False), "t", replica, health
    )


@pytest.mark.process
def test_replicas_share_labels_scorer_and_one_lead(tmp_path: Path) -> None:
    with redis_server(tmp_path) as server:
        a, b = store(server, tmp_path, "a"), store(server, tmp_path, "b")
        assert b.added() == 0  # takes the position
        a.append([label(1), label(2)])
        assert b.added() == 2 and b.count() == 2
        assert [lab.features["x"] for lab in b.read()] == [1.0, 2.0]
        assert a.try_lead() and not b.try_lead() and a.try_lead()  # renewed, not shared
        a.write_scorer(load_scorer("combined"), version=3)
        found = b.read_scorer()
        assert found is not None and found[1] == 3
        a.close()  # gives the lease up
        assert b.try_lead()
        b.close()


@pytest.mark.process
def test_labels_and_a_scorer_from_an_outage_reach_redis_when_it_returns(tmp_path: Path) -> None:
    with redis_server(tmp_path) as server:
        a, b = store(server, tmp_path, "a"), store(server, tmp_path, "b")
        assert (a.added(), b.added()) == (0, 0)  # each takes the position
        server.stop()
        a.append([label(1), label(2), label(3)])  # Redis down: kept locally, waiting
        assert not a.health.connected and a.health.error
        assert a.status()["waiting"] == 3
        assert a.count() == 3 and len(a.read()) == 3  # its own labels, from its files
        assert a.try_lead()  # the local lock stands in for the lease
        a.write_scorer(load_scorer("combined"), version=1)
        assert a.read_scorer() is not None  # its own file
        server.start()  # empty
        assert a.added() == 3  # its own three, counted once; then pushed on this look
        assert a.health.connected and a.status()["waiting"] == 0
        assert b.count() == 3
        found = b.read_scorer()
        assert found is not None and found[1] == 1
        a.close()
        b.close()


def test_redis_url_is_a_secret_and_required_by_the_redis_backend() -> None:
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "R": "redis://:hunter2@127.0.0.1:6379/0"}
    tree = proxy_config("http://l", "http://c", state={"backend": "redis", "redis_url": "${R}"})
    settings = settings_from_mapping(tree, env=env)
    assert settings.model_dump(mode="json")["state"]["redis_url"] == "**********"
    assert "hunter2" in settings.secrets()  # redacted from the logs
    literal = proxy_config("http://l", "http://c", state={"redis_url": "redis://x:6379"})
    with pytest.raises(ConfigError, match=r"state\.redis_url: secrets may only come"):
        settings_from_mapping(literal, env=env)
    with pytest.raises(ConfigError, match="backend redis needs redis_url"):
        settings_from_mapping(proxy_config("http://l", "http://c", state={"backend": "redis"}))
    assert settings_from_mapping(proxy_config("http://l", "http://c"), env=env).state.backend == (
        "memory"
    )
