"""One OpenAI-compatible chat upstream over a shared ``httpx.AsyncClient``.

Both llama-server and Cerebras speak OpenAI's chat protocol; their
differences (error shape, auth, retries, field names) are class attributes
and a ``prepare`` hook in the subclasses. httpx errors are translated into
``UpstreamError`` here, once, so nothing above this module sees httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
import orjson

from app.config import ModelConfig
from app.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)

# Headers worth handing back to the client when an upstream rate-limits.
_PASS_ON_HEADERS = ("retry-after", "retry-after-ms")


@dataclass(frozen=True)
class Completion:
    """A finished non-streaming answer."""

    body: dict[str, Any]
    headers: httpx.Headers
    latency_s: float

    @property
    def choice(self) -> dict[str, Any]:
        return self.body["choices"][0]

    @property
    def text(self) -> str:
        return self.choice.get("message", {}).get("content") or ""

    @property
    def finish_reason(self) -> str | None:
        return self.choice.get("finish_reason")

    @property
    def completion_tokens(self) -> int:
        usage = self.body.get("usage") or {}
        return int(usage.get("completion_tokens") or 0)


def error_message(payload: Any) -> tuple[str, str | None]:
    """Message and code of an error body, nested (OpenAI, llama-server) or flat (Cerebras)."""
    if isinstance(payload, dict):
        inner = payload.get("error", payload)
        if isinstance(inner, dict) and "message" in inner:
            code = inner.get("code")
            return str(inner["message"]), None if code is None else str(code)
        if isinstance(inner, str):
            return inner, None
    return "no error message", None


def create_client(config: ModelConfig) -> httpx.AsyncClient:
    """The one pooled client an upstream uses, with explicit timeouts and limits."""
    t = config.timeout
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=t.connect, read=t.read, write=t.read, pool=t.connect),
        limits=httpx.Limits(
            max_connections=config.max_connections,
            max_keepalive_connections=config.max_connections,
        ),
    )


class ChatUpstream:
    """Chat completions against one configured model."""

    needs_key: ClassVar[bool] = False
    retry_statuses: ClassVar[frozenset[int]] = frozenset()

    def __init__(self, name: str, config: ModelConfig, client: httpx.AsyncClient) -> None:
        self.name = name
        self.config = config
        self.base_url = config.base_url  # a managed server fills this in at start
        self._client = client
        self.last_ok_at: float | None = None
        self.last_error: str | None = None

    # -- hooks ---------------------------------------------------------------

    def prepare(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body as this upstream wants it; the client's fields are kept."""
        return {**body, "model": self.config.model}

    @property
    def unavailable_reason(self) -> str | None:
        """Why this upstream cannot be called at all, or None."""
        if self.needs_key and self.config.api_key is None:
            return "no API key configured (set the environment variable named in config.yaml)"
        if self.base_url is None:
            return "not started"
        return None

    async def healthy(self) -> bool | None:
        """Whether the upstream answers a cheap probe; None where no probe is free."""
        return None

    # -- calls ---------------------------------------------------------------

    @property
    def chat_url(self) -> str:
        base = self.base_url or ""
        return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")

    def _headers(self) -> dict[str, str]:
        key = self.config.api_key
        return {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}

    async def complete(self, body: dict[str, Any]) -> Completion:
        """One non-streaming chat completion, retried where the upstream allows."""
        started = time.perf_counter()
        payload = self.prepare({**body, "stream": False})
        payload.pop("stream_options", None)
        async with self._deadline():
            response = await self._send(payload, stream=False)
        try:
            data = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise self._failed(
                UpstreamProtocolError(self.name, "answered with invalid JSON")
            ) from exc
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("choices"), list)
            or not data["choices"]
        ):
            raise self._failed(UpstreamProtocolError(self.name, "answer has no choices"))
        self._succeeded()
        return Completion(data, response.headers, time.perf_counter() - started)

    async def stream(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any]]:
        """Parsed chunks of a streaming completion; ends at ``[DONE]`` or end of body."""
        payload = self.prepare({**body, "stream": True})
        async with self._deadline():
            response = await self._send(payload, stream=True)
        try:
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, comments, event names
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = orjson.loads(data)
                except orjson.JSONDecodeError as exc:
                    raise self._failed(
                        UpstreamProtocolError(self.name, "sent an invalid stream chunk")
                    ) from exc
                if not isinstance(chunk, dict):
                    raise self._failed(UpstreamProtocolError(self.name, "sent a non-object chunk"))
                if "choices" not in chunk and ("error" in chunk or "message" in chunk):
                    message, code = error_message(chunk)
                    message = self._redact(message)
                    raise self._failed(
                        UpstreamError(self.name, f"error mid-stream: {message}", code=code)
                    )
                yield chunk
            self._succeeded()
        except httpx.TimeoutException as exc:
            raise self._failed(UpstreamTimeout(self.name, "stream stalled")) from exc
        except httpx.HTTPError as exc:
            raise self._failed(
                UpstreamError(self.name, f"stream broke: {type(exc).__name__}")
            ) from exc
        finally:
            await response.aclose()

    # -- internals -----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _deadline(self) -> AsyncIterator[None]:
        """Bound the wait for the upstream's answer (all retries) by ``timeout.total``."""
        total = self.config.timeout.total
        try:
            async with asyncio.timeout(total):
                yield
        except TimeoutError as exc:
            raise self._failed(UpstreamTimeout(self.name, f"no answer within {total:g} s")) from exc

    async def _send(self, payload: dict[str, Any], *, stream: bool) -> httpx.Response:
        """POST with retries on connect errors and ``retry_statuses``; returns a 2xx response."""
        if reason := self.unavailable_reason:
            raise self._failed(UpstreamUnavailable(self.name, reason))
        content = orjson.dumps(payload)
        headers = {"Content-Type": "application/json", **self._headers()}
        attempts = 1 + (self.config.max_retries if self.retry_statuses else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            request = self._client.build_request(
                "POST", self.chat_url, content=content, headers=headers
            )
            try:
                response = await self._client.send(request, stream=stream)
            except httpx.TimeoutException as exc:
                raise self._failed(UpstreamTimeout(self.name, "no answer in time")) from exc
            except httpx.HTTPError as exc:
                if last:
                    raise self._failed(
                        UpstreamUnavailable(self.name, f"cannot connect ({type(exc).__name__})")
                    ) from exc
                await asyncio.sleep(_backoff(attempt, None))
                continue
            if response.is_success:
                return response
            await response.aread()
            await response.aclose()
            if not last and response.status_code in self.retry_statuses:
                await asyncio.sleep(_backoff(attempt, response.headers))
                continue
            raise self._failed(self._rejection(response))
        raise AssertionError("unreachable")  # pragma: no cover

    def _rejection(self, response: httpx.Response) -> UpstreamRejected:
        try:
            payload = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            payload = None
        message, code = error_message(payload)
        message = self._redact(message)
        passed = {h: response.headers[h] for h in _PASS_ON_HEADERS if h in response.headers}
        return UpstreamRejected(self.name, response.status_code, message, code=code, headers=passed)

    def _redact(self, text: str) -> str:
        """Upstream text with this upstream's key masked: some APIs echo the key they refuse."""
        key = self.config.api_key
        return text.replace(key.get_secret_value(), "***") if key else text

    def _failed(self, error: UpstreamError) -> UpstreamError:
        self.last_error = error.message
        return error

    def _succeeded(self) -> None:
        self.last_ok_at = time.time()
        self.last_error = None


def _backoff(attempt: int, headers: httpx.Headers | None) -> float:
    """Seconds to wait before retry ``attempt + 1``: the upstream's word, else jittered 2^n."""
    if headers is not None:
        for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
            try:
                return min(float(headers[name]) * scale, 10.0)
            except (KeyError, ValueError):
                pass
    return random.uniform(0, 0.25 * 2**attempt)
