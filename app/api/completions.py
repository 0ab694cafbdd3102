"""``POST /v1/completions``: the legacy text-completion door, served through the chat path.

The request is checked and translated to a chat request (``app.doors.completions``), the
same ``Pipeline.chat`` the chat route calls answers it with the chosen strategy, and its
answer (whole or streamed) is translated back. The answer says ``completion_as_chat`` in
its ``X-Door`` header and, when speculating, its reasons.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator

import orjson
from fastapi import APIRouter, Request, Response

from app.api.deps import (
    ChatCall,
    cap_tokens,
    check_api_key,
    edge_of,
    read_json,
    services_of,
    validate_chat,
)
from app.cache import CacheAsk, cache_ask
from app.doors import completions as door
from app.edge.disconnect import unless_disconnected
from app.errors import ProxyError
from app.routing.strategy import ROUTING_HEADER, choose_strategy
from app.sse import DONE, DataLines, event
from app.telemetry.logs import request_id
from app.wire import JSONReply

router = APIRouter()


async def completion_call(request: Request) -> tuple[ChatCall, door.CompletionRequest]:
    """Authorise, read, check, translate and route a completion; every refusal counted."""
    services = services_of(request)
    settings = services.settings
    rid = os.urandom(8).hex()
    request_id.set(rid)
    check_api_key(request, services)
    cache_ask.set(CacheAsk.of(request.headers))
    spec = settings.speculative_decoding
    try:
        server = settings.server
        data = await read_json(request, server.max_body_bytes, server.limits.body_timeout_s)
        legacy = door.parse(data)
        raw = door.chat_body(legacy)
        parsed = validate_chat(raw)
        if server.max_tokens_cap is not None:
            cap_tokens(raw, parsed, server.max_tokens_cap)
        strategy = choose_strategy(
            header=request.headers.get(ROUTING_HEADER),
            model=parsed.model,
            default=settings.routing.strategy,
            draft_model=spec.draft_model,
            verify_model=spec.verify_model,
            speculation_enabled=spec.enabled,
            speculative_model=spec.model_name,
        )
    except ProxyError as exc:
        services.refuse(exc.status)
        raise
    return ChatCall(raw, parsed, strategy, rid), legacy


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    """OpenAI's legacy completions, answered as chat by the configured or requested strategy."""
    call, legacy = await completion_call(request)
    pipeline = services_of(request).chat
    reply = await unless_disconnected(
        request.scope, request.receive, pipeline.chat(call.raw, call.request, call.strategy)
    )
    if reply is None:
        return Response(status_code=499)  # nobody is listening; the upstream calls are cancelled
    headers = {
        **reply.headers,
        "X-Request-Id": call.request_id,
        "X-Routing-Strategy": call.strategy.value,
        "X-Door": door.REASON,
    }
    if isinstance(reply, JSONReply):
        answer = door.text_completion(orjson.loads(reply.content), legacy)
        return Response(orjson.dumps(answer), media_type="application/json", headers=headers)
    headers |= {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return await edge_of(request).stream(text_chunks(reply.chunks, legacy), headers)


async def text_chunks(
    chunks: AsyncGenerator[bytes], legacy: door.CompletionRequest
) -> AsyncGenerator[bytes]:
    """The chat stream's events as ``text_completion`` events; the chat stream is closed
    when the client leaves."""
    lines, first = DataLines(), True
    try:
        async for block in chunks:
            out = bytearray()
            for payload in lines.feed(block):
                if payload == b"[DONE]":
                    out += DONE
                    continue
                data = orjson.loads(payload)
                if not isinstance(data, dict) or "error" in data:
                    out += b"data: " + payload + b"\n\n"  # an error event passes as it came
                    continue
                out += event(door.text_chunk(data, legacy, first))
                first = False
            if out:
                yield bytes(out)
    finally:
        await chunks.aclose()
