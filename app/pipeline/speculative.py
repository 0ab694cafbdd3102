"""The speculative strategy: draft locally, decide, then carry out the fallback plan.

``Speculator.run`` is the whole path: the draft (with a hedged cloud call when a
spill is likely), the decision (``app.routing.policy.decide``), then the steps
``app.pipeline.plan`` chooses, each carried out here; a step that fails adds one
fact and the plan is asked again. A streamed request under a first-token budget
(``stream_first_token_s``) hedges with the cloud's stream: a draft accepted within
the budget is served, else the cloud's stream is relayed as it arrives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace

from app.config import SpeculativeConfig
from app.errors import (
    AllUpstreamsFailed,
    InvalidRequest,
    NoValidAnswer,
    UpstreamError,
    UpstreamRejected,
)
from app.learning.learner import Learner
from app.pipeline.answer import Answers, LiveCheck, merge_draft
from app.pipeline.audit import Audits
from app.pipeline.call import Call
from app.pipeline.drafting import Drafter, FirstToken, Judge
from app.pipeline.hedge import Hedge
from app.pipeline.narrative import Narrator
from app.pipeline.plan import CloudState, Facts, Plan, Step, plan
from app.pipeline.relay import StreamRelay
from app.pipeline.wire import (
    Reply,
    SpeculationReport,
    StreamReply,
    draft_body,
    headers,
    server_speculation,
)
from app.routing.policy import Decision, Policy, likely_spill
from app.routing.request_features import request_features
from app.routing.signals import OUT_OF_TIME, DraftSignals, draft_signals
from app.routing.tool_calls import tool_calls_of
from app.sse import CompletionAssembler
from app.upstreams import Completion, OpenStream, Upstream
from app.vocabulary import ContextType, Outcome, Purpose


class Speculator:
    """Serves requests with the speculative_decoding strategy."""

    def __init__(
        self,
        spec: SpeculativeConfig,
        policy: Policy,
        local: Upstream,
        cloud: Upstream,
        answers: Answers,
        narrator: Narrator,
        learner: Learner | None = None,
    ) -> None:
        self.spec = spec
        self.policy = policy
        self.learner = learner
        self.local = local
        self.cloud = cloud
        self.answers = answers
        self.depth = answers.depth
        self.narrator = narrator
        self.drafter = Drafter(local, spec)
        self.audits = Audits(cloud, spec, learner) if learner is not None else None

    async def run(self, call: Call) -> Reply:
        """Draft, decide, and verify, merge or degrade as the plan says."""
        if (call.request.n or 1) > 1:
            raise InvalidRequest(
                "n > 1 is not supported by the speculative_decoding strategy; "
                "use X-Routing-Strategy: local_only or cerebras_only",
                param="n",
            )
        policy = self.learner.policy if self.learner is not None else self.policy
        # Worked out before the decision only when the scorer or adaptive depth reads it
        # (the server knob's reading is known once llama-server has been probed).
        reads_context = policy.scorer is not None or self.depth.reads_context
        context = call.context() if reads_context else ContextType.PROSE
        request = None
        if self.learner is not None or (policy.scorer and policy.scorer.reads_request):
            request = request_features(call.raw)
            call.record.ngrams = request.ngrams
        judge = Judge(policy, context, request)
        budget = self.depth.draft_budget(context)
        if limit := call.request.token_limit:
            budget = min(budget, limit)
        cloud_free = self._cloud(0).blocked is None  # it could take over from the draft
        first_token = self._first_token(call, judge) if cloud_free else None
        hedge = Hedge.off()
        if cloud_free:
            hedge = self._hedge(call, judge, streamed=first_token is not None)
        # llama-server refuses logprobs with tools on a stream: tool drafts come whole. A
        # cold learner needs labels, and a draft stopped early gives none: drafts run whole.
        learning_cold = self.learner is not None and self.learner.cold
        can_abort = cloud_free and not call.contract().has_tools and not learning_cold
        try:
            return await self._speculate(
                call, budget, judge, hedge, first_token, can_abort=can_abort
            )
        finally:
            _settle(call, hedge, self.cloud.name)  # a hedge stopped in flight: the first asked

    async def _speculate(
        self,
        call: Call,
        budget: int,
        judge: Judge,
        hedge: Hedge,
        first_token: FirstToken | None,
        *,
        can_abort: bool,
    ) -> Reply:
        self.narrator.start(budget)
        top_logprobs = max(call.request.top_logprobs or 0, self.spec.top_logprobs)
        body = self.answers.steer(draft_body(call.raw, budget, top_logprobs), call, judge.context)
        progress = CompletionAssembler()  # a streamed draft so far, if the budget stops it
        try:
            if first_token is None:
                draft = await self.drafter.draft_unless_cloud_first(
                    body, judge, hedge, can_abort=can_abort
                )
            else:
                draft = await self.drafter.draft_within(
                    body,
                    judge,
                    hedge,
                    first_token,
                    lambda: self._stream_hedge(call, hedge),
                    can_abort=can_abort,
                    progress=progress,
                )
        except UpstreamError as exc:
            self._note_trust(call, first_token)
            call.fail(exc)
            if isinstance(exc, UpstreamRejected) and exc.about_request:
                raise  # the client's own mistake: its 4xx, and no cloud call for it
            self.narrator.draft_failed(exc)
            facts = Facts(None, hedge=hedge.state, local_failed=True)
            return await self._carry_out(call, facts, None, hedge, exc)
        self._note_trust(call, first_token)
        if draft is None:
            spent = first_token is not None
            if spent:
                self.narrator.out_of_time()
                if self.drafter.streams(can_abort=can_abort):
                    # What it streamed is logged (no label: it was never judged whole).
                    call.record.draft = draft_signals(progress.completion(OUT_OF_TIME), budget)
                # the local model's work is counted, though its answer went unused
                n = len(progress.logprobs) or len(progress.text)
                call.count(self.local.name, Purpose.DRAFT, n, estimated=True)
            else:
                self.narrator.cloud_first()
            facts = Facts(None, hedge=hedge.state, hedge_streams=hedge.streams, budget_spent=spent)
            return await self._carry_out(call, facts, None, hedge)

        signals = self._take_draft(call, draft, budget)
        contract = call.contract()
        violation = contract.violation(signals.text, signals.tool_calls)
        decision = judge.decide(signals)
        self._take_decision(call, decision, violation, judge.policy)
        if not decision.accept and (failure := hedge.failure) is not None:
            call.fail(failure)  # it failed: verify as without hedging (a fresh call, if allowed)
        need = call.record.prompt_tokens + (call.request.token_limit or 0)
        # never a cut draft, nor one the client cannot use
        accepted = decision.accept and not signals.partial and violation is None
        if first_token is not None and not accepted:
            # Doubted within the budget: merged if the cloud's whole answer comes by the
            # deadline, else its stream goes out live.
            if not hedge.started and self._cloud(need).blocked is None:
                self._stream_hedge(call, hedge)
            if hedge.streams and hedge.usable:
                await hedge.answered_by(first_token.deadline)
        facts = Facts(
            signals,
            accepted=accepted,
            violation=violation,
            doubts=tuple(map(str, decision.reasons)),
            hedge=hedge.state,
            hedge_streams=hedge.streams,
            cloud=self._cloud(need),
            stream=call.request.stream,
            client_limit=call.request.token_limit,
        )
        if (blocked := facts.cloud.blocked) and blocked in plan(facts).reasons:
            self.narrator.not_verifying(blocked, facts.cloud.detail)
        return await self._carry_out(call, facts, draft, hedge)

    async def _carry_out(
        self,
        call: Call,
        facts: Facts,
        draft: Completion | None,
        hedge: Hedge,
        local_failure: UpstreamError | None = None,
    ) -> Reply:
        """Carry out the plan's steps until one answers (or all have failed)."""
        while True:
            step = plan(facts)
            report = _report(facts.draft or call.record.draft, step)  # or the stopped one
            if step.step is Step.SERVE_DRAFT:
                assert draft is not None and facts.draft is not None
                call.finish(step.outcome or Outcome.DEGRADED)  # always set for this step
                if step.degraded:
                    self.narrator.serving_degraded(step.reasons)
                if self.audits is not None and step.outcome is Outcome.ACCEPTED:
                    self.audits.maybe(call, facts.draft, facts.cloud)
                return self.answers.serve(
                    call, draft.body, self.local.name, report, from_draft=True
                )
            if step.step is Step.CONTINUE_LOCALLY:
                self.narrator.continuing()
                call.finish(Outcome.DEGRADED)  # = step.outcome
                try:
                    return await self.answers.answer_with(self.local, call, report, Purpose.DRAFT)
                except UpstreamError as exc:
                    call.fail(exc)
                    self.narrator.continuation_failed(exc)
                    facts = replace(facts, continuation_failed=True)
                    continue
            if step.step is Step.REFUSE:
                assert facts.violation is not None
                why = (
                    "it failed" if facts.verifier_failed else facts.cloud.detail
                ) or "unavailable"
                self.narrator.refusing(facts.violation, why)
                raise NoValidAnswer(facts.violation, why)
            if step.step in (Step.SERVE_HEDGE, Step.CLOUD_INSTEAD, Step.FAIL):
                return await self._cloud_alone(call, step, report, hedge, local_failure)
            self.narrator.verifying()
            try:
                if step.step is Step.VERIFY_LIVE:
                    live = hedge if step.use_hedge else None
                    return await self._verify_live(call, report, facts.draft, live)
                verified = await (
                    hedge.answer() if step.use_hedge else self.cloud.complete(call.raw)
                )
            except UpstreamError as exc:
                call.fail(exc)
                self.narrator.verify_failed(exc)
                facts = replace(facts, verifier_failed=True)
                continue
            assert draft is not None and facts.draft is not None
            return self._merge(call, step, facts, draft, verified)

    async def _cloud_alone(
        self,
        call: Call,
        step: Plan,
        report: SpeculationReport,
        hedge: Hedge,
        local_failure: UpstreamError | None,
    ) -> Reply:
        """The cloud's answer with no draft to compare: the hedge came first, or the local
        model failed (then both failures are reported if the cloud fails too)."""
        try:
            if step.step is Step.FAIL:
                raise hedge.failure or UpstreamError(self.cloud.name, "the hedged call failed")
            if not step.use_hedge:
                reply = await self.answers.answer_with(self.cloud, call, report, Purpose.SPILL)
                call.finish(Outcome.LOCAL_DOWN_CLOUD_USED)
                return reply
            if hedge.streams and call.request.stream:
                opened = await hedge.live()
                call.finish(step.outcome or Outcome.SPILLED_OVER)
                return self._relay(call, report, opened, Purpose.HEDGE)
            verified = await hedge.answer()
        except UpstreamError as exc:
            call.fail(exc)
            raise AllUpstreamsFailed([e for e in (local_failure, exc) if e is not None]) from exc
        _count_cloud(call, verified, Purpose.HEDGE)
        report.verified_tokens = verified.completion_tokens
        report.reasons += _fell_over_to(verified.upstream, verified.fell_over)
        call.finish(step.outcome or Outcome.SPILLED_OVER)
        return self.answers.serve(call, verified.body, verified.upstream, report, from_draft=False)

    async def _verify_live(
        self,
        call: Call,
        report: SpeculationReport,
        draft: DraftSignals | None,
        hedge: Hedge | None = None,
    ) -> Reply:
        """The cloud's stream (the hedge's, or a fresh call) relayed live; the draft is
        compared with it once it has all come."""
        assert draft is not None
        started = time.perf_counter()
        opened = await (hedge.live() if hedge is not None else self.cloud.open_stream(call.raw))
        self.narrator.live()
        call.finish(Outcome.SPILLED_OVER)
        check = LiveCheck(draft, started, self.spec)
        purpose = Purpose.SPILL if hedge is None else Purpose.HEDGE
        return self._relay(call, report, opened, purpose, check)

    def _relay(
        self,
        call: Call,
        report: SpeculationReport,
        opened: OpenStream,
        purpose: Purpose,
        check: LiveCheck | None = None,
    ) -> StreamReply:
        """A cloud stream on its way to the client, its fall-overs counted and named."""
        call.fell_over(opened.fell_over)
        report.reasons += _fell_over_to(opened.upstream.name, opened.fell_over)
        relay = StreamRelay(opened, keep_usage=call.request.include_usage)
        chunks = self.answers.relay_out(call, relay, report, purpose, check)
        return StreamReply(chunks, headers(opened.upstream.name, report))

    def _merge(
        self,
        call: Call,
        step: Plan,
        facts: Facts,
        draft: Completion,
        verified: Completion,
    ) -> Reply:
        """Serve the draft if it agrees with the verified answer, else that."""
        signals = facts.draft
        assert signals is not None
        self.answers.note_verified(call, signals, verified.text)
        self.narrator.verified(verified.completion_tokens, len(verified.text))
        calls = tool_calls_of(verified.choice.get("message"))
        result = merge_draft(call, self.spec, signals, verified.text, calls, facts.violation)
        served = Purpose.VERIFICATION if result.use_draft else Purpose.SPILL
        _count_cloud(call, verified, Purpose.HEDGE if step.use_hedge else served)
        call.record.similarity, call.record.agreement = result.similarity, result.agreement
        report = SpeculationReport(
            draft_tokens=signals.n_tokens,
            verified_tokens=verified.completion_tokens,
            similarity=result.similarity,
            agreement=result.agreement,
            reasons=list(  # a broken contract is the plan's reason and the merge's: once
                dict.fromkeys(
                    [
                        *step.reasons,
                        result.reason,
                        *_fell_over_to(verified.upstream, verified.fell_over),
                    ]
                )
            ),
            spilled_over=not result.use_draft,
        )
        self.narrator.merged(result.use_draft, result.similarity)
        if result.use_draft:
            call.finish(Outcome.VERIFIED_DRAFT_USED)
            return self.answers.serve(call, draft.body, self.local.name, report, from_draft=True)
        call.finish(Outcome.SPILLED_OVER)
        return self.answers.serve(call, verified.body, verified.upstream, report, from_draft=False)

    # -- facts ---------------------------------------------------------------

    def _first_token(self, call: Call, judge: Judge) -> FirstToken | None:
        """When a streamed request stops waiting for its draft: after
        ``stream_first_token_s`` (``stream_trust_s`` for a draft the scorer trusts so far
        then), or as soon as the cloud's stream flows when a spill is likely; None outside
        a budget (not streamed, or no budget set)."""
        spec = self.spec
        if spec.stream_first_token_s is None or not call.request.stream:
            return None
        now = asyncio.get_running_loop().time()
        if likely_spill(judge.policy, judge.context, spec.hedge_min_prior):
            return FirstToken(now, now)
        return FirstToken(
            now + spec.stream_first_token_s,
            now + spec.stream_trust_s,
            spec.stream_trust_score,
            spec.abort_check_tokens,
        )

    def _note_trust(self, call: Call, first_token: FirstToken | None) -> None:
        """A draft waited for past the first-token budget: said, and recorded."""
        if first_token is not None and first_token.trusted:
            call.record.trusted = True
            self.narrator.trusted(first_token.trust_score)

    def _stream_hedge(self, call: Call, hedge: Hedge) -> None:
        """Open the cloud's stream now, into ``hedge``."""
        self.narrator.hedging()
        call.record.hedged = True
        hedge.open_stream(self.cloud, call.raw)

    def _hedge(self, call: Call, judge: Judge, *, streamed: bool) -> Hedge:
        """The cloud call started alongside the draft, when a spill is likely (``hedge``); the
        caller has checked that the cloud could take over. Under a first-token budget
        (``streamed``) every stream is hedged unless ``hedge`` is off (then the cloud's
        stream opens at the deadline)."""
        mode = self.spec.hedge
        if streamed and mode != "off":
            hedge = Hedge.off()
            self._stream_hedge(call, hedge)
            return hedge
        if mode == "off" or (
            mode == "auto"
            and not likely_spill(judge.policy, judge.context, self.spec.hedge_min_prior)
        ):
            return Hedge.off()
        self.narrator.hedging()
        call.record.hedged = True
        return Hedge.start(self.cloud, call.raw)

    def _cloud(self, need: int) -> CloudState:
        """Whether the cloud may be called now for an answer of ``need`` tokens: the first
        verifier of a chain that may be, else the first one's reason.

        Side-effect free: no probe is taken, nothing is logged.
        """
        return self.cloud.availability(need)

    def _take_draft(self, call: Call, draft: Completion, budget: int) -> DraftSignals:
        """Read the draft's signals into the record."""
        signals = draft_signals(draft.body, budget)
        rec = call.record
        rec.draft = signals
        rec.prompt_tokens = prompt = draft.prompt_tokens
        call.fell_over(draft.fell_over)  # pool members that failed before one drafted
        latency = draft.latency_s
        call.count(self.local.name, Purpose.DRAFT, signals.n_tokens, prompt, latency_s=latency)
        rec.server_spec = server_speculation(draft.body)
        self.narrator.drafted(signals.n_tokens, len(signals.text))
        return signals

    def _take_decision(
        self, call: Call, decision: Decision, violation: str | None, policy: Policy
    ) -> None:
        rec = call.record
        broken = (violation,) if violation else ()
        rec.decision_reasons = (*map(str, decision.reasons), *broken)
        rec.spill_score, rec.features = decision.score, decision.features
        if violation:
            self.narrator.unusable(violation)
        elif decision.accept:
            self.narrator.accepted(decision, policy)
        else:
            self.narrator.doubted(decision)


