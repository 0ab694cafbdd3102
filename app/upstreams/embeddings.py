"""One embeddings call to an upstream: ``POST {base}/v1/embeddings`` over its own session.

The same transport, error table and masking as a chat call (``transport``, ``parsing``):
an HTTP error is the upstream's ``UpstreamRejected`` (a request it found invalid is the
client's 4xx), a dead one ``UpstreamUnavailable``, a slow one ``UpstreamTimeout``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from app.errors import UpstreamProtocolError, UpstreamTimeout
from app.protocol import JSONObject
from app.upstreams.base import ChatUpstream
from app.upstreams.parsing import rejection
from app.upstreams.transport import Transport


def embeddings_url(base_url: str) -> str:
    """Where embeddings are POSTed (``/v1`` is added unless base_url has it)."""
    return base_url + ("/embeddings" if base_url.endswith("/v1") else "/v1/embeddings")


# llama-server's 500 for an input longer than its physical batch (``--ubatch-size``)
TOO_LARGE = b"is too large to process"


async def embed(upstream: ChatUpstream, body: JSONObject) -> Any:
    """The upstream's JSON answer to ``body``, within its ``timeout.total``."""
    config = upstream.config
    transport = Transport(upstream.name, upstream._client, config.timeout.first_byte)
    headers = {"Content-Type": "application/json", **upstream._headers()}
    url = embeddings_url(upstream.base_url or "")
    total = config.timeout.total
    try:
        async with asyncio.timeout(total):
            response = await transport.post(url, orjson.dumps(body), headers, streamed=False)
            if response.status >= 400:
                said = await response.error_body()
                status, key = response.status, config.api_key
                error = rejection(upstream.name, status, response.headers, said, key)
                if status == 500 and TOO_LARGE in said:  # the client's input is too long
                    error.status, error.type = 400, "invalid_request_error"
                raise error
            content = await response.read(config.max_response_bytes)
    except TimeoutError:
        raise UpstreamTimeout(upstream.name, f"no embeddings within {total:g} s") from None
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        raise UpstreamProtocolError(upstream.name, "the embeddings answer is not JSON") from None
