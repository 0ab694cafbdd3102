"""Labels learned through one replica reach the scorer every replica serves with, through
Redis alone: each replica keeps its files in a state_dir of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.learning.traffic import learning_config, questions, script
from tests.state.test_redis_fleet import fleet_config, redis, replicas, stats
from tests.support.proxy import wait_for
from tests.support.redis_server import RedisServer
from tests.support.scripted import cerebras_class, llama_server_class

__all__ = ["cerebras_class", "llama_server_class", "redis"]  # fixtures


def ask(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": "speculative", "messages": [{"role": "user", "content": prompt}]}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=15)
    assert response.status_code == 200, response.text
    return response.json()["speculative_decoding"]  # type: ignore[no-any-return]


def learned(url: str, labels: int) -> bool:
    """Whether the replica serves a learned scorer and counts ``labels`` in the store."""
    learning = stats(url)["learning"]
    return bool(learning["scorer"]["version"] >= 1 and learning["labels"]["stored"] == labels)


@pytest.mark.slow
def test_labels_learned_through_one_replica_reach_the_scorer_of_all(
    local: ScriptedLlamaServer, cloud: ScriptedCerebras, redis: RedisServer, tmp_path: Path
) -> None:
    triples = questions(40)
    script(local, cloud, triples)
    config = fleet_config(local, cloud, **learning_config("per-replica"))
    with replicas(config, tmp_path) as fleet:
        a, b, c = (url for url, _ in fleet)
        for prompt, _, _ in triples:
            ask(a, prompt)
        for url in (b, c):
            wait_for(lambda url=url: learned(url, labels=40), timeout=30)
            learning = stats(url)["learning"]
            assert learning["labels"]["total"] == 0  # it judged nothing itself
            assert learning["store"]["backend"] == "redis"
            assert learning["store"]["redis"]["connected"]
        leads = [stats(url)["learning"]["lead"] for url in (a, b, c)]
        assert leads.count(True) == 1  # one replica refits for the fleet
        for i in (1, 2):  # B and C appended no labels of their own
            assert not (tmp_path / f"replica{i}" / "state" / "labels.jsonl").exists()
        # B and C serve with the learned scorer: it tells the kinds apart on new questions
        fresh = questions(8, offset=40)
        script(local, cloud, fresh)
        served = [ask(url, p) for url, (p, _, _) in zip([b, c] * 4, fresh, strict=True)]
        assert all(s["accepted"] for s in served[0::2])  # the capitals
        assert not any(s["accepted"] for s in served[1::2])  # the letters
