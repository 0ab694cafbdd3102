"""specproxy as ``main.py`` serves it, on the lean edge less one hand-built part: the
overhead bench's ``lean_without_<part>`` arms, which tell what each part is worth, and
their control ``lean_via_parts`` (nothing left out, started the same way).

    python -m bench.overhead_parts.edge_parts --config FILE --port P --without chat_lane

``server.edge`` names only whole edges (``lean``, ``standard``); a part is left out
here by building the ``Edge`` directly, served as ``app.server`` serves it.
"""

from __future__ import annotations

import argparse
import dataclasses

import uvicorn

from app import create_app
from app.composition import load
from app.edge import Edge
from app.telemetry.logs import configure_logging

PARTS = tuple(f.name for f in dataclasses.fields(Edge))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--without", choices=PARTS, help="the part left out (none: the lean edge)")
    args = p.parse_args()
    settings = load(args.config)
    configure_logging("WARNING", settings.secrets())
    edge = Edge.named("lean")
    if args.without:
        edge = dataclasses.replace(edge, **{args.without: False})
    uvicorn.run(
        create_app(settings, edge=edge),
        host="127.0.0.1",
        port=args.port,
        log_config=None,
        **edge.uvicorn_options(settings.server.limits),
    )


if __name__ == "__main__":
    main()
