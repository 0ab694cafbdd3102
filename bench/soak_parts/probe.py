"""Looks at the running proxy: RSS and open fds from /proc, asyncio tasks and counters
from its ``/stats`` (``runtime.asyncio_tasks`` is ``len(asyncio.all_tasks())``)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from bench.overhead_parts.procs import Child, http_call, rss_kb
from bench.soak_parts.analysis import Sample


def open_fds(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
    return total


def stats(port: int) -> dict[str, Any]:
    """The proxy's /stats (raises when it does not answer: the soak cannot go on blind)."""
    status, _, body = http_call(port, "GET", "/stats", timeout=30.0)
    if status != 200:
        raise RuntimeError(f"/stats answered {status}")
    data: dict[str, Any] = json.loads(body)
    return data


def sample_now(proxy: Child, port: int, t: float) -> tuple[Sample, dict[str, Any]]:
    """One sample (blocking: /stats over HTTP), and the /stats it read."""
    data = stats(port)
    pids = proxy.pids()
    runtime, requests = data["runtime"], data["requests"]
    sample = Sample(
        t=round(t, 1),
        rss_kb=rss_kb(pids),
        fds=open_fds(pids),
        tasks=int(runtime["asyncio_tasks"]),
        in_flight=int(runtime["in_flight"]),
        requests=int(requests["total"]),
        errors=int(requests["errors"]),
        config_version=int(data["config_version"]),
    )
    return sample, data


async def sample(proxy: Child, port: int, t: float) -> tuple[Sample, dict[str, Any]]:
    return await asyncio.to_thread(sample_now, proxy, port, t)


def settle(proxy: Child, port: int, before: Sample | None, timeout: float) -> Sample:
    """Wait for the proxy to go idle: nothing in flight, and fds and tasks down to
    ``before``'s (or, without ``before``, unchanged over three looks a second apart)."""
    deadline = time.monotonic() + timeout
    seen: list[Sample] = []
    while True:
        now, _ = sample_now(proxy, port, 0.0)
        seen.append(now)
        if before is not None:
            done = now.in_flight == 0 and now.fds <= before.fds and now.tasks <= before.tasks
        else:
            last = seen[-3:]
            done = len(last) == 3 and all(
                (s.in_flight, s.fds, s.tasks) == (0, now.fds, now.tasks) for s in last
            )
        if done or time.monotonic() > deadline:
            return now
        time.sleep(1.0)


def _sockets() -> dict[str, tuple[int, int]]:
    """Socket inode -> (local port, remote port), from /proc/net/tcp and tcp6."""
    found: dict[str, tuple[int, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]  # noqa: SIM115
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            found[inode] = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16))
    return found


def fd_table(pids: list[int], ports: dict[int, str]) -> dict[str, int]:
    """What the processes' descriptors are, counted: a file's path, a pipe, or a TCP
    socket named by the ``ports`` (port -> name) at its ends ("tcp to redis",
    "tcp listening on proxy", "tcp from client")."""
    sockets = _sockets()
    table: dict[str, int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                ends = sockets.get(target[8:-1])
                if ends is None:
                    what = "socket (not tcp)"
                elif ends[1] == 0:
                    what = f"tcp listening on {ports.get(ends[0], ends[0])}"
                elif ends[1] in ports:
                    what = f"tcp to {ports[ends[1]]}"
                else:
                    what = f"tcp from {ports.get(ends[0], ends[0])}"
            elif target.startswith("pipe:") or target.startswith("anon_inode:"):
                what = target.split("[")[0]
            else:
                what = target
            table[what] = table.get(what, 0) + 1
    return dict(sorted(table.items()))
