"""Run the proxy: ``python main.py [--config FILE] [--host H] [--port P] [--workers N]``.

The server's entry point lives in the package (``specproxy serve`` runs it too);
the repository's ``main.py`` is a two-line shim so ``python main.py`` keeps working.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

import uvicorn

from app import create_app
from app.composition import load
from app.config import ConfigError, Settings
from app.edge import Edge
from app.local_server import LocalServerError, ensure_model, find_llama_server
from app.multiworker import WorkerPlan, run_workers
from app.reload import ConfigSource
from app.signals import ignore_sighup
from app.telemetry.logs import configure_logging


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="specproxy: speculative routing proxy")
    parser.add_argument(
        "--config", default="config.yaml", help="YAML config (default ./config.yaml)"
    )
    parser.add_argument("--host", help="override server.host")
    parser.add_argument("--port", type=int, help="override server.port")
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--spec-log-file", help="write the speculation log (JSON lines) here")
    parser.add_argument(
        "--workers", type=_positive, help="override server.workers (processes serving requests)"
    )
    return parser.parse_args(argv)


def with_spec_log(settings: Settings, path: str | None) -> Settings:
    """The settings with ``--spec-log-file`` (when given) over ``logging.spec_log_file``."""
    if not path:
        return settings
    logging_config = settings.logging.model_copy(update={"spec_log_file": path})
    return settings.model_copy(update={"logging": logging_config})


def preflight(settings: Settings) -> None:
    """Resolve each managed llama-server binary and model before serving (may fetch the model)."""
    for name, model in settings.models.items():
        if model.launch is not None:
            try:
                find_llama_server(model.launch.binary)
                ensure_model(model.launch.model)
            except LocalServerError as exc:
                raise LocalServerError(f"models.{name}.launch: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    """Load the config and serve until stopped; a bad config exits 2 with its reason."""
    args = parse_args(argv)
    try:
        settings = load(args.config)
    except ConfigError as exc:
        print(f"specproxy: config error: {exc}", file=sys.stderr)
        return 2
    # Absolute, not resolved: a Kubernetes ConfigMap's config.yaml is a symlink through
    # ``..data`` that a ConfigMap update swaps; each reload must follow it again.
    config_path = Path(os.path.abspath(args.config))
    source = ConfigSource(
        config_path,
        settings,
        functools.partial(with_spec_log, path=args.spec_log_file),
        args.log_level,
    )
    settings = source.adapt(settings)
    configure_logging(args.log_level or settings.logging.level, settings.secrets())
    try:
        preflight(settings)
    except LocalServerError as exc:
        print(f"specproxy: cannot start the local model: {exc}", file=sys.stderr)
        return 2
    host = args.host or settings.server.host
    port = args.port if args.port is not None else settings.server.port
    workers = args.workers if args.workers is not None else settings.server.workers
    if workers > 1:
        plan = WorkerPlan(
            config=str(config_path),
            workers=workers,
            log_level=args.log_level,
            spec_log_file=args.spec_log_file,
        )
        try:
            run_workers(settings, plan, host, port)
        except LocalServerError as exc:
            print(f"specproxy: cannot start the local model: {exc}", file=sys.stderr)
            return 2
        return 0
    ignore_sighup()  # until the app serves and reloads on SIGHUP
    uvicorn.run(
        create_app(settings, source=source),
        host=host,
        port=port,
        log_config=None,
        timeout_graceful_shutdown=settings.server.shutdown_grace_s,
        **Edge.named(settings.server.edge).uvicorn_options(settings.server.limits),
    )
    return 0
