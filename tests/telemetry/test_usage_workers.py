"""`python main.py --workers 2` with virtual keys: /stats → keys and the /metrics key
series count every worker's requests once, by key (the workers' states merged)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.support.proxy import proxy_config
from tests.telemetry.test_metrics import parse
from tests.test_multiworker import supervisor

pytestmark = pytest.mark.process

ALICE, BOB = "sk-alice-workers-5a6b", "sk-bob-workers-7c8d"
KEYS = {
    "keys": [
        {"name": "alice", "key": "${ALICE_KEY}", "team": "search"},
        {"name": "bob", "key": "${BOB_KEY}"},
    ]
}
ASK = {"messages": [{"role": "user", "content": "Say hello"}]}


def get(url: str, path: str) -> httpx.Response:
    response = httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {ALICE}"}, timeout=10)
    assert response.status_code == 200, response.text
    return response


def chat(url: str, key: str) -> int:
    """One request on a connection of its own, so the kernel may hand it to any worker."""
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(
        f"{url}/v1/chat/completions", json=ASK, headers=headers, timeout=10
    ).status_code


@pytest.mark.slow
def test_two_workers_add_up_usage_by_key(
    local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALICE_KEY", ALICE)  # the supervisor's children read ${VAR} from it
    monkeypatch.setenv("BOB_KEY", BOB)
    config = proxy_config(local.url, cloud.url, server=KEYS)
    sent = {"alice": 0, "bob": 0}
    with supervisor(config, tmp_path, "--workers", "2") as (_, url):
        body: dict[str, Any] = {}
        with ThreadPoolExecutor(4) as pool:
            for _ in range(50):
                keys = [ALICE, ALICE, ALICE, BOB]
                assert list(pool.map(lambda key: chat(url, key), keys)) == [200] * 4
                sent["alice"] += 3
                sent["bob"] += 1
                body = get(url, "/stats").json()
                workers = body["workers"]
                if workers["count"] == 2 and all(w["requests"] for w in workers["per_worker"]):
                    break
            else:
                pytest.fail(f"some worker served nothing: {body['workers']}")
        samples = parse(get(url, "/metrics").text)
    by_key = body["keys"]["by_key"]
    assert {name: k["requests"] for name, k in by_key.items()} == sent
    assert (by_key["alice"]["team"], by_key["bob"]["team"]) == ("search", None)
    assert body["keys"]["by_team"]["search"]["requests"] == sent["alice"]
    tokens = sum(k["tokens"]["completion"]["local"] for k in by_key.values())
    assert tokens == body["tokens"]["local"]  # every request had a key: the keys are the total
    counted = {s.labels["key"]: s.value for s in samples["specproxy_key_requests_total"]}
    assert counted == sent
