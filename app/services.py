"""The app's long-lived parts in one typed object, and the one status path.

``Services`` replaces untyped ``app.state.*`` access: routes get it as a
dependency. ``snapshot()`` is the status of every process serving this proxy:
with one worker, this process's own description; with several, every peer's
(``app.telemetry.workers``) over the same description. ``/stats``, ``/metrics``
and the peers' protocol all read it, so one worker and many take one code path;
``/stats`` and ``/metrics`` both render its ``totals()``, the workers' ``Stats``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from app.config import Settings
from app.telemetry.stats import Stats
from app.telemetry.trace_context import current
from app.telemetry.workers import Description, GroupSnapshot, WorkerGroup

if TYPE_CHECKING:
    from app.assembly import Lasting, Runtime
    from app.keys.registry import KeyStore
    from app.keys.ring import KeyRing
    from app.local_server import ManagedLlamaServer
    from app.pipeline import Pipeline
    from app.state.sync import FleetSync
    from app.telemetry.tracing import Tracing


def utc_now() -> str:
    """The time now as ISO-8601 UTC, to the millisecond (``/stats`` → ``config_loaded_at``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class ConfigState:
    """Which configuration this process serves with, for ``/stats`` (``app.reload``)."""

    version: int = 1  # 1 at start, +1 per reload that was applied
    loaded_at: str = field(default_factory=utc_now)
    reload_error: str | None = None  # the last reload's refusal; None once one worked
    pending_restart: tuple[str, ...] = ()  # keys the file changes that wait for a restart

    def status(self) -> dict[str, Any]:
        """As JSON data (a worker's description carries it to its peers)."""
        return {
            "version": self.version,
            "loaded_at": self.loaded_at,
            "reload_error": self.reload_error,
            "pending_restart": list(self.pending_restart),
        }


@dataclass(eq=False)
class Services:
    """Everything a route may need. ``runtime`` (the settings and the pipeline built from
    them, ``app.assembly.build``) exists once the app has started; a reload swaps a new
    one in whole (``reloaded``). ``stats``, ``workers`` and ``lasting`` outlive reloads.
    Only this class's methods assign its fields."""

    stats: Stats
    workers: WorkerGroup | None = None
    runtime: Runtime | None = None
    lasting: Lasting | None = None  # the managed llama-servers, the fleet
    config: ConfigState = field(default_factory=ConfigState)
    retiring: set[Pipeline] = field(default_factory=set)  # replaced by a reload, still serving
    tracing: Tracing | None = None  # telemetry.otel, made once at start-up (None: off)

    def serve(self, runtime: Runtime) -> Runtime | None:
        """Serve the next requests with ``runtime`` (one assignment: requests in flight hold
        the pipeline they began on); the one it replaces, if any."""
        old, self.runtime = self.runtime, runtime
        if old is None:  # the first: loaded now, at start-up
            self.config = ConfigState()
        return old

    def traced(self, tracing: Tracing | None) -> None:
        """Trace the requests with ``tracing`` (made once at start-up; None: off)."""
        self.tracing = tracing

    def reloaded(self, runtime: Runtime, pending_restart: tuple[str, ...]) -> Runtime | None:
        """``serve`` after a reload: the configuration's version goes up by one."""
        old = self.serve(runtime)
        self.config = ConfigState(self.config.version + 1, pending_restart=pending_restart)
        return old

    def refused(self, reason: str) -> None:
        """A reload was refused: the running configuration stays, ``/stats`` says why."""
        self.config = replace(self.config, reload_error=reason)

    def outlast(self, lasting: Lasting) -> None:
        """Keep the parts built once at start-up (``app.assembly.start_managed``)."""
        self.lasting = lasting

    @property
    def keys(self) -> KeyRing:
        """The client keys accepted now (the running ``Runtime``'s and the managed ones)."""
        assert self.runtime is not None, "the app has not started"
        if self.lasting is None:
            return self.runtime.keys
        return self.lasting.keys.view.joined(self.runtime.keys)

    @property
    def key_store(self) -> KeyStore:
        """The managed keys (``/admin/keys``; they outlive reloads)."""
        assert self.lasting is not None, "the app has not started"
        return self.lasting.keys

    @property
    def settings(self) -> Settings:
        """The settings in force (the running ``Runtime``'s)."""
        assert self.runtime is not None, "the app has not started"
        return self.runtime.settings

    @property
    def managed(self) -> Mapping[str, ManagedLlamaServer]:
        """The managed llama-servers (they outlive reloads)."""
        return self.lasting.managed if self.lasting is not None else {}

    @property
    def fleet(self) -> FleetSync | None:
        """The fleet's sync (``state.backend: redis``)."""
        return self.lasting.fleet if self.lasting is not None else None

    def shared_state(self) -> dict[str, Any]:
        """/stats → ``state`` (the backend, Redis' health) and ``fleet`` (every replica's
        requests; None with the memory backend: ``requests`` covers this proxy)."""
        keys = {"keys": self.lasting.keys.status()} if self.lasting is not None else {}
        if self.fleet is None:
            return {"state": {"backend": "memory", **keys}, "fleet": None}
        return {"state": {**self.fleet.status(), **keys}, "fleet": self.fleet.fleet()}

    @property
    def chat(self) -> Pipeline:
        """The current pipeline (built when the app starts, replaced by a reload)."""
        assert self.runtime is not None, "the app has not started"
        return self.runtime.pipeline

    def refuse(self, status: int) -> None:
        """Count a request refused before it reached the pipeline (/stats and /metrics)."""
        self.stats.refused[str(status)] += 1
        if (trace := current.get()) is not None:  # telemetry.otel: its span ends here
            trace.refused(status)

    def lose_line(self, log: str) -> None:
        """Count a line a log could not write (/stats and /metrics); any thread may call."""
        self.stats.lost_lines[log] += 1

    def describe(self) -> Description:
        """This process's status, as its peers and its own routes read it."""
        pipeline = self.chat
        return {
            "stats": self.stats.state(),
            "in_flight": pipeline.in_flight + sum(p.in_flight for p in self.retiring),
            "asyncio_tasks": len(asyncio.all_tasks()),
            "upstreams": {name: up.status() for name, up in pipeline.upstreams.items()},
            "adaptive_depth": pipeline.depth.status(),
            "learning": pipeline.learner.status() if pipeline.learner else {"enabled": False},
            "config": self.config.status(),
            "cache": pipeline.cache.status(),
        }

    async def snapshot(self) -> GroupSnapshot:
        """Every worker's status (this one first) and the managed llama-servers'."""
        if self.workers is not None:
            return await self.workers.snapshot()
        local_servers: dict[str, Any] = {
            name: server.status() for name, server in self.managed.items()
        }
        this = {"pid": os.getpid(), **self.describe()}
        return GroupSnapshot([this], [], local_servers, grouped=False)
