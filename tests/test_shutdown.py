"""SIGTERM on `python main.py`: stop accepting, finish in-flight requests, flush, exit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import GOOD_DRAFT
from tests.support.processes import ROOT, healthy, main_process
from tests.support.proxy import proxy_config, wait_for

pytestmark = pytest.mark.process  # every test here starts a server or a process


def test_sigterm_lets_the_request_in_flight_finish_and_flushes_the_log(
    local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    spec_log = tmp_path / "spec.jsonl"
    config = proxy_config(
        local.url,
        cloud.url,
        logging={"spec_log_file": str(spec_log)},
        server={"shutdown_grace_s": 10},
    )
    local.enqueue(Reply(GOOD_DRAFT, delay=1.5))
    with main_process(config, tmp_path) as (proc, url):
        answers: list[httpx.Response] = []
        request = threading.Thread(
            target=lambda: answers.append(
                httpx.post(
                    f"{url}/v1/chat/completions",
                    timeout=10,
                    json={"messages": [{"role": "user", "content": "Say hello"}]},
                )
            )
        )
        request.start()
        wait_for(lambda: local.in_flight == 1)
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: not healthy(url))  # no longer accepting
        request.join(10)
        # uvicorn re-raises the signal once it has shut down, so supervisors see the
        # usual "terminated by SIGTERM" status; the graceful part is asserted below.
        assert proc.wait(10) == -signal.SIGTERM
    assert answers and answers[0].status_code == 200
    assert answers[0].json()["choices"][0]["message"]["content"] == GOOD_DRAFT
    lines = spec_log.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["outcome"] == "accepted_without_verification"
    assert "Finished server process" in (tmp_path / "proxy.log").read_text()


def test_bad_config_exits_2_with_the_key_and_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("models: {local: {provider: llama_server, model: x}}\n")
    done = subprocess.run(
        [sys.executable, "main.py", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "config error" in done.stderr and "models.local" in done.stderr
    assert "Traceback" not in done.stderr
