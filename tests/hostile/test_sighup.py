"""D9: SIGHUP does not kill the proxy: it reloads the config, and requests go on."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import main_process
from tests.support.proxy import dead_url, proxy_config, wait_for

pytestmark = pytest.mark.process  # every test here starts a server or a process


def version(url: str) -> int:
    return int(httpx.get(f"{url}/stats", timeout=5).json()["config_version"])


def per_worker(url: str) -> list[dict[str, Any]]:
    return list(httpx.get(f"{url}/stats", timeout=5).json()["workers"]["per_worker"])


def test_sighup_reloads_the_config_and_the_proxy_serves_on(tmp_path: Path, edge: str) -> None:
    config = proxy_config(dead_url(), dead_url(), server={"edge": edge})
    with main_process(config, tmp_path) as (proc, url):
        assert version(url) == 1
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: version(url) == 2, timeout=10)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: version(url) == 3, timeout=10)
        assert proc.poll() is None
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        assert (
            "config reloaded: version 3; changed: nothing" in (tmp_path / "proxy.log").read_text()
        )


@pytest.mark.slow
def test_with_workers_sighup_reloads_each_worker_instead_of_replacing_it(
    tmp_path: Path, edge: str
) -> None:
    config = proxy_config(dead_url(), dead_url(), server={"edge": edge})
    with main_process(config, tmp_path, "--workers", "2") as (proc, url):
        wait_for(lambda: len(per_worker(url)) == 2, timeout=20)
        pids = sorted(w["pid"] for w in per_worker(url))
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: version(url) == 2, timeout=10)  # the lowest of the two
        after = per_worker(url)
        assert sorted(w["pid"] for w in after) == pids  # the same processes, reloaded
        assert [w["config_version"] for w in after] == [2, 2]
        assert proc.poll() is None
