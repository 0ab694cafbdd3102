"""The request path: one ``Call`` per request, served by a strategy, recorded once.

``Pipeline.chat`` is the entry: the cache of verified answers first (``app.cache``), then a
pass-through strategy's one upstream (``answer.Answers``) or ``speculative_decoding``'s draft,
decision and fallback plan (``speculative.Speculator``). Each step returns its typed events
(``app.story``); only this module applies them to the record (``apply``), a relayed stream's
when its chunks end, and hands it to telemetry once. Decisions are pure (``app.routing``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator

from app import story
from app.cache import AnswerCache
from app.call import Call
from app.config import SpeculativeConfig
from app.depth_control import DepthControl
from app.errors import UpstreamError
from app.keys import caller
from app.learning.learner import Learner
from app.pipeline.answer import Answers, LiveRelay
from app.pipeline.speculative import Speculator
from app.pipeline.verify import LateDrafts
from app.pricing import Pricing
from app.protocol import ChatCompletionRequest, JSONObject
from app.record import RequestRecord, Usage
from app.routing.features import draft_features
from app.routing.policy import Policy
from app.story import Audited, Event, Failed, Finished
from app.telemetry import Telemetry
from app.telemetry.logs import request_id
from app.telemetry.narrative import Narrator
from app.upstreams import Upstream, chain
from app.upstreams.parsing import add_counts
from app.vocabulary import Outcome, Strategy
from app.wire import Reply, StreamReply

log = logging.getLogger("specproxy.pipeline")


class Pipeline:
    """Serves chat requests with one of the three strategies."""

    def __init__(
        self,
        spec: SpeculativeConfig,
        upstreams: dict[str, Upstream],
        telemetry: Telemetry,
        *,
        policy: Policy,
        depth: DepthControl,
        pricing: Pricing,
        learner: Learner | None = None,
        local_can: frozenset[str] | None = None,
        cache: AnswerCache,
    ) -> None:
        """Plain construction over parts built from the settings (``app.assembly``).
        ``local_can``: what the local model reads beyond text and whether it calls tools,
        from llama-server's /props (None: not asked, anything is passed on)."""
        self.policy, self.depth, self.pricing, self.learner = policy, depth, pricing, learner
        self.local_can, self.cache = local_can, cache
        self.upstreams, self.telemetry = upstreams, telemetry
        self.local = upstreams[spec.draft_model]
        self.cloud = chain(upstreams, spec.verify_model)
        self.in_flight = 0  # requests started and not yet recorded (streams until their end)
        self._idle = asyncio.Event()  # set while in_flight is 0: a retired pipeline may close
        self._idle.set()
        label = "Cerebras" if self.cloud.config.provider == "cerebras" else self.cloud.name
        narrator = Narrator(label, self.cloud.name)
        self.answers = Answers(
            self.local, self.cloud, spec, self.depth, narrator, telemetry.keeps_content
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
        await self.speculator.late.close()  # drafts finishing for a label: cancelled
        if self.learner is not None:
            await self.learner.close()

    async def chat(
        self, raw: JSONObject, request: ChatCompletionRequest, strategy: Strategy, why: str = ""
    ) -> Reply:
        """Answer one validated request (``why``: a reason its strategy was forced, such as
        ``budget_local``); counts it in ``stats`` however it ends."""
        self.in_flight += 1
        self._idle.clear()
        who = caller.get()
        record = RequestRecord(
            strategy=strategy,
            stream=request.stream,
            request_id=request_id.get(),
            reasons=[why] if why else [],
            key=who.name if who.key_id else None,
            team=who.team,
            draft_model=self.local.name,
            verify_model=self.cloud.name,
        )
        call = Call(raw, request, record)
        try:
            looked = call.looked = await self.cache.look(call, strategy)
            call.events += looked.events
            if call.trace is not None:
                call.trace.mark(*looked.events)
            reply = looked.catch(looked.reply or await self._answer(call, strategy))
        except BaseException as exc:
            call.events.append(Finished.of(exc))
            self._finish(call)
            raise
        if isinstance(reply, StreamReply):
            call.answered()
            reply.chunks = self._finish_after(reply.chunks, reply.relay, call)
        else:
            self._finish(call)
        return reply

    async def _answer(self, call: Call, strategy: Strategy) -> Reply:
        if strategy is Strategy.SPECULATIVE:
            return await self.speculator.run(call)
        upstream = self.local if strategy is Strategy.LOCAL_ONLY else self.cloud
        try:
            answer = await self.answers.answer_with(upstream, call, speculative=False)
        except UpstreamError as exc:
            call.events.append(Failed(exc))
            raise
        call.events += (*answer.events, Finished(Outcome.PASSED_THROUGH))
        return answer.reply

    async def _finish_after(
        self, chunks: AsyncGenerator[bytes], relay: LiveRelay | None, call: Call
    ) -> AsyncGenerator[bytes]:
        """The stream's chunks; once they end (or the client leaves) the relay's outcome
        is applied, then the request is recorded."""
        left = False
        try:
            async for chunk in chunks:
                yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            left = True
            raise
        finally:
            await chunks.aclose()  # closes the upstream stream at once, not when collected
            if relay is not None and relay.outcome is not None:
                call.events.append(relay.outcome)
            if left:
                call.events.append(Finished(Outcome.CLIENT_DISCONNECTED))
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
        """Write the story into the record, classify the request and count it, once."""
        call.events += LateDrafts.told(call.late)  # ended by now: its tokens count here
        for event in call.events:
            apply(call, event)
        rec = call.record
        rec.context_type, rec.classified = call.context().value, True
        if rec.draft is not None and rec.features is None and self.telemetry.spec_log:
            markers = self.policy.uncertainty_markers
            rec.features = draft_features(rec.draft, markers=markers, context_type=rec.context_type)
        if self.telemetry.keeps_content:
            rec.prompt = call.prompt()
        rec.bill = self.pricing.bill(rec, paired=call.late is None or call.late.done())
        audit = call.audit
        self.telemetry.record(rec, log_line=audit is None)
        if audit is not None:
            audit.add_done_callback(lambda task: self._audited(call, task))
        elif self.learner is not None:
            self.learner.observe(rec)
        if (late := call.late) is not None and not late.done():  # counted once it ends
            late.add_done_callback(lambda task: self._counted_late(call, LateDrafts.told(task)))
        try:
            self.depth.observe(rec)
        except Exception:  # adaptive depth must never cost a request its record
            log.exception("adaptive depth failed to take a finished request")
        self.cache.settle(call)  # a verified answer kept, or a hit audited
        if call.trace is not None:  # its spans, from the story (app.telemetry.tracing)
            call.trace.end(call, self.upstreams)

    def _audited(self, call: Call, task: asyncio.Task[Audited | None]) -> None:
        """An audit ended (or was cancelled): its call and label, then the log line."""
        assert self.learner is not None
        self._counted_late(call, [] if task.cancelled() or (a := task.result()) is None else [a])
        self.learner.observe(call.record, audit_rate=call.audit_rate)
        self.telemetry.write_log(call.record)

    def _counted_late(self, call: Call, events: list[Event]) -> None:
        """What ended after the request was counted (an audit, a draft beside): charged."""
        for event in events:
            apply(call, event)
        if (late := self.pricing.bill_late(call.record)) is not None:
            self.telemetry.charge(late)


def apply(call: Call, event: Event) -> None:
    """One event of the request's story, written into its record (the only place it is)."""
    rec = call.record
    match event:
        case story.Counted(model, purpose, n, prompt, latency_s, estimated):
            rec.usage.append(Usage(model, purpose, prompt, n, estimated))
            if model == rec.draft_model:
                rec.local_tokens += n
                rec.draft_s = rec.draft_s or latency_s
            else:
                rec.cloud_tokens += n
                rec.verify_s = rec.verify_s or latency_s
        case story.FellOver(failures):
            rec.upstream_errors += [(e.upstream, e.kind) for e in failures]
        case story.Finished(outcome):
            rec.outcome = outcome
        case story.Served(reasons, tool_calls, first_token_s):
            if reasons is not None:
                rec.reasons = list(reasons)
            rec.tool_calls = tool_calls
            if first_token_s is not None:
                rec.first_token_s = first_token_s
        case story.Started() | story.Planned() | story.Opened() | story.Answered():
            pass  # the log's and the client's report's only
        case story.Failed(exc):
            rec.upstream_errors += [(e.upstream, e.kind) for e in (*exc.fell_over, exc)]
        case story.Prepared(ngrams):
            rec.ngrams = ngrams
        case story.Steered(depth):
            rec.server_depth = depth
        case story.Hedged():
            rec.hedged = True
        case story.Laned(lane, p_wrong):
            rec.lane, rec.gate_p_wrong = lane, p_wrong
        case story.Trusted():
            rec.trusted = True
        case story.Drafted(signals, prompt_tokens, server_spec):
            rec.draft, rec.prompt_tokens, rec.server_spec = signals, prompt_tokens, server_spec
        case story.Stopped(signals) if signals is not None:
            rec.draft = signals
        case story.Judged(reasons, score, features, threshold=threshold):
            rec.decision_reasons, rec.spill_score, rec.features = reasons, score, features
            rec.spill_threshold = threshold if score is not None and threshold >= 0 else None
        case story.Compared(similarity, agreement, acceptance, verified_text, verify_s):
            rec.similarity, rec.agreement, rec.acceptance = similarity, agreement, acceptance
            rec.verified_text = verified_text if verified_text is not None else rec.verified_text
            rec.verify_s = verify_s if verify_s is not None else rec.verify_s
        case story.LocalCounters(counters):
            rec.server_spec = add_counts(rec.server_spec, counters)
        case story.RelayOutcome():
            _apply_relay(call, event)
        case story.Audited(agreement, usage):
            rec.audit, rec.agreement = True, agreement
            rec.usage.append(usage)
        case story.CacheLooked(result, _, baseline):
            rec.cache, rec.cached = result, baseline
        case story.LateDraft(_, counted):
            apply(call, counted)  # the label is the learner's (app.pipeline.verify.LateDrafts)


def _apply_relay(call: Call, out: story.RelayOutcome) -> None:
    """A relayed stream's outcome: its tokens and what went out; a stream that broke
    makes the request an error; a live verification's comparison."""
    n, prompt = out.n_tokens, out.prompt_tokens
    apply(call, story.Counted(out.upstream, out.purpose, n, prompt, estimated=out.estimated))
    first = out.first_token_at - call.started if out.first_token_at is not None else None
    apply(call, story.Served(out.reasons, out.tool_calls, first))
    if out.counters is not None:
        apply(call, out.counters)
    for part in out.continued:  # both parts counted; the break and who failed to continue
        n, prompt, estimated = part.n_tokens, part.prompt_tokens, part.estimated
        apply(call, story.Counted(part.upstream, out.purpose, n, prompt, estimated=estimated))
        apply(call, story.FellOver((part.broken, *part.fell_over)))
        call.record.continued_by = part.upstream
    if out.error is not None:
        apply(call, story.Failed(out.error))
        apply(call, story.Finished(Outcome.ERROR))
    if out.compared is not None:
        apply(call, out.compared)
