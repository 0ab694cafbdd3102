"""One OpenAI-compatible chat upstream over a shared ``httpx.AsyncClient``.

Both llama-server and Cerebras speak OpenAI's chat protocol; their
differences (error shape, auth, retries, field names) are class attributes
and a ``prepare`` hook in the subclasses. httpx errors are translated into
``UpstreamError`` here, once, so nothing above this module sees httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
import orjson

from app.config import ModelConfig
from app.errors import (
    UpstreamBusy,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstreams.breaker import CircuitBreaker
from app.upstreams.ratelimit import RateBudget
from app.upstreams.retry import retry_delay

log = logging.getLogger("specproxy.upstream")

# A reused connection that the upstream closed under us (keep-alive race).
_DROPPED = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)

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
            keepalive_expiry=config.keepalive_expiry_s,
        ),
    )


class ChatUpstream:
    """Chat completions against one configured model."""

    needs_key: ClassVar[bool] = False
    retries: ClassVar[bool] = False

    def __init__(self, name: str, config: ModelConfig, client: httpx.AsyncClient) -> None:
        self.name = name
        self.config = config
        self.base_url = config.base_url  # a managed server fills this in at start
        self._client = client
        self.last_ok_at: float | None = None
        self.last_error: str | None = None
        breaker = config.circuit_breaker
        self.breaker = CircuitBreaker(breaker.failures, breaker.cooldown_s)
        self.budget = RateBudget()
        limit = config.concurrency.max_in_flight
        self._slots = asyncio.Semaphore(limit) if limit else None
        self.queued = 0

    @property
    def max_retries(self) -> int:
        """Retries allowed per call (0 for upstreams that are not retried)."""
        return self.config.max_retries if self.retries else 0

    def status(self) -> dict[str, Any]:
        """Resilience state for /stats: circuit, rate budget, queue."""
        return {
            "circuit": self.breaker.status(),
            "rate_limit": self.budget.status(),
            "queued": self.queued,
        }

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
        async with self._slot(), self._deadline():
            response = await self._send(payload)
            try:
                content = await response.aread()
            except httpx.HTTPError as exc:
                raise self._failed(self._transport_error(exc, "reading the answer")) from exc
            finally:
                await response.aclose()
        try:
            data = orjson.loads(content)
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
        async with self._slot():
            async with self._deadline():
                response = await self._send(payload)
            try:
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue  # blank separators, comments, event names
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    yield self._chunk(data)
                self._succeeded()
            except httpx.HTTPError as exc:
                self.breaker.failure()
                raise self._failed(self._transport_error(exc, "stream broke")) from exc
            finally:
                await response.aclose()

    def _chunk(self, data: str) -> dict[str, Any]:
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
            raise self._failed(
                UpstreamError(self.name, f"error mid-stream: {self._redact(message)}", code=code)
            )
        return chunk

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

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """Hold one of ``max_in_flight`` slots for the call; wait a bounded time for it."""
        if self._slots is None:
            yield
            return
        wait = self.config.concurrency.queue_timeout_s
        self.queued += 1
        try:
            async with asyncio.timeout(wait):
                await self._slots.acquire()
        except TimeoutError:
            raise self._failed(
                UpstreamBusy(
                    self.name,
                    f"{self.config.concurrency.max_in_flight} requests in flight; "
                    f"no slot freed within {wait:g} s",
                    headers={"retry-after": "1"},
                )
            ) from None
        finally:
            self.queued -= 1
        try:
            yield
        finally:
            self._slots.release()

    async def _send(self, payload: dict[str, Any]) -> httpx.Response:
        """POST with retries; returns an open 2xx response whose body is not read yet."""
        if reason := self.unavailable_reason:
            raise self._failed(UpstreamUnavailable(self.name, reason))
        content = orjson.dumps(payload)
        headers = {"Content-Type": "application/json", **self._headers()}
        deadline = time.monotonic() + self.config.timeout.total
        attempt = 0
        while True:
            if not self.breaker.allow():
                failures = self.breaker.failure_threshold
                raise self._failed(
                    UpstreamUnavailable(
                        self.name,
                        f"circuit open after {failures} consecutive failures; "
                        f"next probe in {self.breaker.retry_in():.1f} s",
                    )
                )
            status: int | None = None
            response_headers: Mapping[str, str] = {}
            try:
                response = await self._post(content, headers)
            except UpstreamError as error:
                self.breaker.failure()
                failure: UpstreamError = error
            except BaseException:
                self.breaker.abandon()  # cancelled: no verdict on the upstream's health
                raise
            else:
                self.budget.update(response.headers)
                status, response_headers = response.status_code, response.headers
                if response.status_code < 500:
                    self.breaker.success()  # it answered: alive, whatever it said
                else:
                    self.breaker.failure()
                if response.is_success:
                    return response
                await response.aread()
                await response.aclose()
                failure = self._rejection(response)
            delay = None
            if attempt < self.max_retries:
                delay = retry_delay(
                    attempt,
                    status,
                    response_headers,
                    deadline - time.monotonic(),
                    max_wait_s=self.config.max_retry_wait_s,
                )
            if delay is None:
                raise self._failed(failure)
            log.info("%s: retrying in %.2f s after %s", self.name, delay, failure.detail)
            await asyncio.sleep(delay)
            attempt += 1

    async def _post(self, content: bytes, headers: dict[str, str]) -> httpx.Response:
        """One attempt: the response once its headers arrive (``timeout.first_byte``)."""
        request = self._client.build_request(
            "POST", self.chat_url, content=content, headers=headers
        )
        first_byte = self.config.timeout.first_byte
        for dropped_before in (False, True):
            try:
                async with asyncio.timeout(first_byte):
                    return await self._client.send(request, stream=True)
            except TimeoutError as exc:
                raise UpstreamTimeout(self.name, f"no response within {first_byte:g} s") from exc
            except _DROPPED as exc:
                # A pooled connection the upstream closed as we reused it: nothing was
                # answered, so one immediate retry on a fresh connection is safe.
                if dropped_before:
                    raise self._transport_error(
                        exc, "connection dropped before a response"
                    ) from exc
                log.debug("%s: pooled connection dropped (%r); retrying once", self.name, exc)
            except httpx.HTTPError as exc:
                raise self._transport_error(exc, "cannot connect") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _transport_error(self, exc: httpx.HTTPError, what: str) -> UpstreamError:
        if isinstance(exc, httpx.TimeoutException):
            return UpstreamTimeout(self.name, f"{what}: timed out ({type(exc).__name__})")
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return UpstreamUnavailable(self.name, f"{what} ({type(exc).__name__})")
        return UpstreamError(self.name, f"{what} ({type(exc).__name__})")

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
