"""SIGTERM on `python main.py` with a managed llama-server: the child is stopped too."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.real.support import poll_until
from tests.support.processes import alive, main_process
from tests.support.proxy import dead_url, proxy_config


@pytest.mark.real
def test_sigterm_stops_the_managed_llama_server(tmp_path: Path, real_assets) -> None:
    launch = {
        "model": "auto",
        "binary": "auto",
        "port": 0,
        "args": ["-c", "512", "-np", "1", "-t", "2"],
    }
    config = proxy_config(dead_url(), dead_url(), models={"local": {"launch": launch}})
    del config["models"]["local"]["base_url"]  # the launch section decides where it listens
    with main_process(config, tmp_path) as (proc, url):
        status = httpx.get(f"{url}/stats", timeout=5).json()["local_servers"]["local"]
        assert status["state"] == "running"
        child = status["pid"]
        answer = httpx.post(
            f"{url}/v1/chat/completions",
            timeout=30,
            json={
                "model": "local",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "Say hi"}],
            },
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == -signal.SIGTERM
    poll_until(lambda: not alive(child), timeout=5, what="the managed llama-server to exit")
