"""Anthropic's Messages API: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

The request is checked and translated (``app.doors.messages``), routed as a chat
request is (the model it names, ``X-Routing-Strategy``), served by the same
``Pipeline.chat`` and its answer translated back. Auth by ``x-api-key`` or
``Authorization: Bearer`` (the chat door's keys); ``anthropic-version``,
``anthropic-beta`` and query parameters such as ``?beta=true`` are accepted and not
read. Every error, this door's own or the pipeline's, is in Anthropic's shape.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from app.api.auth import check_api_key
from app.api.body import read_json
from app.api.deps import (
    ChatCall,
    checked,
    opened,
    routed,
    served,
    services_of,
    strategy_of,
)
from app.api.handlers import error_response
from app.doors.messages import MessageEvents, MessagesRequest, to_chat
from app.doors.messages.answer import to_message
from app.doors.messages.request import CountTokensRequest, prefill
from app.doors.messages.stream import message_events
from app.errors import InvalidRequest, ProxyError
from app.schemas import inline_schema
from app.services import Services
from app.vocabulary import Strategy
from app.wire import JSONReply

router = APIRouter()
_PROXY_FIELDS = ("model_used", "speculative_decoding")


def _body(model: type[CountTokensRequest]) -> dict[str, Any]:
    """The request body for OpenAPI (the route reads and checks it itself, in ``checked``)."""
    schema = {"application/json": {"schema": inline_schema(model)}}
    return {"requestBody": {"required": True, "content": schema}}


@router.post("/v1/messages", openapi_extra=_body(MessagesRequest))
async def messages(request: Request) -> Response:
    """Anthropic Messages, routed by the configured or requested strategy."""
    try:
        call, parsed = await _messages_call(request)
        return await _answer(request, call, parsed)
    except Exception as exc:  # in Anthropic's shape, logged; never a traceback to the client
        return error_response(request, exc)


@router.post("/v1/messages/count_tokens", openapi_extra=_body(CountTokensRequest))
async def count_tokens(request: Request) -> Response:
    """The prompt's tokens in the local model's tokenizer (llama-server's ``/tokenize``)."""
    try:
        services = services_of(request)
        _authorize(request, services)
        parsed = checked(CountTokensRequest, await read_json(request, services.settings.server))
        local = services.chat.local.members[0]
        counter = getattr(local, "count_tokens", None)  # llama-server's alone
        if counter is None:
            raise InvalidRequest(
                f"count_tokens needs the local model ({local.name}) to be served by "
                "llama-server (provider: llama_server), whose /tokenize counts"
            )
        n = await counter(to_chat(parsed, top_k=False))
        return Response(orjson.dumps({"input_tokens": n}), media_type="application/json")
    except Exception as exc:  # as above
        return error_response(request, exc)


def _authorize(request: Request, services: Services) -> None:
    """Anthropic's ``x-api-key``, else ``Authorization: Bearer``."""
    send = "'x-api-key: <key>' (or 'Authorization: Bearer <key>')"
    check_api_key(request, services, request.headers.get("x-api-key"), send)


async def _messages_call(request: Request) -> tuple[ChatCall, MessagesRequest]:
    """Authorise, read, check, translate and route; every refusal is counted."""
    services, rid = opened(request)
    _authorize(request, services)
    try:
        parsed = checked(MessagesRequest, await read_json(request, services.settings.server))
        strategy = strategy_of(services.settings, parsed.model, request)
        # top_k: llama-server takes it, the cloud refuses it
        raw = to_chat(parsed, top_k=strategy is Strategy.LOCAL_ONLY)
        # the message limit and what only the cloud meets, in the client's own words
        count, needs = len(parsed.messages), parsed.needs()
        return routed(
            request, services, raw, rid, strategy=strategy, count=count, needs=needs
        ), parsed
    except ProxyError as exc:
        services.refuse(exc.status)
        raise


async def _answer(request: Request, call: ChatCall, parsed: MessagesRequest) -> Response:
    model, stops, echo = parsed.model, parsed.stop_sequences or (), prefill(parsed)

    async def whole(reply: JSONReply) -> bytes:
        completion = orjson.loads(reply.content)
        extra = {k: completion.pop(k) for k in _PROXY_FIELDS if k in completion}
        return orjson.dumps(to_message(completion, model, extra, stops, echo))

    return await served(
        request,
        call,
        headers={"request-id": call.request_id},
        whole=whole,
        stream=lambda reply: message_events(reply.chunks, MessageEvents(model, stops, echo)),
    )
