"""llama.cpp's llama-server: the local draft model."""

from __future__ import annotations

from typing import Any

import aiohttp

from app.upstreams.base import ChatUpstream

_PROBE = aiohttp.ClientTimeout(total=1.0)  # /health and /metrics: answer quickly or not at all


class LlamaServer(ChatUpstream):
    """llama-server's OpenAI-compatible API; errors nested, logprobs carry token ids."""

    streams_usage = True  # prepare() asks for it on every stream

    def prepare(self, body: dict[str, Any]) -> dict[str, Any]:
        # A stream's usage is the only true token count (the end-of-generation
        # token is counted but never streamed); it costs nothing locally. The
        # relay drops the usage chunk again if the client did not ask for it.
        body = super().prepare(body)
        if body.get("stream"):
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return body

    async def healthy(self) -> bool:
        """True when ``GET /health`` answers 200 (503 while the model loads)."""
        if self.base_url is None:
            return False
        try:
            async with self._client.get(f"{self.base_url}/health", timeout=_PROBE) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def per_request_params(self) -> dict[str, Any] | None:
        """The request parameters ``GET /props`` lists with their defaults (its default
        generation settings), or None when it cannot be had quickly. Tells which
        per-request keys a build takes."""
        if self.base_url is None:
            return None
        root = self.base_url.removesuffix("/v1")
        try:
            probe = self._client.get(f"{root}/props", headers=self._headers(), timeout=_PROBE)
            async with probe as response:
                props = await response.json(content_type=None) if response.status == 200 else {}
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        params = settings.get("params", settings) if isinstance(settings, dict) else None
        return params if isinstance(params, dict) else None

    async def metrics_text(self) -> str | None:
        """``GET /metrics`` as Prometheus text, or None when it cannot be had quickly.

        llama-server serves it only when started with ``--metrics`` (501
        otherwise) and only at the root, even when base_url ends in ``/v1``.
        """
        if self.base_url is None:
            return None
        root = self.base_url.removesuffix("/v1")
        try:
            scrape = self._client.get(f"{root}/metrics", headers=self._headers(), timeout=_PROBE)
            async with scrape as response:
                return await response.text() if response.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return None
