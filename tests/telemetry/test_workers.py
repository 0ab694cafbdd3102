"""Workers asking each other for their state over real Unix sockets, in one event loop.

Each ``WorkerGroup`` is given the pid it stands for, so several "workers" live
in this process; the pid matters only when a socket refuses (dead or alive?).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.record import RequestRecord
from app.services import ConfigState
from app.telemetry.stats import Stats
from app.telemetry.workers import (
    SUPERVISOR_SOCKET,
    GroupSnapshot,
    WorkerGroup,
    ask,
    close_server,
    serve_state,
    worker_socket,
)
from app.vocabulary import Outcome, Strategy

UPSTREAMS = {
    "local": {
        "circuit": {"state": "closed", "opened_total": 0},
        "rate_limit": {"remaining_tokens_minute": None, "remaining_requests_day": None},
        "queued": 0,
    }
}


@pytest.fixture
def shared() -> Iterator[Path]:
    """A short directory: Unix socket paths must fit in 108 bytes (tmp_path may not)."""
    path = Path(tempfile.mkdtemp(prefix="sp-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def stats_with(requests: int) -> Stats:
    stats = Stats()
    for _ in range(requests):
        stats.record(RequestRecord(strategy=Strategy.LOCAL_ONLY, outcome=Outcome.PASSED_THROUGH))
    return stats


def describing(stats: Stats, in_flight: int = 0, config: ConfigState | None = None) -> Any:
    return lambda: {
        "stats": stats.state(),
        "in_flight": in_flight,
        "asyncio_tasks": 3,
        "upstreams": UPSTREAMS,
        "config": (config or ConfigState()).status(),
    }


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def refusing_socket(path: Path) -> None:
    """A socket file nobody listens on, as a worker killed with SIGKILL leaves behind."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


async def started(group: WorkerGroup, stats: Stats, in_flight: int = 0) -> WorkerGroup:
    await group.start(describing(stats, in_flight))
    return group


@pytest.mark.process
def test_the_asked_worker_adds_up_every_peer(shared: Path) -> None:
    async def scenario() -> GroupSnapshot:
        groups = [
            await started(WorkerGroup(shared, pid=101), stats_with(2), in_flight=1),
            await started(WorkerGroup(shared, pid=102), stats_with(3)),
            await started(WorkerGroup(shared, pid=103), stats_with(0), in_flight=2),
        ]
        try:
            return await groups[1].snapshot()
        finally:
            for group in groups:
                await group.close()

    snapshot = asyncio.run(scenario())
    stats = snapshot.stats()
    assert stats["requests"]["total"] == 5
    assert stats["requests"]["by_outcome"] == {"passed_through": 5}
    assert stats["workers"] == {
        "count": 3,
        "answered_by": 102,
        "per_worker": [
            {"pid": 101, "requests": 2, "in_flight": 1, "config_version": 1},
            {"pid": 102, "requests": 3, "in_flight": 0, "config_version": 1},
            {"pid": 103, "requests": 0, "in_flight": 2, "config_version": 1},
        ],
        "unanswered": [],
    }
    assert snapshot.runtime() == {"in_flight": 3, "asyncio_tasks": 9}
    assert snapshot.local_servers == {}  # no managed llama-server, nothing asked
    assert list(shared.iterdir()) == []  # every socket closed and removed


@pytest.mark.process
def test_a_silent_peer_is_named_and_does_not_hold_up_the_answer(shared: Path) -> None:
    async def scenario() -> tuple[GroupSnapshot, float]:
        async def never_answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await asyncio.sleep(30)
            finally:
                writer.close()

        silent = await asyncio.start_unix_server(never_answer, path=str(worker_socket(shared, 7)))
        me = await started(WorkerGroup(shared, pid=8, timeout=0.3), stats_with(1))
        began = time.monotonic()
        try:
            return await me.snapshot(), time.monotonic() - began
        finally:
            await me.close()
            await close_server(silent, worker_socket(shared, 7))

    snapshot, elapsed = asyncio.run(scenario())
    assert elapsed < 2
    assert snapshot.stats()["workers"]["unanswered"] == [7]
    assert snapshot.stats()["requests"]["total"] == 1  # what did answer is still served


