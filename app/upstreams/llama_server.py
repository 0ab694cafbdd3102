"""llama.cpp's llama-server: the local draft model."""

from __future__ import annotations

from typing import cast

import aiohttp

from app.errors import UpstreamRejected, UpstreamUnavailable
from app.protocol import TOOL_CALLS, JSONObject
from app.upstreams.base import ChatUpstream
from app.upstreams.interface import Props

_PROBE = aiohttp.ClientTimeout(total=1.0)  # /health and /metrics: answer quickly or not at all
# A content part's kind -> the ``/props`` modality that reads it.
_PART_MODALITY = {"image_url": "vision", "input_audio": "audio"}


class LlamaServer(ChatUpstream):
    """llama-server's OpenAI-compatible API; errors nested, logprobs carry token ids."""

    streams_usage = True  # prepare() asks for it on every stream
    has_props = True
    continues_prefill = True  # a final assistant message is continued (llama.cpp's prefill)

    def prepare(self, body: JSONObject) -> JSONObject:
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

    async def props(self) -> Props | None:
        """``GET /props`` (the build's generation settings, what the model reads...), or
        None when it cannot be had quickly."""
        if self.base_url is None:
            return None
        root = self.base_url.removesuffix("/v1")
        try:
            probe = self._client.get(f"{root}/props", headers=self._headers(), timeout=_PROBE)
            async with probe as response:
                props = await response.json(content_type=None) if response.status == 200 else {}
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        return cast(Props, props) if isinstance(props, dict) else None

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

    async def count_tokens(self, body: JSONObject) -> int:
        """The prompt tokens of a chat request in the model's own tokenizer: its chat
        template applied (``POST /apply-template``, tools included), then
        ``POST /tokenize`` (``app.api.messages``' count_tokens)."""
        if self.base_url is None:
            raise UpstreamUnavailable(self.name, "not started")
        root = self.base_url.removesuffix("/v1")
        chat: JSONObject = {k: body[k] for k in ("messages", "tools") if k in body}
        prompt = (await self._post(f"{root}/apply-template", chat)).get("prompt")
        tokens = (await self._post(f"{root}/tokenize", {"content": prompt or ""})).get("tokens")
        return len(tokens) if isinstance(tokens, list) else 0

    async def _post(self, url: str, payload: JSONObject) -> JSONObject:
        try:
            call = self._client.post(url, json=payload, headers=self._headers())
            async with call as response:
                data = await response.json(content_type=None)
                if response.status != 200:
                    raise UpstreamRejected(self.name, response.status, url.rsplit("/", 1)[1])
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise UpstreamUnavailable(self.name, f"{url.rsplit('/', 1)[1]}: {exc}") from exc
        return data if isinstance(data, dict) else {}


def per_request_params(props: Props | None) -> JSONObject | None:
    """The request parameters ``/props`` lists with their defaults (its default generation
    settings): which per-request keys a build takes."""
    settings = props.get("default_generation_settings") if props else None
    params = settings.get("params", settings) if isinstance(settings, dict) else None
    return params if isinstance(params, dict) else None


def capabilities(props: Props | None) -> frozenset[str]:
    """What the model can do beyond text (``ChatCompletionRequest.needs``), from ``/props``:
    the kinds of content its ``modalities`` read (a multimodal projector loaded), and tool
    calls unless its ``chat_template_caps`` say the template has none."""
    props = props or Props()
    modalities = props.get("modalities")
    modalities = modalities if isinstance(modalities, dict) else {}
    can = {kind for kind, modality in _PART_MODALITY.items() if modalities.get(modality)}
    caps = props.get("chat_template_caps")
    if not isinstance(caps, dict) or caps.get("supports_tool_calls", True) is not False:
        can.add(TOOL_CALLS)  # a build that does not say is taken at its word: tools work
    return frozenset(can)
