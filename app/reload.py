"""Hot reload: on SIGHUP, read config.yaml again and serve the next requests with it.

The file is checked as at start-up (``app.composition.load``); a file that fails is
refused: the running configuration stays, ``/stats`` shows the error and one line is
logged. A good one builds a new pipeline over new upstream clients
(``app.assembly``) and swaps it in; each request holds the pipeline it started with,
so requests in flight finish with their configuration, and the old pipeline and its
clients close once its last request is done. Keys that only a restart can change
(``app.config.changes``) keep their running values and are named in a warning and in
``/stats``. Counters live in ``Services`` and survive every reload.

Each process reloads itself; with ``--workers`` the supervisor passes SIGHUP on to
every worker (``app.multiworker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.assembly import open_pipeline
from app.composition import load
from app.config import ConfigError, Settings
from app.config.changes import classify, keep_running
from app.pipeline import Pipeline
from app.services import ConfigState, Services, utc_now
from app.signals import ignore_sighup
from app.telemetry import Telemetry
from app.telemetry.logs import configure_logging

RETIRE_WITHIN_S = 600.0

log = logging.getLogger("specproxy.reload")


def _as_is(settings: Settings) -> Settings:
    return settings


@dataclass(frozen=True)
class ConfigSource:
    """Where the running settings came from, so a reload can read them again.

    ``loaded`` is the file's settings as read at start; ``adapt`` lays over them what
    the file does not say (the command line's overrides, a worker's llama-server URLs);
    ``log_level`` is ``--log-level``, which wins over ``logging.level``.
    """

    path: Path
    loaded: Settings
    adapt: Callable[[Settings], Settings] = _as_is
    log_level: str | None = None

    def read(self) -> Settings:
        """The file's settings now, checked as at start-up; raises ConfigError."""
        return load(self.path)


class Reloader:
    """Owns the current pipeline and the retiring ones; ``reload()`` swaps in a new one."""

    def __init__(
        self, services: Services, telemetry: Telemetry, source: ConfigSource | None
    ) -> None:
        self.services = services
        self.telemetry = telemetry
        self.source = source  # None: settings given in code, nothing to read again
        self.running = source.loaded if source is not None else services.settings
        self._stack = AsyncExitStack()  # the current pipeline's clients
        self._lock = asyncio.Lock()  # one reload at a time, in the order asked
        self._tasks: set[asyncio.Task[Any]] = set()  # reloads asked for, retirements
        self._listening = False

    def _managed_urls(self) -> dict[str, str]:
        """The managed llama-servers' URLs: they keep running across reloads."""
        return {
            name: url for name, server in self.services.managed.items() if (url := server.base_url)
        }

    async def start(self) -> None:
        """Build the first pipeline."""
        self.services.pipeline = await open_pipeline(
            self.services.settings, self.telemetry, self._managed_urls(), self._stack
        )
        self.services.config = ConfigState()

    def listen(self) -> None:
        """Reload on SIGHUP (only where a file can be read again, in the main thread)."""
        if self.source is None or threading.current_thread() is not threading.main_thread():
            return
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._hup)
        self._listening = True

    def _hup(self) -> None:
        # A signal handler only schedules: the reload runs as a task on the loop.
        log.info("SIGHUP: reloading %s", self.source.path if self.source else "-")
        self._spawn(self.reload())

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("config reload failed unexpectedly: %r", exc)

    async def reload(self) -> bool:
        """Read the file again and serve with it; False (and the reason kept) if refused."""
        assert self.source is not None, "settings given in code cannot be read again"
        source = self.source
        async with self._lock:
            try:
                fresh = await asyncio.to_thread(source.read)
                change = classify(self.running, fresh)
                applied = keep_running(self.running, fresh, change.restart)
                settings = source.adapt(applied)
            except ConfigError as exc:
                return self._refuse(str(exc))
            stack = AsyncExitStack()
            try:
                pipeline = await open_pipeline(
                    settings, self.telemetry, self._managed_urls(), stack
                )
            except Exception as exc:
                await stack.aclose()
                return self._refuse(f"cannot build the new configuration: {exc!r}")
            services, old, old_stack = self.services, self.services.chat, self._stack
            previous_secrets = services.settings.secrets()
            # The swap: requests from here on get the new pipeline; each request in
            # flight holds the one it started with.
            services.settings, services.pipeline, self._stack = settings, pipeline, stack
            services.stats.alerts = settings.telemetry.alerts
            self.running = applied
            level = source.log_level or settings.logging.level
            # The old keys stay masked: requests in flight may still print them.
            configure_logging(level, [*settings.secrets(), *previous_secrets])
            state = services.config
            state.version += 1
            state.loaded_at = utc_now()
            state.reload_error = None
            state.pending_restart = change.restart
            log.info(
                "config reloaded: version %d; changed: %s",
                state.version,
                ", ".join(change.live) or "nothing",
            )
            if change.restart:
                log.warning(
                    "config keys changed that need a restart (running values kept): %s",
                    ", ".join(change.restart),
                )
            services.retiring.add(old)
            self._spawn(self._retire(old, old_stack))
            return True

    def _refuse(self, reason: str) -> bool:
        reason = " ".join(reason.split())  # one log line, even for YAML's multi-line errors
        state = self.services.config
        state.reload_error = reason
        log.error("config reload refused, still serving version %d: %s", state.version, reason)
        return False

    async def _retire(self, pipeline: Pipeline, stack: AsyncExitStack) -> None:
        """Close a replaced pipeline and its clients once its requests are done, or after
        ``RETIRE_WITHIN_S`` (a request's count that never came down must not keep its
        clients open for ever; a stream may outlast any upstream timeout, so it is long)."""
        try:
            async with asyncio.timeout(RETIRE_WITHIN_S):
                await pipeline.drained()
        except TimeoutError:
            log.warning("a replaced configuration still had requests in flight; closed anyway")
        finally:
            self.services.retiring.discard(pipeline)
            await stack.aclose()

    async def close(self) -> None:
        """Stop listening; close every pipeline (shutdown: in-flight requests had their grace)."""
        if self._listening:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            ignore_sighup()  # SIGHUP while stopping must not kill the process
            self._listening = False
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._stack.aclose()
