"""The cloud call started alongside the draft: whole, or as a stream kept for relaying.

A ``Hedge`` is one background cloud call whose answer can stand in for a
verification. ``Hedge.start`` asks for the whole answer; ``Hedge.stream`` (a
streamed request under a first-token budget) opens the cloud's stream and reads it
into a buffer, so that when the proxy commits to it, ``live()`` relays what came so
far and then the rest as it arrives, and when the draft is served instead,
``cancel()`` stops it with the tokens it had sent known. Either way ``answer()`` is
the whole answer, for a merge; ``settle`` returns the tokens of one whose answer went
unused, as events.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from app.chat_completion import Chunk
from app.errors import UpstreamError
from app.protocol import JSONObject
from app.routing.plan import HedgeState
from app.routing.setup import HedgeMode
from app.sse import CompletionAssembler
from app.story import Counted, Drafted, Event, cloud_counted
from app.upstreams import Completion, OpenStream, Upstream
from app.vocabulary import Purpose


class Hedge:
    """The cloud call started alongside the draft (or none yet: ``Hedge.off()``)."""

    def __init__(self) -> None:
        self._task: asyncio.Task[Completion] | None = None
        self._tap: _Tap | None = None  # the buffered stream, for a streamed hedge
        self.used = False  # its answer was asked for (served, relayed or compared)

    @classmethod
    def start(cls, cloud: Upstream, body: JSONObject) -> Hedge:
        """Ask ``cloud`` for the whole answer now, in the background."""
        hedge = cls()
        hedge._run(cloud.complete(body))
        return hedge

    @classmethod
    def stream(cls, cloud: Upstream, body: JSONObject) -> Hedge:
        """Open ``cloud``'s stream now and read it into a buffer, in the background."""
        hedge = cls()
        hedge.open_stream(cloud, body)
        return hedge

    @classmethod
    def of(cls, mode: HedgeMode, cloud: Upstream, body: JSONObject) -> Hedge:
        """The hedge ``setup`` chose: none yet, the whole answer, or the stream."""
        if mode is HedgeMode.WHOLE:
            return cls.start(cloud, body)
        return cls.stream(cloud, body) if mode is HedgeMode.STREAM else cls.off()

    @classmethod
    def off(cls) -> Hedge:
        """No hedge (yet): the cloud is called only if the draft needs it."""
        return cls()

    def open_stream(self, cloud: Upstream, body: JSONObject) -> None:
        """Start the streamed call now (one not started with the draft: at its deadline)."""
        assert self._task is None, "a hedge was already started"
        self._tap = _Tap()
        self._run(self._tap.read(cloud, body))

    def _run(self, call: Any) -> None:
        self._task = asyncio.ensure_future(call)
        self._task.add_done_callback(retrieve)

    @property
    def started(self) -> bool:
        """Whether a cloud call was started alongside the draft."""
        return self._task is not None

    @property
    def streams(self) -> bool:
        """It is a stream that can be relayed live as it arrives."""
        return self._tap is not None

    @property
    def usable(self) -> bool:
        """Started, and not (yet) failed or cancelled: its answer can stand in for a call."""
        task = self._task
        return task is not None and not (task.done() and (task.cancelled() or task.exception()))

    @property
    def answered(self) -> bool:
        """Its whole answer is here."""
        task = self._task
        return task is not None and task.done() and not task.cancelled() and not task.exception()

    @property
    def state(self) -> HedgeState:
        """Where the call stands, for the fallback plan."""
        if not self.started:
            return HedgeState.OFF
        if not self.usable:
            return HedgeState.FAILED
        return HedgeState.ANSWERED if self.answered else HedgeState.PENDING

    @property
    def failure(self) -> UpstreamError | None:
        """The upstream error it ended with, if any."""
        task = self._task
        if task is None or not task.done() or task.cancelled():
            return None
        exc = task.exception()
        return exc if isinstance(exc, UpstreamError) else None

    @property
    def result(self) -> Completion | None:
        """Its answer, if it has come."""
        return self._task.result() if self.answered and self._task is not None else None

    @property
    def buffered(self) -> int:
        """Batches of a stream read and not yet relayed (what it holds in memory)."""
        return len(self._tap.batches) if self._tap is not None else 0

    @property
    def tokens_sent(self) -> int:
        """Content chunks a stream had sent so far (the cost of one stopped in flight)."""
        return self._tap.tokens if self._tap is not None else 0

    async def answer(self) -> Completion:
        """The cloud's whole answer (waits for it); raises what the call raised."""
        assert self._task is not None, "no hedge was started"
        self.used = True
        return await self._task

    async def ended(self) -> Completion | None:
        """Its whole answer once the call has ended, without using it (None: it failed or
        was stopped; waiting here is cancelled alone, never the call)."""
        if self._task is None:
            return None
        await asyncio.wait((self._task,))
        return self.result

    async def race(self, other: asyncio.Future[Any]) -> None:
        """Wait until this call or ``other`` is done, whichever is first."""
        assert self._task is not None, "no hedge was started"
        await asyncio.wait((other, self._task), return_when=asyncio.FIRST_COMPLETED)

    async def flowing_or(self, other: asyncio.Future[Any]) -> bool:
        """Wait until this stream's first chunk has come or ``other`` is done; whether the
        stream is flowing (False: it failed first, or ``other`` came first)."""
        assert self._tap is not None and self._task is not None, "no stream was started"
        first = asyncio.ensure_future(self._tap.opened.wait())
        try:
            await asyncio.wait((other, first, self._task), return_when=asyncio.FIRST_COMPLETED)
        finally:
            first.cancel()
        return self._tap.opened.is_set() and self.usable and not other.done()

    async def answered_by(self, deadline: float) -> bool:
        """Wait for the whole answer until the loop's clock reads ``deadline``; whether it came."""
        assert self._task is not None, "no hedge was started"
        timeout = max(0.0, deadline - asyncio.get_running_loop().time())
        await asyncio.wait((self._task,), timeout=timeout)
        return self.answered

    async def live(self) -> OpenStream:
        """The stream from its first chunk, for relaying: what came so far, then the rest
        as it arrives; raises the call's error if it failed before its first chunk."""
        assert self._tap is not None and self._task is not None, "no stream was started"
        self.used = True
        await self.flowing_or(self._task)
        if not self._tap.opened.is_set():
            await self._task  # it failed before any chunk: this raises its error
        return self._tap.follow(self._task)

    def settle(self, cloud: str, story: Sequence[Event]) -> list[Event]:
        """The tokens of a call whose answer was not used, as far as they are known; one
        still running is stopped (the draft won). An answer that came is counted whole; a
        call stopped in flight by the request's prompt (the local model's count in the
        ``story``) and the tokens its stream had sent (none for a whole answer), on
        ``cloud`` (the first asked); a failed call costs nothing."""
        if not self.started or self.used:
            return []
        if (answer := self.result) is not None:
            return cloud_counted(answer, Purpose.HEDGE)
        if self.cancel():
            drafted = (e.prompt_tokens for e in story if isinstance(e, Drafted))
            sent, prompt = self.tokens_sent, next(drafted, 0)
            return [Counted(cloud, Purpose.HEDGE_CANCELLED, sent, prompt, estimated=True)]
        return []

    def cancel(self) -> bool:
        """Stop the call if it is still running (the draft won); whether it was."""
        if self._task is not None and not self._task.done():
            return self._task.cancel()
        return False


