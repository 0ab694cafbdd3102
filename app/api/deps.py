"""Request dependencies: the app's services, auth, and the size-capped JSON body."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from fastapi import Depends, Request
from pydantic import ValidationError
from starlette.types import Receive

from app.cache import CacheAsk, cache_ask
from app.edge import Edge
from app.edge.disconnect import HANGUP, Hangup
from app.errors import (
    AuthenticationFailed,
    ClientGone,
    InvalidRequest,
    PayloadTooLarge,
    ProxyError,
    RequestTimeout,
)
from app.protocol import ChatCompletionRequest, first_problem
from app.routing.strategy import ROUTING_HEADER, choose_strategy, for_local
from app.services import Services
from app.telemetry.logs import request_id
from app.vocabulary import Strategy

log = logging.getLogger("specproxy.api")


def services_of(request: Request) -> Services:
    """The app's ``Services`` (set by ``create_app``)."""
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(services_of)]


def edge_of(request: Request) -> Edge:
    """The app's HTTP ``Edge`` (set by ``create_app``)."""
    edge: Edge = request.app.state.edge
    return edge


def key_matches(presented: str, keys: Iterable[bytes]) -> bool:
    """Constant-time check of a presented key against every configured key."""
    given = presented.encode()
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key)
    return found


def check_api_key(request: Request, services: Services) -> None:
    """401 unless ``Authorization: Bearer <key>`` names a key in server.api_keys."""
    keys = services.settings.server.api_key_values
    if not keys:
        return
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key_matches(presented.strip(), keys):
        services.refuse(401)
        raise AuthenticationFailed(
            "missing or invalid API key: send 'Authorization: Bearer <key>' with a key from "
            "server.api_keys",
            code="invalid_api_key",
        )


async def require_api_key(request: Request, services: ServicesDep) -> None:
    check_api_key(request, services)


Authorized = Depends(require_api_key)


async def read_json(request: Request, limit: int, timeout_s: float) -> dict[str, Any]:
    """The request body as a JSON object, refusing bodies over ``limit`` bytes or not all
    there within ``timeout_s``."""
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


def validate_chat(data: dict[str, Any]) -> ChatCompletionRequest:
    """Check the fields the proxy relies on; the first problem names its field."""
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        param, message = first_problem(data, exc.errors())
        raise InvalidRequest(f"{param}: {message}" if param else message, param=param) from None


def cap_tokens(raw: dict[str, Any], parsed: ChatCompletionRequest, cap: int) -> None:
    """Clamp the client's output budget to ``cap`` (in the forwarded body and its view)."""
    for field in ("max_tokens", "max_completion_tokens"):
        if (getattr(parsed, field) or 0) > cap:
            raw[field] = cap
            setattr(parsed, field, cap)


@dataclass(frozen=True, slots=True)
class ChatCall:
    """A chat request ready for the pipeline: the client's JSON, its checked view, the strategy."""

    raw: dict[str, Any]
    request: ChatCompletionRequest
    strategy: Strategy
    request_id: str


async def chat_call(request: Request) -> ChatCall:
    """Authorise, read, check and route a chat request; every refusal is counted.

    The chat route's dependency; the lean edge's chat lane calls it directly.
    """
    services = services_of(request)
    settings = services.settings
    rid = os.urandom(8).hex()
    request_id.set(rid)
    check_api_key(request, services)
    cache_ask.set(CacheAsk.of(request.headers))  # the client's scope (hashed) and Cache-Control
    spec = settings.speculative_decoding
    try:
        server = settings.server
        raw = await read_json(request, server.max_body_bytes, server.limits.body_timeout_s)
        parsed = validate_chat(raw)
        limits = settings.server
        if len(parsed.messages) > limits.max_messages:
            raise InvalidRequest(
                f"messages: {len(parsed.messages)} messages; the limit is {limits.max_messages}",
                param="messages",
            )
        if limits.max_tokens_cap is not None:
            cap_tokens(raw, parsed, limits.max_tokens_cap)
        strategy = choose_strategy(
            header=request.headers.get(ROUTING_HEADER),
            model=parsed.model,
            default=settings.routing.strategy,
            draft_model=spec.draft_model,
            verify_model=spec.verify_model,
            speculation_enabled=spec.enabled,
            speculative_model=spec.model_name,
        )
        if needs := parsed.needs():  # images, audio, a tool call: can the local model?
            chosen = for_local(strategy, needs, services.chat.local_can)
            if chosen is not strategy:
                log.info("the local model cannot meet %s: the cloud answers", ", ".join(needs))
                strategy = chosen
    except ProxyError as exc:
        services.refuse(exc.status)
        raise
    return ChatCall(raw, parsed, strategy, rid)


ChatCallDep = Annotated[ChatCall, Depends(chat_call)]
