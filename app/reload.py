"""Hot reload: on SIGHUP, read config.yaml again and serve the next requests with it.

The file is checked as at start-up (``app.composition.load``); a file that fails is
refused: the running configuration stays, ``/stats`` shows the error and one line is
logged. A good one builds a new ``Runtime`` (``app.assembly.build``: new upstream
clients, a new pipeline over them) and swaps it into ``Services`` whole; each request
holds the pipeline it started with, so requests in flight finish with their
configuration, and the old runtime (its pipeline and its clients) closes once its last
request is done. Keys that only a restart can change (``app.config.changes``) keep
their running values and are named in a warning and in ``/stats``. Counters live in
``Services`` and survive every reload.

Each process reloads itself; with ``--workers`` the supervisor passes SIGHUP on to
every worker (``app.multiworker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.assembly import Runtime, build
from app.composition import load
from app.config import ConfigError, Settings
from app.config.changes import classify, keep_running
from app.services import Services
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
    """Builds the runtime at start and again on ``reload()``, swaps it into ``Services``,
    and retires the ones it replaced."""

    def __init__(
        self,
        services: Services,
        telemetry: Telemetry,
        source: ConfigSource | None,
        managed: Mapping[str, str],
    ) -> None:
        """``managed``: the managed llama-servers' URLs (they keep running across reloads)."""
        self.services = services
        self.telemetry = telemetry
        self.source = source  # None: settings given in code, nothing to read again
        self.managed = dict(managed)
        self.running: Settings | None = source.loaded if source is not None else None
        self._lock = asyncio.Lock()  # one reload at a time, in the order asked
        self._tasks: set[asyncio.Task[Any]] = set()  # reloads asked for, retirements
        self._listening = False

    async def start(self, settings: Settings) -> None:
        """Build the first runtime and serve with it."""
        self.services.serve(await build(settings, self.telemetry, self.managed))
        if self.running is None:
            self.running = settings

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
        source, running = self.source, self.running
        assert running is not None, "a source's settings are the running ones from the start"
        async with self._lock:
            try:
                fresh = await asyncio.to_thread(source.read)
                change = classify(running, fresh)
                applied = keep_running(running, fresh, change.restart)
                settings = source.adapt(applied)
            except ConfigError as exc:
                return self._refuse(str(exc))
            try:
                runtime = await build(settings, self.telemetry, self.managed)
            except Exception as exc:
                return self._refuse(f"cannot build the new configuration: {exc!r}")
            services = self.services
            previous_secrets = services.settings.secrets()
            # The swap, one assignment: requests from here on get the new pipeline; each
            # request in flight holds the one it started with.
            old = services.reloaded(runtime, change.restart)
            self.running = applied
            level = source.log_level or settings.logging.level
            # The old keys stay masked: requests in flight may still print them.
            configure_logging(level, [*settings.secrets(), *previous_secrets])
            log.info(
                "config reloaded: version %d; changed: %s",
                services.config.version,
                ", ".join(change.live) or "nothing",
            )
            if change.restart:
                log.warning(
                    "config keys changed that need a restart (running values kept): %s",
                    ", ".join(change.restart),
                )
            if old is not None:
                services.retiring.add(old.pipeline)
                self._spawn(self._retire(old))
            return True

    def _refuse(self, reason: str) -> bool:
        reason = " ".join(reason.split())  # one log line, even for YAML's multi-line errors
        self.services.refused(reason)
        log.error(
            "config reload refused, still serving version %d: %s",
            self.services.config.version,
            reason,
        )
        return False

    async def _retire(self, runtime: Runtime) -> None:
        """Close a replaced runtime (its pipeline and clients) once its requests are done,
        or after ``RETIRE_WITHIN_S`` (a request's count that never came down must not keep
        its clients open for ever; a stream may outlast any upstream timeout, so it is
        long)."""
        try:
            async with asyncio.timeout(RETIRE_WITHIN_S):
                await runtime.pipeline.drained()
        except TimeoutError:
            log.warning("a replaced configuration still had requests in flight; closed anyway")
        finally:
            self.services.retiring.discard(runtime.pipeline)
            await runtime.close()

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
        if (runtime := self.services.runtime) is not None:
            await runtime.close()