def _fell_over_to(answered: str, failures: Sequence[UpstreamError]) -> list[str]:
    """The reason naming the verifier that answered after others failed (none otherwise)."""
    return [f"fell_over_to:{answered}"] if failures else []


def _count_cloud(call: Call, verified: Completion, purpose: Purpose) -> None:
    """The cloud's answer's tokens, on the upstream that gave it; the ones that failed first."""
    call.fell_over(verified.fell_over)
    n, prompt = verified.completion_tokens, verified.prompt_tokens
    call.count(verified.upstream, purpose, n, prompt, latency_s=verified.latency_s)


def _settle(call: Call, hedge: Hedge, cloud: str) -> None:
    """A hedge whose answer was not used: stopped if it is still running (the draft won),
    and its tokens counted as far as they are known. An answer that came is counted whole;
    a call stopped in flight by the request's prompt (the local model's count) and the
    tokens its stream had sent (none for a whole answer); a failed call costs nothing."""
    if not hedge.started or hedge.used:
        return
    if (answer := hedge.result) is not None:
        _count_cloud(call, answer, Purpose.HEDGE)
    elif hedge.cancel():
        sent, prompt = hedge.tokens_sent, call.record.prompt_tokens
        call.count(cloud, Purpose.HEDGE_CANCELLED, sent, prompt, estimated=True)


def _report(draft: DraftSignals | None, step: Plan) -> SpeculationReport:
    """The client's report of a step (a merge writes its own)."""
    return SpeculationReport(
        draft_tokens=draft.n_tokens if draft is not None else 0,
        accepted=step.outcome is Outcome.ACCEPTED,
        spilled_over=step.step in (Step.SERVE_HEDGE, Step.CLOUD_INSTEAD, Step.VERIFY_LIVE),
        reasons=list(step.reasons),
        degraded=step.degraded,
    )
