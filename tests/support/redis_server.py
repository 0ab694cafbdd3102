"""A real redis-server of the test's own on a free loopback port, which a test may kill
and start again on the same port (nothing saved: ``--save ''``, no append-only file)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from tests.support.proxy import free_port, wait_for


class RedisServer:
    """One redis-server process; ``stop()`` kills it, ``start()`` brings it back."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                *("redis-server", "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", str(self.directory)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(self.answers, timeout=10)

    def stop(self) -> None:
        """Kill it (SIGKILL: the way an outage looks to its clients)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def answers(self) -> bool:
        try:
            with redis.Redis(port=self.port, socket_timeout=0.5) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2)


@contextmanager
def redis_server(directory: Path) -> Iterator[RedisServer]:
    """A started redis-server, stopped on the way out; without one the test fails."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed: scripts/bootstrap.sh dev installs it")
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
