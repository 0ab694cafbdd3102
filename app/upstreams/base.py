"""One OpenAI-compatible chat upstream over a shared ``aiohttp.ClientSession``.

Both llama-server and Cerebras speak OpenAI's chat protocol; their
differences (error shape, auth, retries, field names) are class attributes
and a ``prepare`` hook in the subclasses. aiohttp errors are translated into
``UpstreamError`` here, once, so nothing above this module sees aiohttp.

Why aiohttp and not httpx: on this machine's loopback bench, one core, httpx
0.28 managed 1,681 requests/s at concurrency 1 and 659 at concurrency 64 (its
pool checks every idle connection's socket on every request), aiohttp 3.14
4,548 and 13,276 (``bench/overhead.py`` shows the effect on the whole proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import aiohttp
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
from app.sse import DataLines, passes_unread
from app.upstreams.breaker import CircuitBreaker
from app.upstreams.ratelimit import RateBudget
from app.upstreams.retry import retry_delay

log = logging.getLogger("specproxy.upstream")

# A reused connection that the upstream closed under us (keep-alive race); a
# refused or timed-out connect is a ClientConnectorError/ServerTimeoutError and
# is caught before these.
_DROPPED = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)

# A stream chunk: parsed, or (``unread``) the raw payload of a content chunk.
Chunk = dict[str, Any] | bytes

# Headers worth handing back to the client when an upstream rate-limits.
_PASS_ON_HEADERS = ("retry-after", "retry-after-ms")


@dataclass(frozen=True)
class Completion:
    """A finished non-streaming answer."""

    body: dict[str, Any]
    headers: Mapping[str, str]
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


def create_client(config: ModelConfig) -> aiohttp.ClientSession:
    """The one pooled session an upstream uses, with explicit timeouts and limits.

    ``timeout.first_byte`` and ``timeout.total`` are enforced per call (see
    ``ChatUpstream``); the session bounds connecting and each socket read.
    Environment proxies (``HTTPS_PROXY``...) apply to remote upstreams, never to
    the local model.
    """
    t = config.timeout
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=config.max_connections,
            keepalive_timeout=config.keepalive_expiry_s,
        ),
        timeout=aiohttp.ClientTimeout(sock_connect=t.connect, sock_read=t.read),
        trust_env=config.provider != "llama_server",
    )


class ChatUpstream:
    """Chat completions against one configured model."""

    needs_key: ClassVar[bool] = False
    retries: ClassVar[bool] = False
    # Every stream ends with a usage chunk (the only exact token count), so
    # content chunks need not be read to count them.
    streams_usage: ClassVar[bool] = False

    def __init__(self, name: str, config: ModelConfig, client: aiohttp.ClientSession) -> None:
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
                content = await response.read()
            except aiohttp.ClientError as exc:
                raise self._failed(self._transport_error(exc, "reading the answer")) from exc
            finally:
                response.release()
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

    async def stream(
        self, body: dict[str, Any], *, unread: bool = False
    ) -> AsyncGenerator[list[Chunk]]:
        """Parsed chunks of a streaming completion, a batch per network read (never
        waiting for more than has arrived); ends at ``[DONE]`` or end of body.

        ``unread``: content chunks that finish nothing come as their raw ``data:``
        payload (bytes), not parsed (``app.sse.passes_unread``).
        """
        payload = self.prepare({**body, "stream": True})
        async with self._slot():
            async with self._deadline():
                response = await self._send(payload)
            lines = DataLines()
            try:
                while True:
                    block = await response.content.readany()  # b"" at the end of the body
                    batch, done, error = self._parse(lines.feed(block or b"\n"), unread)
                    if batch:
                        yield batch  # the good chunks before a bad one still go out
                    if error is not None:
                        raise error
                    if done or not block:
                        break
                self._succeeded()
            except aiohttp.ClientError as exc:
                self.breaker.failure()
                raise self._failed(self._transport_error(exc, "stream broke")) from exc
            except ValueError as exc:  # an event line over the limit
                self.breaker.failure()
                raise self._failed(UpstreamProtocolError(self.name, f"stream: {exc}")) from exc
            finally:
                # An unfinished body closes the connection: the upstream stops generating.
                response.release()

    def _parse(
        self, payloads: list[bytes], unread: bool
    ) -> tuple[list[Chunk], bool, UpstreamError | None]:
        """The chunks parsed up to ``[DONE]`` (True) or up to a bad one (its error)."""
        batch: list[Chunk] = []
        for data in payloads:
            if data == b"[DONE]":
                return batch, True, None
            if unread and passes_unread(data):
                batch.append(data)
                continue
            try:
                batch.append(self._chunk(data))
            except UpstreamError as error:
                return batch, False, error
        return batch, False, None

    def _chunk(self, data: bytes) -> dict[str, Any]:
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

    async def _send(self, payload: dict[str, Any]) -> aiohttp.ClientResponse:
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
                status, response_headers = response.status, response.headers
                if status < 500:
                    self.breaker.success()  # it answered: alive, whatever it said
                else:
                    self.breaker.failure()
                if 200 <= status < 300:
                    return response
                failure = self._rejection(response, await _error_body(response))
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

    async def _post(self, content: bytes, headers: dict[str, str]) -> aiohttp.ClientResponse:
        """One attempt: the response once its headers arrive (``timeout.first_byte``)."""
        first_byte = self.config.timeout.first_byte
        for dropped_before in (False, True):
            try:
                async with asyncio.timeout(first_byte):
                    return await self._client.post(self.chat_url, data=content, headers=headers)
            except (aiohttp.ServerTimeoutError, aiohttp.ClientConnectorError) as exc:
                raise self._transport_error(exc, "cannot connect") from exc
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
            except aiohttp.ClientError as exc:
                raise self._transport_error(exc, "cannot connect") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _transport_error(self, exc: aiohttp.ClientError, what: str) -> UpstreamError:
        if isinstance(exc, TimeoutError):  # aiohttp's connect and read timeouts are both
            return UpstreamTimeout(self.name, f"{what}: timed out ({type(exc).__name__})")
        if isinstance(exc, aiohttp.ClientConnectorError):
            return UpstreamUnavailable(self.name, f"{what} ({type(exc).__name__})")
        return UpstreamError(self.name, f"{what} ({type(exc).__name__})")

    def _rejection(self, response: aiohttp.ClientResponse, body: bytes) -> UpstreamRejected:
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            payload = None
        message, code = error_message(payload)
        message = self._redact(message)
        passed = {h: response.headers[h] for h in _PASS_ON_HEADERS if h in response.headers}
        return UpstreamRejected(self.name, response.status, message, code=code, headers=passed)

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


async def _error_body(response: aiohttp.ClientResponse) -> bytes:
    """An error answer's body, or nothing if it cannot be read; the connection is released."""
    try:
        return await response.read()
    except aiohttp.ClientError:
        return b""
    finally:
        response.release()
