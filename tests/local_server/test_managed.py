"""ManagedLlamaServer: the life cycle on a stand-in server (fast), then on the real one (real)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import LaunchConfig
from app.local_server import LocalServerError, ManagedLlamaServer, managed
from tests.real.support import alive

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = Path(__file__).with_name("stand_in_llama_server.py")


async def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll check() until it holds; fail the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s")
        await asyncio.sleep(0.02)


def our_llama_servers() -> set[int]:
    """Live llama-server children of this test process."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            pid, rest = stat.read_text().split(" (", 1)
            comm, fields = rest.rsplit(") ", 1)
            state, ppid = fields.split()[:2]
            if comm == "llama-server" and state != "Z" and int(ppid) == os.getpid():
                found.add(int(pid))
    return found


def await_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still alive"
        time.sleep(0.02)


# --- fast: a stand-in server takes llama-server's place -------------------------------


class StandIn:
    """Builds LaunchConfigs that run the stand-in; records the pids it spawned."""

    def __init__(self, tmp_path: Path) -> None:
        self.binary = tmp_path / "llama-server"
        self.binary.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STAND_IN}" "$@"\n')
        self.binary.chmod(0o755)
        self.model = tmp_path / "model.gguf"
        self.model.write_bytes(b"GGUF\x03\x00\x00\x00")
        self.pid_file = tmp_path / "pids"
        self.flag = tmp_path / "fail-from-now-on"

    def config(self, *args: str, **overrides: Any) -> LaunchConfig:
        fields: dict[str, Any] = {
            "binary": str(self.binary),
            "model": str(self.model),
            "port": 0,
            "args": ["--pid-file", str(self.pid_file), *args],
            "startup_timeout": 10,
            "restart_backoff_initial": 0.05,
            "restart_backoff_max": 0.2,
            "max_restarts": 3,
        }
        return LaunchConfig(**(fields | overrides))

    def pids(self) -> list[int]:
        if not self.pid_file.exists():
            return []
        return [int(line) for line in self.pid_file.read_text().split()]


def test_start_polls_through_loading_then_stop_reaps(stand_in: StandIn) -> None:
    async def scenario() -> None:
        server = ManagedLlamaServer(stand_in.config("--loading", "3"))
        url = await server.start()
        assert url == server.base_url and url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{url}/served")).json() == {"503": 3}
        status = server.status()
        assert status["state"] == "running" and status["pid"] == stand_in.pids()[0]
        assert status["model"] == str(stand_in.model) and status["restarts"] == 0
        await server.stop()
        await server.stop()  # idempotent
        assert server.status()["state"] == "stopped" and server.pid is None

    asyncio.run(scenario())
    assert not alive(stand_in.pids()[0])


def test_stop_before_start_is_harmless(stand_in: StandIn) -> None:
    server = ManagedLlamaServer(stand_in.config())
    asyncio.run(server.stop())
    assert server.status()["state"] == "stopped"


def test_exit_during_start_reports_the_last_lines(stand_in: StandIn) -> None:
    server = ManagedLlamaServer(stand_in.config("--exit", "2"))
    with pytest.raises(LocalServerError, match=r"(?s)exited with code 2.*failed to load model"):
        asyncio.run(server.start())
    assert server.status()["state"] == "failed"


def test_startup_timeout_stops_the_child(stand_in: StandIn) -> None:
    server = ManagedLlamaServer(stand_in.config("--loading", "1000000", startup_timeout=0.5))
    with pytest.raises(LocalServerError, match=r"not healthy after 0.5 s.*startup_timeout"):
        asyncio.run(server.start())
    [pid] = stand_in.pids()
    assert not alive(pid)


def test_missing_model_fails_before_spawning(stand_in: StandIn, tmp_path: Path) -> None:
    server = ManagedLlamaServer(stand_in.config(model=str(tmp_path / "nope.gguf")))
    with pytest.raises(LocalServerError, match=r"launch.model .*no such file"):
        asyncio.run(server.start())
    assert stand_in.pids() == []


def test_a_busy_port_is_refused(stand_in: StandIn) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = ManagedLlamaServer(stand_in.config(port=port))
        with pytest.raises(LocalServerError, match=f"port {port} .*already in use"):
            asyncio.run(server.start())


def test_supervisor_restarts_a_killed_child(stand_in: StandIn) -> None:
    async def scenario() -> None:
        server = ManagedLlamaServer(stand_in.config())
        url = await server.start()
        first = server.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await wait_until(lambda: server.state == "running" and server.pid not in (None, first))
        status = server.status()
        assert status["restarts"] == 1 and status["last_exit_code"] == -signal.SIGKILL
        assert status["base_url"] == url  # same port, so clients need not know
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{url}/health")).status_code == 200
        await server.stop()

    asyncio.run(scenario())
    assert [alive(pid) for pid in stand_in.pids()] == [False, False]


def test_supervisor_gives_up_after_max_restarts(stand_in: StandIn) -> None:
    async def scenario() -> float:
        server = ManagedLlamaServer(
            stand_in.config("--fail-if-exists", str(stand_in.flag), max_restarts=2)
        )
        await server.start()
        stand_in.flag.touch()
        began = time.monotonic()
        os.kill(server.pid or 0, signal.SIGKILL)
        await wait_until(lambda: server.state == "failed")
        elapsed = time.monotonic() - began
        assert server.status()["restarts"] == 2 and server.pid is None
        assert server.status()["last_exit_code"] == -signal.SIGKILL
        await server.stop()
        return elapsed

    elapsed = asyncio.run(scenario())
    assert elapsed >= 0.05 + 0.1  # backed off 0.05 s, then doubled
    assert len(stand_in.pids()) == 3 and not any(alive(pid) for pid in stand_in.pids())


