"""Anthropic's Messages API: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

The request is checked and translated (``app.doors.messages``), routed as a chat
request is (the model it names, ``X-Routing-Strategy``), served by the same
``Pipeline.chat`` and its answer translated back. Auth by ``x-api-key`` or
``Authorization: Bearer`` (the chat door's keys); ``anthropic-version``,
``anthropic-beta`` and query parameters such as ``?beta=true`` are accepted and not
read. Every error, this door's own or the pipeline's, is in Anthropic's shape.
"""

from __future__ import annotations

import logging
import os
from typing import Any, TypeVar

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from app.api.deps import (
    ChatCall,
    cap_tokens,
    edge_of,
    key_matches,
    read_json,
    services_of,
    validate_chat,
)
from app.cache import CacheAsk, cache_ask
from app.doors.messages import MessageEvents, MessagesRequest, anthropic_error, to_chat
from app.doors.messages.answer import to_message
from app.doors.messages.errors import error_body
from app.doors.messages.request import CountTokensRequest, json_schema
from app.doors.messages.stream import message_events
from app.edge.disconnect import unless_disconnected
from app.errors import AuthenticationFailed, InvalidRequest, ProxyError, UpstreamError
from app.protocol import first_problem
from app.routing.strategy import ROUTING_HEADER, choose_strategy, for_local
from app.services import Services
from app.telemetry.logs import request_id
from app.vocabulary import Strategy
from app.wire import JSONReply

log = logging.getLogger("specproxy.api")
router = APIRouter()
T = TypeVar("T", bound=CountTokensRequest)
_PROXY_FIELDS = ("model_used", "speculative_decoding")


def _body(model: type[CountTokensRequest]) -> dict[str, Any]:
    """The request body for OpenAPI (the route reads and checks it itself, in ``_checked``)."""
    schema = {"application/json": {"schema": json_schema(model)}}
    return {"requestBody": {"required": True, "content": schema}}


@router.post("/v1/messages", openapi_extra=_body(MessagesRequest))
async def messages(request: Request) -> Response:
    """Anthropic Messages, routed by the configured or requested strategy."""
    try:
        call, model = await _messages_call(request)
        return await _answer(request, call, model)
    except ProxyError as exc:
        return error_response(exc)
    except Exception:  # never a 500 nor a traceback: Anthropic's api_error
        log.exception("unexpected error on POST /v1/messages")
        return error_response(UpstreamError("proxy", "internal error in the proxy; see its log"))


@router.post("/v1/messages/count_tokens", openapi_extra=_body(CountTokensRequest))
async def count_tokens(request: Request) -> Response:
    """The prompt's tokens in the local model's tokenizer (llama-server's ``/tokenize``)."""
    try:
        services = services_of(request)
        _authorize(request, services)
        parsed = _checked(CountTokensRequest, await _read(request, services))
        local = services.chat.local.members[0]
        counter = getattr(local, "count_tokens", None)  # llama-server's alone
        if counter is None:
            raise InvalidRequest(
                f"count_tokens needs the local model ({local.name}) to be served by "
                "llama-server (provider: llama_server), whose /tokenize counts"
            )
        n = await counter(to_chat(parsed, top_k=False))
        return Response(orjson.dumps({"input_tokens": n}), media_type="application/json")
    except ProxyError as exc:
        return error_response(exc)


def error_response(exc: ProxyError) -> Response:
    """The error in Anthropic's shape and status."""
    error = anthropic_error(exc)
    headers = {k: v for k, v in exc.headers.items() if k.lower() == "retry-after"}
    return Response(
        orjson.dumps(error_body(error)),
        status_code=error.status,
        media_type="application/json",
        headers=headers,
    )


def _authorize(request: Request, services: Services) -> None:
    keys = services.settings.server.api_key_values
    if not keys:
        return
    presented = request.headers.get("x-api-key")
    if presented is None:
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        presented = bearer.strip() if scheme.lower() == "bearer" else ""
    if not key_matches(presented, keys):
        services.refuse(401)
        raise AuthenticationFailed(
            "missing or invalid API key: send 'x-api-key: <key>' or 'Authorization: Bearer "
            "<key>' with a key from server.api_keys"
        )


async def _read(request: Request, services: Services) -> dict[str, Any]:
    server = services.settings.server
    return await read_json(request, server.max_body_bytes, server.limits.body_timeout_s)


def _checked(model: type[T], data: dict[str, Any]) -> T:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        param, message = first_problem(data, exc.errors())
        raise InvalidRequest(f"{param}: {message}" if param else message, param=param) from None


async def _messages_call(request: Request) -> tuple[ChatCall, str]:
    """Authorise, read, check, translate and route; every refusal is counted."""
    services = services_of(request)
    settings = services.settings
    rid = os.urandom(8).hex()
    request_id.set(rid)
    _authorize(request, services)
    cache_ask.set(CacheAsk.of(request.headers))
    spec = settings.speculative_decoding
    try:
        parsed = _checked(MessagesRequest, await _read(request, services))
        strategy = choose_strategy(
            header=request.headers.get(ROUTING_HEADER),
            model=parsed.model,
            default=settings.routing.strategy,
            draft_model=spec.draft_model,
            verify_model=spec.verify_model,
            speculation_enabled=spec.enabled,
            speculative_model=spec.model_name,
        )
        # top_k: llama-server takes it, the cloud refuses it
        raw = to_chat(parsed, top_k=strategy is Strategy.LOCAL_ONLY)
        chat = validate_chat(raw)
        limits = settings.server
        if len(chat.messages) > limits.max_messages:
            raise InvalidRequest(
                f"messages: {len(chat.messages)} messages; the limit is {limits.max_messages}",
                param="messages",
            )
        if limits.max_tokens_cap is not None:
            cap_tokens(raw, chat, limits.max_tokens_cap)
        if needs := chat.needs():
            strategy = for_local(strategy, needs, services.chat.local_can)
    except ProxyError as exc:
        services.refuse(exc.status)
        raise
    return ChatCall(raw, chat, strategy, rid), parsed.model


async def _answer(request: Request, call: ChatCall, model: str) -> Response:
    pipeline = services_of(request).chat
    reply = await unless_disconnected(
        request.scope, request.receive, pipeline.chat(call.raw, call.request, call.strategy)
    )
    if reply is None:
        return Response(status_code=499)  # nobody is listening; the upstream calls are cancelled
    headers = {
        **reply.headers,
        "X-Request-Id": call.request_id,
        "request-id": call.request_id,
        "X-Routing-Strategy": call.strategy.value,
    }
    if isinstance(reply, JSONReply):
        completion = orjson.loads(reply.content)
        extra = {k: completion.pop(k) for k in _PROXY_FIELDS if k in completion}
        body = orjson.dumps(to_message(completion, model, extra))
        return Response(body, media_type="application/json", headers=headers)
    stream = edge_of(request).stream
    headers |= {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return await stream(message_events(reply.chunks, MessageEvents(model)), headers)
