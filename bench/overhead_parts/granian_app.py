"""specproxy under Granian, for the overhead bench's ``local_only_granian`` arm.

    granian --interface asgi --factory bench.overhead_parts.granian_app:app

The config's path comes in ``SPECPROXY_BENCH_CONFIG``; the app is built as
``main.py`` builds it for uvicorn (one process, no reload source).
"""

from __future__ import annotations

import os

from fastapi import FastAPI

from app import create_app
from app.composition import load
from app.telemetry.logs import configure_logging


def app() -> FastAPI:
    """The proxy's ASGI app for the bench's config."""
    settings = load(os.environ["SPECPROXY_BENCH_CONFIG"])
    configure_logging("WARNING", settings.secrets())
    return create_app(settings)
