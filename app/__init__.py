"""specproxy: an OpenAI-compatible proxy that drafts locally and spills over to the cloud.

``create_app(settings)`` builds the ASGI app; nothing is started at import time.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app.api import admin, completions, dashboard, embeddings, messages, responses
from app.api.handlers import install_error_handlers
from app.api.routes import chat_lane, router
from app.assembly import start_managed, with_fleet, with_keys
from app.config import Settings
from app.doors.responses.store import ResponseStore
from app.edge import Edge
from app.keys.admission import Limits
from app.reload import ConfigSource, Reloader
from app.services import Services
from app.telemetry import Telemetry
from app.telemetry.spec_log import SpecLog
from app.telemetry.stats import Stats
from app.telemetry.trace_context import start_tracing
from app.telemetry.workers import WorkerGroup

log = logging.getLogger("specproxy")


def create_app(
    settings: Settings,
    workers: WorkerGroup | None = None,
    source: ConfigSource | None = None,
    edge: Edge | None = None,
) -> FastAPI:
    """The proxy app; upstream clients and managed servers live for its lifespan.

    What one configuration serves with is built by ``app.assembly.build`` (at start-up,
    through the ``Reloader``, and again on each reload); what outlives reloads (the
    managed llama-servers, the fleet, ``Stats``, the spec log) is built here, once.

    ``workers``: this app is one of several worker processes (``app.multiworker``);
    /stats and /metrics then cover them all. ``source``: the file ``settings`` came
    from, read again on SIGHUP (``app.reload``); without it there is no reload.
    ``edge``: the HTTP edge's parts (default: the one ``server.edge`` names).
    """
    edge = edge or Edge.named(settings.server.edge)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            lasting = await start_managed(settings, stack)
            spec_log = _open_spec_log(settings, lambda: services.lose_line("spec_log"))
            limits = app.state.limits = Limits.build(settings.state, settings.secrets())
            stack.push_async_callback(limits.close)  # after the runtimes: their last charges
            telemetry = Telemetry(services.stats, spec_log=spec_log, observers=[limits])
            stack.callback(telemetry.close)
            if (tracing := start_tracing(settings.telemetry.otel)) is not None:
                stack.callback(tracing.close)  # after the last request is recorded
                services.traced(tracing)
            reloader = Reloader(services, telemetry, source, lasting.urls())
            stack.push_async_callback(reloader.close)
            await reloader.start(settings)
            lasting = await with_fleet(lasting, settings, services, stack)
            services.outlast(await with_keys(lasting, settings, stack))
            app.state.responses = ResponseStore.build(
                settings.state, settings.responses
            )  # /v1/responses
            stack.push_async_callback(app.state.responses.close)
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
    services = Services(Stats(), workers)
    app.state.services = services
    app.state.edge = edge
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(responses.router)
    app.include_router(messages.router)
    app.include_router(dashboard.router)
    app.include_router(completions.router)
    app.include_router(embeddings.router)
    app.include_router(admin.router)
    app.mount("/dashboard/static", dashboard.static_files(), name="dashboard-static")
    if origins := settings.server.cors_origins:
        app.add_middleware(CORSMiddleware, **_cors(origins))
    return app


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
