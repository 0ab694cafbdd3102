"""The machine: core pinning, fd limit, facts for the report, the event loop, signals."""

from __future__ import annotations

import asyncio
import resource
import signal
from typing import Any

import uvloop

from bench.host import host_facts
from bench.overhead_parts import procs


def resolve_cores(spec: str) -> tuple[int | None, int | None]:
    if spec == "none" or (spec == "auto" and not procs.can_pin()):
        return None, None
    if spec == "auto":
        return 0, 1
    load, arm = spec.split(":")
    return int(load), int(arm)


def raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


def machine_facts(cores: tuple[int | None, int | None]) -> dict[str, Any]:
    load, arm = cores
    pinning = "none" if load is None else f"load generator + upstream on core {load}, arms on {arm}"
    return {
        **host_facts(),
        "pinning": pinning,
        "uvloop": uvloop.__version__,
        "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }


def new_loop() -> asyncio.AbstractEventLoop:
    return uvloop.new_event_loop()


def interruptible() -> None:
    """Ctrl-C and SIGTERM both end the run through its ``finally`` (children stopped).

    SIGTERM is turned into SIGINT: asyncio.Runner answers that by cancelling the running
    cell, where an exception raised by a handler inside an event-loop callback is lost.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignoring it
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
