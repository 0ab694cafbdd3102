"""SIGHUP reloads config.yaml on a running `python main.py`, one process or several.

The proxy runs as a real process against the stand-in upstreams of this test
process; the tests rewrite its config file, send SIGHUP and read the outcome from
``/stats``, the answers and the log. A draft the seed's rules accept is served
locally; under ``combined`` with ``spill_threshold: 0`` every draft spills, so the
policy and threshold in force show in each answer, and the price in its bill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.local_server import StandIn
from tests.support.processes import alive, main_process
from tests.support.proxy import CLOUD_KEY, deep_merge, free_port, proxy_config, wait_for

ASK = {"messages": [{"role": "user", "content": "Say hello"}]}
CHEAP = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
CLOUD_ANSWER = "Paris is the capital of France, on the Seine, with two million people."
DEAR = {"input_per_mtok": 100_000.0, "output_per_mtok": 200_000.0}


def first(local: FakeLlamaServer, cloud: FakeCerebras) -> dict[str, Any]:
    """Version 1: the seed's rules (the stand-in's draft is accepted), the cheap price.

    The cloud answers unlike the draft, so a verified draft is replaced (spilled over).
    """
    cloud.default = Reply(CLOUD_ANSWER)
    slow = {"read": 30, "total": 60}  # a held draft outlasts the reload
    return proxy_config(
        local.url,
        cloud.url,
        models={
            "cerebras": {"price": CHEAP},
            "local": {"price": CHEAP, "timeout": slow},
        },
        speculative_decoding={"policy": "seed", "min_confidence": 0.8},
    )


def second(config: dict[str, Any]) -> dict[str, Any]:
    """Version 2: combined with a zero threshold (every draft spills), the dear price."""
    change = {
        "models": {"cerebras": {"price": DEAR}, "local": {"price": DEAR}},
        "speculative_decoding": {
            "policy": "combined",
            "spill_threshold": 0.0,
            "min_confidence": 0.5,
        },
    }
    return deep_merge(config, change)


def stats(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/stats", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def ask(url: str) -> dict[str, Any]:
    """One request on a connection of its own (any worker may take it); its JSON body."""
    response = httpx.post(f"{url}/v1/chat/completions", json=ASK, timeout=20)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def spills(url: str, n: int) -> list[bool]:
    """Whether each of ``n`` concurrent requests spilled to the cloud."""
    with ThreadPoolExecutor(4) as pool:
        bodies = list(pool.map(lambda _: ask(url), range(n)))
    return [body["speculative_decoding"]["spilled_over"] for body in bodies]


def cloud_spend(url: str) -> float:
    return float(stats(url)["cost"]["spend_usd"]["by_model"].get("cerebras", 0.0))


def hup(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGHUP)


def log_count(tmp_path: Path, text: str) -> int:
    return (tmp_path / "proxy.log").read_text().count(text)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_applies_a_threshold_a_price_and_the_policy_and_refuses_a_broken_file(
    local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path, workers: int
) -> None:
    config = first(local, cloud)
    path = tmp_path / "config.yaml"
    with main_process(config, tmp_path, "--workers", str(workers)) as (proc, url):
        before = stats(url)
        assert before["config_version"] == 1 and before["reload_error"] is None
        assert before["config_loaded_at"].endswith("Z")
        assert spills(url, 4 * workers) == [False] * 4 * workers  # seed: served locally
        assert cloud_spend(url) == 0.0

        path.write_text(yaml.safe_dump(second(config)))
        hup(proc)
        body = wait_until(url, lambda b: b["config_version"] == 2)
        assert body["reload_error"] is None and body["reload_pending_restart"] == []
        assert body["config_loaded_at"] > before["config_loaded_at"]
        assert [w["config_version"] for w in body["workers"]["per_worker"]] == [2] * workers
        spec = body["config"]["speculative_decoding"]
        assert (spec["policy"], spec["spill_threshold"], spec["min_confidence"]) == (
            "combined",
            0.0,
            0.5,
        )
        assert body["config"]["models"]["cerebras"]["price"] == DEAR
        assert body["requests"]["total"] == 4 * workers  # the counters survived

        answer = ask(url)
        report = answer["speculative_decoding"]
        assert report["spilled_over"] and "low_confidence" in report["reasons"]
        usage = answer["usage"]  # the cloud's answer, billed at the new price
        dear = (usage["prompt_tokens"] * 100_000 + usage["completion_tokens"] * 200_000) / 1e6
        wait_for(lambda: cloud_spend(url) > 0, timeout=10)
        assert cloud_spend(url) == pytest.approx(dear)
        assert spills(url, 4 * workers) == [True] * 4 * workers  # every worker's decisions

        path.write_text("speculative_decoding: [policy: seed\n")  # not YAML
        hup(proc)
        wait_for(lambda: log_count(tmp_path, "config reload refused") == workers, timeout=20)
        body = stats(url)
        assert body["config_version"] == 2 and "not valid YAML" in body["reload_error"]
        assert body["config"]["speculative_decoding"]["policy"] == "combined"
        assert spills(url, 2 * workers) == [True] * 2 * workers  # version 2 still decides

        path.write_text(
            yaml.safe_dump(deep_merge(config, {"speculative_decoding": {"spill_threshold": 2}}))
        )
        hup(proc)
        wait_for(lambda: log_count(tmp_path, "config reload refused") == 2 * workers, timeout=20)
        body = stats(url)
        assert body["config_version"] == 2 and "spill_threshold" in body["reload_error"]
        assert spills(url, 2 * workers) == [True] * 2 * workers

        path.write_text(yaml.safe_dump(config))  # fixed: back to version 1's content
        hup(proc)
        body = wait_until(url, lambda b: b["config_version"] == 3)
        assert body["reload_error"] is None
        assert spills(url, 2 * workers) == [False] * 2 * workers
        assert proc.poll() is None


@contextmanager
def released(gate: threading.Event) -> Iterator[None]:
    """Let a held answer go however the block ends (a failed test must not leave it held)."""
    try:
        yield
    finally:
        gate.set()


def wait_until(url: str, done: Any, timeout: float = 20) -> dict[str, Any]:
    """``/stats`` once ``done`` holds of it (polled, at most ``timeout`` seconds)."""
    seen: list[dict[str, Any]] = []

    def check() -> bool:
        seen.append(stats(url))
        return bool(done(seen[-1]))

    wait_for(check, timeout=timeout)
    return seen[-1]


def test_stats_shows_the_settings_of_the_version_it_reports_across_a_reload(
    local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    """A reload that lands while ``/stats`` is being answered (here: while it probes the
    llama-server) must not pair the new version with the old settings."""
    config = first(local, cloud)
    probe = threading.Event()
    with (
        main_process(config, tmp_path) as (proc, url),
        ThreadPoolExecutor(1) as pool,
        released(probe),
    ):
        asked = local.health_asked
        local.health_hold = probe
        answer = pool.submit(stats, url)
        wait_for(lambda: local.health_asked > asked, timeout=10)
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(second(config)))
        hup(proc)
        wait_for(lambda: log_count(tmp_path, "config reloaded: version 2") == 1, timeout=10)
        probe.set()
        body = answer.result(timeout=20)
        assert body["config_version"] == 2
        assert body["config"]["speculative_decoding"]["policy"] == "combined"


def test_a_request_in_flight_finishes_with_the_config_it_started_with(
    local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    spec_log = tmp_path / "spec.jsonl"
    config = deep_merge(first(local, cloud), {"logging": {"spec_log_file": str(spec_log)}})
    release = threading.Event()
    local.enqueue(Reply(hold=release))  # the draft of the first request waits for the test
    with (
        main_process(config, tmp_path) as (proc, url),
        ThreadPoolExecutor(1) as pool,
        released(release),
    ):
        held = pool.submit(ask, url)
        wait_for(lambda: local.in_flight == 1, timeout=10)
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(second(config)))
        hup(proc)
        body = wait_until(url, lambda b: b["config_version"] == 2)
        assert body["runtime"]["in_flight"] == 1  # the old pipeline's request, still counted
        assert ask(url)["speculative_decoding"]["spilled_over"]  # a new request: version 2
        release.set()
        answer = held.result(timeout=20)
        assert not answer["speculative_decoding"]["spilled_over"]  # the seed's rules decided
        wait_until(url, lambda b: b["runtime"]["in_flight"] == 0 and b["requests"]["total"] == 2)
        # The old pipeline, drained, closed its clients; the new one serves on.
        assert ask(url)["speculative_decoding"]["spilled_over"]
        # The writer thread logs after the answer; the process is then killed, not stopped.
        wait_for(lambda: len(spec_log.read_text().splitlines()) == 3, timeout=10)
    lines = [json.loads(line) for line in spec_log.read_text().splitlines()]
    [old] = [line for line in lines if line["outcome"] == "accepted_without_verification"]
    usage = answer["usage"]  # the local draft's, billed at the price the request started with
    cheap = (usage["prompt_tokens"] * 1.0 + usage["completion_tokens"] * 2.0) / 1e6
    assert old["cost"]["spend_usd"] == pytest.approx(cheap)
    assert len(lines) == 3 and all(
        line["cost"]["spend_usd"] > 1e-3 for line in lines if line is not old
    )


def test_client_keys_change_live_and_restart_only_keys_are_reported_not_applied(
    local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    config = first(local, cloud)
    with main_process(config, tmp_path) as (proc, url):
        # The key comes from the environment the proxy started with, as every secret does.
        change = {"server": {"api_keys": ["${CEREBRAS_API_KEY}"], "port": 1, "workers": 3}}
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(deep_merge(config, change)))
        hup(proc)
        key = {"Authorization": f"Bearer {CLOUD_KEY}"}
        wait_for(lambda: httpx.get(f"{url}/stats", timeout=5).status_code == 401, timeout=10)
        body = httpx.get(f"{url}/stats", headers=key, timeout=5).json()
        assert body["config_version"] == 2
        assert body["reload_pending_restart"] == ["server.port", "server.workers"]
        assert body["config"]["server"]["workers"] == 1  # still the running value
        assert body["config"]["server"]["api_keys"] == ["**********"]
        log = (tmp_path / "proxy.log").read_text()
        assert "need a restart (running values kept): server.port, server.workers" in log


def test_the_managed_llama_server_keeps_running_across_a_reload(
    cloud: FakeCerebras, tmp_path: Path
) -> None:
    stand_in = StandIn(tmp_path)
    launch = stand_in.config().model_dump(mode="json")
    config = proxy_config(
        "http://127.0.0.1:1", cloud.url, models={"local": {"base_url": None, "launch": launch}}
    )
    moved = deep_merge(
        config,
        {
            "models": {"local": {"launch": {"port": free_port()}, "timeout": {"read": 7}}},
            "speculative_decoding": {"min_confidence": 0.6},
        },
    )
    try:
        with main_process(config, tmp_path) as (proc, url):
            before = stats(url)
            [llama] = stand_in.pids()
            (tmp_path / "config.yaml").write_text(yaml.safe_dump(moved))
            hup(proc)
            body = wait_until(url, lambda b: b["config_version"] == 2)
            assert body["reload_pending_restart"] == ["models.local.launch.port"]
            assert body["config"]["models"]["local"]["launch"]["port"] == 0  # running value
            assert body["config"]["models"]["local"]["timeout"]["read"] == 7  # applied
            server = body["local_servers"]["local"]
            assert server["state"] == "running" and server["pid"] == llama
            assert stand_in.pids() == [llama]  # not started again
            local_url = body["features"]["upstreams"]["local"]["base_url"]
            assert local_url == before["features"]["upstreams"]["local"]["base_url"]
            assert local_url == server["base_url"]
            assert httpx.post(f"{url}/v1/chat/completions", json=ASK, timeout=20).status_code == 200
    finally:
        for pid in stand_in.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_embeddings_on_for_a_managed_server_waits_for_a_restart(
    cloud: FakeCerebras, tmp_path: Path
) -> None:
    """The running llama-server has no ``--embeddings``: a reload that turns embeddings on
    reports it pending and serves none from it (a 404, not a 501 from the server)."""
    stand_in = StandIn(tmp_path)
    launch = stand_in.config().model_dump(mode="json")
    config = proxy_config(
        "http://127.0.0.1:1", cloud.url, models={"local": {"base_url": None, "launch": launch}}
    )
    try:
        with main_process(config, tmp_path) as (proc, url):
            [llama] = stand_in.pids()
            on = deep_merge(config, {"models": {"local": {"embeddings": True}}})
            (tmp_path / "config.yaml").write_text(yaml.safe_dump(on))
            hup(proc)
            body = wait_until(url, lambda b: b["config_version"] == 2)
            assert body["reload_pending_restart"] == ["models.local.embeddings"]
            assert body["config"]["models"]["local"]["embeddings"] is False  # running value
            answer = httpx.post(f"{url}/v1/embeddings", json={"input": "hi"}, timeout=10)
            assert answer.status_code == 404 and answer.json()["error"]["code"] == "model_not_found"
            assert stand_in.pids() == [llama]  # not started again
    finally:
        for pid in stand_in.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
