"""specproxy: an OpenAI-compatible proxy that drafts locally and spills over to the cloud.

``create_app(settings)`` builds the ASGI app; nothing is started at import time.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app.api import dashboard
from app.api.handlers import install_error_handlers
from app.api.routes import chat_lane, router
from app.config import Settings
from app.edge import Edge
from app.reload import ConfigSource, Reloader
from app.services import Services
from app.telemetry import Telemetry
from app.telemetry.spec_log import SpecLog
from app.telemetry.stats import Stats
from app.telemetry.workers import WorkerGroup
from app.upstreams import servers

if TYPE_CHECKING:
    from app.state.sync import FleetSync

log = logging.getLogger("specproxy")


def create_app(
    settings: Settings,
    workers: WorkerGroup | None = None,
    source: ConfigSource | None = None,
    edge: Edge | None = None,
) -> FastAPI:
    """The proxy app; upstream clients and managed servers live for its lifespan.

    ``workers``: this app is one of several worker processes (``app.multiworker``);
    /stats and /metrics then cover them all. ``source``: the file ``settings`` came
    from, read again on SIGHUP (``app.reload``); without it there is no reload.
    ``edge``: the HTTP edge's parts (default: the one ``server.edge`` names).
    """
    edge = edge or Edge.named(settings.server.edge)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for name, config in settings.models.items():
                if config.launch is not None:
                    from app.local_server import ManagedLlamaServer

                    server = ManagedLlamaServer(config.launch, name)
                    stack.push_async_callback(server.stop)
                    await server.start()
                    services.managed[name] = server
            spec_log = _open_spec_log(settings, lambda: services.lose_line("spec_log"))
            telemetry = Telemetry(services.stats, spec_log=spec_log)
            stack.callback(telemetry.close)
            reloader = Reloader(services, telemetry, source)
            stack.push_async_callback(reloader.close)
            await reloader.start()
            if settings.state.backend == "redis":
                services.fleet = await _join_fleet(settings, services)
                stack.push_async_callback(services.fleet.close)
            edge.started()  # everything built so far lives as long as the app
            if workers is not None:
                await workers.start(services.describe)
                stack.push_async_callback(workers.close)
            reloader.listen()
            yield

    # FastAPI's own OpenTelemetry is off: the lean edge's chat lane bypasses it, and
    # the proxy's observability is /stats, /metrics and the speculation log.
    app = edge.new_app(
        chat_lane,
        title="specproxy",
        version="0.1.0",
        lifespan=lifespan,
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    services = Services(settings, Stats(settings.telemetry.alerts), workers)
    app.state.services = services
    app.state.edge = edge
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(dashboard.router)
    app.mount("/dashboard/static", dashboard.static_files(), name="dashboard-static")
    if origins := settings.server.cors_origins:
        app.add_middleware(CORSMiddleware, **_cors(origins))
    return app


async def _join_fleet(settings: Settings, services: Services) -> FleetSync:
    """Start sharing this replica's state through Redis (``state.backend: redis``)."""
    from app.state.health import RedisHealth
    from app.state.sync import FleetSync

    fleet = FleetSync(
        settings.state,
        lambda: servers(services.chat.upstreams),  # a reload replaces the pipeline's
        services.stats.state,
        RedisHealth(settings.secrets(), "shared state"),
    )
    await fleet.start()
    log.info("sharing state through redis as replica %s", fleet.replica)
    return fleet


def _cors(origins: list[str]) -> dict[str, Any]:
    return {
        "allow_origins": origins,
        "allow_methods": ["GET", "POST"],
        "allow_headers": ["Authorization", "Content-Type", "X-Routing-Strategy"],
        "expose_headers": ["X-Request-Id", "X-Model-Used", "X-Spilled-Over", "X-Degraded"],
    }


def _open_spec_log(settings: Settings, on_lost: Callable[[], None]) -> SpecLog | None:
    cfg = settings.logging
    if not cfg.spec_log_file:
        return None
    log.info(
        "speculation log: %s (content %s)",
        cfg.spec_log_file,
        "included" if cfg.spec_log_content else "left out",
    )
    return SpecLog(
        cfg.spec_log_file,
        max_bytes=cfg.spec_log_max_bytes,
        backups=cfg.spec_log_backups,
        with_content=cfg.spec_log_content,
        on_lost=on_lost,
    )
