"""BackgroundServers: managed llama-servers run from a thread of their own (the supervisor's)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.local_server import LocalServerError
from app.local_server.background import BackgroundServers
from app.telemetry.workers import ask
from tests.support.local_server import StandIn
from tests.support.processes import alive

pytestmark = pytest.mark.process  # every test here starts a server or a process


@pytest.fixture
def status_socket() -> Iterator[Path]:
    """In a short directory: Unix socket paths must fit in 108 bytes (tmp_path may not)."""
    directory = Path(tempfile.mkdtemp(prefix="sp-"))
    yield directory / "supervisor.sock"
    shutil.rmtree(directory, ignore_errors=True)


def test_start_serves_status_and_stop_reaps(stand_in: StandIn, status_socket: Path) -> None:
    servers = BackgroundServers({"local": stand_in.config()}, status_socket)
    try:
        urls = servers.start()
        assert httpx.get(f"{urls['local']}/health", timeout=5).status_code == 200
        report = asyncio.run(ask(status_socket, 2.0))
        [pid] = stand_in.pids()
        assert report["pid"] == os.getpid()
        local = report["local_servers"]["local"]
        assert local["state"] == "running" and local["pid"] == pid
        assert local["base_url"] == urls["local"]
    finally:
        servers.stop()
    assert not alive(pid)
    assert not status_socket.exists()


def test_a_server_that_cannot_start_raises_and_leaves_nothing(
    stand_in: StandIn, status_socket: Path
) -> None:
    servers = BackgroundServers(
        {"good": stand_in.config(), "bad": stand_in.config("--exit", "2")}, status_socket
    )
    with pytest.raises(LocalServerError, match="bad: llama-server exited with code 2"):
        servers.start()
    servers.stop()  # harmless after a failed start
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in stand_in.pids()):
        assert time.monotonic() < deadline, "a stand-in outlived the failed start"
        time.sleep(0.02)
    assert len(stand_in.pids()) == 2 and not status_socket.exists()


def test_stop_before_start_is_harmless(stand_in: StandIn, status_socket: Path) -> None:
    threads_before = set(threading.enumerate())
    servers = BackgroundServers({"local": stand_in.config()}, status_socket)
    servers.stop()  # raises nothing
    # Harmless: nothing was spawned, served or left running ...
    assert stand_in.pids() == [] and not status_socket.exists()
    assert servers.status()["local_servers"] == {}
    assert not [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    # ... and the servers still start and stop as usual afterwards.
    try:
        urls = servers.start()
        assert httpx.get(f"{urls['local']}/health", timeout=5).status_code == 200
    finally:
        servers.stop()
    [pid] = stand_in.pids()
    assert not alive(pid) and not status_socket.exists()
