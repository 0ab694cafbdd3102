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
from typing import Any

from app.config import SpeculativeConfig
from app.errors import (
    AllUpstreamsFailed,
    InvalidRequest,
    NoValidAnswer,
    UpstreamError,
    UpstreamRejected,
)
from app.learning.learner import Learner
from app.pipeline.answer import Answer, Answers, LiveCheck, compare, merge_draft
from app.pipeline.audit import Audits
from app.pipeline.call import (
    Call,
    Counted,
    Drafted,
    Failed,
    FellOver,
    Finished,
    Hedged,
    Judged,
    Prepared,
    Result,
    Trusted,
)
from app.pipeline.drafting import Drafter, FirstToken, Judge
from app.pipeline.hedge import Hedge
from app.pipeline.narrative import Narrator
from app.pipeline.plan import (
    CloudState,
    Facts,
    HedgeMode,
    Knobs,
    Plan,
    RequestFacts,
    Setup,
    Step,
    plan,
    setup,
)
from app.pipeline.relay import OpenStream, StreamRelay, open_stream
from app.pipeline.wire import (
    Reply,
    SpeculationReport,
    StreamReply,
    draft_body,
    server_speculation,
)
from app.routing.policy import Decision, Policy, likely_spill
from app.routing.request_features import request_features
from app.routing.signals import OUT_OF_TIME, DraftSignals, draft_signals
from app.routing.tool_calls import tool_calls_of
from app.sse import CompletionAssembler
from app.upstreams import ChatUpstream, Completion, Upstream, UpstreamGroup
from app.vocabulary import ContextType, Outcome, Purpose


