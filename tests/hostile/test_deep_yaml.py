"""D20: a config file nested thousands of levels deep: a clear config error, at start
(exit 2, no traceback) and on reload (refused, ``reload_error`` says why; the proxy
serves on with its config)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.processes import ROOT, main_process
from tests.support.proxy import CLOUD_KEY, dead_url, proxy_config, wait_for

pytestmark = pytest.mark.process  # every test here starts a process

DEEP = "server:\n  note: " + "[" * 5000 + "]" * 5000 + "\n"


def test_a_config_nested_too_deep_is_a_config_error_at_start(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(DEEP)
    done = subprocess.run(
        [sys.executable, "main.py", "--config", str(path), "--port", "1"],
        cwd=ROOT,
        env={"CEREBRAS_API_KEY": CLOUD_KEY, "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "nested too deep" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_config_nested_too_deep_is_refused_on_reload(tmp_path: Path) -> None:
    config = proxy_config(dead_url(), dead_url())
    with main_process(config, tmp_path) as (proc, url):
        (tmp_path / "config.yaml").write_text(DEEP)
        proc.send_signal(signal.SIGHUP)

        def refusal() -> str | None:
            return httpx.get(f"{url}/stats", timeout=5).json()["reload_error"]  # type: ignore[no-any-return]

        wait_for(lambda: refusal() is not None, timeout=10)
        assert "nested too deep" in str(refusal())
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    assert "Traceback" not in (tmp_path / "proxy.log").read_text()
