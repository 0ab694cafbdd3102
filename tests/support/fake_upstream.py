"""A queue-backed ``Upstream`` for unit tests of the pipeline: no sockets, no server.

As simonw/llm's fake model: ``enqueue()`` what it answers next, read ``history`` for
what it was asked. An answer is scripted as the loopback stand-ins script theirs
(``tests.fakes.Reply``: text, token probabilities, tool calls, an HTTP error status, a
stream cut by an error event), and its bytes are written by the same stand-in
(``FakeLlamaServer`` or ``FakeCerebras``, whose output is checked against recorded
real answers), then read by the proxy's own parsing: ``Completion``, ``PassedAnswer``
and ``OpenStream`` are what the real upstream would hand back for those bytes.

    local = FakeUpstream("local")
    local.enqueue("Four.", Reply("Paris is the capital.", token_probs=[...]))
    local.enqueue(local.error("timeout"))           # any UpstreamError, raised as is
    local.enqueue(BrokenStream("Tides come", after=2))  # the connection drops mid-stream
    local.open_circuit()                            # availability(): circuit open
    ...
    assert local.history[0]["max_tokens"] == 128

``wait_for`` (an ``asyncio.Event``) holds the next answer, or a stream after its first
``hold_after`` batches, until the test sets it: hedges and first-token budgets are
ordered by events, never by sleeping (a ``Reply``'s ``delay``, ``chunk_delay`` and
``hold`` are the loopback servers' and are not read here). ``batch``: stream events per
network read. ``props``: what ``props()`` answers (``has_props`` with it).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.chat_completion import Chunk
from app.config import ModelConfig
from app.errors import (
    UpstreamBusy,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamTransportError,
    UpstreamUnavailable,
)
from app.upstreams import CloudState, Completion, OpenStream, PassedAnswer, Upstream
from app.upstreams.parsing import ChunkParser, completion_body, rejection
from app.upstreams.passthrough import read_answer
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.fakes.script import Generation, ScriptedServer, first_int, prompt_tokens

JSON = dict[str, Any]

# Each kind of UpstreamError, as the real layers word it (``error(kind)``).
_ERRORS: dict[str, tuple[type[UpstreamError], str]] = {
    "timeout": (UpstreamTimeout, "no answer within 1 s"),
    "unavailable": (UpstreamUnavailable, "cannot connect (ClientConnectorError)"),
    "busy": (UpstreamBusy, "1 requests in flight; no slot freed within 0 s"),
    "transport": (UpstreamTransportError, "cannot connect (ServerDisconnectedError)"),
    "protocol": (UpstreamProtocolError, "answered with invalid JSON"),
    "stream": (UpstreamError, "stream broke (ClientPayloadError)"),
}


@dataclass(frozen=True)
class BrokenStream:
    """A stream whose connection drops after ``after`` content chunks (``error``: what the
    transport then raises; a broken stream, kind ``stream``, unless told)."""

    reply: Reply | str
    after: int
    error: UpstreamError | None = None


Answer = Reply | str | UpstreamError | BrokenStream


class FakeUpstream:
    """An ``Upstream`` answering from a queue; ``speaks`` llama-server (the default) or
    Cerebras, as the stand-in servers write them."""

    def __init__(
        self,
        name: str = "local",
        *,
        speaks: str = "llama_server",
        model: str | None = None,
        batch: int = 1,
        wait_for: asyncio.Event | None = None,
        hold_after: int | None = None,
        default: Answer | None = None,
        props: JSON | None = None,
    ) -> None:
        self.name = name
        self._server: ScriptedServer = (
            FakeLlamaServer() if speaks == "llama_server" else FakeCerebras()
        )
        model = model or ("smollm2" if speaks == "llama_server" else "gpt-oss-120b")
        self.config = ModelConfig(provider=speaks, model=model, base_url=f"http://{name}.fake")
        # llama-server's class asks every stream for its usage (``LlamaServer.prepare``).
        self.streams_usage = speaks == "llama_server"
        self.continues_prefill = speaks == "llama_server"
        self.batch = batch  # stream events per network read
        self.wait_for = wait_for
        self.hold_after = hold_after  # with wait_for: a stream's batches before it waits
        self.default = default  # answered when the queue is empty (else: an error)
        self.history: list[JSON] = []  # every body that went out, as the upstream got it
        self.state = CloudState()  # what availability() answers (need aside)
        self.low_below: int | None = None  # budget low for a need of this many tokens or more
        self.health: bool | None = None
        self.props_answer = props  # what props() answers (llama-server's /props)
        self.has_props = props is not None
        self.in_flight = 0
        self.last_ok_at: float | None = None
        self.last_error: str | None = None
        self._queue: deque[Answer] = deque()

    # -- scripting -------------------------------------------------------------

    def enqueue(self, *answers: Answer) -> FakeUpstream:
        """Queue the next answers, in order: a text or ``Reply`` (whole or streamed as the
        call asks), an ``UpstreamError`` (raised as the call's failure), a ``BrokenStream``."""
        self._queue.extend(answers)
        return self

    @property
    def queued(self) -> int:
        """Answers not yet given."""
        return len(self._queue)

    def error(self, kind: str, message: str | None = None) -> UpstreamError:
        """An error of ``kind`` (``timeout``, ``unavailable``, ``busy``, ``transport``,
        ``protocol``, ``stream``, or an HTTP status such as ``"429"``) named after this
        upstream; an HTTP status is read from the stand-in's error body by the real
        ``rejection()``."""
        if kind.isdigit():
            body = orjson.dumps(self._server.error_body(int(kind)))
            return rejection(self.name, int(kind), {}, body, None)
        error, default = _ERRORS[kind]
        return error(self.name, message or default)

    def open_circuit(self, retry_in: float = 30.0) -> None:
        """Its circuit is open: it refuses calls at once, as the real one does."""
        detail = f"circuit open; next probe in {retry_in:.1f} s"
        self.state = CloudState(circuit_open=True, detail=detail)

    def remove_key(self) -> None:
        """It has no API key: it refuses calls at once."""
        detail = "no API key configured (set the environment variable named in config.yaml)"
        self.state = CloudState(has_key=False, detail=detail)

    def low_budget(self, below: int = 0) -> None:
        """Its rate budget is under the reserve for a need of ``below`` tokens or more
        (0: for any call); calls still go out, as the real one's do."""
        self.low_below = below

    def restore(self) -> None:
        """Callable again: key, closed circuit, budget."""
        self.state, self.low_below = CloudState(), None

    # -- the Upstream protocol ---------------------------------------------------

    @property
    def base_url(self) -> str | None:
        return self.config.base_url

    @property
    def members(self) -> Sequence[Upstream]:
        return (self,)

    @property
    def configured(self) -> bool:
        return self.state.has_key

    @property
    def unavailable_reason(self) -> str | None:
        return None if self.state.has_key else self.state.detail

    def availability(self, need: int) -> CloudState:
        state = self.state
        if self.low_below is not None and need >= self.low_below and state.reachable:
            detail = f"budget low (need {need})"
            return CloudState(has_key=True, budget_low=True, detail=detail)
        return state

    def status(self) -> dict[str, Any]:
        circuit = "open" if self.state.circuit_open else "closed"
        return {
            "circuit": {"state": circuit, "opened_total": int(self.state.circuit_open)},
            "rate_limit": {},
            "queued": 0,
        }

    async def healthy(self) -> bool | None:
        return self.health

    async def props(self) -> dict[str, Any] | None:
        return self.props_answer

    async def metrics_text(self) -> str | None:
        return None

    async def complete(self, body: JSON) -> Completion:
        started = time.perf_counter()
        content, headers = await self._whole(body)
        data = self._call(completion_body, self.name, content, self.config.model)
        return Completion(data, headers, time.perf_counter() - started, self.name)

    async def pass_on(self, body: JSON) -> PassedAnswer:
        started = time.perf_counter()
        content, headers = await self._whole(body)
        content, view = self._call(read_answer, self.name, content, self.config.model)
        return PassedAnswer(content, view, headers, time.perf_counter() - started, self.name)

    async def open_stream(
        self, body: JSON, *, unread: bool = False, bounded: bool = False
    ) -> OpenStream:
        chunks = self._stream(body, unread=unread)
        return await OpenStream.first_of(self, chunks)

    # -- internals -------------------------------------------------------------

    def _prepare(self, body: JSON) -> JSON:
        """The body as the real class sends it (``ChatUpstream.prepare`` and llama-server's)."""
        body = {**body, "model": self.config.model}
        if body.get("stream") and self.streams_usage:
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return body

    def _call(self, read: Any, *args: Any) -> Any:
        """``read(*args)``, its failure noted as the real upstream notes one."""
        try:
            result = read(*args)
        except UpstreamError as error:
            self.last_error = error.message
            raise
        self.last_ok_at, self.last_error = time.time(), None
        return result

    def _next(self, body: JSON) -> Answer:
        """Refuse as the real upstream does without a call, else record the body and take
        the next answer."""
        if not self.state.reachable:
            error = UpstreamUnavailable(self.name, self.state.detail or "unavailable")
            self.last_error = error.message
            raise error
        self.history.append(body)
        if self._queue:
            return self._queue.popleft()
        if self.default is not None:
            return self.default
        raise AssertionError(f"{self.name}: asked with nothing enqueued: {body!r}")

    async def _whole(self, body: JSON) -> tuple[bytes, dict[str, str]]:
        """The bytes and headers of a whole answer to ``body``."""
        body = self._prepare({k: v for k, v in body.items() if k not in _STREAM_KEYS})
        answer = self._next(body)
        self.in_flight += 1
        try:
            if self.wait_for is not None:
                await self.wait_for.wait()
            reply = self._reply(answer)
            if reply.status != 200:
                raise self._rejection(reply)
            generation = self._generation(reply, body)
            content = orjson.dumps(self._server.completion(generation, body))
            return content, self._server.response_headers(reply)
        except UpstreamError as error:
            self.last_error = error.message
            raise
        finally:
            self.in_flight -= 1

    async def _stream(self, body: JSON, *, unread: bool) -> AsyncGenerator[list[Chunk]]:
        """Batches of parsed chunks, as ``ChatUpstream.stream`` yields them."""
        body = self._prepare({**body, "stream": True})
        answer = self._next(body)
        broken = answer if isinstance(answer, BrokenStream) else None
        model = self.config.model
        parser = ChunkParser(self.name, None, unread=unread, model=model)
        self.in_flight += 1
        try:
            if self.wait_for is not None and self.hold_after is None:
                await self.wait_for.wait()
            reply = self._reply(broken.reply if broken else answer)
            if reply.status != 200:
                raise self._rejection(reply)
            for i, block in enumerate(self._blocks(reply, body, broken)):
                if i == self.hold_after and self.wait_for is not None:
                    await self.wait_for.wait()
                if isinstance(block, UpstreamError):
                    raise block
                batch = parser.feed(block)
                if batch.error is not None:
                    self.last_error = batch.error.message
                if batch.chunks:
                    yield batch.chunks
                if batch.error is not None:
                    raise batch.error
                if batch.done:
                    break
            self.last_ok_at, self.last_error = time.time(), None
        except UpstreamError as error:
            self.last_error = error.message
            raise
        finally:
            self.in_flight -= 1

    def _blocks(
        self, reply: Reply, body: JSON, broken: BrokenStream | None
    ) -> list[bytes | UpstreamError]:
        """The streamed body as network reads of ``batch`` events, then b"" (its end)."""
        stream = self._server.stream(self._generation(reply, body), body)
        content, tail, done = stream.content, stream.tail, reply.stream_done
        if (cut := reply.fail_after_chunks) is not None:
            content, tail, done = content[:cut], self._server.stream_failure(reply), False
        if broken is not None:
            content, tail, done = content[: broken.after], [], False
        events = [b"data: " + orjson.dumps(c) + b"\n\n" for c in (*stream.head, *content, *tail)]
        if done:
            events.append(b"data: [DONE]\n\n")
        n = max(1, self.batch)
        blocks: list[bytes | UpstreamError] = [
            b"".join(events[i : i + n]) for i in range(0, len(events), n)
        ]
        if broken is not None:
            blocks.append(broken.error or self.error("stream"))
        else:
            blocks.append(b"")
        return blocks

    def _reply(self, answer: Answer | BrokenStream) -> Reply:
        if isinstance(answer, UpstreamError):
            raise answer
        if isinstance(answer, BrokenStream):
            answer = answer.reply
        return Reply(answer) if isinstance(answer, str) else answer

    def _generation(self, reply: Reply, body: JSON) -> Generation:
        limit = first_int(body, "n_predict", "max_completion_tokens", "max_tokens")
        calls = self._server.answers_calls(body)
        return Generation.of(reply, limit, prompt_tokens(body), with_calls=calls)

    def _rejection(self, reply: Reply) -> UpstreamRejected:
        """An HTTP error answer, read by the real ``rejection()``."""
        body = orjson.dumps(reply.error or self._server.error_body(reply.status))
        return rejection(self.name, reply.status, self._server.response_headers(reply), body, None)


_STREAM_KEYS = ("stream", "stream_options")
