"""The request's JSON body: capped in size and in time, read once, straight from the
server, and refused with the OpenAI error shape when it is not a JSON object the proxy
could send on."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from fastapi import Request
from starlette.types import Receive

from app.config.server import ServerConfig
from app.edge.disconnect import HANGUP, Hangup
from app.errors import ClientGone, InvalidRequest, PayloadTooLarge, RequestTimeout

log = logging.getLogger("specproxy.api")


async def read_json(request: Request, server: ServerConfig) -> dict[str, Any]:
    """The request body as a JSON object, refusing bodies over ``server.max_body_bytes``
    or not all there within ``server.limits.body_timeout_s``."""
    limit, timeout_s = server.max_body_bytes, server.limits.body_timeout_s
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is {declared} bytes; the limit is {limit}")
    body = bytearray()
    hangup: Hangup | None = request.scope.get(HANGUP)
    try:
        if hangup is not None and hangup.arrived:  # all there: no wait, so no timer
            await _read_body(request.receive, body, limit)
        else:
            async with asyncio.timeout(timeout_s):
                await _read_body(request.receive, body, limit)
    except TimeoutError:
        raise RequestTimeout(
            f"request body not complete within {timeout_s:g} s ({len(body)} bytes read)"
        ) from None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequest("request body must be a JSON object")
    refuse_too_deep(body, data)
    return data


# orjson reads JSON up to 1024 levels deep but writes at most this many; a body the proxy
# could not send on is refused here, not a 500 when it is sent.
MAX_DEPTH = 254


def refuse_too_deep(body: bytes | bytearray, data: dict[str, Any]) -> None:
    """Raise InvalidRequest if ``data`` (parsed from ``body``) is nested deeper than
    ``MAX_DEPTH``. Cheap for the usual body: fewer brackets than that cannot nest so deep,
    and only a body with more is written once to find out."""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return
    try:
        orjson.dumps(data)
    except orjson.JSONEncodeError:
        raise InvalidRequest(
            f"request body is nested too deep (more than {MAX_DEPTH} levels)"
        ) from None


async def _read_body(receive: Receive, body: bytearray, limit: int) -> None:
    """Read the request's body into ``body``, straight from the server (read once, here)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            log.info("client left while sending its request (%d bytes read)", len(body))
            raise ClientGone(f"the client left after {len(body)} bytes of its request")
        body += message.get("body", b"")
        if len(body) > limit:
            raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
        if not message.get("more_body", False):
            return
