"""The local draft, whole or stopped early, and the cloud call hedged alongside it.

``draft`` asks the local model for the draft; with ``early_abort`` it streams it
and stops at the first token under the floor, or when the scorer already doubts
the draft so far (finish_reason ``p_min``; closing the connection stops
llama-server). ``Drafter.start`` runs it as a task (``Drafting``) that the speculator
races against the hedged cloud call (``app.pipeline.hedge``) or a streamed request's
first-token deadline (``FirstToken``, past which only a draft the scorer trusts so far
keeps going; ``Judge``, in ``app.routing.policy``, is what it is judged by). What a
draft did is returned as events (``took``, ``stopped``, ``FirstToken.told``) for the
speculator to add. Nothing here calls back up into the speculator.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

from app.config import SpeculativeConfig
from app.errors import UpstreamError
from app.pipeline.hedge import Hedge, retrieve
from app.protocol import JSONObject
from app.routing.policy import Judge
from app.routing.setup import FirstTokenBudget
from app.routing.signals import ABORTED, OUT_OF_TIME, DraftSignals, draft_signals, entry_logprob
from app.sse import CompletionAssembler
from app.story import Counted, Drafted, Event, FellOver, Stopped, Trusted
from app.upstreams import Completion, Upstream
from app.upstreams.parsing import server_speculation
from app.vocabulary import Purpose


@dataclass(slots=True)
class FirstToken:
    """A streamed request's first-token budget, on the loop's clock: its draft has until
    ``deadline``; a draft still running then whose P(wrong) so far is at most
    ``trust_score`` (and has at least ``min_tokens`` to be judged by) until
    ``trusted_until``. ``trusted`` tells whether it was waited for so. ``finish_late``: a
    draft that loses to the cloud's stream is left running (``late``) for a label, not
    cancelled (``app.pipeline.verify.LateDrafts``)."""

    deadline: float
    trusted_until: float
    trust_score: float | None = None
    min_tokens: int = 1
    trusted: bool = False
    finish_late: bool = False
    late: asyncio.Future[Completion] | None = None

    @classmethod
    def starting(cls, budget: FirstTokenBudget, now: float, *, late: bool = False) -> FirstToken:
        """The budget ``setup`` chose, counted from ``now`` on the loop's clock (``late``:
        a draft that loses may finish for a label)."""
        trust, tokens = budget.trust_score, budget.min_tokens
        return cls(now + budget.wait_s, now + budget.trust_s, trust, tokens, finish_late=late)

    def trust(self, judge: Judge, progress: CompletionAssembler, max_tokens: int) -> bool:
        """Whether the draft so far earns the wait past the deadline (then ``trusted``)."""
        if self.trust_score is None or len(progress.logprobs) < self.min_tokens:
            return False
        prefix = draft_signals(progress.completion(), max_tokens)
        self.trusted = judge.trusts(prefix, self.trust_score)
        return self.trusted

    def told(self) -> list[Trusted]:
        """A draft waited for past the budget, as the story tells it."""
        return [Trusted(self.trust_score)] if self.trusted else []


@dataclass(frozen=True, slots=True)
class Drafter:
    """Asks the local model for drafts as the speculative settings say."""

    local: Upstream
    spec: SpeculativeConfig

    def start(
        self,
        body: JSONObject,
        judge: Judge,
        *,
        can_abort: bool,
        progress: CompletionAssembler | None = None,
    ) -> Drafting:
        """The draft, started as a task that the speculator races against the cloud."""
        drafting = self.draft(body, judge, can_abort=can_abort, progress=progress)
        task = asyncio.ensure_future(drafting)
        task.add_done_callback(retrieve)
        return Drafting(task)

    def took(
        self, draft: Completion, budget: int, client_limit: int | None
    ) -> tuple[DraftSignals, list[Event]]:
        """The draft's signals, and what it did: the pool members that failed before one
        drafted, its tokens, and the draft itself."""
        signals = draft_signals(draft.body, budget, client_limit)
        prompt, latency = draft.prompt_tokens, draft.latency_s
        n = signals.n_tokens
        return signals, [
            FellOver(draft.fell_over),
            Counted(self.local.name, Purpose.DRAFT, n, prompt, latency_s=latency),
            Drafted(signals, prompt, server_speculation(draft.body)),
        ]

    def stopped(
        self, progress: CompletionAssembler, budget: int, *, out_of_time: bool, streamed: bool
    ) -> list[Event]:
        """A draft cancelled for the cloud: what a streamed one had sent when its first-token
        budget ran out (logged; no label: it was never judged whole), and the local model's
        work, counted though its answer went unused (none when the hedge came first)."""
        signals = None
        if out_of_time and streamed:
            signals = draft_signals(progress.completion(OUT_OF_TIME), budget)
        if not out_of_time:
            return [Stopped(signals, out_of_time=False)]
        n = len(progress.logprobs) or progress.token_chunks  # the reader's count
        counted = Counted(self.local.name, Purpose.DRAFT, n, estimated=True)
        return [Stopped(signals, out_of_time=True), counted]

    async def race(
        self,
        body: JSONObject,
        judge: Judge,
        hedge: Hedge,
        first_token: FirstToken | None,
        progress: CompletionAssembler,
        can_abort: bool,
        cloud: Upstream,
        raw: JSONObject,
    ) -> Completion | None:
        """The draft; None when the cloud won the race: the hedged answer came first, or a
        stream's first-token budget ran out with the cloud's stream flowing (the draft is
        cancelled, or left running as ``first_token.late`` when it may finish late; a
        streamed draft's tokens so far are left in ``progress``). A stream not hedged from
        the start opens ``cloud``'s stream (for ``raw``) at the deadline. A hedge that fails
        first changes nothing: the draft decides, as without it."""
        if first_token is None and not hedge.started:
            return await self.draft(body, judge, can_abort=can_abort)
        drafting = self.start(
            body, judge, can_abort=can_abort, progress=progress if first_token else None
        )
        lost = False
        try:
            if first_token is None:
                lost = await drafting.loses_to(hedge)
            elif not await drafting.within(first_token, judge, progress, body["max_tokens"]):
                if not hedge.started:  # the cloud's stream opens at the deadline
                    hedge.open_stream(cloud, raw)
                lost = hedge.streams and await hedge.flowing_or(drafting.task)
        except BaseException:
            drafting.cancel()  # we were cancelled ourselves (client gone)
            raise
        if lost and first_token is not None and first_token.finish_late:
            first_token.late = drafting.task  # the cloud's stream goes out; this, to a label
            return None
        return await drafting.unless(lost)

    def streams(self, *, can_abort: bool) -> bool:
        """Whether ``draft`` streams the draft (so what came is known if it is stopped)."""
        return self.spec.early_abort and can_abort

    async def draft(
        self,
        body: JSONObject,
        judge: Judge,
        *,
        can_abort: bool,
        progress: CompletionAssembler | None = None,
    ) -> Completion:
        """The local draft, whole; with ``early_abort`` (and ``can_abort``: a cloud to go
        to), streamed into ``progress`` (or an assembler of its own) and stopped at the first
        token under ``abort_min_token_prob`` or, with ``abort_min_score``, when the scorer
        already doubts the draft so far that much."""
        if not self.streams(can_abort=can_abort):
            # Stopping a draft only helps when the cloud can take over.
            return await self.local.complete(body)
        started = time.perf_counter()
        floor = math.log(p) if (p := self.spec.abort_min_token_prob) > 0 else -math.inf
        every, min_score = self.spec.abort_check_tokens, self.spec.abort_min_score
        next_check = every
        assembler = progress if progress is not None else CompletionAssembler()
        finish: str | None = None
        opened = await self.local.open_stream(body, bounded=True)  # read whole before answering
        try:
            async for batch in opened.batches():
                for chunk in batch:
                    entries = assembler.add(chunk)  # streamed without ``unread``: read
                    if any(e.get("token") and _below(e, floor) for e in entries):
                        finish = ABORTED
                    elif min_score is not None and len(assembler.logprobs) >= next_check:
                        next_check = len(assembler.logprobs) + every
                        prefix = draft_signals(assembler.completion(), body["max_tokens"])
                        if judge.doomed(prefix, min_score):
                            finish = ABORTED
                    if finish:
                        break
                if finish:
                    break
        finally:
            await opened.rest.aclose()  # an aborted draft's connection closes: llama-server stops
        if finish is None and assembler.finish_reason is None:
            raise UpstreamError(self.local.name, "draft stream ended before finish_reason")
        latency = time.perf_counter() - started
        completion = assembler.completion(finish)
        return Completion(completion, {}, latency, opened.upstream.name, opened.fell_over)


@dataclass(frozen=True, slots=True)
class Drafting:
    """A draft running as a task: waited for until a time, or given up for the cloud."""

    task: asyncio.Future[Completion]

    @property
    def done(self) -> bool:
        """Whether the draft has ended (answered or failed)."""
        return self.task.done()

    async def by(self, when: float) -> bool:
        """Wait for the draft until the loop's clock reads ``when``; whether it is done."""
        timeout = max(0.0, when - asyncio.get_running_loop().time())
        await asyncio.wait((self.task,), timeout=timeout)
        return self.task.done()

    async def loses_to(self, hedge: Hedge) -> bool:
        """Wait until the draft or the hedged call is done; whether the hedge answered first
        (one that fails first changes nothing: the draft decides, as without it)."""
        await hedge.race(self.task)
        return not self.done and hedge.answered

    async def within(
        self, first_token: FirstToken, judge: Judge, progress: CompletionAssembler, budget: int
    ) -> bool:
        """Wait for the draft until the first-token deadline, or past it until
        ``trusted_until`` while the draft so far (``progress``) earns it; whether it is done."""
        late = not await self.by(first_token.deadline)
        if late and first_token.trust(judge, progress, budget):
            await self.by(first_token.trusted_until)  # trusted: it may go on
        return self.done

    async def unless(self, lost: bool) -> Completion | None:
        """The draft; None (it is cancelled and its stream closed) when the cloud won."""
        if lost:
            self.cancel()
            await asyncio.wait((self.task,))  # let it close its stream
            return None
        return await self.task

    def cancel(self) -> None:
        """Stop the draft (the request was cancelled, or the cloud won)."""
        self.task.cancel()


def _below(entry: Mapping[str, object], floor: float) -> bool:
    """The token's log probability is under ``floor`` (one that cannot be read is not)."""
    logprob = entry_logprob(entry)
    return logprob is not None and logprob < floor
