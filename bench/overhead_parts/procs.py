"""Child processes: start (pinned), wait until ready, read CPU and RSS, stop for sure."""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
POLL_S = 0.02  # between readiness probes


class BenchError(RuntimeError):
    """Something the bench cannot go on without; the message says what and where."""


def free_port() -> int:
    """A loopback port the kernel just handed out (bound to port 0, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pin_prefix(core: int | None) -> list[str]:
    return ["taskset", "-c", str(core)] if core is not None else []


def can_pin() -> bool:
    return shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2


@dataclass
class Child:
    """A started process (its own session, so it and its children stop together)."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def pids(self) -> list[int]:
        """This process and its descendants, now."""
        return [self.pid, *descendants(self.pid)]

    def stop(self, timeout: float = 8.0) -> None:
        """SIGTERM the process group, then SIGKILL it if it outlives ``timeout``."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.proc.wait(timeout)


def start(
    name: str,
    argv: Sequence[str],
    *,
    core: int | None,
    logdir: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Child:
    """Start ``argv`` pinned to ``core`` (when not None), output to ``logdir/<name>.log``."""
    log = logdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*pin_prefix(core), *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    return Child(name, proc, log)


def wait_until(child: Child, ready: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``ready`` until it is true; fail early if the child dies, or at the deadline.

    On any failure (Ctrl-C included) the child is stopped: nobody else knows of it yet.
    """
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            if not child.alive():
                code = child.proc.returncode
                raise BenchError(f"{child.name} exited ({code}) before {what}:\n{child.tail()}")
            if time.monotonic() > deadline:
                raise BenchError(f"{child.name}: no {what} within {timeout:g} s:\n{child.tail()}")
            time.sleep(POLL_S)
    except BaseException:
        child.stop()
        raise


def port_open(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            return False
        return True

    return check


def http_ok(port: int, path: str, headers: dict[str, str] | None = None) -> Callable[[], bool]:
    def check() -> bool:
        return http_call(port, "GET", path, headers=headers, timeout=2.0)[0] == 200

    return check


def http_call(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, dict[str, str], bytes]:
    """One blocking request; (status, lower-cased headers, body), status 0 if it failed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    except (OSError, http.client.HTTPException):
        return 0, {}, b""
    finally:
        conn.close()


# -- /proc -------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from 3 (state) on


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (scans /proc: the kernel may lack task children)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(int(entry))) is not None:
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def cpu_seconds(pids: Sequence[int]) -> float:
    """utime + stime of the processes (all their threads), in seconds."""
    ticks = 0
    for pid in pids:
        if (fields := _stat_fields(pid)) is not None:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / CLK_TCK


def rss_kb(pids: Sequence[int]) -> int:
    """VmRSS of the processes, summed, in KB."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def core_busy_seconds(cores: Sequence[int]) -> dict[int, float]:
    """Seconds each core was not idle since boot (/proc/stat: all but idle and iowait)."""
    busy: dict[int, float] = {}
    with open("/proc/stat") as stat:
        for line in stat:
            name, *ticks = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                values = [int(t) for t in ticks[:8]]
                busy[int(name[3:])] = (sum(values) - values[3] - values[4]) / CLK_TCK
    return busy
