"""``POST /v1/responses`` (OpenAI's Responses API), ``GET`` and ``DELETE`` of a stored one.

The door checks the request (``app.doors.responses.request``), builds the chat request,
and calls the same ``Pipeline.chat`` the chat route calls, so every strategy and feature
works behind it; the chat answer comes back as a response object, or its stream as the
Responses events (``app.doors.responses.events``). Stored responses (``store``, the
default) are kept per API key (``app.doors.responses.store``) for
``previous_response_id``. Errors are OpenAI's envelope, as on the chat route.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from app.api.auth import check_api_key
from app.api.body import read_json
from app.api.deps import (
    checked,
    new_request_id,
    opened,
    routed,
    served,
    services_of,
)
from app.doors.chat_stream import ChatPayloads
from app.doors.responses import reply as replies
from app.doors.responses.events import ResponseEvents
from app.doors.responses.request import ResponsesRequest, chat_body, request_json_schema
from app.doors.responses.store import ResponseStore, Stored, owner_of
from app.errors import InvalidRequest, ProxyError
from app.wire import JSONReply, StreamReply

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
    return checked(ResponsesRequest, data)


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


@router.post("/v1/responses", openapi_extra=_BODY)
async def create_response(request: Request) -> Response:
    """OpenAI's Responses API over the chat pipeline, in the requested strategy."""
    services, rid = opened(request)
    check_api_key(request, services)
    owner = owner_of(request.headers.get("authorization", ""))
    try:
        data = await read_json(request, services.settings.server)
        asked = validate(data)
        history = await _history(request, owner, asked)
        call = routed(request, services, chat_body(asked, history), rid, param="input")
    except ProxyError as exc:
        services.refuse(exc.status)
        raise
    messages = call.raw["messages"]
    turns = messages[1:] if asked.instructions else list(messages)
    response_id = replies.new_id("resp")
    store = store_of(request) if asked.store else None

    async def whole(reply: JSONReply) -> bytes:
        response = replies.from_chat(orjson.loads(reply.content), asked, response_id)
        if store is not None:
            await _keep(store, owner, response, turns)
        return orjson.dumps(response)

    def stream(reply: StreamReply) -> AsyncGenerator[bytes]:
        events = ResponseEvents(replies.skeleton(asked, response_id, time.time()))
        events.response[replies.EXTRA] = {"model_used": reply.headers.get("X-Model-Used", "")}
        return _translated(reply.chunks, events, store, owner, turns)

    return await served(request, call, whole=whole, stream=stream)


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
    payloads, ended = ChatPayloads(), False
    pending = events.start()  # written with the first block's events: one write, not two
    try:
        async for block in chunks:
            out = [pending]
            for payload in payloads.feed(block):
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
    new_request_id()
    check_api_key(request, services_of(request))
    owner = owner_of(request.headers.get("authorization", ""))
    stored = await store_of(request).get(owner, response_id)
    if stored is None:
        raise _not_found(response_id)
    return Response(orjson.dumps(stored.response), media_type="application/json")


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    """Forget a stored response of this API key's (404 for an unknown id or another key's)."""
    new_request_id()
    check_api_key(request, services_of(request))
    owner = owner_of(request.headers.get("authorization", ""))
    if not await store_of(request).delete(owner, response_id):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}
