"""One llama-server child process that the proxy starts, watches and restarts.

The supervisor: start-up, health, restart with backoff and status. How the child is
spawned is in ``spawn``; the draft-model pair check and its flags in ``speculation``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from enum import StrEnum
from pathlib import Path
from typing import Any

import aiohttp

from app.config import LaunchConfig
from app.local_server.assets import ensure_model, find_llama_server
from app.local_server.errors import LocalServerError
from app.local_server.spawn import (
    command_line,
    die_with_parent_hook,
    free_port,
    port_in_use,
    url_host,
)
from app.local_server.speculation import Speculation, check_draft, plan_speculation

# Re-exported: callers and tests import these from here, where they used to live.
__all__ = ["ManagedLlamaServer", "ServerState", "Speculation", "plan_speculation"]

log = logging.getLogger("specproxy.llama_server")

_HEALTH_POLL_S = 0.1
_STOP_GRACE_S = 5.0
_TAIL_LINES = 30


class ServerState(StrEnum):
    """Life-cycle states reported by ``status()``."""

    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    STOPPED = "stopped"
    FAILED = "failed"


class ManagedLlamaServer:
    """A supervised llama-server: start it, restart it with backoff when it dies, stop it."""

    def __init__(self, launch: LaunchConfig, name: str = "local") -> None:
        self.launch = launch
        self.name = name
        self._state = ServerState.STOPPED
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._binary: Path | None = None
        self._model: Path | None = None
        self._speculation: Speculation | None = None
        self._port: int | None = None
        self._restarts = 0
        self._last_exit_code: int | None = None
        self._started_at: float | None = None  # wall clock, for status()
        self._spawned = 0.0  # monotonic, for uptime
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)

    @property
    def pid(self) -> int | None:
        """Pid of the live child, or None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    @property
    def base_url(self) -> str | None:
        """``http://host:port`` once a port is chosen (stable across restarts)."""
        if self._port is None:
            return None
        return f"http://{url_host(self.launch.host)}:{self._port}"

    @property
    def state(self) -> ServerState:
        """Where the server is in its life cycle."""
        return self._state

    def status(self) -> dict[str, Any]:
        """A JSON-ready snapshot for ``/stats``."""
        spec = self._speculation
        return {
            "state": self._state.value,
            "pid": self.pid,
            "base_url": self.base_url,
            "binary": str(self._binary) if self._binary else None,
            "model": str(self._model) if self._model else None,
            "draft_model": str(spec.draft) if spec else None,
            "speculative": spec.status() if spec else None,
            "restarts": self._restarts,
            "last_exit_code": self._last_exit_code,
            "started_at": self._started_at,
        }

    async def start(self) -> str:
        """Resolve binary and model, spawn, wait for ``/health`` 200; returns the base URL."""
        if self._state in (ServerState.RUNNING, ServerState.RESTARTING) and self.base_url:
            return self.base_url
        self._state = ServerState.STARTING
        try:
            self._binary, self._model, self._speculation = await asyncio.to_thread(self._resolve)
            self._port = self.launch.port or free_port(self.launch.host)
            await self._launch()
        except BaseException:
            self._state = ServerState.FAILED
            await self._terminate()
            raise
        self._state = ServerState.RUNNING
        self._supervisor = asyncio.create_task(self._supervise(), name=f"supervise-{self.name}")
        assert self.base_url is not None
        return self.base_url

    async def stop(self) -> None:
        """Stop supervising, SIGTERM the child, SIGKILL it after a grace period, reap it."""
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None and supervisor is not asyncio.current_task():
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        await self._terminate()
        self._state = ServerState.STOPPED

    def _resolve(self) -> tuple[Path, Path, Speculation | None]:
        """Binary, model and draft plan (blocking: may fetch the model and reads GGUF files)."""
        binary, model = find_llama_server(self.launch.binary), ensure_model(self.launch.model)
        return binary, model, check_draft(self.launch, model, self.name)

    async def _launch(self) -> None:
        """Spawn one child and wait until it is healthy; on failure it is stopped and reaped."""
        assert self._binary and self._model and self._port is not None
        host, port = self.launch.host, self._port
        if port_in_use(host, port):
            # Another server there would answer our health poll and fool us.
            raise LocalServerError(
                f"{self.name}: port {port} on {host} is already in use; "
                "set launch.port to a free port or to 0 (pick one)"
            )
        command = command_line(
            self._binary, self._model, host, port, self._speculation, self.launch.args
        )
        self._tail.clear()
        try:
            # A session of its own keeps the terminal's Ctrl-C away from the child, so that
            # shutdown goes through stop() instead of racing the supervisor into a restart.
            self._proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent_hook(),
            )
        except OSError as exc:
            raise LocalServerError(f"{self.name}: cannot run {self._binary}: {exc}") from exc
        self._started_at, self._spawned = time.time(), time.monotonic()
        self._reader = asyncio.create_task(self._pump(self._proc), name=f"log-{self.name}")
        log.info("%s: started llama-server pid %d on port %d", self.name, self._proc.pid, port)
        try:
            await self._wait_healthy(self._proc)
        except BaseException:
            await self._terminate()
            raise

    async def _pump(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            try:
                raw = await proc.stdout.readline()
            except ValueError:  # a line over the buffer limit; the reader drops it
                raw = b"(an over-long line was dropped)"
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip()
            self._tail.append(line)
            log.debug("[%s] %s", self.name, line)

    def _last_lines(self) -> str:
        return "\n".join(self._tail) or "(no output)"

    async def _wait_healthy(self, proc: asyncio.subprocess.Process) -> None:
        deadline = time.monotonic() + self.launch.startup_timeout
        url = f"{self.base_url}/health"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as client:
            while True:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with client.get(url) as response:
                        if response.status == 200:
                            return
                    # 503 "Loading model" is expected while the weights load.
                if proc.returncode is not None:
                    await self._drain_log()
                    raise LocalServerError(
                        f"{self.name}: llama-server exited with code {proc.returncode} "
                        f"during start-up; last output:\n{self._last_lines()}"
                    )
                if time.monotonic() >= deadline:
                    raise LocalServerError(
                        f"{self.name}: llama-server not healthy after "
                        f"{self.launch.startup_timeout:g} s (raise launch.startup_timeout "
                        f"for a large model); last output:\n{self._last_lines()}"
                    )
                await asyncio.sleep(_HEALTH_POLL_S)

    async def _drain_log(self) -> None:
        # The pipe closes when the child is gone; let the reader take the last lines.
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._reader, 2.0)

    async def _terminate(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), _STOP_GRACE_S)
            except TimeoutError:
                log.warning("%s: llama-server ignored SIGTERM; killing it", self.name)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        await self._drain_log()
        self._reader = None

    async def _supervise(self) -> None:
        """Restart the child when it dies, backing off; give up after max_restarts failures."""
        launch = self.launch
        backoff = launch.restart_backoff_initial
        failures = 0  # restart attempts in a row that never became healthy
        while True:
            proc = self._proc
            assert proc is not None
            code = await proc.wait()
            await self._drain_log()
            self._last_exit_code = code
            # A child that ran for a while earns a fast restart; a crash loop keeps backing off.
            if time.monotonic() - self._spawned >= launch.restart_backoff_max:
                backoff = launch.restart_backoff_initial
            log.warning(
                "%s: llama-server pid %d exited with code %s; last output:\n%s",
                self.name,
                proc.pid,
                code,
                self._last_lines(),
            )
            self._state = ServerState.RESTARTING
            while True:
                if failures >= launch.max_restarts:
                    self._state = ServerState.FAILED
                    log.error(
                        "%s: llama-server gave up after %d failed restarts in a row",
                        self.name,
                        failures,
                    )
                    return
                log.warning("%s: restarting llama-server in %.1f s", self.name, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, launch.restart_backoff_max)
                self._restarts += 1
                try:
                    await self._launch()
                except Exception as exc:  # whatever it was, the supervisor must keep going
                    failures += 1
                    log.warning("%s: restart %d failed: %s", self.name, self._restarts, exc)
                    continue
                failures = 0
                self._state = ServerState.RUNNING
                break
