"""The speculative strategy: set up, draft locally, decide, then carry out the plan.

``Speculator.run`` is the whole path, a state machine over pure decisions: ``setup``
(``app.pipeline.plan``) chooses what happens before the draft (its budget, a hedged
cloud call, a stream's first-token budget, early abort); the draft races the cloud
(``app.pipeline.drafting``); the decision (``app.routing.policy.decide``) judges it;
then ``plan`` chooses each next step, carried out here; a step that fails adds one
fact and the plan is asked again. Every step's outcome is an event added to the
request's story (``Call.events``, told to the log as it is added); the pipeline
applies the story to the record.
"""

from __future__ import annotations

import asyncio
import time
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
    Answered,
    Call,
    Counted,
    Drafted,
    Event,
    Failed,
    FellOver,
    Finished,
    Hedged,
    Judged,
    Opened,
    Planned,
    Prepared,
    Started,
    Stopped,
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
from app.pipeline.relay import StreamRelay
from app.pipeline.wire import Reply, StreamReply, draft_body, server_speculation
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
        request = None
        if self.learner is not None or (policy.scorer and policy.scorer.reads_request):
            request = request_features(call.raw)
            self._add(call, Prepared(request.ngrams))
        judge = Judge(policy, context, request)
        hedge = Hedge.off()
        if before.hedge is not HedgeMode.OFF:
            self._add(call, Hedged())
            if before.hedge is HedgeMode.STREAM:
                hedge.open_stream(self.cloud, call.raw)
            else:
                hedge = Hedge.start(self.cloud, call.raw)
        try:
            return await self._speculate(call, before, judge, hedge)
        finally:
            _settle(call, hedge, self.cloud.name)  # a hedge stopped in flight: the first asked

    def _add(self, call: Call, *events: Event) -> None:
        """Events added to the request's story, each told to the log as it is added."""
        for event in events:
            call.events.append(event)
            self.narrator.tell(event)

    async def _speculate(self, call: Call, before: Setup, judge: Judge, hedge: Hedge) -> Reply:
        budget = before.budget
        self._add(call, Started(budget))
        top_logprobs = max(call.request.top_logprobs or 0, self.spec.top_logprobs)
        asked = draft_body(call.raw, budget, top_logprobs)
        body, steered = self.answers.steer(asked, judge.context)
        if steered is not None:
            self._add(call, steered)
        progress = CompletionAssembler()  # a streamed draft so far, if the budget stops it
        first_token = None
        if before.first_token is not None:
            now = asyncio.get_running_loop().time()
            first_token = FirstToken.starting(before.first_token, now)
        try:
            draft = await self._draft(call, body, judge, hedge, first_token, before, progress)
        except UpstreamError as exc:
            self._note_trust(call, first_token)
            if isinstance(exc, UpstreamRejected) and exc.about_request:
                self._add(call, Failed(exc))
                raise  # the client's own mistake: its 4xx, and no cloud call for it
            self._add(call, Failed(exc, "draft"))
            facts = self._facts(call, None, hedge, local_failed=True)
            return await self._carry_out(call, facts, None, hedge, local_failure=exc)
        self._note_trust(call, first_token)
        if draft is None:
            spent = first_token is not None
            stopped = None
            if spent and before.streams_draft:
                # What it streamed is logged (no label: it was never judged whole).
                stopped = draft_signals(progress.completion(OUT_OF_TIME), budget)
            self._add(call, Stopped(stopped, out_of_time=spent))
            if spent:  # the local model's work is counted, though its answer went unused
                n = len(progress.logprobs) or len(progress.text)
                self._add(call, Counted(self.local.name, Purpose.DRAFT, n, estimated=True))
            facts = self._facts(call, None, hedge, budget_spent=spent)
            return await self._carry_out(call, facts, None, hedge)

        signals = self._take_draft(call, draft, budget)
        violation = call.contract().violation(signals.text, signals.tool_calls)
        decision = judge.decide(signals)
        self._take_decision(call, decision, violation, judge.policy)
        if not decision.accept and (failure := hedge.failure) is not None:
            self._add(call, Failed(failure))  # verify as without hedging (a fresh call)
        need = draft.prompt_tokens + (call.request.token_limit or 0)
        # never a cut draft, nor one the client cannot use
        accepted = decision.accept and not signals.partial and violation is None
        if first_token is not None and not accepted:
            # Doubted within the budget: merged if the cloud's whole answer comes by the
            # deadline, else its stream goes out live.
            if not hedge.started and self._cloud(need).blocked is None:
                self._add(call, Hedged())
                hedge.open_stream(self.cloud, call.raw)
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
                        self._add(call, Hedged())
                        hedge.open_stream(self.cloud, call.raw)
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
    ) -> Reply:
        """Carry out the plan's steps until one answers (or all have failed); a step that
        fails adds one fact and the plan is asked again, once per step."""
        first = True
        while True:
            step = self._plan(call, facts, first=first)
            first = False
            if step.step is Step.SERVE_DRAFT:
                assert draft is not None and facts.draft is not None
                self._add(call, Finished(step.outcome or Outcome.DEGRADED))  # always set
                if self.audits is not None and step.outcome is Outcome.ACCEPTED:
                    call.audit, call.audit_rate = self.audits.maybe(call, facts.draft, facts.cloud)
                local = self.local.name
                return self._answer(
                    call, self.answers.serve(call, draft.body, local, from_draft=True)
                )
            if step.step is Step.CONTINUE_LOCALLY:
                self._add(call, Finished(Outcome.DEGRADED))  # = step.outcome
                try:
                    answer = await self.answers.answer_with(self.local, call, Purpose.DRAFT)
                    return self._answer(call, answer)
                except UpstreamError as exc:
                    self._add(call, Failed(exc, "continue"))
                    facts = replace(facts, continuation_failed=True)
                    continue
            if step.step is Step.REFUSE:
                assert facts.violation is not None
                raise NoValidAnswer(facts.violation, _why(facts))
            if step.step in (Step.SERVE_HEDGE, Step.CLOUD_INSTEAD, Step.FAIL):
                return await self._cloud_alone(call, step, hedge, local_failure)
            try:
                if step.step is Step.VERIFY_LIVE:
                    live = hedge if step.use_hedge else None
                    return await self._verify_live(call, facts.draft, live)
                verified = await (
                    hedge.answer() if step.use_hedge else self.cloud.complete(call.raw)
                )
            except UpstreamError as exc:
                self._add(call, Failed(exc, "verify"))
                facts = replace(facts, verifier_failed=True)
                continue
            assert draft is not None and facts.draft is not None
            return self._merge(call, step, facts, draft, verified)

    def _plan(self, call: Call, facts: Facts, *, first: bool) -> Plan:
        """The plan's next step for ``facts``, added to the story."""
        step = plan(facts)
        self._add(call, Planned(step, facts.cloud, first, facts.violation, _why(facts)))
        return step

    def _answer(self, call: Call, answer: Answer) -> Reply:
        """A step's reply, its events added to the story."""
        self._add(call, *answer.events)
        return answer.reply

    async def _cloud_alone(
        self, call: Call, step: Plan, hedge: Hedge, local_failure: UpstreamError | None
    ) -> Reply:
        """The cloud's answer with no draft to compare: the hedge came first, or the local
        model failed (then both failures are reported if the cloud fails too)."""
        try:
            if step.step is Step.FAIL:
                raise hedge.failure or UpstreamError(self.cloud.name, "the hedged call failed")
            if not step.use_hedge:
                answer = await self.answers.answer_with(self.cloud, call, Purpose.SPILL)
                self._add(call, Finished(Outcome.LOCAL_DOWN_CLOUD_USED))
                return self._answer(call, answer)
            if hedge.streams and call.request.stream:
                opened = await hedge.live()
                self._add(call, Finished(step.outcome or Outcome.SPILLED_OVER))
                return self._relay(call, opened, Purpose.HEDGE)
            verified = await hedge.answer()
        except UpstreamError as exc:
            self._add(call, Failed(exc))
            raise AllUpstreamsFailed([e for e in (local_failure, exc) if e is not None]) from exc
        self._add(
            call,
            *_cloud_counted(verified, Purpose.HEDGE),
            Answered(verified.upstream, verified.completion_tokens, False, verified.fell_over),
            Finished(step.outcome or Outcome.SPILLED_OVER),
        )
        upstream = verified.upstream
        return self._answer(
            call, self.answers.serve(call, verified.body, upstream, from_draft=False)
        )

    async def _verify_live(
        self, call: Call, draft: DraftSignals | None, hedge: Hedge | None = None
    ) -> Reply:
        """The cloud's stream (the hedge's, or a fresh call) relayed live; the draft is
        compared with it once it has all come."""
        assert draft is not None
        started = time.perf_counter()
        opened = await (hedge.live() if hedge is not None else self.cloud.open_stream(call.raw))
        check = LiveCheck(draft, started, self.spec)
        purpose = Purpose.SPILL if hedge is None else Purpose.HEDGE
        return self._relay(call, opened, purpose, check)

    def _relay(
        self, call: Call, opened: OpenStream, purpose: Purpose, check: LiveCheck | None = None
    ) -> StreamReply:
        """A cloud stream on its way to the client, its fall-overs counted and named."""
        live = check is not None
        self._add(call, Opened(opened.upstream.name, opened.fell_over, live))
        if live:
            self._add(call, Finished(Outcome.SPILLED_OVER))
        self._add(call, FellOver(opened.fell_over))
        relay = StreamRelay(opened, keep_usage=call.request.include_usage)
        return self.answers.relay(call, relay, purpose, check)

    def _merge(
        self, call: Call, step: Plan, facts: Facts, draft: Completion, verified: Completion
    ) -> Reply:
        """Serve the draft if it agrees with the verified answer, else that."""
        signals = facts.draft
        assert signals is not None
        calls = tool_calls_of(verified.choice.get("message"))
        result = merge_draft(call, self.spec, signals, verified.text, calls, facts.violation)
        served = Purpose.VERIFICATION if result.use_draft else Purpose.SPILL
        compared = compare(
            signals,
            verified.text,
            keeps_content=self.answers.keeps_content,
            similarity=result.similarity,
            agreement=result.agreement,
            n_tokens=verified.completion_tokens,
            use_draft=result.use_draft,
            reason=result.reason,
            upstream=verified.upstream,
            fell_over=verified.fell_over,
        )
        self._add(
            call, compared, *_cloud_counted(verified, Purpose.HEDGE if step.use_hedge else served)
        )
        if result.use_draft:
            self._add(call, Finished(Outcome.VERIFIED_DRAFT_USED))
            answer = self.answers.serve(call, draft.body, self.local.name, from_draft=True)
        else:
            self._add(call, Finished(Outcome.SPILLED_OVER))
            answer = self.answers.serve(call, verified.body, verified.upstream, from_draft=False)
        return self._answer(call, answer)

    # -- what the draft gives ------------------------------------------------

    def _note_trust(self, call: Call, first_token: FirstToken | None) -> None:
        """A draft waited for past the first-token budget: added to the story."""
        if first_token is not None and first_token.trusted:
            self._add(call, Trusted(first_token.trust_score))

    def _cloud(self, need: int) -> CloudState:
        """Whether the cloud may be called now for an answer of ``need`` tokens: the first
        verifier of a chain that may be, else the first one's reason.

        Side-effect free: no probe is taken, nothing is logged.
        """
        return self.cloud.availability(need)

    def _take_draft(self, call: Call, draft: Completion, budget: int) -> DraftSignals:
        """The draft's signals, added to the story with its tokens."""
        signals = draft_signals(draft.body, budget)
        prompt, latency = draft.prompt_tokens, draft.latency_s
        self._add(
            call,
            FellOver(draft.fell_over),  # pool members that failed before one drafted
            Counted(self.local.name, Purpose.DRAFT, signals.n_tokens, prompt, latency_s=latency),
            Drafted(signals, prompt, server_speculation(draft.body)),
        )
        return signals

    def _take_decision(
        self, call: Call, decision: Decision, violation: str | None, policy: Policy
    ) -> None:
        broken = (violation,) if violation else ()
        reasons = (*map(str, decision.reasons), *broken)
        judged = Judged(
            reasons,
            decision.score,
            decision.features,
            accepted=decision.accept,
            violation=violation,
            details=decision.details,
            policy=policy.name,
            threshold=policy.threshold,
        )
        self._add(call, judged)


def _why(facts: Facts) -> str:
    """Why the verifier cannot answer, as the log says it."""
    return ("it failed" if facts.verifier_failed else facts.cloud.detail) or "unavailable"


def _cloud_counted(verified: Completion, purpose: Purpose) -> list[Event]:
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
        call.events += _cloud_counted(answer, Purpose.HEDGE)
    elif hedge.cancel():
        drafted = (e for e in call.events if isinstance(e, Drafted))
        prompt = next((e.prompt_tokens for e in drafted), 0)
        sent = hedge.tokens_sent
        call.events.append(Counted(cloud, Purpose.HEDGE_CANCELLED, sent, prompt, estimated=True))
