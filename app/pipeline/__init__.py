"""The request path: one ``Call`` per request, served by a strategy, recorded once.

``Pipeline.chat`` is the entry: the pass-through strategies answer with one
upstream (``answer.Answers``); ``speculative_decoding`` drafts, decides and
carries out the fallback plan (``speculative.Speculator``). However a request
ends, its record goes to telemetry exactly once. This package is the only code
that calls upstreams and telemetry; every decision is a pure function in
``app.routing`` or ``plan``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

from app.composition import build_policy, learning_store
from app.config import Settings
from app.depth_control import DepthControl
from app.errors import ProxyError, UpstreamError
from app.learning.learner import Learner
from app.pipeline.answer import Answers
from app.pipeline.call import Call
from app.pipeline.narrative import Narrator
from app.pipeline.speculative import Speculator
from app.pipeline.wire import (
    JSONReply,
    Reply,
    SpeculationReport,
    StreamReply,
    add_speculation,
    draft_body,
)
from app.pricing import Pricing
from app.protocol import ChatCompletionRequest
from app.record import RequestRecord
from app.routing.features import draft_features
from app.telemetry import Telemetry
from app.telemetry.logs import request_id
from app.upstreams import Upstream, chain
from app.vocabulary import Outcome, Strategy

log = logging.getLogger("specproxy.pipeline")

__all__ = [
    "Call",
    "JSONReply",
    "Pipeline",
    "Reply",
    "SpeculationReport",
    "StreamReply",
    "add_speculation",
    "draft_body",
]


class Pipeline:
    """Serves chat requests with one of the three strategies."""

    def __init__(
        self, settings: Settings, upstreams: dict[str, Upstream], telemetry: Telemetry
    ) -> None:
        spec = settings.speculative_decoding
        self.policy = build_policy(spec)
        self.depth = DepthControl(settings, settings.logging.spec_adjust_log_file)
        self.upstreams = upstreams
        self.local = upstreams[spec.draft_model]
        self.cloud = chain(upstreams, spec.verify_model)
        self.telemetry = telemetry
        self.pricing = Pricing.of(settings)
        # What the local model can do beyond text (``ChatCompletionRequest.needs``: kinds of
        # content it reads, tool calls), from llama-server's /props at start; None: not a
        # llama-server, so anything is passed on.
        self.local_can: frozenset[str] | None = None
        self.in_flight = 0  # requests started and not yet recorded (streams until their end)
        self._idle = asyncio.Event()  # set while in_flight is 0: a retired pipeline may close
        self._idle.set()
        label = "Cerebras" if self.cloud.config.provider == "cerebras" else self.cloud.name
        narrator = Narrator(label, self.cloud.name)
        self.answers = Answers(self.local, self.depth, narrator, telemetry.keeps_content)
        self.learner: Learner | None = None
        if settings.learning.enabled:
            self.learner = Learner(
                settings.learning,
                self.policy,
                threshold=spec.spill_threshold,
                store=learning_store(settings),
            )
        self.speculator = Speculator(
            spec, self.policy, self.local, self.cloud, self.answers, narrator, self.learner
        )

    async def start(self) -> None:
        """Start what runs in the background (the learner)."""
        if self.learner is not None:
            await self.learner.start()

    async def drained(self) -> None:
        """Return once no request is in flight (a reload retires this pipeline then)."""
        await self._idle.wait()

    async def close(self) -> None:
        """Stop the audits (their requests are still logged) and the learner."""
        if (audits := self.speculator.audits) is not None:
            await audits.close()
        if self.learner is not None:
            await self.learner.close()

    async def chat(
        self, raw: dict[str, Any], request: ChatCompletionRequest, strategy: Strategy
    ) -> Reply:
        """Answer one validated request; counts it in ``stats`` however it ends."""
        self.in_flight += 1
        self._idle.clear()
        record = RequestRecord(
            strategy=strategy,
            stream=request.stream,
            request_id=request_id.get(),
            draft_model=self.local.name,
            verify_model=self.cloud.name,
        )
        call = Call(raw, request, record)
        try:
            if strategy is Strategy.SPECULATIVE:
                reply = await self.speculator.run(call)
            else:
                reply = await self._direct(call, strategy)
        except BaseException as exc:
            call.finish(_failure_outcome(exc))
            self._finish(call)
            raise
        if isinstance(reply, StreamReply):
            call.answered()
            reply.chunks = self._finish_after(reply.chunks, call)
        else:
            self._finish(call)
        return reply

    async def _direct(self, call: Call, strategy: Strategy) -> Reply:
        upstream = self.local if strategy is Strategy.LOCAL_ONLY else self.cloud
        try:
            reply = await self.answers.answer_with(upstream, call, None)
        except UpstreamError as exc:
            call.fail(exc)
            raise
        call.finish(Outcome.PASSED_THROUGH)
        return reply

    async def _finish_after(
        self, chunks: AsyncGenerator[bytes], call: Call
    ) -> AsyncGenerator[bytes]:
        try:
            async for chunk in chunks:
                yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            call.finish(Outcome.CLIENT_DISCONNECTED)
            raise
        finally:
            await chunks.aclose()  # closes the upstream stream at once, not when collected
            self._finish(call)

    def _finish(self, call: Call) -> None:
        call.record.total_s = time.perf_counter() - call.started
        self.in_flight -= 1
        # Counted as soon as the answer is on its way, not before: call_soon runs it
        # ahead of anything the loop reads next (a /stats call included).
        asyncio.get_running_loop().call_soon(self._record, call)
        if not self.in_flight:
            self._idle.set()  # after the call_soon: a waiter wakes once this is recorded

    def _record(self, call: Call) -> None:
        """Classify the request (unless the decision did) and count it."""
        rec = call.record
        call.context()
        if rec.draft is not None and rec.features is None and self.telemetry.spec_log:
            rec.features = draft_features(
                rec.draft,
                markers=self.policy.uncertainty_markers,
                context_type=rec.context_type,
            )
        if self.telemetry.keeps_content:
            rec.prompt = call.prompt()
        rec.bill = self.pricing.bill(rec)
        audit = call.audit
        self.telemetry.record(rec, log_line=audit is None)
        if audit is not None:
            audit.add_done_callback(lambda _: self._audited(call))
        elif self.learner is not None:
            self.learner.observe(rec)
        try:
            self.depth.observe(rec)
        except Exception:  # adaptive depth must never cost a request its record
            log.exception("adaptive depth failed to take a finished request")

    def _audited(self, call: Call) -> None:
        """An audit ended (or was cancelled): its label, then the request's log line."""
        assert self.learner is not None
        rec = call.record
        self.learner.observe(rec, audit_rate=call.audit_rate)
        if rec.bill is not None:  # the audit's own call, counted after its request
            charges = [self.pricing.charge(u) for u in rec.usage[len(rec.bill.charges) :]]
            rec.bill.charges.extend(charges)
            self.telemetry.charge(charges)
        self.telemetry.write_log(rec)


def _failure_outcome(exc: BaseException) -> Outcome:
    """How a request that raised is counted: the client's mistake, gone, or an error."""
    if isinstance(exc, asyncio.CancelledError):
        return Outcome.CLIENT_DISCONNECTED
    if isinstance(exc, ProxyError) and exc.status < 500 and exc.status != 429:
        return Outcome.CLIENT_ERROR
    return Outcome.ERROR
