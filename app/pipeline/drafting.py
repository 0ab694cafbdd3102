"""The local draft, whole or stopped early, and the cloud call hedged alongside it.

``draft`` asks the local model for the draft; with ``early_abort`` it streams it
and stops at the first token under the floor, or when the scorer already doubts
the draft so far (finish_reason ``p_min``; closing the connection stops
llama-server). ``Drafter.start`` runs it as a task (``Drafting``) that the speculator
races against the hedged cloud call (``app.pipeline.hedge``) or a streamed request's
first-token deadline (``FirstToken``, past which only a draft the scorer trusts so far
keeps going). Nothing here calls back up into the speculator.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any

from app.config import SpeculativeConfig
from app.errors import UpstreamError
from app.pipeline.hedge import retrieve
from app.pipeline.plan import FirstTokenBudget
from app.routing.policy import Decision, Policy, decide, doomed_prefix, prefix_score
from app.routing.request_features import RequestFeatures
from app.routing.signals import ABORTED, DraftSignals, draft_signals, entry_logprob
from app.sse import CompletionAssembler
from app.upstreams import Completion, Upstream
from app.vocabulary import ContextType


@dataclass(frozen=True, slots=True)
class Judge:
    """What a request's draft is judged by: the policy in force when it started, the
    request's context type, and what a learned scorer reads of the request."""

    policy: Policy
    context: ContextType
    request: RequestFeatures | None = None

    def decide(self, signals: DraftSignals) -> Decision:
        return decide(signals, self.policy, self.context, self.request)

    def trusts(self, prefix: DraftSignals, max_score: float) -> bool:
        """The scorer's P(wrong) of the draft so far is at most ``max_score`` (never
        without a scorer)."""
        score = prefix_score(prefix, self.policy, self.context, self.request)
        return score is not None and score <= max_score

    def doomed(self, prefix: DraftSignals, min_score: float) -> bool:
        """The draft so far already doubted past ``min_score``: stop it."""
        score = doomed_prefix(prefix, self.policy, self.context, min_score, self.request)
        return score is not None


@dataclass(slots=True)
class FirstToken:
    """A streamed request's first-token budget, on the loop's clock: its draft has until
    ``deadline``; a draft still running then whose P(wrong) so far is at most
    ``trust_score`` (and has at least ``min_tokens`` to be judged by) until
    ``trusted_until``. ``trusted`` tells whether it was waited for so."""

    deadline: float
    trusted_until: float
    trust_score: float | None = None
    min_tokens: int = 1
    trusted: bool = False

    @classmethod
    def starting(cls, budget: FirstTokenBudget, now: float) -> FirstToken:
        """The budget ``setup`` chose, counted from ``now`` on the loop's clock."""
        return cls(now + budget.wait_s, now + budget.trust_s, budget.trust_score, budget.min_tokens)

    def trust(self, judge: Judge, progress: CompletionAssembler, max_tokens: int) -> bool:
        """Whether the draft so far earns the wait past the deadline (then ``trusted``)."""
        if self.trust_score is None or len(progress.logprobs) < self.min_tokens:
            return False
        prefix = draft_signals(progress.completion(), max_tokens)
        self.trusted = judge.trusts(prefix, self.trust_score)
        return self.trusted


@dataclass(frozen=True, slots=True)
class Drafter:
    """Asks the local model for drafts as the speculative settings say."""

    local: Upstream
    spec: SpeculativeConfig

    def start(
        self,
        body: dict[str, Any],
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

    def streams(self, *, can_abort: bool) -> bool:
        """Whether ``draft`` streams the draft (so what came is known if it is stopped)."""
        return self.spec.early_abort and can_abort

    async def draft(
        self,
        body: dict[str, Any],
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
                    assert isinstance(chunk, dict)  # streamed without ``unread``
                    entries = assembler.add(chunk)
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


def _below(entry: dict[str, Any], floor: float) -> bool:
    """The token's log probability is under ``floor`` (one that cannot be read is not)."""
    logprob = entry_logprob(entry)
    return logprob is not None and logprob < floor
