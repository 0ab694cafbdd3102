"""llama.cpp's llama-server: the local draft model."""

from __future__ import annotations

import httpx

from app.upstreams.base import ChatUpstream


class LlamaServer(ChatUpstream):
    """llama-server's OpenAI-compatible API; errors nested, logprobs carry token ids."""

    async def healthy(self) -> bool:
        """True when ``GET /health`` answers 200 (503 while the model loads)."""
        if self.base_url is None:
            return False
        try:
            response = await self._client.get(f"{self.base_url}/health", timeout=1.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200