class Speculator:
    """Serves requests with the speculative_decoding strategy: a state machine whose steps
    return results, kept in ``Call.results`` for the pipeline to apply to the record."""

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
        self.knobs = Knobs.of(spec)
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
        """Set up, draft, decide, and verify, merge or degrade as the plan says."""
        policy = self.learner.policy if self.learner is not None else self.policy
        # Worked out before the decision only when the scorer or adaptive depth reads it
        # (the server knob's reading is known once llama-server has been probed).
        reads_context = policy.scorer is not None or self.depth.reads_context
        context = call.context() if reads_context else ContextType.PROSE
        request = None
        if self.learner is not None or (policy.scorer and policy.scorer.reads_request):
            request = request_features(call.raw)
            call.results.append(Prepared(request.ngrams))
        judge = Judge(policy, context, request)
        ask = call.request
        before = setup(
            RequestFacts(ask.n or 1, ask.stream, ask.token_limit, call.contract().has_tools),
            self.knobs,
            depth_budget=self.depth.draft_budget(context),
            likely_spill=likely_spill(policy, context, self.spec.hedge_min_prior),
            learning_cold=self.learner is not None and self.learner.cold,
            cloud=self._cloud(0),  # it could take over from the draft
        )
        if before.refused:
            raise InvalidRequest(
                "n > 1 is not supported by the speculative_decoding strategy; "
                "use X-Routing-Strategy: local_only or cerebras_only",
                param="n",
            )
        hedge = self._hedge(call, before.hedge)
        try:
            return await self._speculate(call, before, judge, hedge)
        finally:
            _settle(call, hedge, self.cloud.name)  # a hedge stopped in flight: the first asked

    async def _speculate(self, call: Call, before: Setup, judge: Judge, hedge: Hedge) -> Reply:
        budget = before.budget
        self.narrator.start(budget)
        top_logprobs = max(call.request.top_logprobs or 0, self.spec.top_logprobs)
        asked = draft_body(call.raw, budget, top_logprobs)
        body, steered = self.answers.steer(asked, judge.context)
        if steered is not None:
            call.results.append(steered)
        progress = CompletionAssembler()  # a streamed draft so far, if the budget stops it
        first_token = None
        if before.first_token is not None:
            now = asyncio.get_running_loop().time()
            first_token = FirstToken.starting(before.first_token, now)
        try:
            draft = await self._draft(call, body, judge, hedge, first_token, before, progress)
        except UpstreamError as exc:
            self._note_trust(call, first_token)
            call.results.append(Failed(exc))
            if isinstance(exc, UpstreamRejected) and exc.about_request:
                raise  # the client's own mistake: its 4xx, and no cloud call for it
            self.narrator.draft_failed(exc)
            facts = self._facts(call, None, hedge, local_failed=True)
            return await self._carry_out(call, facts, None, hedge, local_failure=exc)
        self._note_trust(call, first_token)
        if draft is None:
            spent = first_token is not None
            stopped = None
            if spent:
                self.narrator.out_of_time()
                if before.streams_draft:
                    # What it streamed is logged (no label: it was never judged whole).
                    stopped = draft_signals(progress.completion(OUT_OF_TIME), budget)
                # the local model's work is counted, though its answer went unused
                n = len(progress.logprobs) or len(progress.text)
                call.results += [
                    Drafted(stopped),
                    Counted(self.local.name, Purpose.DRAFT, n, estimated=True),
                ]
            else:
                self.narrator.cloud_first()
            facts = self._facts(call, None, hedge, budget_spent=spent)
            return await self._carry_out(call, facts, None, hedge, stopped=stopped)

        signals = self._take_draft(call, draft, budget)
        violation = call.contract().violation(signals.text, signals.tool_calls)
        decision = judge.decide(signals)
        self._take_decision(call, decision, violation, judge.policy)
        if not decision.accept and (failure := hedge.failure) is not None:
            call.results.append(Failed(failure))  # verify as without hedging (a fresh call)
        need = draft.prompt_tokens + (call.request.token_limit or 0)
        # never a cut draft, nor one the client cannot use
        accepted = decision.accept and not signals.partial and violation is None
        if first_token is not None and not accepted:
            # Doubted within the budget: merged if the cloud's whole answer comes by the
            # deadline, else its stream goes out live.
            if not hedge.started and self._cloud(need).blocked is None:
                self._open_stream_hedge(call, hedge)
            if hedge.streams and hedge.usable:
                await hedge.answered_by(first_token.deadline)
        facts = self._facts(
            call,
            signals,
            hedge,
            accepted=accepted,
            violation=violation,
            doubts=tuple(map(str, decision.reasons)),
            cloud=self._cloud(need),
        )
        return await self._carry_out(call, facts, draft, hedge)

    async def _draft(
        self,
        call: Call,
        body: dict[str, Any],
        judge: Judge,
        hedge: Hedge,
        first_token: FirstToken | None,
        before: Setup,
        progress: CompletionAssembler,
    ) -> Completion | None:
        """The draft; None when the cloud won the race: the hedged answer came first, or a
        stream's first-token budget ran out with the cloud's stream flowing (the draft is
        cancelled; a streamed draft's tokens so far are left in ``progress``). A hedge that
        fails first changes nothing: the draft decides, as without it."""
        can_abort = before.may_abort
        if first_token is None and not hedge.started:
            return await self.drafter.draft(body, judge, can_abort=can_abort)
        drafting = self.drafter.start(
            body, judge, can_abort=can_abort, progress=progress if first_token else None
        )
        try:
            if first_token is None:
                await hedge.race(drafting.task)
                lost = not drafting.done and hedge.answered
            else:
                late = not await drafting.by(first_token.deadline)
                if late and first_token.trust(judge, progress, body["max_tokens"]):
                    await drafting.by(first_token.trusted_until)  # trusted: it may go on
                lost = False
                if not drafting.done:
                    if not hedge.started:  # the cloud's stream opens at the deadline
                        self._open_stream_hedge(call, hedge)
                    lost = hedge.streams and await hedge.flowing_or(drafting.task)
        except BaseException:
            drafting.cancel()  # we were cancelled ourselves (client gone)
            raise
        return await drafting.unless(lost)

    def _facts(
        self,
        call: Call,
        draft: DraftSignals | None,
        hedge: Hedge,
        *,
        cloud: CloudState | None = None,
        **known: Any,
    ) -> Facts:
        """The facts the plan is asked about: what is ``known`` of the draft, with the
        hedge's state and the request's (a missing draft needs no cloud state)."""
        return Facts(
            draft,
            hedge=hedge.state,
            hedge_streams=hedge.streams,
            cloud=cloud or CloudState(),
            stream=call.request.stream,
            client_limit=call.request.token_limit,
            **known,
        )

    async def _carry_out(
        self,
        call: Call,
        facts: Facts,
        draft: Completion | None,
        hedge: Hedge,
        *,
        local_failure: UpstreamError | None = None,
        stopped: DraftSignals | None = None,
    ) -> Reply:
        """Carry out the plan's steps until one answers (or all have failed); a step that
        fails adds one fact and the plan is asked again, once per step."""
        step = plan(facts)
        if (blocked := facts.cloud.blocked) and blocked in step.reasons:
            self.narrator.not_verifying(blocked, facts.cloud.detail)
        while True:
            report = _report(facts.draft or stopped, step)  # or the stopped one
            if step.step is Step.SERVE_DRAFT:
                assert draft is not None and facts.draft is not None
                call.results.append(Finished(step.outcome or Outcome.DEGRADED))  # always set
                if step.degraded:
                    self.narrator.serving_degraded(step.reasons)
                if self.audits is not None and step.outcome is Outcome.ACCEPTED:
                    call.audit, call.audit_rate = self.audits.maybe(call, facts.draft, facts.cloud)
                local = self.local.name
                answer = self.answers.serve(call, draft.body, local, report, from_draft=True)
                return self._answer(call, answer)
            if step.step is Step.CONTINUE_LOCALLY:
                self.narrator.continuing()
                call.results.append(Finished(Outcome.DEGRADED))  # = step.outcome
                try:
                    answer = await self.answers.answer_with(self.local, call, report, Purpose.DRAFT)
                    return self._answer(call, answer)
                except UpstreamError as exc:
                    call.results.append(Failed(exc))
                    self.narrator.continuation_failed(exc)
                    facts = replace(facts, continuation_failed=True)
                    step = plan(facts)
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
                call.results.append(Failed(exc))
                self.narrator.verify_failed(exc)
                facts = replace(facts, verifier_failed=True)
                step = plan(facts)
                continue
            assert draft is not None and facts.draft is not None
            return self._merge(call, step, facts, draft, verified)

    def _answer(self, call: Call, answer: Answer) -> Reply:
        """A step's reply, its results kept for the record."""
        call.results += answer.results
        return answer.reply

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
                answer = await self.answers.answer_with(self.cloud, call, report, Purpose.SPILL)
                call.results.append(Finished(Outcome.LOCAL_DOWN_CLOUD_USED))
                return self._answer(call, answer)
            if hedge.streams and call.request.stream:
                opened = await hedge.live()
                call.results.append(Finished(step.outcome or Outcome.SPILLED_OVER))
                return self._relay(call, report, opened, Purpose.HEDGE)
            verified = await hedge.answer()
        except UpstreamError as exc:
            call.results.append(Failed(exc))
            raise AllUpstreamsFailed([e for e in (local_failure, exc) if e is not None]) from exc
        call.results += _cloud_counted(verified, Purpose.HEDGE)
        report.verified_tokens = verified.completion_tokens
        report.reasons += _fell_over_to(verified.upstream, verified.fell_over)
        call.results.append(Finished(step.outcome or Outcome.SPILLED_OVER))
        answer = self.answers.serve(
            call, verified.body, verified.upstream, report, from_draft=False
        )
        return self._answer(call, answer)

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
        opened = await (hedge.live() if hedge is not None else open_stream(self.cloud, call.raw))
        self.narrator.live()
        call.results.append(Finished(Outcome.SPILLED_OVER))
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
        call.results.append(FellOver(opened.fell_over))
        report.reasons += _fell_over_to(opened.upstream.name, opened.fell_over)
        relay = StreamRelay(opened, keep_usage=call.request.include_usage)
        return self.answers.relay(call, relay, report, purpose, check)

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
        self.narrator.verified(verified.completion_tokens, len(verified.text))
        calls = tool_calls_of(verified.choice.get("message"))
        result = merge_draft(call, self.spec, signals, verified.text, calls, facts.violation)
        served = Purpose.VERIFICATION if result.use_draft else Purpose.SPILL
        call.results += _cloud_counted(verified, Purpose.HEDGE if step.use_hedge else served)
        call.results.append(
            compare(
                call,
                signals,
                verified.text,
                keeps_content=self.answers.keeps_content,
                similarity=result.similarity,
                agreement=result.agreement,
            )
        )
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
            call.results.append(Finished(Outcome.VERIFIED_DRAFT_USED))
            answer = self.answers.serve(call, draft.body, self.local.name, report, from_draft=True)
        else:
            call.results.append(Finished(Outcome.SPILLED_OVER))
            answer = self.answers.serve(
                call, verified.body, verified.upstream, report, from_draft=False
            )
        return self._answer(call, answer)

    # -- before the draft, and what it gives ---------------------------------

    def _note_trust(self, call: Call, first_token: FirstToken | None) -> None:
        """A draft waited for past the first-token budget: said, and kept."""
        if first_token is not None and first_token.trusted:
            call.results.append(Trusted())
            self.narrator.trusted(first_token.trust_score)

    def _open_stream_hedge(self, call: Call, hedge: Hedge) -> None:
        """Open the cloud's stream now, into ``hedge``."""
        self.narrator.hedging()
        call.results.append(Hedged())
        hedge.open_stream(self.cloud, call.raw)

    def _hedge(self, call: Call, mode: HedgeMode) -> Hedge:
        """The cloud call started alongside the draft, as ``setup`` chose."""
        if mode is HedgeMode.OFF:
            return Hedge.off()
        hedge = Hedge.off()
        if mode is HedgeMode.STREAM:
            self._open_stream_hedge(call, hedge)
            return hedge
        self.narrator.hedging()
        call.results.append(Hedged())
        return Hedge.start(self.cloud, call.raw)

    def _cloud(self, need: int) -> CloudState:
        """Whether the cloud may be called now for an answer of ``need`` tokens: the first
        verifier of a chain that may be, else the first one's reason.

        Side-effect free: no probe is taken, nothing is logged.
        """
        cloud = self.cloud
        members = cloud.members if isinstance(cloud, UpstreamGroup) else [cloud]
        states = [_state(m, need) for m in members]
        return next((s for s in states if s.blocked is None), states[0])

    def _take_draft(self, call: Call, draft: Completion, budget: int) -> DraftSignals:
        """The draft's signals, kept with its tokens."""
        signals = draft_signals(draft.body, budget)
        prompt = draft.prompt_tokens
        call.results += [
            Drafted(signals, prompt, server_speculation(draft.body)),
            FellOver(draft.fell_over),  # pool members that failed before one drafted
            Counted(
                self.local.name, Purpose.DRAFT, signals.n_tokens, prompt, latency_s=draft.latency_s
            ),
        ]
        self.narrator.drafted(signals.n_tokens, len(signals.text))
        return signals

    def _take_decision(
        self, call: Call, decision: Decision, violation: str | None, policy: Policy
    ) -> None:
        broken = (violation,) if violation else ()
        reasons = (*map(str, decision.reasons), *broken)
        call.results.append(Judged(reasons, decision.score, decision.features))
        if violation:
            self.narrator.unusable(violation)
        elif decision.accept:
            self.narrator.accepted(decision, policy)
        else:
            self.narrator.doubted(decision)


