"""Request dependencies: the app's services, auth, a chat request checked and routed."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request, Response
from pydantic import BaseModel, ValidationError

from app.api.auth import check_api_key, check_telemetry_key
from app.api.body import read_json
from app.cache import CacheAsk, cache_ask
from app.config import Settings
from app.edge import Edge
from app.edge.disconnect import unless_disconnected
from app.errors import (
    InvalidRequest,
    ProxyError,
    UpstreamNotConfigured,
)
from app.keys import caller
from app.keys.admission import Limits, Ticket
from app.problems import first_problem
from app.protocol import ChatCompletionRequest
from app.routing.strategy import ROUTING_HEADER, choose_strategy, for_local
from app.services import Services
from app.telemetry.logs import request_id
from app.vocabulary import Strategy
from app.wire import JSONReply, StreamReply

log = logging.getLogger("specproxy.api")
M = TypeVar("M", bound=BaseModel)


def services_of(request: Request) -> Services:
    """The app's ``Services`` (set by ``create_app``)."""
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(services_of)]


def edge_of(request: Request) -> Edge:
    """The app's HTTP ``Edge`` (set by ``create_app``)."""
    edge: Edge = request.app.state.edge
    return edge


async def require_api_key(request: Request, services: ServicesDep) -> None:
    """The routes that are not doors (``/v1/models``): an id for the request, which its
    errors carry, then the key."""
    new_request_id()
    check_api_key(request, services)


async def require_telemetry_key(request: Request, services: ServicesDep) -> None:
    """``/stats`` and ``/metrics``: an id for the request, then ``check_telemetry_key``."""
    new_request_id()
    check_telemetry_key(request, services)


def new_request_id() -> str:
    """A fresh id for the request: its log lines and its errors carry it."""
    rid = os.urandom(8).hex()
    request_id.set(rid)
    return rid


Authorized = Depends(require_api_key)
TelemetryReader = Depends(require_telemetry_key)


def validate_chat(data: dict[str, Any]) -> ChatCompletionRequest:
    """Check the fields the proxy relies on; the first problem names its field."""
    return checked(ChatCompletionRequest, data)


def checked(model: type[M], data: dict[str, Any]) -> M:
    """``data`` read as a door's request ``model``; the first problem names its field."""
    try:
        return model.model_validate(data)
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
    services, rid = opened(request)
    check_api_key(request, services)
    try:
        raw = await read_json(request, services.settings.server)
        return routed(request, services, raw, rid)
    except ProxyError as exc:
        services.refuse(exc.status)
        raise


def opened(request: Request) -> tuple[Services, str]:
    """Every door's first step: the request's id, and the client's cache scope (its key,
    hashed) and Cache-Control (``app.cache``)."""
    rid = new_request_id()
    cache_ask.set(CacheAsk.of(request.headers))
    services = services_of(request)
    if services.tracing is not None:  # telemetry.otel: the request's span starts now
        services.tracing.enter(request.headers)
    return services, rid


def strategy_of(settings: Settings, model: str | None, request: Request | None = None) -> Strategy:
    """The strategy a request picks: its ``X-Routing-Strategy``, its model, the default."""
    spec = settings.speculative_decoding
    return choose_strategy(
        header=request.headers.get(ROUTING_HEADER) if request is not None else None,
        model=model,
        default=settings.routing.strategy,
        draft_model=spec.draft_model,
        verify_model=spec.verify_model,
        speculation_enabled=spec.enabled,
        speculative_model=spec.model_name,
    )


def routed(
    request: Request,
    services: Services,
    raw: dict[str, Any],
    rid: str,
    *,
    strategy: Strategy | None = None,
    param: str = "messages",
    count: int | None = None,
    needs: Mapping[str, str] | None = None,
) -> ChatCall:
    """A chat body checked and routed as the chat route does (every door's, once it has
    translated its dialect): the checked view, the message limit (``param`` names the
    field in the client's dialect, ``count`` what it holds there, if not the chat's
    messages), the output cap, the strategy (``strategy``: already chosen), and the cloud
    for what the local model cannot read (``needs``: in the client's words, if not chat's)."""
    parsed = validate_chat(raw)
    parsed.narrow_to_allowed(raw)
    server = services.settings.server
    count = len(parsed.messages) if count is None else count
    if count > server.max_messages:
        raise InvalidRequest(
            f"{param}: {count} messages; the limit is {server.max_messages}", param=param
        )
    if server.max_tokens_cap is not None:
        cap_tokens(raw, parsed, server.max_tokens_cap)
    if strategy is None:
        strategy = strategy_of(services.settings, parsed.model, request)
    if needs := parsed.needs() if needs is None else needs:  # images, a tool call: local?
        chosen, unmet = for_local(strategy, needs, services.chat.local_can)
        if unmet is not None:
            log.info("%s: the cloud answers", unmet)
            if not (cloud := services.chat.cloud).configured:
                why = f"{unmet}, so only the cloud can answer it, and it has"
                raise UpstreamNotConfigured(cloud.name, f"{why} {cloud.unavailable_reason}")
            strategy = chosen
    return ChatCall(raw, parsed, strategy, rid)


async def served(
    request: Request,
    call: ChatCall,
    *,
    headers: dict[str, str] | None = None,
    whole: Callable[[JSONReply], Awaitable[bytes]] | None = None,
    stream: Callable[[StreamReply], AsyncGenerator[bytes]] | None = None,
) -> Response:
    """The pipeline's reply to ``call`` as the HTTP response (499: the client left), its
    body put in a door's dialect by ``whole`` / ``stream`` (None: chat's, as it is); the
    caller's limits first (``admitted``)."""
    ticket = await admitted(request, call.strategy, call.raw.get("messages"), call.request_id)
    if ticket.local:  # the key's budget is spent: the local model alone answers
        call = replace(call, strategy=Strategy.LOCAL_ONLY)
        headers = {**ticket.headers, **(headers or {})}
    pipeline = services_of(request).chat
    reply = await unless_disconnected(
        request.scope,
        request.receive,
        pipeline.chat(
            call.raw, call.request, call.strategy, "budget_local" if ticket.local else ""
        ),
    )
    if reply is None:
        return Response(status_code=499)  # nobody is listening; the upstream calls are cancelled
    sent = {
        **reply.headers,
        "X-Request-Id": call.request_id,
        "X-Routing-Strategy": call.strategy.value,
        **(headers or {}),
    }
    if isinstance(reply, JSONReply):
        body = await whole(reply) if whole is not None else reply.content
        return Response(body, media_type="application/json", headers=sent)
    sent |= {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    chunks = stream(reply) if stream is not None else reply.chunks
    return await edge_of(request).stream(chunks, sent)


ChatCallDep = Annotated[ChatCall, Depends(chat_call)]


def limits_of(request: Request) -> Limits:
    """The app's key limits (built for its lifespan by ``create_app``)."""
    limits: Limits = request.app.state.limits
    return limits


async def admitted(
    request: Request,
    strategy: Strategy | None,
    prompt: Any,
    request_id: str,
    *,
    local_possible: bool = True,
) -> Ticket:
    """Every door's admission, once its call is routed: the caller's key's strategies,
    budget and rate limits (``app.keys.admission``); a refusal is counted and raised."""
    try:
        return await limits_of(request).admit(
            caller.get(), strategy, prompt, request_id, local_possible=local_possible
        )
    except ProxyError as exc:
        services_of(request).refuse(exc.status)
        raise
