"""Child processes of the tests: ``python main.py`` on a free port, and probes of any process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.proxy import CLOUD_KEY, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    """True while pid is a running (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def healthy(url: str) -> bool:
    """Whether ``GET /health`` answers 200 (a proxy or llama-server is up)."""
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def main_process(
    config: dict[str, Any], tmp_path: Path, *args: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``python main.py`` on a free port with this config (``tmp_path/config.yaml``) and
    ``args``; in a session of its own, killed whole if the test leaves it up."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    port = str(free_port())
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "CEREBRAS_API_KEY": CLOUD_KEY}
    command = [sys.executable, "main.py", "--config", str(path), "--host", "127.0.0.1"]
    with (tmp_path / "proxy.log").open("wb") as log:
        proc = subprocess.Popen(
            [*command, "--port", port, *args],
            cwd=ROOT,
            env=env,
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
