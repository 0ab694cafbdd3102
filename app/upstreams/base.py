"""One OpenAI-compatible chat upstream: the facade over three layers.

    ChatUpstream       the ``Upstream`` protocol (``interface.py``) for one server:
                       complete(), pass_on(), open_stream(), availability(), status()
    ├── resilience.py  concurrency slots, the call's deadline, retries, breaker, rate budget
    ├── transport.py   the shared aiohttp session; its errors -> UpstreamError, once
    └── parsing.py     answers, stream chunks and error bodies -> Completion / chunks / errors

Both llama-server and Cerebras speak OpenAI's chat protocol (and its legacy text
completions: a body with a ``prompt`` goes to ``/v1/completions``,
``app.upstreams.text_completion``); their differences
(error shape, auth, retries, field names) are class attributes and a ``prepare``
hook in the subclasses. The facade itself only composes the layers and keeps the
health bookkeeping (``last_ok_at``, ``last_error``) that /health reports.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import ClassVar

import aiohttp
import orjson

from app.chat_completion import Chunk
from app.config import ModelConfig
from app.errors import UpstreamError, UpstreamNotConfigured, UpstreamUnavailable
from app.protocol import JSONObject
from app.telemetry.trace_context import outgoing
from app.upstreams import text_completion
from app.upstreams.deadlines import Deadline
from app.upstreams.interface import CloudState, OpenStream, Props, Upstream, UpstreamStatus
from app.upstreams.parsing import ChunkParser, Completion, completion_body, error_message
from app.upstreams.passthrough import PassedAnswer, read_answer
from app.upstreams.resilience import Resilience
from app.upstreams.transport import Response, Transport, create_client

__all__ = [
    "ChatUpstream",
    "Chunk",
    "Completion",
    "PassedAnswer",
    "create_client",
    "error_message",
]


class ChatUpstream:
    """Chat completions against one configured model."""

    needs_key: ClassVar[bool] = False
    retries: ClassVar[bool] = False
    # Every stream ends with a usage chunk (the only exact token count), so
    # content chunks need not be read to count them.
    streams_usage: ClassVar[bool] = False
    # It says what it can do beyond text (llama-server's ``/props``): ``props()``.
    has_props: ClassVar[bool] = False
    # It continues a final assistant message (an assistant prefill) instead of answering
    # after it: a broken stream is continued from the text sent (``app.upstreams.continuation``).
    continues_prefill: ClassVar[bool] = False

    def __init__(self, name: str, config: ModelConfig, client: aiohttp.ClientSession) -> None:
        self.name = name
        self.config = config
        self.base_url = config.base_url  # a managed server fills this in at start
        self._client = client  # subclasses' probes (/health, /props) use it directly
        self.last_ok_at: float | None = None
        self.last_error: str | None = None
        self.in_flight = 0  # calls under way (a pool sends the next to its least busy)
        transport = Transport(name, client, config.timeout.first_byte)
        self._resilience = Resilience(name, config, transport, max_retries=self.max_retries)
        self.breaker = self._resilience.breaker
        self.budget = self._resilience.budget

    @property
    def queued(self) -> int:
        """Calls waiting for a concurrency slot now."""
        return self._resilience.queued

    @property
    def max_retries(self) -> int:
        """Retries allowed per call (0 for upstreams that are not retried)."""
        return self.config.max_retries if self.retries else 0

    @property
    def members(self) -> Sequence[Upstream]:
        """Itself: the one server that answers."""
        return (self,)

    def status(self) -> UpstreamStatus:
        """Resilience state for /stats: circuit, rate budget, queue."""
        return {
            "circuit": self.breaker.status(),
            "rate_limit": self.budget.status(),
            "queued": self.queued,
        }

    # -- hooks ---------------------------------------------------------------

    def prepare(self, body: JSONObject) -> JSONObject:
        """The body as this upstream wants it; the client's fields are kept."""
        return {**body, "model": self.config.model}

    @property
    def configured(self) -> bool:
        """Whether it has what it needs to be called (an API key, if it needs one)."""
        return not self.needs_key or self.config.api_key is not None

    @property
    def unavailable_reason(self) -> str | None:
        """Why this upstream cannot be called at all, or None."""
        if not self.configured:
            return "no API key configured (set the environment variable named in config.yaml)"
        if self.base_url is None:
            return "not started"
        return None

    def availability(self, need: int) -> CloudState:
        """Whether a call for an answer of ``need`` tokens may go out now: a key, the
        circuit letting it through, and the rate budget above its reserve plus ``need``.
        Side-effect free: no probe is taken."""
        reserve = self.config.rate_limit_reserve
        missing = self.unavailable_reason
        wait = self.breaker.retry_in()
        low = self.budget.low(reserve.tokens, reserve.requests, need)
        circuit = f"circuit open; next probe in {wait:.1f} s" if wait > 0 else None
        return CloudState(
            has_key=missing is None,
            circuit_open=wait > 0,
            budget_low=low is not None,
            probe_out=not self.breaker.ready() and wait <= 0,
            detail=missing or circuit or low or "",
        )

    async def healthy(self) -> bool | None:
        """Whether the upstream answers a cheap probe; None where no probe is free."""
        return None

    async def props(self) -> Props | None:
        """What the server says of itself; None here (``has_props``: a server that says)."""
        return None

    async def metrics_text(self) -> str | None:
        """The server's own Prometheus metrics; None here (no scrape)."""
        return None

    # -- calls ---------------------------------------------------------------

    @property
    def chat_url(self) -> str:
        """Where chat completions are POSTed (``/v1`` is added unless base_url has it)."""
        base = self.base_url or ""
        return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")

    def _headers(self) -> dict[str, str]:
        key = self.config.api_key
        return {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}

    async def complete(self, body: JSONObject) -> Completion:
        """One non-streaming chat completion, retried where the upstream allows."""
        started = time.perf_counter()
        with _Tracked(self):
            content, headers = await self._whole(body)
            data = completion_body(self.name, content, self.config.model)
        self._succeeded()
        return Completion(data, headers, time.perf_counter() - started, self.name)

    async def pass_on(self, body: JSONObject) -> PassedAnswer:
        """One non-streaming chat completion (or legacy text completion: ``is_text``) to
        pass on as it came, read but not parsed (``app.upstreams.passthrough``); retried
        where the upstream allows."""
        started = time.perf_counter()
        decoder = text_completion.ANSWER_DECODER if text_completion.is_text(body) else None
        with _Tracked(self):
            content, headers = await self._whole(body)
            if decoder is None:
                content, view = read_answer(self.name, content, self.config.model)
            else:
                content, view = read_answer(self.name, content, self.config.model, decoder)
        self._succeeded()
        latency = time.perf_counter() - started
        return PassedAnswer(content, view, headers, latency, self.name)

    async def open_stream(
        self, body: JSONObject, *, unread: bool = False, bounded: bool = False
    ) -> OpenStream:
        """The stream once its first chunks have come (``Upstream.open_stream``)."""
        chunks = self.stream(body, unread=unread, bounded=bounded)
        return await OpenStream.first_of(self, chunks)

    async def stream(
        self, body: JSONObject, *, unread: bool = False, bounded: bool = False
    ) -> AsyncGenerator[list[Chunk]]:
        """Parsed chunks of a streaming completion, a batch per network read (never
        waiting for more than has arrived); ends at ``[DONE]`` or end of body.

        The call's deadline (``timeout.total``) bounds the wait until the first chunk,
        and with ``bounded`` (a draft the proxy reads whole before answering) the whole
        stream. ``unread``: content chunks that finish nothing come as their raw
        ``data:`` payload only, not read (``app.sse.passes_unread``).
        """
        payload = self.prepare({**body, "stream": True})
        if text_completion.is_text(body):  # every chunk read: its text is not chat's content
            decoder = text_completion.CHUNK_DECODER
            parser = ChunkParser(
                self.name, self.config.api_key, model=self.config.model, decoder=decoder
            )
        else:
            parser = ChunkParser(
                self.name, self.config.api_key, unread=unread, model=self.config.model
            )
        resilience = self._resilience
        with _Tracked(self):
            async with resilience.call() as deadline:
                async with deadline:
                    response = await self._open(payload, deadline)
                started = False  # a chunk has come: the client's stream is under way
                try:
                    while True:
                        try:
                            if started and not bounded:
                                block = await response.next_block()
                            else:
                                async with deadline:
                                    block = await response.next_block()
                            batch = parser.feed(block)
                        except UpstreamError:
                            resilience.breaker.failure()  # the stream broke under way
                            raise
                        started = started or bool(batch.chunks)
                        if batch.error is not None:
                            # Seen now: the consumer may stop at the good chunks before it.
                            self.last_error = batch.error.message
                        if batch.chunks:
                            yield batch.chunks  # the good chunks before a bad one still go out
                        if batch.error is not None:
                            raise batch.error
                        if batch.done:
                            break
                        del block, batch  # an open stream keeps no read it has passed on
                    self._succeeded()
                finally:
                    response.release()

    # -- internals -----------------------------------------------------------

    async def _whole(self, body: JSONObject) -> tuple[bytes, Mapping[str, str]]:
        """The bytes and headers of a whole (non-streaming) answer to ``body``."""
        # Not streamed, by leaving it unsaid (every API's default): nothing the client did
        # not send is added.
        payload = self.prepare({k: v for k, v in body.items() if k not in _STREAM_KEYS})
        async with self._resilience.call() as deadline, deadline:
            response = await self._open(payload, deadline)
            content = await response.read(self.config.max_response_bytes)
        return content, response.headers

    async def _open(self, payload: JSONObject, deadline: Deadline) -> Response:
        """The open 2xx response to a prepared body, through the resilience layer."""
        if reason := self.unavailable_reason:
            unusable = UpstreamUnavailable if self.configured else UpstreamNotConfigured
            raise unusable(self.name, reason)
        headers = {"Content-Type": "application/json", **self._headers()}
        if (traceparent := outgoing.get()) is not None:  # telemetry.otel: the request's trace
            headers["traceparent"] = traceparent
        content, streamed = orjson.dumps(payload), bool(payload.get("stream"))
        resilience = self._resilience
        url = self.chat_url
        if text_completion.is_text(payload):
            url = text_completion.completions_url(self.base_url or "")
        return await resilience.send(url, content, headers, deadline, streamed=streamed)

    def _succeeded(self) -> None:
        self.last_ok_at = time.time()
        self.last_error = None


_STREAM_KEYS = ("stream", "stream_options")


class _Tracked:
    """A call under way: counted in its upstream's ``in_flight`` while it lasts, and the
    message of an ``UpstreamError`` that leaves it noted as ``last_error``.

    A slotted class, not @contextmanager generators: an open stream holds it for its
    whole length (two generator context managers were ~0.9 KB per stream).
    """

    __slots__ = ("upstream",)

    def __init__(self, upstream: ChatUpstream) -> None:
        self.upstream = upstream

    def __enter__(self) -> None:
        self.upstream.in_flight += 1

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        self.upstream.in_flight -= 1
        if isinstance(error, UpstreamError):
            self.upstream.last_error = error.message
