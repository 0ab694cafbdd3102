"""`python main.py --workers N`: one picture in /stats and /metrics, one llama-server, clean exit.

The end-to-end tests run main.py as a subprocess (in a session of its own, so
a failing test can take the whole process tree down) against the stand-in
upstreams served by this test process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.config import settings_from_mapping
from app.multiworker import WorkerPlan, per_worker_path, worker_settings
from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.support.local_server import StandIn
from tests.support.processes import alive, healthy
from tests.support.proxy import CLOUD_KEY, free_port, proxy_config, wait_for

ROOT = Path(__file__).resolve().parent.parent
ASK = {"messages": [{"role": "user", "content": "Say hello"}]}


# --- the settings each worker serves with (pure) -----------------------------------------


def launched_settings() -> Any:
    tree = proxy_config("http://127.0.0.1:1", "http://127.0.0.1:2")
    tree["models"]["local"] = {
        "provider": "llama_server",
        "model": "smollm2",
        "launch": {"port": 0},
    }
    tree["logging"] = {"spec_log_file": "/var/log/spec.jsonl"}
    return settings_from_mapping(tree, env={"CEREBRAS_API_KEY": CLOUD_KEY})


def test_workers_use_the_supervisors_llama_server_instead_of_launching_one() -> None:
    plan = WorkerPlan(config="/c.yaml", workers=3, managed={"local": "http://127.0.0.1:5555"})
    settings = worker_settings(launched_settings(), plan, pid=42)
    local = settings.models["local"]
    assert local.launch is None and local.base_url == "http://127.0.0.1:5555"
    assert settings.models["cerebras"] == launched_settings().models["cerebras"]
    assert settings.server.workers == 3
    assert settings.logging.spec_log_file == "/var/log/spec.42.jsonl"


def test_the_command_line_spec_log_wins_and_is_split_per_worker() -> None:
    plan = WorkerPlan(config="/c.yaml", workers=2, spec_log_file="/tmp/run.log")
    assert worker_settings(launched_settings(), plan, 7).logging.spec_log_file == "/tmp/run.7.log"
    assert per_worker_path("spec", 7) == "spec.7"


# --- end to end: main.py --workers 2 ----------------------------------------------------


@contextmanager
def supervisor(
    config: dict[str, Any], tmp_path: Path, *args: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``python main.py`` with this config on a free port; the session is killed on the way out."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    port = str(free_port())
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "main.py", "--config", str(path), "--host", "127.0.0.1"]
    with (tmp_path / "proxy.log").open("wb") as log:
        proc = subprocess.Popen(
            [*command, "--port", port, *args],
            cwd=ROOT,
            env={**os.environ, "CEREBRAS_API_KEY": CLOUD_KEY},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: healthy(url), timeout=30)
        yield proc, url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stats(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/stats", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def chat(url: str) -> int:
    """One request on a connection of its own, so the kernel may hand it to any worker."""
    return httpx.post(f"{url}/v1/chat/completions", json=ASK, timeout=10).status_code


def until_every_worker_served(url: str, workers: int) -> int:
    """Send batches of concurrent requests until each worker has answered one; returns
    how many were sent (all of them answered 200)."""
    sent = 0
    with ThreadPoolExecutor(4) as pool:
        for _ in range(50):
            statuses = list(pool.map(lambda _: chat(url), range(4)))
            assert statuses == [200] * 4
            sent += 4
            seen = stats(url)["workers"]
            if seen["count"] == workers and all(w["requests"] for w in seen["per_worker"]):
                return sent
    pytest.fail(f"after {sent} requests some worker had served none: {seen}")


def metric_sum(text: str, name: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


def shared_dir_of(pid: int) -> Path:
    """The directory the supervisor made, as a worker's environment names it."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    [plan] = [e.split(b"=", 1)[1] for e in environ if e.startswith(b"SPECPROXY_WORKER_PLAN=")]
    return Path(WorkerPlan.model_validate_json(plan).shared_dir)


def await_gone(pids: list[int], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while left := [pid for pid in pids if alive(pid)]:
        assert time.monotonic() < deadline, f"still running: {left}"
        time.sleep(0.05)


def until(
    read: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """read() again until done(result) holds; at most 20 s."""
    deadline = time.monotonic() + 20
    while not done(result := read()):
        assert time.monotonic() < deadline, f"never reached: {result}"
        time.sleep(0.1)
    return result


@pytest.mark.slow
def test_two_workers_count_every_request_once_in_stats_and_metrics(
    local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    with supervisor(proxy_config(local.url, cloud.url), tmp_path, "--workers", "2") as (proc, url):
        sent = until_every_worker_served(url, 2)
        body = stats(url)
        requests, workers = body["requests"], body["workers"]
        assert requests["total"] == sent
        assert sum(requests["by_outcome"].values()) == sent
        assert sum(requests["by_strategy"].values()) == sent
        assert sum(w["requests"] for w in workers["per_worker"]) == sent
        assert workers["count"] == 2 and workers["unanswered"] == []
        assert body["latency_ms"]["total"]["n"] == sent  # samples pooled from both
        assert body["runtime"]["in_flight"] == 0
        assert body["config"]["server"]["workers"] == 2

        scrape = httpx.get(f"{url}/metrics", timeout=10)
        assert scrape.status_code == 200
        assert metric_sum(scrape.text, "specproxy_requests_total") == sent
        assert metric_sum(scrape.text, "specproxy_request_latency_seconds_count") == sent
        labelled = {
            sample.labels["worker"]
            for family in text_string_to_metric_families(scrape.text)
            if family.name == "specproxy_circuit_state"
            for sample in family.samples
        }
        pids = [w["pid"] for w in workers["per_worker"]]
        assert labelled == {str(pid) for pid in pids}

        shared = shared_dir_of(pids[0])
        assert shared.is_dir()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    await_gone(pids)
    assert not shared.exists()
    assert "Stopping parent process" in (tmp_path / "proxy.log").read_text()


@pytest.mark.slow
def test_one_llama_server_for_all_workers_stopped_by_ctrl_c(
    cloud: FakeCerebras, tmp_path: Path
) -> None:
    stand_in = StandIn(tmp_path)
    launch = stand_in.config().model_dump(mode="json")
    config = proxy_config(
        "http://127.0.0.1:1",
        cloud.url,
        server={"workers": 2},  # from the config this time, not the command line
        models={"local": {"base_url": None, "launch": launch}},
    )
    try:
        with supervisor(config, tmp_path) as (proc, url):
            body = until(lambda: stats(url), lambda b: b["workers"]["count"] == 2)
            [llama] = stand_in.pids()  # one, not one per worker
            managed = body["local_servers"]["local"]
            assert managed["state"] == "running" and managed["pid"] == llama
            assert body["features"]["upstreams"]["local"]["base_url"] == managed["base_url"]
            assert body["config"]["models"]["local"]["launch"] is None
            workers = [w["pid"] for w in body["workers"]["per_worker"]]
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
            assert proc.wait(30) == 0
        await_gone([llama, *workers])
    finally:
        for pid in stand_in.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.process
def test_workers_must_be_positive() -> None:
    done = subprocess.run(
        [sys.executable, "main.py", "--workers", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "--workers: must be 1 or more" in done.stderr