@pytest.mark.process
def test_the_socket_of_a_dead_worker_is_removed_and_not_named(shared: Path) -> None:
    gone = worker_socket(shared, dead_pid())
    refusing_socket(gone)

    async def scenario() -> GroupSnapshot:
        me = await started(WorkerGroup(shared, pid=8), stats_with(1))
        try:
            return await me.snapshot()
        finally:
            await me.close()

    snapshot = asyncio.run(scenario())
    assert snapshot.unanswered == [] and len(snapshot.workers) == 1
    assert not gone.exists()


@pytest.mark.process
def test_a_live_worker_that_refuses_is_named_and_its_socket_kept(shared: Path) -> None:
    live = worker_socket(shared, os.getppid())  # alive, and not this "worker"
    refusing_socket(live)

    async def scenario() -> GroupSnapshot:
        me = await started(WorkerGroup(shared, pid=8), stats_with(0))
        try:
            return await me.snapshot()
        finally:
            await me.close()

    assert asyncio.run(scenario()).unanswered == [os.getppid()]
    assert live.exists()


@pytest.mark.process
def test_local_servers_come_from_the_supervisor(shared: Path) -> None:
    report = {"pid": 1, "local_servers": {"local": {"state": "running", "restarts": 0}}}

    async def scenario() -> GroupSnapshot:
        supervisor = await serve_state(shared / SUPERVISOR_SOCKET, lambda: report)
        me = await started(WorkerGroup(shared, {"local": "http://127.0.0.1:1"}, pid=8), Stats())
        try:
            return await me.snapshot()
        finally:
            await me.close()
            await close_server(supervisor, shared / SUPERVISOR_SOCKET)

    assert asyncio.run(scenario()).local_servers == report["local_servers"]


@pytest.mark.process
def test_a_silent_supervisor_leaves_a_note_per_server(shared: Path) -> None:
    async def scenario() -> GroupSnapshot:
        me = await started(WorkerGroup(shared, {"local": "http://127.0.0.1:1"}, pid=8), Stats())
        try:
            return await me.snapshot()
        finally:
            await me.close()

    local = asyncio.run(scenario()).local_servers["local"]
    assert local["state"] == "unknown" and local["base_url"] == "http://127.0.0.1:1"


@pytest.mark.process
def test_a_describe_that_fails_gives_an_empty_answer(
    shared: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("boom")

    async def scenario() -> None:
        path = shared / "x.sock"
        server = await serve_state(path, broken)
        try:
            with pytest.raises(ValueError):
                await ask(path, 1.0)
        finally:
            await close_server(server, path)

    asyncio.run(scenario())
    assert "cannot describe this process" in caplog.text


def test_a_socket_path_too_long_is_refused_with_the_fix(shared: Path) -> None:
    with pytest.raises(OSError, match="shorter TMPDIR"):
        asyncio.run(serve_state(shared / ("x" * 120), dict))


def test_a_group_reports_depth_per_worker_even_when_only_one_answered() -> None:
    depth = {"server_n_max": {"enabled": True, "k": {"prose": 8}}}
    alone = {"pid": 11, "adaptive_depth": depth}
    assert GroupSnapshot([alone], unanswered=[12]).depth() == {"per_worker": {"11": depth}}
    assert GroupSnapshot([alone], grouped=False).depth() == depth  # one worker: its own


def test_the_group_reports_the_oldest_config_and_any_refusal() -> None:
    """A reload reaches the workers in turn: until the last has it, the version is the
    one every worker has; each worker's own is in per_worker."""
    reloaded = ConfigState(version=2, loaded_at="2025-01-02T00:00:00.000Z")
    behind = ConfigState(version=1, loaded_at="2025-01-01T00:00:00.000Z")
    refused = ConfigState(version=2, reload_error="bad YAML", pending_restart=("server.port",))
    workers = [
        {"pid": pid, **describing(stats_with(0), config=config)()}
        for pid, config in ((11, reloaded), (12, behind), (13, refused))
    ]
    snapshot = GroupSnapshot(workers)
    assert snapshot.config() == {
        "config_version": 1,
        "config_loaded_at": "2025-01-01T00:00:00.000Z",
        "reload_error": "bad YAML",
        "reload_pending_restart": ["server.port"],
    }
    versions = [w["config_version"] for w in snapshot.stats()["workers"]["per_worker"]]
    assert versions == [2, 1, 2]
    assert GroupSnapshot(workers[:1], grouped=False).config()["reload_error"] is None
