"""The kit the speculative flows' unit tests share: the shipped config with overrides, a
``Pipeline`` over queue-backed fakes, and what one request left behind.

Every flow is driven through ``Pipeline.chat`` only (the stable entry point) and read
back from what it returns (a JSON reply, or a stream whose chunks are collected), the
``RequestRecord`` telemetry received, the ``Stats`` it was counted in, and the fakes'
``history``. Ordering is by events: a fake's ``wait_for`` gate, set by ``release_when``
(once the fakes show a state) or ``release_after`` (after some turns of the loop), never
by sleeping; each request runs within ``GUARD_S``, so a flow that would wait out a budget
fails instead of passing slowly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson
import yaml

from app.assembly import pipeline_of
from app.config import Settings, settings_from_mapping
from app.protocol import ChatCompletionRequest
from app.record import RequestRecord
from app.telemetry import Telemetry
from app.telemetry.stats import Stats
from app.vocabulary import Purpose, Strategy
from app.wire import JSONReply, StreamReply
from tests.fakes import Reply
from tests.fakes.script import tokenize
from tests.support.answers import GOOD_DRAFT, HEDGED, collect_calls
from tests.support.fake_upstream import FakeUpstream
from tests.support.proxy import CLOUD_KEY, deep_merge

SHIPPED = Path(__file__).resolve().parents[2] / "config.yaml"

JSON = dict[str, Any]

ASK = {"messages": [{"role": "user", "content": "Say hello"}]}
CODE_ASK = {
    "messages": [
        {"role": "user", "content": "Write a Python function `def reverse(s):` that reverses s."}
    ]
}


def probs(text: str, p: float, *, first: float | None = None) -> list[float]:
    """One probability per fake token of ``text`` (``first``: the first token's)."""
    n = len(tokenize(text))
    return ([first] if first is not None else [p]) + [p] * (n - 1)


# Under the shipped scorer (``combined``, threshold 0.5) a draft whose tokens are sure but
# for one close call scores about 0.01 (served), one of even 0.6 tokens about 0.999 (doubted).
CONFIDENT = Reply(GOOD_DRAFT, token_probs=probs(GOOD_DRAFT, 0.99, first=0.34))
DOUBTFUL = Reply(HEDGED, token_probs=probs(HEDGED, 0.6))
LONG_TEXT = " ".join(["Machine learning fits models to data so they can predict new cases."] * 4)


# The flows here are the judge's and the plan's, not the learner's: learning (shipped on) is
# off unless a test turns it on, else its cold judge would verify every draft and audits
# would call the cloud after the answer.
NOT_LEARNING = {"learning": {"enabled": False}}


def shipped_settings(**overrides: Any) -> Settings:
    """The shipped config.yaml, learning off (``NOT_LEARNING``), with ``overrides`` laid on
    top (nested keys merged), the cloud's key from the environment as the file asks."""
    tree = deep_merge(yaml.safe_load(SHIPPED.read_text(encoding="utf-8")), NOT_LEARNING)
    return settings_from_mapping(deep_merge(tree, overrides), {"CEREBRAS_API_KEY": CLOUD_KEY})


def local_fake(*answers: Any, **options: Any) -> FakeUpstream:
    """The local llama-server, named as the shipped config names it."""
    return FakeUpstream("local", **options).enqueue(*answers)


def cloud_fake(*answers: Any, name: str = "cerebras", **options: Any) -> FakeUpstream:
    """A Cerebras verifier."""
    return FakeUpstream(name, speaks="cerebras", **options).enqueue(*answers)


# Far above any flow here (milliseconds), far below the budgets some tests set (30 s): a
# flow that waits out such a budget, or a fake it should not wait for, fails instead.
GUARD_S = 10.0

T = TypeVar("T")


async def guarded(flow: Awaitable[T]) -> T:
    """``flow``, failed with TimeoutError if it takes ``GUARD_S``."""
    return await asyncio.wait_for(flow, GUARD_S)


class Recorder(Telemetry):
    """Telemetry that also keeps every record it counted."""

    def __init__(self) -> None:
        super().__init__(Stats())
        self.records: list[RequestRecord] = []

    def record(self, rec: RequestRecord, *, log_line: bool = True) -> None:
        self.records.append(rec)
        super().record(rec, log_line=log_line)


@dataclass
class Served:
    """What one request gave the client, and what it left in telemetry."""

    headers: dict[str, str]
    body: JSON  # the JSON answer; for a stream, its finishing chunk
    text: str
    chunks: list[JSON] = field(default_factory=list)  # a stream's data events, in order
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    events: list[bytes] = field(default_factory=list)  # a stream's raw events
    record: RequestRecord | None = None
    stats: Stats | None = None

    @property
    def model_used(self) -> str:
        return str(self.body["model_used"])

    @property
    def report(self) -> JSON:
        """The ``speculative_decoding`` object."""
        return self.body["speculative_decoding"]

    @property
    def rec(self) -> RequestRecord:
        assert self.record is not None, "the request was not recorded"
        return self.record

    @property
    def purposes(self) -> list[tuple[str, Purpose]]:
        """(upstream, purpose) of every call the record counted, in order."""
        return [(u.model, u.purpose) for u in self.rec.usage]

    @property
    def by_outcome(self) -> dict[str, int]:
        """``/stats`` → ``requests.by_outcome`` after this request."""
        assert self.stats is not None
        return dict(self.stats.get_metrics()["requests"]["by_outcome"])

    @property
    def routing_events(self) -> dict[str, int]:
        """``/stats`` → ``routing_events`` after this request (hedged, early_abort...)."""
        assert self.stats is not None
        return dict(self.stats.get_metrics()["routing_events"])


class Flow:
    """One ``Pipeline`` over fakes: ``local`` drafts, ``cloud`` verifies (more verifiers
    under their own names for a chain)."""

    def __init__(
        self,
        local: FakeUpstream,
        cloud: FakeUpstream,
        *more: FakeUpstream,
        **overrides: Any,
    ) -> None:
        self.local, self.cloud, self.more = local, cloud, more
        self.settings = shipped_settings(**overrides)
        self.telemetry = Recorder()
        upstreams: dict[str, Any] = {local.name: local, cloud.name: cloud}
        upstreams |= {fake.name: fake for fake in more}
        self.pipeline = pipeline_of(self.settings, upstreams, self.telemetry)

    @property
    def stats(self) -> Stats:
        return self.telemetry.stats

    async def chat(
        self,
        body: JSON,
        strategy: Strategy = Strategy.SPECULATIVE,
        *,
        answered: Callable[[], None] | None = None,
    ) -> Served:
        """One request through ``Pipeline.chat``; a stream is read to its end
        (``answered`` is called first: the reply is on its way, nothing read yet)."""
        request = ChatCompletionRequest.model_validate(body)
        reply = await self.pipeline.chat(body, request, strategy)
        if answered is not None:
            answered()
        if isinstance(reply, JSONReply):
            data = orjson.loads(reply.content)
            text = data["choices"][0]["message"].get("content") or ""
            served = Served(reply.headers, data, text)
        else:
            assert isinstance(reply, StreamReply)
            raw = b"".join([chunk async for chunk in reply.chunks])
            events = [e for e in raw.split(b"\n\n") if e]
            chunks = [orjson.loads(e[len(b"data: ") :]) for e in events if e[6:7] == b"{"]
            text, calls, _, final = collect_calls(chunks)
            served = Served(reply.headers, final, text, chunks, calls, events)
        await self.settled()
        served.record = self.telemetry.records[-1] if self.telemetry.records else None
        served.stats = self.stats
        return served

    async def settled(self) -> None:
        """Let the loop run what the request left scheduled (its record, a cancelled hedge)."""
        for _ in range(3):
            await asyncio.sleep(0)

    def ask(self, body: JSON, strategy: Strategy = Strategy.SPECULATIVE) -> Served:
        """``chat`` on a loop of its own, within ``GUARD_S``."""
        return asyncio.run(guarded(self.chat(body, strategy)))

    def fails(self, body: JSON, error: type[BaseException]) -> tuple[BaseException, Stats]:
        """The request raises ``error``; it is still recorded once."""

        async def chat() -> BaseException:
            try:
                await self.chat(body)
            except error as exc:
                await self.settled()
                return exc
            raise AssertionError(f"expected {error.__name__}")

        return asyncio.run(guarded(chat())), self.stats


def streamed(body: JSON, **extra: Any) -> JSON:
    """``body`` asked as a stream."""
    return {**body, "stream": True, **extra}


async def until(ready: Callable[[], bool], turns: int = 2000) -> None:
    """Wait until ``ready()`` holds, checking at every turn of the loop (no clock)."""
    for _ in range(turns):
        if ready():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never came")


async def release_when(gate: asyncio.Event, ready: Callable[[], bool], turns: int = 1000) -> None:
    """Set ``gate`` once ``ready()`` holds, checking at every turn of the loop (no clock)."""
    await until(ready, turns)
    gate.set()


async def read_past(
    flow: Flow,
    body: JSON,
    held: asyncio.Event,
    ready: Callable[[], bool],
    before: Callable[[], bool] = lambda: True,
) -> None:
    """Ask for ``body`` as a stream and read its first chunk (the cloud's stream flowing,
    the draft ``held``); with ``before()`` holding then, release the draft while the client
    is still reading, wait until ``ready()``, read the rest and let the flow settle."""
    request = ChatCompletionRequest.model_validate(body)
    reply = await flow.pipeline.chat(body, request, Strategy.SPECULATIVE)
    assert isinstance(reply, StreamReply)
    chunks = reply.chunks.__aiter__()
    await chunks.__anext__()
    assert before()
    held.set()
    await until(ready)
    async for _ in chunks:
        pass
    await flow.settled()


async def release_after(gate: asyncio.Event, turns: int) -> None:
    """Set ``gate`` after ``turns`` turns of the loop (no clock): for a moment nothing
    outside the pipeline shows, such as a deadline of 0 s having been checked."""
    for _ in range(turns):
        await asyncio.sleep(0)
    gate.set()
