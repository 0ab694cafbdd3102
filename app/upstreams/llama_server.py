"""llama.cpp's llama-server: the local draft model."""

from __future__ import annotations

from typing import Any

import httpx

from app.upstreams.base import ChatUpstream


class LlamaServer(ChatUpstream):
    """llama-server's OpenAI-compatible API; errors nested, logprobs carry token ids."""

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
            response = await self._client.get(f"{self.base_url}/health", timeout=1.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def metrics_text(self) -> str | None:
        """``GET /metrics`` as Prometheus text, or None when it cannot be had quickly.

        llama-server serves it only when started with ``--metrics`` (501
        otherwise) and only at the root, even when base_url ends in ``/v1``.
        """
        if self.base_url is None:
            return None
        root = self.base_url.removesuffix("/v1")
        try:
            response = await self._client.get(f"{root}/metrics", timeout=1.0)
        except httpx.HTTPError:
            return None
        return response.text if response.status_code == 200 else None
