"""Several worker processes, one picture: each worker answers its peers on a Unix socket.

With ``--workers N`` every worker keeps its own ``Stats`` and upstream state
(nothing is shared on the request path). The worker that is asked for
``/stats`` or ``/metrics`` connects to every peer's ``worker-<pid>.sock`` in
the directory the supervisor made, and each answers with its description (JSON,
then it closes the connection). So totals are exact when asked, at the price of
a few local round trips on those two routes only.

A peer that does not answer within the timeout is left out and named; a
socket whose worker is dead (it crashed and uvicorn replaced it) is removed.
The directory comes from ``tempfile.mkdtemp`` (mode 0700): only this user can
connect. The supervisor, which runs the managed llama-servers, answers on
``supervisor.sock`` the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from app.config import AlertConfig
from app.evaluation.metrics import wilson
from app.telemetry.stats import Stats

log = logging.getLogger("specproxy.workers")

ASK_TIMEOUT_S = 1.0
SUPERVISOR_SOCKET = "supervisor.sock"
_WORKER_SOCKET = re.compile(r"worker-(\d+)\.sock")
# sun_path holds 108 bytes on Linux (104 on macOS); a longer TMPDIR cannot host the sockets.
_MAX_SOCKET_PATH = 100

Description = dict[str, Any]


def worker_socket(directory: Path, pid: int) -> Path:
    """Where the worker with this pid answers."""
    return directory / f"worker-{pid}.sock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


async def serve_state(path: Path, describe: Callable[[], Mapping[str, Any]]) -> asyncio.Server:
    """Listen on ``path``; every connection gets ``describe()`` as JSON, then EOF."""
    if len(str(path)) > _MAX_SOCKET_PATH:
        raise OSError(f"socket path {path} is too long for a Unix socket; set a shorter TMPDIR")

    async def answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(orjson.dumps(describe()))
            await writer.drain()
        except ConnectionError:
            pass  # the asker gave up (timeout); nothing to do
        except Exception:
            # An empty answer makes the asker name us as unanswered; the log says why.
            log.exception("cannot describe this process to a peer")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_unix_server(answer, path=str(path))


async def close_server(server: asyncio.Server, path: Path) -> None:
    """Stop answering and remove the socket file (Python 3.11 leaves it behind)."""
    server.close()
    await server.wait_closed()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


async def ask(path: Path, timeout: float) -> Description:
    """The JSON a ``serve_state`` socket answers; raises OSError, TimeoutError or ValueError."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_unix_connection(str(path))
        try:
            data = await reader.read()  # until EOF
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
    answer = orjson.loads(data)  # orjson.JSONDecodeError is a ValueError
    if not isinstance(answer, dict):
        raise ValueError("the answer is not a JSON object")
    return answer


@dataclass(frozen=True)
class GroupSnapshot:
    """Every worker's description as gathered for one ``/stats`` or ``/metrics`` answer.

    ``workers`` holds this worker first, then the peers that answered;
    ``unanswered`` names the peers that did not in time.
    """

    workers: list[Description]
    unanswered: list[int] = field(default_factory=list)
    local_servers: dict[str, Any] = field(default_factory=dict)
    grouped: bool = True  # several workers serve the proxy (however many answered)

    def totals(self, alerts: AlertConfig | None = None) -> Stats:
        """Every worker that answered, counted as one ``Stats``: what ``/stats`` and
        ``/metrics`` both render."""
        return Stats.merged((w["stats"] for w in self.workers), alerts)

    def stats(self, alerts: AlertConfig | None = None) -> dict[str, Any]:
        """``Stats.get_metrics()`` over every worker that answered, plus a ``workers`` section."""
        merged = self.totals(alerts).get_metrics()
        per_worker = [
            {
                "pid": w["pid"],
                "requests": sum(n for *_, n in w["stats"]["finished"]),
                "in_flight": w["in_flight"],
                "config_version": w["config"]["version"],
            }
            for w in sorted(self.workers, key=lambda w: int(w["pid"]))
        ]
        merged["workers"] = {
            "count": len(self.workers),
            "answered_by": self.workers[0]["pid"],
            "per_worker": per_worker,
            "unanswered": sorted(self.unanswered),
        }
        return merged

    def depth(self) -> dict[str, Any]:
        """Adaptive K: one worker's own; with several, each worker's (by pid)."""
        if not self.grouped:
            return dict(self.workers[0]["adaptive_depth"])
        return {"per_worker": {str(w["pid"]): w["adaptive_depth"] for w in self.workers}}

    def learning(self) -> dict[str, Any]:
        """The learner's status: one worker's own; with several, the counts summed, the
        scorer the one every worker serves with (each worker's version is listed: they
        reload the same file, so they differ only until the next look at it)."""
        statuses = [w["learning"] for w in self.workers]
        if not self.grouped or not statuses[0].get("enabled"):
            return dict(statuses[0])
        merged = dict(statuses[0])
        merged["labels"] = _summed(s["labels"] for s in statuses)
        audits = _summed(s["audits"] for s in statuses)
        n, agreed = audits["n"], audits["agreed"]
        audits["agree_rate"] = round(agreed / n, 4) if n else None
        audits["ci95"] = wilson(agreed, n)
        audits["rate"] = statuses[0]["audits"]["rate"]
        merged["audits"] = audits
        merged["refits"] = sum(s["refits"] for s in statuses)
        merged["lead"] = next((w["pid"] for w in self.workers if w["learning"]["lead"]), None)
        merged["per_worker"] = {
            str(w["pid"]): w["learning"]["scorer"]["version"] for w in self.workers
        }
        return merged

    def config(self) -> dict[str, Any]:
        """The configuration in force: with several workers the lowest version (a reload
        reaches each in turn; per worker in ``workers``), when it was loaded, the last
        reload's refusal and the keys waiting for a restart, as any worker reports them."""
        states = [w["config"] for w in self.workers]
        oldest = min(states, key=lambda state: int(state["version"]))
        return {
            "config_version": oldest["version"],
            "config_loaded_at": oldest["loaded_at"],
            "reload_error": next((s["reload_error"] for s in states if s["reload_error"]), None),
            "reload_pending_restart": sorted({k for s in states for k in s["pending_restart"]}),
        }

    def cache(self) -> dict[str, int]:
        """The cache's entries and bytes: one store for all (Redis) counted once, each
        worker's own memory added up."""
        stores = [w["cache"] for w in self.workers if w.get("cache")]
        if stores and stores[0]["shared"]:
            stores = stores[:1]
        return {
            "entries": sum(c["entries"] for c in stores),
            "bytes": sum(c["bytes"] for c in stores),
            "audits": sum(c["audits"] for c in stores),
            "audit_replaced": sum(c["audit_replaced"] for c in stores),
        }

    def runtime(self) -> dict[str, int]:
        """Requests in flight and asyncio tasks, summed over the workers that answered."""
        return {
            "in_flight": sum(w["in_flight"] for w in self.workers),
            "asyncio_tasks": sum(w["asyncio_tasks"] for w in self.workers),
        }