def _state(cloud: ChatUpstream, need: int) -> CloudState:
    """Whether this upstream may be called now for an answer of ``need`` tokens."""
    reserve = cloud.config.rate_limit_reserve
    missing = cloud.unavailable_reason
    wait = cloud.breaker.retry_in()
    low = cloud.budget.low(reserve.tokens, reserve.requests, need)
    circuit = f"circuit open; next probe in {wait:.1f} s" if wait > 0 else None
    return CloudState(
        has_key=missing is None,
        circuit_open=wait > 0,
        budget_low=low is not None,
        detail=missing or circuit or low or "",
    )


def _fell_over_to(answered: str, failures: Sequence[UpstreamError]) -> list[str]:
    """The reason naming the verifier that answered after others failed (none otherwise)."""
    return [f"fell_over_to:{answered}"] if failures else []


def _cloud_counted(verified: Completion, purpose: Purpose) -> list[Result]:
    """The cloud's answer's tokens, on the upstream that gave it; the ones that failed first."""
    n, prompt = verified.completion_tokens, verified.prompt_tokens
    counted = Counted(verified.upstream, purpose, n, prompt, latency_s=verified.latency_s)
    return [FellOver(verified.fell_over), counted]


def _settle(call: Call, hedge: Hedge, cloud: str) -> None:
    """A hedge whose answer was not used: stopped if it is still running (the draft won),
    and its tokens counted as far as they are known. An answer that came is counted whole;
    a call stopped in flight by the request's prompt (the local model's count) and the
    tokens its stream had sent (none for a whole answer); a failed call costs nothing."""
    if not hedge.started or hedge.used:
        return
    if (answer := hedge.result) is not None:
        call.results += _cloud_counted(answer, Purpose.HEDGE)
    elif hedge.cancel():
        prompt = next(
            (r.prompt_tokens for r in call.results if isinstance(r, Drafted) and r.prompt_tokens),
            0,
        )
        counted = Counted(cloud, Purpose.HEDGE_CANCELLED, hedge.tokens_sent, prompt, estimated=True)
        call.results.append(counted)


def _report(draft: DraftSignals | None, step: Plan) -> SpeculationReport:
    """The client's report of a step (a merge writes its own)."""
    return SpeculationReport(
        draft_tokens=draft.n_tokens if draft is not None else 0,
        accepted=step.outcome is Outcome.ACCEPTED,
        spilled_over=step.step in (Step.SERVE_HEDGE, Step.CLOUD_INSTEAD, Step.VERIFY_LIVE),
        reasons=list(step.reasons),
        degraded=step.degraded,
    )
