"""``POST /v1/responses`` (OpenAI's Responses API), ``GET`` and ``DELETE`` of a stored one.

The door checks the request (``app.doors.responses.request``), builds the chat request,
and calls the same ``Pipeline.chat`` the chat route calls, so every strategy and feature
works behind it; the chat answer comes back as a response object, or its stream as the
Responses events (``app.doors.responses.events``). Stored responses (``store``, the
default) are kept per API key (``app.doors.responses.store``) for
``previous_response_id``. Errors are OpenAI's envelope, as on the chat route.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncGenerator
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from app.api.deps import (
    cap_tokens,
    check_api_key,
    edge_of,
    read_json,
    services_of,
    validate_chat,
)
from app.cache import CacheAsk, cache_ask
from app.doors.responses import reply as replies
from app.doors.responses.events import ResponseEvents
from app.doors.responses.request import ResponsesRequest, chat_body, request_json_schema
from app.doors.responses.store import ResponseStore, Stored, owner_of
from app.edge.disconnect import unless_disconnected
from app.errors import InvalidRequest, ProxyError
from app.protocol import first_problem
from app.routing.strategy import ROUTING_HEADER, choose_strategy, for_local
from app.sse import DataLines
from app.telemetry.logs import request_id
from app.vocabulary import Strategy
from app.wire import JSONReply

router = APIRouter()

# The body is read and checked by the route (size cap, timeout, the first problem named),
# not by FastAPI; this documents it.
_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": request_json_schema()}},
    }
}


class ResponseNotFound(InvalidRequest):
    status = 404


def _not_found(response_id: str) -> ResponseNotFound:
    return ResponseNotFound(
        f"Response with id '{response_id}' not found.", param="response_id", code="not_found"
    )


def store_of(request: Request) -> ResponseStore:
    """The app's response store (built for its lifespan by ``create_app``)."""
    store: ResponseStore = request.app.state.responses
    return store


def validate(data: dict[str, Any]) -> ResponsesRequest:
    """The Responses fields the door reads, checked; the first problem names its field."""
    try:
        return ResponsesRequest.model_validate(data)
    except ValidationError as exc:
        param, message = first_problem(data, exc.errors())
        raise InvalidRequest(f"{param}: {message}" if param else message, param=param) from None


async def _history(request: Request, owner: str, asked: ResponsesRequest) -> list[Any]:
    if asked.previous_response_id is None:
        return []
    stored = await store_of(request).get(owner, asked.previous_response_id)
    if stored is None:
        raise InvalidRequest(
            f"Previous response with id '{asked.previous_response_id}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return stored.history


def _strategy(request: Request, raw: dict[str, Any]) -> tuple[Any, Strategy]:
    """The chat request's checked view and its strategy, as the chat route chooses it."""
    services = services_of(request)
    settings = services.settings
    parsed = validate_chat(raw)
    if len(parsed.messages) > settings.server.max_messages:
        raise InvalidRequest(
            f"input: {len(parsed.messages)} messages in the conversation; the limit is "
            f"{settings.server.max_messages}",
            param="input",
        )
    if settings.server.max_tokens_cap is not None:
        cap_tokens(raw, parsed, settings.server.max_tokens_cap)
    spec = settings.speculative_decoding
    strategy = choose_strategy(
        header=request.headers.get(ROUTING_HEADER),
        model=parsed.model,
        default=settings.routing.strategy,
        draft_model=spec.draft_model,
        verify_model=spec.verify_model,
        speculation_enabled=spec.enabled,
        speculative_model=spec.model_name,
    )
    if needs := parsed.needs():
        strategy = for_local(strategy, needs, services.chat.local_can)
    return parsed, strategy


@router.post("/v1/responses", openapi_extra=_BODY)
async def create_response(request: Request) -> Response:
    """OpenAI's Responses API over the chat pipeline, in the requested strategy."""
    services = services_of(request)
    settings = services.settings
    rid = os.urandom(8).hex()
    request_id.set(rid)
    check_api_key(request, services)
    cache_ask.set(CacheAsk.of(request.headers))
    owner = owner_of(request.headers.get("authorization", ""))
    try:
        server = settings.server
        data = await read_json(request, server.max_body_bytes, server.limits.body_timeout_s)
        asked = validate(data)
        history = await _history(request, owner, asked)
        raw = chat_body(asked, history)
        parsed, strategy = _strategy(request, raw)
    except ProxyError as exc:
        services.refuse(exc.status)
        raise
    turns = raw["messages"][1:] if asked.instructions else list(raw["messages"])
    pipeline = services.chat
    answer = await unless_disconnected(
        request.scope, request.receive, pipeline.chat(raw, parsed, strategy)
    )
    if answer is None:
        return Response(status_code=499)
    headers = {**answer.headers, "X-Request-Id": rid, "X-Routing-Strategy": strategy.value}
    response_id = replies.new_id("resp")
    store = store_of(request) if asked.store else None
    if isinstance(answer, JSONReply):
        response = replies.from_chat(orjson.loads(answer.content), asked, response_id)
        if store is not None:
            await _keep(store, owner, response, turns)
        return Response(orjson.dumps(response), media_type="application/json", headers=headers)
    events = ResponseEvents(replies.skeleton(asked, response_id, time.time()))
    events.response["metadata"] |= {"model_used": answer.headers.get("X-Model-Used", "")}
    headers |= {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    stream = _translated(answer.chunks, events, store, owner, turns)
    return await edge_of(request).stream(stream, headers)


async def _keep(
    store: ResponseStore, owner: str, response: dict[str, Any], turns: list[Any]
) -> None:
    if response["status"] == "failed":
        return
    history = [*turns, replies.assistant_message(response["output"])]
    await store.put(owner, Stored(response, history))


async def _kept(
    store: ResponseStore | None, owner: str, events: ResponseEvents, turns: list[Any]
) -> None:
    if store is not None and events.final is not None:
        await _keep(store, owner, events.final, turns)


async def _translated(
    chunks: AsyncGenerator[bytes],
    events: ResponseEvents,
    store: ResponseStore | None,
    owner: str,
    turns: list[Any],
) -> AsyncGenerator[bytes]:
    """The chat stream's chunks as Responses events; the chat stream is closed however
    this one ends (the client left: its upstream calls are cancelled)."""
    lines, ended = DataLines(), False
    pending = events.start()  # written with the first block's events: one write, not two
    try:
        async for block in chunks:
            out = [pending]
            for payload in lines.feed(block):
                if payload == b"[DONE]":
                    out.append(events.end())  # in the same write as the last events
                    ended = True
                else:
                    out.append(events.take_bytes(payload))
            pending = b""
            if ended:  # kept before the client reads the end: its next turn may name it
                await _kept(store, owner, events, turns)
            if data := b"".join(out):
                yield data
        if not ended:
            last = pending + events.end()
            await _kept(store, owner, events, turns)
            yield last
    finally:
        await chunks.aclose()


@router.get("/v1/responses/{response_id}")
async def retrieve_response(response_id: str, request: Request) -> Response:
    """A stored response of this API key's (404 for an unknown id or another key's)."""
    check_api_key(request, services_of(request))
    owner = owner_of(request.headers.get("authorization", ""))
    stored = await store_of(request).get(owner, response_id)
    if stored is None:
        raise _not_found(response_id)
    return Response(orjson.dumps(stored.response), media_type="application/json")


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    """Forget a stored response of this API key's (404 for an unknown id or another key's)."""
    check_api_key(request, services_of(request))
    owner = owner_of(request.headers.get("authorization", ""))
    if not await store_of(request).delete(owner, response_id):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}