def _summed(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts added up over the workers (the other fields from the first; rates are
    worked out again by the caller)."""
    total: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, int) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
            else:
                total.setdefault(key, value)
    return total


class WorkerGroup:
    """This worker's place among its peers: it answers them and gathers their descriptions."""

    def __init__(
        self,
        directory: Path,
        managed: Mapping[str, str] | None = None,
        pid: int | None = None,
        timeout: float = ASK_TIMEOUT_S,
    ) -> None:
        self.directory = directory
        self.managed = dict(managed or {})  # model name -> URL of the supervisor's llama-server
        self.pid = os.getpid() if pid is None else pid
        self.timeout = timeout
        self._describe: Callable[[], Mapping[str, Any]] | None = None
        self._server: asyncio.Server | None = None

    def describe(self) -> Description:
        """This worker's description: its pid plus what the app's ``describe`` returns."""
        assert self._describe is not None, "start() first"
        return {"pid": self.pid, **self._describe()}

    async def start(self, describe: Callable[[], Mapping[str, Any]]) -> None:
        """Answer peers with ``describe()`` (it must hold ``stats``, ``in_flight``,
        ``asyncio_tasks``, ``upstreams`` and ``config``)."""
        self._describe = describe
        self._server = await serve_state(worker_socket(self.directory, self.pid), self.describe)

    async def close(self) -> None:
        """Stop answering; the socket file goes too."""
        server, self._server = self._server, None
        if server is not None:
            await close_server(server, worker_socket(self.directory, self.pid))

    async def snapshot(self) -> GroupSnapshot:
        """This worker's description and every live peer's, asked concurrently."""
        peers = []
        for path in self.directory.glob("worker-*.sock"):
            match = _WORKER_SOCKET.fullmatch(path.name)
            if match and int(match.group(1)) != self.pid:
                peers.append((int(match.group(1)), path))
        answers, local_servers = await asyncio.gather(
            asyncio.gather(*(self._ask_peer(pid, path) for pid, path in peers)),
            self._local_servers(),
        )
        found = [a for a in answers if isinstance(a, dict)]
        unanswered = [a for a in answers if isinstance(a, int)]
        return GroupSnapshot([self.describe(), *found], unanswered, local_servers)

    async def _ask_peer(self, pid: int, path: Path) -> Description | int | None:
        """The peer's description; its pid when it does not answer; None when it is gone."""
        try:
            return await ask(path, self.timeout)
        except (ConnectionRefusedError, FileNotFoundError):
            if not _alive(pid):
                # Its worker died without closing (uvicorn started another): not a peer.
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                return None
            log.warning("worker %d refused the connection on %s", pid, path)
        except (OSError, TimeoutError, ValueError) as exc:
            log.warning("worker %d did not answer in %.1f s: %r", pid, self.timeout, exc)
        return pid

    async def _local_servers(self) -> dict[str, Any]:
        """The supervisor's managed llama-servers, or a note per server when it is silent."""
        if not self.managed:
            return {}
        try:
            answer = await ask(self.directory / SUPERVISOR_SOCKET, self.timeout)
            return dict(answer["local_servers"])
        except (OSError, TimeoutError, ValueError, KeyError) as exc:
            log.warning("the supervisor did not report its llama-servers: %r", exc)
            return {
                name: {
                    "state": "unknown",
                    "base_url": url,
                    "note": "run by the supervisor process, which did not answer",
                }
                for name, url in self.managed.items()
            }
