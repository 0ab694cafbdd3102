"""``POST /v1/completions``: the legacy text-completion door, served through the chat path.

The request is checked and translated to a chat request (``app.doors.completions``), the
same ``Pipeline.chat`` the chat route calls answers it with the chosen strategy, and its
answer (whole or streamed) is translated back. The answer says ``completion_as_chat`` in
its ``X-Door`` header and, when speculating, its reasons.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import orjson
from fastapi import APIRouter, Request, Response

from app.api.deps import (
    ChatCall,
    check_api_key,
    opened,
    read_json,
    routed,
    served,
)
from app.doors import completions as door
from app.errors import ProxyError
from app.sse import DONE, DataLines, event
from app.wire import JSONReply

router = APIRouter()


async def completion_call(request: Request) -> tuple[ChatCall, door.CompletionRequest]:
    """Authorise, read, check, translate and route a completion; every refusal counted."""
    services, rid = opened(request)
    check_api_key(request, services)
    try:
        server = services.settings.server
        data = await read_json(request, server.max_body_bytes, server.limits.body_timeout_s)
        legacy = door.parse(data)
        return routed(request, services, door.chat_body(legacy), rid, param="prompt"), legacy
    except ProxyError as exc:
        services.refuse(exc.status)
        raise


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    """OpenAI's legacy completions, answered as chat by the configured or requested strategy."""
    call, legacy = await completion_call(request)

    async def whole(reply: JSONReply) -> bytes:
        return orjson.dumps(door.text_completion(orjson.loads(reply.content), legacy))

    return await served(
        request,
        call,
        headers={"X-Door": door.REASON},
        whole=whole,
        stream=lambda reply: text_chunks(reply.chunks, legacy),
    )


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
