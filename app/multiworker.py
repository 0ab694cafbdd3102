"""Several worker processes: ``main.py``'s side (``run_workers``) and each worker's.

uvicorn's multiprocess supervisor spawns fresh interpreters, so an app object
cannot be handed over: each worker calls ``create_worker_app()``, which
rebuilds the settings from a ``WorkerPlan`` that ``main.py`` put in the
environment (the config path and the command-line overrides; secrets stay in
the environment variables they already come from). Before spawning, the
supervisor

- makes a private directory (``tempfile.mkdtemp``, mode 0700) for the
  workers' sockets (each answers its peers with its counts: ``/stats`` and
  ``/metrics`` add them up), and removes it at exit;
- starts the managed llama-servers once (``BackgroundServers``) and gives the
  workers their URLs in place of the ``launch:`` sections.

On SIGHUP the supervisor passes the signal on to every worker, and each reloads
the config file itself (``app.reload``).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import tempfile
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict
from uvicorn.supervisors.multiprocess import Multiprocess

from app import create_app
from app.composition import load
from app.config import Settings
from app.edge import Edge
from app.local_server.background import BackgroundServers
from app.reload import ConfigSource
from app.signals import ignore_sighup
from app.telemetry.logs import configure_logging
from app.telemetry.workers import SUPERVISOR_SOCKET, WorkerGroup

log = logging.getLogger("specproxy")

PLAN_ENV = "SPECPROXY_WORKER_PLAN"


class WorkerPlan(BaseModel):
    """What a worker needs beyond config.yaml; travels as JSON in ``SPECPROXY_WORKER_PLAN``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: str  # absolute path: workers re-read the same file
    workers: int
    log_level: str | None = None  # --log-level
    spec_log_file: str | None = None  # --spec-log-file
    shared_dir: str = ""
    managed: dict[str, str] = {}  # model name -> URL of the llama-server the supervisor runs


def per_worker_path(path: str, pid: int) -> str:
    """``spec.jsonl`` -> ``spec.<pid>.jsonl``: one file per writer, since each rotates its own."""
    p = Path(path)
    return str(p.with_name(f"{p.stem}.{pid}{p.suffix}"))


def worker_settings(settings: Settings, plan: WorkerPlan, pid: int) -> Settings:
    """The settings one worker serves with: the supervisor's llama-servers instead of
    ``launch:``, the worker count, and a speculation log of its own."""
    models = {
        name: (
            model.model_copy(update={"launch": None, "base_url": plan.managed[name]})
            if name in plan.managed
            else model
        )
        for name, model in settings.models.items()
    }
    spec_log = plan.spec_log_file or settings.logging.spec_log_file
    logging_config = settings.logging.model_copy(
        update={"spec_log_file": per_worker_path(spec_log, pid) if spec_log else None}
    )
    server = settings.server.model_copy(update={"workers": plan.workers})
    return settings.model_copy(
        update={"models": models, "logging": logging_config, "server": server}
    )


def create_worker_app() -> FastAPI:
    """uvicorn's app factory in each worker process."""
    plan = WorkerPlan.model_validate_json(os.environ[PLAN_ENV])
    adapt = functools.partial(worker_settings, plan=plan, pid=os.getpid())
    source = ConfigSource(Path(plan.config), load(plan.config), adapt, plan.log_level)
    settings = adapt(source.loaded)
    configure_logging(plan.log_level or settings.logging.level, settings.secrets())
    ignore_sighup()  # until the app serves and reloads on SIGHUP
    edge = Edge.named(settings.server.edge)
    edge.uvicorn_options(settings.server.limits)  # the protocol class's limits, here
    group = WorkerGroup(Path(plan.shared_dir), plan.managed)
    return create_app(settings, workers=group, source=source, edge=edge)


class ReloadingSupervisor(Multiprocess):
    """uvicorn's supervisor, except that SIGHUP reaches every worker as a reload.

    uvicorn's own answer to SIGHUP replaces every worker, which would drop what each
    has counted and learned; a reload keeps both (``app.reload``).
    """

    def handle_hup(self) -> None:
        for process in self.processes:
            if process.pid is not None and process.process.is_alive():
                log.info("SIGHUP: asking worker %d to reload the config", process.pid)
                os.kill(process.pid, signal.SIGHUP)


def run_workers(settings: Settings, plan: WorkerPlan, host: str, port: int) -> None:
    """Serve with ``plan.workers`` processes until SIGINT/SIGTERM, then clean up.

    Raises ``LocalServerError`` when a managed llama-server cannot start.
    """
    shared = Path(tempfile.mkdtemp(prefix="specproxy-"))
    launches = {name: lc for name, m in settings.models.items() if (lc := m.managed_launch())}
    servers = BackgroundServers(launches, shared / SUPERVISOR_SOCKET)
    saved = os.environ.get(PLAN_ENV)
    try:
        managed = servers.start() if launches else {}
        ready = plan.model_copy(update={"shared_dir": str(shared), "managed": managed})
        os.environ[PLAN_ENV] = ready.model_dump_json()
        config = uvicorn.Config(
            f"{__name__}:create_worker_app",
            factory=True,
            workers=plan.workers,
            host=host,
            port=port,
            log_config=None,
            timeout_graceful_shutdown=settings.server.shutdown_grace_s,
            **Edge.named(settings.server.edge).uvicorn_options(settings.server.limits),
        )
        # What uvicorn.run does with several workers, with our supervisor in its place.
        ReloadingSupervisor(config, sockets=[config.bind_socket()]).run()
    finally:
        servers.stop()
        if saved is None:
            os.environ.pop(PLAN_ENV, None)
        else:
            os.environ[PLAN_ENV] = saved
        shutil.rmtree(shared, ignore_errors=True)
