"""The speculative strategy: set up, draft locally, decide, then carry out the plan.

``Speculator.run`` is the whole path, a state machine over pure decisions: ``setup``
(``app.routing.setup``) chooses what happens before the draft (its budget, a hedged
cloud call or the cloud's answer alone, a stream's first-token budget, early abort); the draft
races the cloud (``app.pipeline.drafting``); the decision (``app.routing.policy.decide``) judges it;
then ``plan`` chooses each next step, carried out here, the steps that end with an
answer by ``app.pipeline.answer``; a step that fails adds one fact and the plan is
asked again. Every step returns what it did as events (``app.story``); this module adds
them to the request's story (``Call.events``, told to the log as each is added) and the
pipeline applies the story to the record.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from app.call import Call
from app.config import SpeculativeConfig
from app.errors import (
    AllUpstreamsFailed,
    InvalidRequest,
    NoValidAnswer,
    UpstreamError,
    UpstreamRejected,
)
from app.learning.learner import Learner
from app.pipeline.answer import Answer, Answers
from app.pipeline.drafting import Drafter, FirstToken
from app.pipeline.hedge import Hedge
from app.pipeline.verify import Audits, LateDrafts
from app.routing.gate import Lane, judged_in
from app.routing.plan import Facts, Plan, Step, plan
from app.routing.policy import Judge, Policy, likely_spill
from app.routing.request_features import request_features
from app.routing.setup import Knobs, RequestFacts, Setup, setup
from app.routing.signals import DraftSignals
from app.sse import CompletionAssembler
from app.story import Event, Failed, Finished, Hedged, Judged, Laned, Planned, Prepared, Started
from app.telemetry.narrative import Narrator
from app.upstreams import Completion, Upstream
from app.vocabulary import ContextType, Outcome, Purpose
from app.wire import Reply, draft_body

LANELESS: tuple[Lane, float | None] = (Lane.UNCERTAIN, None)  # no gate: today's flow


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
        self.late = LateDrafts(local, cloud, spec, learner)  # drafts finished for a label

    async def run(self, call: Call) -> Reply:
        """Set up, draft, decide, and verify, merge or degrade as the plan says."""
        policy = self.learner.policy if self.learner is not None else self.policy
        # Worked out before the decision only when the scorer or adaptive depth reads it
        # (the server knob's reading is known once llama-server has been probed).
        reads_context = policy.scorer is not None or self.depth.reads_context
        context = call.context() if reads_context else ContextType.PROSE
        ask = call.request
        request = None
        if self.learner is not None or (policy.scorer and policy.scorer.reads_request):
            request = request_features(call.raw)
            self._add(call, Prepared(request.ngrams))
        cold = self.learner is not None and self.learner.cold
        gate = self.learner.gate if self.learner is not None else None
        lane, p_wrong = gate.lane(request, cold=cold) if gate is not None else LANELESS
        before = setup(
            RequestFacts(ask.n or 1, ask.stream, ask.token_limit, call.contract().has_tools),
            self.knobs,
            depth_budget=self.depth.draft_budget(context),
            likely_spill=likely_spill(policy, context, self.spec.hedge_min_prior),
            wants_labels=self.learner is not None and self.learner.keeps_whole(),
            cloud=self.cloud.availability(0),  # it could take over from the draft
            lane=lane,
            unheld=self.learner is not None and self.learner.cloud_until_held and self.late.room,
        )
        if before.refused:
            raise InvalidRequest(
                "n > 1 is not supported by the speculative_decoding strategy; "
                "use X-Routing-Strategy: local_only or cerebras_only",
                param="n",
            )
        self._add(call, Laned(before.lane.value, p_wrong))
        judge = Judge(judged_in(before.lane, policy), context, request)
        hedge = Hedge.of(before.hedge, self.cloud, call.raw)
        if hedge.started:
            self._add(call, Hedged())
        try:
            cloud_failed = False
            if before.lane is Lane.CLOUD or before.unheld:  # the cloud answers
                first, hedge = self.late.explore(
                    call, judge, before.budget, hedge, unheld=before.unheld
                )
                self._add(call, Planned(first, self.cloud.availability(0), first=True))
                try:
                    return self._answer(call, await self.answers.cloud_alone(call, first, hedge))
                except UpstreamError as exc:  # the draft answers instead, the cloud not again
                    self._add(call, Failed(exc, "cloud"))
                    if isinstance(exc, UpstreamRejected) and exc.about_request:
                        raise  # the client's own mistake: its 4xx
                    before = replace(before, lane=Lane.UNCERTAIN, unheld=False)
                    hedge, cloud_failed = Hedge.off(), True
            return await self._speculate(call, before, judge, hedge, cloud_failed)
        finally:
            # a hedge whose answer went unused: stopped, and its tokens counted as far as known
            call.events += hedge.settle(self.cloud.name, call.events)

    def _add(self, call: Call, *events: Event) -> None:
        """Events added to the request's story, each told to the log as it is added."""
        for event in events:
            call.events.append(event)
            self.narrator.tell(event)
            if call.trace is not None:
                call.trace.mark(event)

    async def _speculate(
        self, call: Call, before: Setup, judge: Judge, hedge: Hedge, cloud_failed: bool
    ) -> Reply:
        """The draft, judged, then the plan carried out (``cloud_failed``: the cloud already
        failed this request, so it is not asked to verify)."""
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
            first_token = FirstToken.starting(before.first_token, now, late=self.late.room)
        hedged = hedge.started
        try:
            draft = await self.drafter.race(
                body, judge, hedge, first_token, progress, before.may_abort, self.cloud, call.raw
            )
        except UpstreamError as exc:
            self._raced(call, hedge, hedged, first_token)
            if isinstance(exc, UpstreamRejected) and exc.about_request:
                self._add(call, Failed(exc))
                raise  # the client's own mistake: its 4xx, and no cloud call for it
            self._add(call, Failed(exc, "draft"))
            facts = self._facts(call, None, hedge, local_failed=True)
            return await self._carry_out(call, facts, None, hedge, local_failure=exc)
        self._raced(call, hedge, hedged, first_token)
        if draft is None:
            spent, streamed = first_token is not None, before.streams_draft
            self._add(
                call, *self.drafter.stopped(progress, budget, out_of_time=spent, streamed=streamed)
            )
            call.late = self.late.adopt(call, first_token, judge, budget, hedge, progress)
            facts = self._facts(call, None, hedge, budget_spent=spent)
            return await self._carry_out(call, facts, None, hedge)

        signals, took = self.drafter.took(draft, budget, call.request.token_limit)
        self._add(call, *took)
        violation = call.contract().violation(signals.text, signals.tool_calls)
        decision = judge.decide(signals)
        self._add(call, Judged.of(decision, violation, judge.policy))
        if not decision.accept and (failure := hedge.failure) is not None:
            self._add(call, Failed(failure))  # verify as without hedging (a fresh call)
        need = (draft.prompt_tokens or call.prompt_tokens_guess()) + (call.request.token_limit or 0)
        # never a cut draft, nor one the client cannot use
        accepted = decision.accept and not signals.partial and violation is None
        if first_token is not None and not accepted:
            # Doubted within the budget: merged if the cloud's whole answer comes by the
            # deadline, else its stream goes out live.
            if not hedge.started and self.cloud.availability(need).blocked is None:
                self._hedge_stream(call, hedge)
            if hedge.streams and hedge.usable:
                await hedge.answered_by(first_token.deadline)
        facts = self._facts(
            call,
            signals,
            hedge,
            accepted=accepted,
            violation=violation,
            doubts=tuple(map(str, decision.reasons)),
            cloud=self.cloud.availability(need),
            verifier_failed=cloud_failed,
        )
        return await self._carry_out(call, facts, draft, hedge)

    def _raced(
        self, call: Call, hedge: Hedge, hedged: bool, first_token: FirstToken | None
    ) -> None:
        """What the race told: the cloud's stream opened at the deadline, a trusted draft."""
        self._add(call, *([Hedged()] if hedge.started and not hedged else []))
        self._add(call, *(first_token.told() if first_token else ()))

    def _hedge_stream(self, call: Call, hedge: Hedge) -> None:
        """The cloud's stream opened alongside the draft, now."""
        self._add(call, Hedged())
        hedge.open_stream(self.cloud, call.raw)

    def _facts(self, call: Call, draft: DraftSignals | None, hedge: Hedge, **known: Any) -> Facts:
        """The facts the plan is asked about: what is ``known`` of the draft, with the
        hedge's state and the request's (a missing draft needs no cloud state)."""
        streams, stream = hedge.streams, call.request.stream
        return Facts(draft, hedge=hedge.state, hedge_streams=streams, stream=stream, **known)

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
                try:
                    return self._answer(call, await self.answers.cloud_alone(call, step, hedge))
                except UpstreamError as exc:  # both failed, if the local model did: both named
                    self._add(call, Failed(exc))
                    failed = [e for e in (local_failure, exc) if e is not None]
                    raise AllUpstreamsFailed(failed) from exc
            assert facts.draft is not None
            hedged = hedge if step.use_hedge else None
            try:
                if step.step is Step.VERIFY_LIVE:
                    answer = await self.answers.verify_live(call, facts.draft, hedged)
                else:
                    assert draft is not None
                    answer = await self.answers.verify_whole(call, draft, facts, hedged)
            except UpstreamError as exc:
                self._add(call, Failed(exc, "verify"))
                facts = replace(facts, verifier_failed=True)
                continue
            return self._answer(call, answer)

    def _plan(self, call: Call, facts: Facts, *, first: bool) -> Plan:
        """The plan's next step for ``facts``, added to the story."""
        step = plan(facts)
        self._add(call, Planned(step, facts.cloud, first, facts.violation, _why(facts)))
        return step

    def _answer(self, call: Call, answer: Answer) -> Reply:
        """A step's reply, its events added to the story."""
        self._add(call, *answer.events)
        return answer.reply


def _why(facts: Facts) -> str:
    """Why the verifier cannot answer, as the log says it."""
    return ("it failed" if facts.verifier_failed else facts.cloud.detail) or "unavailable"