def test_stop_kills_a_child_that_ignores_sigterm(
    stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(managed, "_STOP_GRACE_S", 0.3)

    async def scenario() -> float:
        server = ManagedLlamaServer(stand_in.config("--ignore-sigterm"))
        await server.start()
        began = time.monotonic()
        await server.stop()
        return time.monotonic() - began

    assert asyncio.run(scenario()) >= 0.3
    assert not alive(stand_in.pids()[0])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_child_dies_with_a_sigkilled_proxy(stand_in: StandIn) -> None:
    proxy_code = textwrap.dedent(
        """
        import asyncio, sys
        from app.config import LaunchConfig
        from app.local_server import ManagedLlamaServer

        async def main():
            server = ManagedLlamaServer(LaunchConfig.model_validate_json(sys.argv[1]))
            await server.start()
            print(server.pid, flush=True)
            await asyncio.sleep(60)

        asyncio.run(main())
        """
    )
    config = stand_in.config().model_dump_json()
    proxy = subprocess.Popen(
        [sys.executable, "-c", proxy_code, config], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proxy.stdout is not None
        child = int(proxy.stdout.readline())
        assert alive(child)
        proxy.kill()
        proxy.wait()
        await_gone(child)
    finally:
        proxy.kill()
        proxy.wait()
        if proxy.stdout:
            proxy.stdout.close()


# --- real: the llama-server binary and the SmolLM2 model --------------------------------


def real_config(**overrides: Any) -> LaunchConfig:
    fields: dict[str, Any] = {
        "port": 0,
        "args": ["-c", "1024", "-t", "2", "--metrics"],
        "startup_timeout": 60,
        "restart_backoff_initial": 0.2,
    }
    return LaunchConfig(**(fields | overrides))


def chat(base_url: str) -> dict[str, Any]:
    body = {
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "temperature": 0,
    }
    response = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for the module, so the server and its supervisor outlive a test."""
    with asyncio.Runner() as loop_runner:
        yield loop_runner


@pytest.fixture(scope="module")
def real_server(runner: asyncio.Runner) -> Iterator[ManagedLlamaServer]:
    server = ManagedLlamaServer(real_config(), name="real")
    runner.run(server.start())
    pids = [server.pid]
    try:
        yield server
        pids.append(server.pid)
    finally:
        runner.run(server.stop())
    for pid in pids:
        if pid is not None:
            await_gone(pid)


@pytest.mark.real
def test_real_server_is_healthy_and_answers(real_server: ManagedLlamaServer) -> None:
    assert real_server.base_url is not None
    health = httpx.get(f"{real_server.base_url}/health", timeout=5)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    answer = chat(real_server.base_url)
    assert isinstance(answer["choices"][0]["message"]["content"], str)
    assert answer["usage"]["completion_tokens"] > 0
    status = real_server.status()
    assert status["state"] == "running" and status["binary"].endswith("llama-server")
    assert status["model"].endswith(".gguf")


@pytest.mark.real
def test_real_server_restarts_after_kill_9(
    real_server: ManagedLlamaServer, runner: asyncio.Runner
) -> None:
    first = real_server.pid
    restarts = real_server.status()["restarts"]
    assert first is not None
    os.kill(first, signal.SIGKILL)
    runner.run(
        wait_until(
            lambda: real_server.state == "running" and real_server.pid not in (None, first), 60
        )
    )
    assert real_server.status()["restarts"] == restarts + 1
    assert not alive(first)
    assert real_server.base_url is not None
    assert chat(real_server.base_url)["usage"]["completion_tokens"] > 0


@pytest.mark.real
def test_real_stop_leaves_no_process(runner: asyncio.Runner) -> None:
    server = ManagedLlamaServer(real_config())
    runner.run(server.start())
    pid = server.pid
    assert pid is not None and alive(pid)
    runner.run(server.stop())
    assert server.status()["state"] == "stopped" and server.pid is None
    assert not alive(pid)


@pytest.mark.real
def test_real_bad_model_fails_with_the_servers_words(
    runner: asyncio.Runner, tmp_path: Path
) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 64)
    before = our_llama_servers()
    server = ManagedLlamaServer(real_config(model=str(bad)))
    with pytest.raises(LocalServerError, match=r"(?s)exited with code \d+ during start-up.*gguf"):
        runner.run(server.start())
    assert our_llama_servers() <= before
    with pytest.raises(LocalServerError, match="no such file"):
        runner.run(ManagedLlamaServer(real_config(model=str(tmp_path / "no.gguf"))).start())


@pytest.mark.real
def test_real_startup_timeout(runner: asyncio.Runner) -> None:
    before = our_llama_servers()
    server = ManagedLlamaServer(real_config(startup_timeout=0.01))
    with pytest.raises(LocalServerError, match=r"not healthy after 0.01 s"):
        runner.run(server.start())
    assert our_llama_servers() <= before
