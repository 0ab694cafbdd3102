"""D9: SIGHUP no longer kills the proxy: it is logged and ignored, and requests go on."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx

from tests.support.processes import main_process
from tests.support.proxy import dead_url, proxy_config, wait_for


def test_sighup_is_logged_and_ignored(tmp_path: Path) -> None:
    config = proxy_config(dead_url(), dead_url())
    with main_process(config, tmp_path) as (proc, url):
        proc.send_signal(signal.SIGHUP)
        log = tmp_path / "proxy.log"
        wait_for(lambda: "SIGHUP received and ignored" in log.read_text(), timeout=10)
        assert proc.poll() is None
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
