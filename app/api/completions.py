"""``POST /v1/completions``: the legacy text-completion door.

The request is checked and translated to a chat request (``app.doors.completions``) and
routed as chat is. The same ``Pipeline.chat`` the chat route calls answers it in the
chosen strategy (so it is counted, priced and logged as chat is):

- ``local_only`` and ``cerebras_only`` pass the client's own body to the upstream's
  ``/v1/completions`` (the ``Upstream`` calls take a text completion's body:
  ``app.upstreams.text_completion``) and its ``text_completion`` back as it came
  (``X-Door: completion``); not cached (``cerebras_only`` says ``X-Cache: bypass``): the
  cache keeps chat answers.
- ``speculative_decoding`` drafts and judges it as chat, and its answer is translated
  back; it says ``completion_as_chat`` in its ``X-Door`` header and its reasons.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace

import orjson
from fastapi import APIRouter, Request, Response

from app.api.auth import check_api_key
from app.api.body import read_json
from app.api.deps import (
    ChatCall,
    opened,
    routed,
    served,
)
from app.cache import CacheAsk, cache_ask
from app.doors import completions as door
from app.errors import ProxyError
from app.sse import DONE, DataLines, event
from app.wire import JSONReply

router = APIRouter()


async def completion_call(request: Request) -> tuple[ChatCall, door.CompletionRequest]:
    """Authorise, read, check, translate and route a completion; every refusal counted.
    A pass-through strategy's call carries the client's own body (``door.upstream_body``)
    beside the chat view the pipeline reads."""
    services, rid = opened(request)
    check_api_key(request, services)
    try:
        data = await read_json(request, services.settings.server)
        legacy = door.parse(data)
        chat = door.chat_body(legacy)
        call = routed(request, services, chat, rid, param="prompt")
    except ProxyError as exc:
        services.refuse(exc.status)
        raise
    if door.passes_raw(call.strategy):
        ask = cache_ask.get() or CacheAsk()
        cache_ask.set(replace(ask, read=False, store=False))  # the cache keeps chat answers
        call = replace(call, raw=door.upstream_body(data, chat))
    return call, legacy


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    """OpenAI's legacy completions: the upstream's own in a pass-through strategy, else
    answered as chat by the speculative one."""
    call, legacy = await completion_call(request)
    if door.passes_raw(call.strategy):
        return await _passed(request, call, legacy)

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


async def _passed(request: Request, call: ChatCall, legacy: door.CompletionRequest) -> Response:
    """The upstream's own ``text_completion``, its bytes as they came unless ``echo`` or
    ``logprobs`` rework them (``door.reworked``)."""
    headers = {"X-Door": door.RAW}
    if not door.reworks(legacy):
        return await served(request, call, headers=headers)

    async def whole(reply: JSONReply) -> bytes:
        return orjson.dumps(door.reworked(orjson.loads(reply.content), legacy))

    return await served(
        request,
        call,
        headers=headers,
        whole=whole,
        stream=lambda reply: reworked_chunks(reply.chunks, legacy),
    )


async def reworked_chunks(
    chunks: AsyncGenerator[bytes], legacy: door.CompletionRequest
) -> AsyncGenerator[bytes]:
    """The upstream's ``text_completion`` events, each reworked (``door.reworked``); the
    stream is closed when the client leaves."""
    lines, first = DataLines(), True
    try:
        async for block in chunks:
            out = bytearray()
            for payload in lines.feed(block):
                data = orjson.loads(payload) if payload != b"[DONE]" else None
                if not isinstance(data, dict) or "error" in data:
                    out += b"data: " + payload + b"\n\n"  # [DONE] and errors as they came
                    continue
                out += event(door.reworked(data, legacy, first))
                first = False
            if out:
                yield bytes(out)
    finally:
        await chunks.aclose()