class _Tap:
    """A cloud stream read in the background into batches that can be replayed and followed
    (once): a batch is kept until it is handed on, the answer's text until the end."""

    def __init__(self) -> None:
        self.batches: deque[list[Chunk]] = deque()  # read, not yet handed to the follower
        self.opened = asyncio.Event()  # the first chunk has come
        self.changed = asyncio.Event()  # a batch came or the stream ended
        self.tokens = 0
        self.upstream_name = ""
        self._stream: OpenStream | None = None

    async def read(self, cloud: Upstream, body: JSONObject) -> Completion:
        """The whole answer, assembled while each batch is kept for ``follow``."""
        self.upstream_name = cloud.name
        started = time.perf_counter()
        assembler = CompletionAssembler()
        try:
            opened = self._stream = await cloud.open_stream(body)
            self.upstream_name = opened.upstream.name
            self.opened.set()
            async for batch in opened.batches():
                self.batches.append(batch)
                for chunk in batch:
                    assembler.add(chunk)  # streamed without ``unread``: read, and counted
                self.tokens = assembler.token_chunks
                self.changed.set()
        finally:
            self.changed.set()
            if self._stream is not None:
                await self._stream.rest.aclose()
        if assembler.finish_reason is None:
            raise UpstreamError(self.upstream_name, "stream ended before finish_reason")
        latency = time.perf_counter() - started
        assert self._stream is not None
        fell_over = self._stream.fell_over
        return Completion(assembler.completion(), {}, latency, self.upstream_name, fell_over)

    def follow(self, task: asyncio.Task[Completion]) -> OpenStream:
        """The stream as an ``OpenStream``: the batches so far as its first, then the rest;
        each batch is let go as it is handed on (a long answer is not held whole)."""
        assert self._stream is not None
        task.add_done_callback(lambda _: self.changed.set())  # the end wakes a follower
        first = [chunk for batch in self.batches for chunk in batch]
        self.batches.clear()
        rest = self._rest(task)
        return OpenStream(self._stream.upstream, first, rest, self._stream.fell_over)

    async def _rest(self, task: asyncio.Task[Completion]) -> AsyncGenerator[list[Chunk]]:
        try:
            while True:
                while self.batches:
                    yield self.batches.popleft()
                if task.done():
                    if not task.cancelled() and isinstance(exc := task.exception(), UpstreamError):
                        raise exc  # the stream broke: the relay ends it with an error event
                    return
                self.changed.clear()
                await self.changed.wait()
        finally:
            task.cancel()  # the client is gone (or the stream ended: then this does nothing)


def retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a race's failure as seen: a lost race's error is not worth a loop warning."""
    if not task.cancelled():
        task.exception()
