"""``POST /v1/embeddings``: passed to the ``models:`` entry with ``embeddings: true``.

The same auth and body limits as chat; the request is checked and shaped by
``app.doors.embeddings``, sent by ``app.upstreams.embeddings``, counted in ``/stats`` →
``embeddings`` and priced at the model's input price with purpose ``embeddings``.
"""

from __future__ import annotations

import logging
import os
import time

import orjson
from fastapi import APIRouter, Request, Response

from app.api.auth import check_api_key
from app.api.body import read_json
from app.api.deps import admitted, limits_of, services_of
from app.doors import embeddings as door
from app.errors import ProxyError
from app.keys import caller
from app.pricing import Charge
from app.telemetry.logs import request_id
from app.upstreams import servers
from app.upstreams.base import ChatUpstream
from app.upstreams.embeddings import embed
from app.vocabulary import Purpose

log = logging.getLogger("specproxy.api")
router = APIRouter()


@router.post("/v1/embeddings")
async def embeddings(request: Request) -> Response:
    """OpenAI's embeddings, from the configured embeddings model."""
    services = services_of(request)
    settings = services.settings
    rid = os.urandom(8).hex()
    request_id.set(rid)
    check_api_key(request, services)
    try:
        server = settings.server
        data = await read_json(request, server)
        asked = door.parse(data)
        serving = [name for name, model in settings.models.items() if model.embeddings]
        name = door.choose(serving, asked.model)
    except ProxyError as exc:
        services.refuse(exc.status)
        raise
    config = settings.models[name]
    cloud = config.provider != "llama_server"  # /stats counts calls to a cloud model
    # the caller's limits; a spent budget refuses a cloud model's embeddings
    ticket = await admitted(request, None, data.get("input"), rid, local_possible=not cloud)
    upstream = _least_busy(servers(services.chat.upstreams), name)
    started = time.monotonic()
    try:
        got = await embed(upstream, door.upstream_body(asked, config.model))
        answer = door.answer(name, got, asked, config.model)  # named as chat answers are
    except ProxyError as exc:
        services.stats.embedded(asked.count, 0, None)
        log.warning("embeddings: %s failed (%d): %s", name, exc.status, exc.message)
        raise
    finally:
        limits_of(request).release(ticket)
    tokens = answer["usage"]["prompt_tokens"]
    usd = config.price.of(tokens, 0)
    charge = Charge(name, Purpose.EMBEDDINGS.value, usd, cloud=cloud)
    limits_of(request).charge(caller.get(), 0, usd if cloud else 0.0)
    services.stats.embedded(asked.count, tokens, charge)
    log.info(
        "embeddings: %d input(s), %d tokens, %s, from %s in %.0f ms",
        asked.count,
        tokens,
        asked.encoding_format or "float",
        name,
        (time.monotonic() - started) * 1e3,
    )
    headers = {"X-Model-Used": name, "X-Request-Id": rid}
    return Response(orjson.dumps(answer), media_type="application/json", headers=headers)


def _least_busy(every: dict[str, ChatUpstream], name: str) -> ChatUpstream:
    """The server of entry ``name`` (of a pool: the one with the fewest calls in flight)."""
    pool = [up for key, up in every.items() if key == name or key.startswith(f"{name}@")]
    return min(pool, key=_in_flight)


def _in_flight(upstream: ChatUpstream) -> int:
    return upstream.in_flight
