"""plan(): every branch as a table, and the fallback rules as hypothesis properties.

The generated facts keep to what the speculative path can build: ``decide`` never
accepts a partial draft and names a doubt whenever it refuses one; a missing draft
means the local model failed (any hedge) or the hedged answer came first (ANSWERED).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.plan import CloudState, Facts, HedgeState, Plan, Step, plan
from app.routing.policy import SpillReason
from app.routing.signals import ABORTED, DraftSignals
from app.routing.validity import Violation
from app.vocabulary import Outcome

TERMINAL = (Step.SERVE_DRAFT, Step.SERVE_HEDGE, Step.CLOUD_INSTEAD, Step.FAIL, Step.REFUSE)
VERIFY = (Step.VERIFY_WHOLE, Step.VERIFY_LIVE)


def draft(finish: str = "stop", n: int = 5, budget: int = 10) -> DraftSignals:
    return DraftSignals(text="x" * n, n_tokens=n, budget=budget, finish_reason=finish)


WHOLE = draft()
CUT = draft("length", n=10)
ABORTED_DRAFT = draft(ABORTED, n=3)
DOUBT = (str(SpillReason.LOW_CONFIDENCE),)
CUT_DOUBT = (str(SpillReason.INCOMPLETE),)
ABORT_DOUBT = (str(SpillReason.EARLY_ABORT),)
NO_KEY = CloudState(has_key=False)
OPEN = CloudState(circuit_open=True)
LOW = CloudState(budget_low=True)
BAD = str(Violation.UNKNOWN_FUNCTION)


def limited(client_limit: int | None) -> DraftSignals:
    """The draft cut at its budget of 10 tokens, for a client that allows ``client_limit``."""
    return replace(CUT, client_limit=client_limit)


def doubted(signals: DraftSignals, **facts) -> Facts:
    """Facts of a draft the decision refused, with the doubt it would name."""
    doubts = CUT_DOUBT if signals.cut else ABORT_DOUBT if signals.aborted else DOUBT
    return Facts(signals, doubts=doubts, **facts)


def expect(
    step: Step,
    outcome: Outcome | None,
    *reasons: str,
    degraded: bool = False,
    use_hedge: bool = False,
) -> Plan:
    return Plan(step, outcome, reasons, degraded=degraded, use_hedge=use_hedge)


def served_degraded(*reasons: str) -> Plan:
    return expect(Step.SERVE_DRAFT, Outcome.DEGRADED, *reasons, degraded=True)


def continued(*reasons: str) -> Plan:
    return expect(
        Step.CONTINUE_LOCALLY, Outcome.DEGRADED, *reasons, "local_continuation", degraded=True
    )


CASES = {
    # the decision accepted the draft: served as is, the hedge (if any) unused
    "accepted": (
        Facts(WHOLE, accepted=True),
        expect(Step.SERVE_DRAFT, Outcome.ACCEPTED, "passed_checks"),
    ),
    "accepted, hedge pending": (
        Facts(WHOLE, accepted=True, hedge=HedgeState.PENDING),
        expect(Step.SERVE_DRAFT, Outcome.ACCEPTED, "passed_checks"),
    ),
    "accepted, cloud blocked": (
        Facts(WHOLE, accepted=True, cloud=NO_KEY),
        expect(Step.SERVE_DRAFT, Outcome.ACCEPTED, "passed_checks"),
    ),
    # no draft
    "hedge came first": (
        Facts(None, hedge=HedgeState.ANSWERED),
        expect(Step.SERVE_HEDGE, Outcome.SPILLED_OVER, "hedged", "cloud_first", use_hedge=True),
    ),
    "local failed, hedge pending": (
        Facts(None, hedge=HedgeState.PENDING, local_failed=True),
        expect(
            Step.CLOUD_INSTEAD,
            Outcome.LOCAL_DOWN_CLOUD_USED,
            "local_unavailable",
            "hedged",
            use_hedge=True,
        ),
    ),
    "local failed, hedge answered": (
        Facts(None, hedge=HedgeState.ANSWERED, local_failed=True),
        expect(
            Step.CLOUD_INSTEAD,
            Outcome.LOCAL_DOWN_CLOUD_USED,
            "local_unavailable",
            "hedged",
            use_hedge=True,
        ),
    ),
    "local failed, hedge failed": (
        Facts(None, hedge=HedgeState.FAILED, local_failed=True),
        expect(Step.FAIL, Outcome.ERROR, "local_unavailable"),
    ),
    "local failed, hedge off": (
        Facts(None, local_failed=True),
        expect(Step.CLOUD_INSTEAD, Outcome.LOCAL_DOWN_CLOUD_USED, "local_unavailable"),
    ),
    "local failed, hedge off, budget low: the cloud is the last way": (
        Facts(None, local_failed=True, cloud=LOW),
        expect(Step.CLOUD_INSTEAD, Outcome.LOCAL_DOWN_CLOUD_USED, "local_unavailable"),
    ),
    "local failed, hedge off, no key: the upstream refuses by itself": (
        Facts(None, local_failed=True, cloud=NO_KEY),
        expect(Step.CLOUD_INSTEAD, Outcome.LOCAL_DOWN_CLOUD_USED, "local_unavailable"),
    ),
    # refused draft, the cloud may verify
    "doubted whole draft": (doubted(WHOLE), expect(Step.VERIFY_WHOLE, None, *DOUBT)),
    "doubted whole draft, stream": (
        doubted(WHOLE, stream=True),
        expect(Step.VERIFY_WHOLE, None, *DOUBT),
    ),
    "non-stream cut draft: verify whole": (
        doubted(CUT),
        expect(Step.VERIFY_WHOLE, None, *CUT_DOUBT),
    ),
    "non-stream aborted draft: verify whole": (
        doubted(ABORTED_DRAFT),
        expect(Step.VERIFY_WHOLE, None, *ABORT_DOUBT),
    ),
    "stream, cut draft: verify live": (
        doubted(CUT, stream=True),
        expect(Step.VERIFY_LIVE, Outcome.SPILLED_OVER, *CUT_DOUBT, "draft_truncated"),
    ),
    "stream, aborted draft: verify live": (
        doubted(ABORTED_DRAFT, stream=True),
        expect(Step.VERIFY_LIVE, Outcome.SPILLED_OVER, *ABORT_DOUBT, "draft_aborted"),
    ),
    "several doubts are all told": (
        Facts(CUT, doubts=("incomplete", "too_short"), stream=True),
        expect(
            Step.VERIFY_LIVE, Outcome.SPILLED_OVER, "incomplete", "too_short", "draft_truncated"
        ),
    ),
    # a hedge under way stands in for the cloud call, whatever the cloud's state now
    "hedge pending": (
        doubted(WHOLE, hedge=HedgeState.PENDING),
        expect(Step.VERIFY_WHOLE, None, *DOUBT, "hedged", use_hedge=True),
    ),
    "hedge answered": (
        doubted(WHOLE, hedge=HedgeState.ANSWERED),
        expect(Step.VERIFY_WHOLE, None, *DOUBT, "hedged", use_hedge=True),
    ),
    "hedge answered, budget low since": (
        doubted(WHOLE, hedge=HedgeState.ANSWERED, cloud=LOW),
        expect(Step.VERIFY_WHOLE, None, *DOUBT, "hedged", use_hedge=True),
    ),
    "hedge pending, stream, cut draft: the hedge, not a live call": (
        doubted(CUT, hedge=HedgeState.PENDING, stream=True),
        expect(Step.VERIFY_WHOLE, None, *CUT_DOUBT, "hedged", use_hedge=True),
    ),
    # a streamed request under a first-token budget: the hedge is the cloud's stream
    "budget spent, the hedge's stream flowing: relayed live": (
        Facts(None, hedge=HedgeState.PENDING, hedge_streams=True, budget_spent=True, stream=True),
        expect(
            Step.SERVE_HEDGE, Outcome.SPILLED_OVER, "hedged", "first_token_budget", use_hedge=True
        ),
    ),
    "budget spent, the hedge's whole answer here": (
        Facts(None, hedge=HedgeState.ANSWERED, hedge_streams=True, budget_spent=True, stream=True),
        expect(
            Step.SERVE_HEDGE, Outcome.SPILLED_OVER, "hedged", "first_token_budget", use_hedge=True
        ),
    ),
    "doubted within the budget, the hedge's stream not done: relayed live": (
        doubted(WHOLE, hedge=HedgeState.PENDING, hedge_streams=True, stream=True),
        expect(Step.VERIFY_LIVE, Outcome.SPILLED_OVER, *DOUBT, "hedged", use_hedge=True),
    ),
    "aborted within the budget, the hedge's stream not done: relayed live": (
        doubted(ABORTED_DRAFT, hedge=HedgeState.PENDING, hedge_streams=True, stream=True),
        expect(
            Step.VERIFY_LIVE,
            Outcome.SPILLED_OVER,
            *ABORT_DOUBT,
            "hedged",
            "draft_aborted",
            use_hedge=True,
        ),
    ),
    "doubted within the budget, the hedge's stream done: merged": (
        doubted(WHOLE, hedge=HedgeState.ANSWERED, hedge_streams=True, stream=True),
        expect(Step.VERIFY_WHOLE, None, *DOUBT, "hedged", use_hedge=True),
    ),
    "the hedge's stream failed: verify as without hedging": (
        doubted(WHOLE, hedge=HedgeState.FAILED, hedge_streams=True, stream=True),
        expect(Step.VERIFY_WHOLE, None, *DOUBT),
    ),
    "hedge failed: verify as without hedging": (
        doubted(WHOLE, hedge=HedgeState.FAILED),
        expect(Step.VERIFY_WHOLE, None, *DOUBT),
    ),
    "hedge failed, stream, cut draft": (
        doubted(CUT, hedge=HedgeState.FAILED, stream=True),
        expect(Step.VERIFY_LIVE, Outcome.SPILLED_OVER, *CUT_DOUBT, "draft_truncated"),
    ),
    # the verifier failed
    "verifier failed, whole draft": (
        doubted(WHOLE, verifier_failed=True),
        served_degraded(*DOUBT, "verifier_failed"),
    ),
    "verifier failed, hedged whole draft": (
        doubted(WHOLE, hedge=HedgeState.PENDING, verifier_failed=True),
        served_degraded(*DOUBT, "hedged", "verifier_failed"),
    ),
    "verifier failed, cut draft: continue locally": (
        doubted(CUT, verifier_failed=True),
        continued(*CUT_DOUBT, "verifier_failed"),
    ),
    "verifier failed, aborted draft: continue locally": (
        doubted(ABORTED_DRAFT, stream=True, verifier_failed=True),
        continued(*ABORT_DOUBT, "verifier_failed"),
    ),
    "verifier and continuation failed: the truncated draft": (
        doubted(CUT, verifier_failed=True, continuation_failed=True),
        served_degraded(*CUT_DOUBT, "verifier_failed", "truncated_draft_served"),
    ),
    # the cloud must not verify now: degraded
    "no key, whole draft": (
        doubted(WHOLE, cloud=NO_KEY),
        served_degraded(*DOUBT, "verifier_unavailable"),
    ),
    "circuit open, whole draft": (
        doubted(WHOLE, cloud=OPEN),
        served_degraded(*DOUBT, "verifier_unavailable"),
    ),
    "budget low, whole draft": (
        doubted(WHOLE, cloud=LOW),
        served_degraded(*DOUBT, "cloud_budget_low"),
    ),
    "no key and budget low: unavailable is told": (
        doubted(WHOLE, cloud=CloudState(has_key=False, budget_low=True)),
        served_degraded(*DOUBT, "verifier_unavailable"),
    ),
    "budget low, stream, cut draft: no live call": (
        doubted(CUT, cloud=LOW, stream=True),
        continued(*CUT_DOUBT, "cloud_budget_low"),
    ),
    "circuit open, cut draft": (
        doubted(CUT, cloud=OPEN),
        continued(*CUT_DOUBT, "verifier_unavailable"),
    ),
    "no key, aborted draft": (
        doubted(ABORTED_DRAFT, cloud=NO_KEY),
        continued(*ABORT_DOUBT, "verifier_unavailable"),
    ),
    "budget low, continuation failed: the truncated draft": (
        doubted(CUT, cloud=LOW, continuation_failed=True),
        served_degraded(*CUT_DOUBT, "cloud_budget_low", "truncated_draft_served"),
    ),
    "no key, aborted draft, continuation failed": (
        doubted(ABORTED_DRAFT, cloud=NO_KEY, continuation_failed=True),
        served_degraded(*ABORT_DOUBT, "verifier_unavailable", "truncated_draft_served"),
    ),
    # whole for the client: the client asked for no more than the draft's budget
    "client limit == draft budget: a draft that fills it is whole": (
        doubted(limited(10), cloud=NO_KEY),
        served_degraded(*DOUBT, "verifier_unavailable"),
    ),
    "client limit < draft budget": (
        doubted(limited(4), cloud=LOW),
        served_degraded(*DOUBT, "cloud_budget_low"),
    ),
    "client limit <= draft budget, verifier failed": (
        doubted(limited(10), verifier_failed=True),
        served_degraded(*DOUBT, "verifier_failed"),
    ),
    "client limit > draft budget: continue locally": (
        doubted(limited(11), cloud=LOW),
        continued(*CUT_DOUBT, "cloud_budget_low"),
    ),
    "no client limit: continue locally": (
        doubted(limited(None), cloud=LOW),
        continued(*CUT_DOUBT, "cloud_budget_low"),
    ),
    "aborted is never whole for the client, whatever its limit": (
        doubted(replace(ABORTED_DRAFT, client_limit=1), cloud=LOW),
        continued(*ABORT_DOUBT, "cloud_budget_low"),
    ),
    # a draft that breaks the request's contract (a bad tool call, JSON that does not parse)
    "unusable draft: verified": (
        Facts(WHOLE, violation=BAD),
        expect(Step.VERIFY_WHOLE, None, BAD),
    ),
    "unusable draft, stream: verified live (it can never be served)": (
        Facts(WHOLE, violation=BAD, stream=True),
        expect(Step.VERIFY_LIVE, Outcome.SPILLED_OVER, BAD),
    ),
    "unusable draft, no key: an error, never the draft": (
        Facts(WHOLE, violation=BAD, cloud=NO_KEY),
        expect(Step.REFUSE, Outcome.ERROR, BAD, "verifier_unavailable", "no_valid_answer"),
    ),
    "unusable draft, verifier failed: an error": (
        Facts(WHOLE, violation=BAD, verifier_failed=True),
        expect(Step.REFUSE, Outcome.ERROR, BAD, "verifier_failed", "no_valid_answer"),
    ),
    "unusable cut draft, blocked: the local model may still finish it": (
        doubted(CUT, violation=BAD, cloud=LOW),
        continued(*CUT_DOUBT, BAD, "cloud_budget_low"),
    ),
    "unusable cut draft, continuation failed: an error": (
        doubted(CUT, violation=BAD, cloud=LOW, continuation_failed=True),
        expect(Step.REFUSE, Outcome.ERROR, *CUT_DOUBT, BAD, "cloud_budget_low", "no_valid_answer"),
    ),
    "a stream's draft stopped at the client's limit is verified whole, to be merged": (
        doubted(limited(10), stream=True),
        expect(Step.VERIFY_WHOLE, None, *DOUBT),
    ),
    "a stream's draft cut short of the client's limit is verified live": (
        doubted(limited(11), stream=True),
        expect(Step.VERIFY_LIVE, Outcome.SPILLED_OVER, *CUT_DOUBT, "draft_truncated"),
    ),
}


@pytest.mark.parametrize(("facts", "expected"), CASES.values(), ids=CASES.keys())
def test_plan_for_each_branch(facts: Facts, expected: Plan) -> None:
    assert plan(facts) == expected


def follow(facts: Facts) -> list[Plan]:
    """The plans the speculative path goes through when every step it tries fails."""
    plans = [plan(facts)]
    while plans[-1].step not in TERMINAL and len(plans) < 10:
        failed = (
            "continuation_failed" if plans[-1].step is Step.CONTINUE_LOCALLY else "verifier_failed"
        )
        facts = replace(facts, **{failed: True})
        plans.append(plan(facts))
    return plans


CHAINS = {
    "whole draft: verify, then serve it degraded": (
        doubted(WHOLE),
        [Step.VERIFY_WHOLE, Step.SERVE_DRAFT],
    ),
    "cut draft: verify, continue, then the truncated draft": (
        doubted(CUT),
        [Step.VERIFY_WHOLE, Step.CONTINUE_LOCALLY, Step.SERVE_DRAFT],
    ),
    "stream, cut draft: verify live, continue, then the truncated draft": (
        doubted(CUT, stream=True),
        [Step.VERIFY_LIVE, Step.CONTINUE_LOCALLY, Step.SERVE_DRAFT],
    ),
    "hedged cut draft: the hedge, continue, then the truncated draft": (
        doubted(CUT, hedge=HedgeState.PENDING, stream=True),
        [Step.VERIFY_WHOLE, Step.CONTINUE_LOCALLY, Step.SERVE_DRAFT],
    ),
    "blocked cut draft: continue, then the truncated draft": (
        doubted(CUT, cloud=LOW),
        [Step.CONTINUE_LOCALLY, Step.SERVE_DRAFT],
    ),
}
UNUSABLE_CHAINS = {
    "unusable draft: verify, then an error": (
        Facts(WHOLE, violation=BAD),
        [Step.VERIFY_WHOLE, Step.REFUSE],
    ),
    "unusable cut draft: verify, continue, then an error": (
        doubted(CUT, violation=BAD),
        [Step.VERIFY_WHOLE, Step.CONTINUE_LOCALLY, Step.REFUSE],
    ),
}


@pytest.mark.parametrize(("facts", "steps"), CHAINS.values(), ids=CHAINS.keys())
def test_each_failure_moves_down_the_fallback_chain(facts: Facts, steps: list[Step]) -> None:
    plans = follow(facts)
    assert [p.step for p in plans] == steps
    assert plans[-1].outcome is Outcome.DEGRADED and plans[-1].degraded


@pytest.mark.parametrize(("facts", "steps"), UNUSABLE_CHAINS.values(), ids=UNUSABLE_CHAINS.keys())
def test_an_unusable_draft_ends_in_an_error_not_in_the_draft(
    facts: Facts, steps: list[Step]
) -> None:
    plans = follow(facts)
    assert [p.step for p in plans] == steps
    assert plans[-1].outcome is Outcome.ERROR


# -- properties ---------------------------------------------------------------------------

FINISHES = ("stop", "length", ABORTED)


@st.composite
def draft_signals(draw: st.DrawFn) -> DraftSignals:
    budget = draw(st.integers(1, 512))
    return DraftSignals(
        text="x",
        n_tokens=draw(st.integers(0, budget)),
        budget=budget,
        finish_reason=draw(st.sampled_from(FINISHES)),
        client_limit=draw(st.none() | st.integers(1, 600)),
    )


CLOUDS = st.builds(CloudState, st.booleans(), st.booleans(), st.booleans())
DOUBTS = st.lists(st.sampled_from([str(r) for r in SpillReason]), min_size=1, unique=True)


@st.composite
def any_facts(draw: st.DrawFn) -> Facts:
    """Facts as the speculative path builds them, then any failures on top."""
    kind = draw(st.sampled_from(["draft", "local_failed", "cloud_first", "budget_spent"]))
    signals = draw(draft_signals()) if kind == "draft" else None
    # decide() never accepts a partial draft, and names a doubt whenever it refuses one
    accepted = signals is not None and not signals.partial and draw(st.booleans())
    hedge = draw(st.sampled_from(HedgeState))
    if kind == "cloud_first":
        hedge = HedgeState.ANSWERED
    elif kind == "budget_spent":  # the draft is stopped only once the hedge's stream flows
        hedge = draw(st.sampled_from([HedgeState.PENDING, HedgeState.ANSWERED]))
    streams = kind == "budget_spent" or (hedge is not HedgeState.OFF and draw(st.booleans()))
    violations = st.none() | st.sampled_from([str(v) for v in Violation])
    return Facts(
        signals,
        accepted=accepted,
        violation=None if accepted or signals is None else draw(violations),
        doubts=() if accepted or signals is None else tuple(draw(DOUBTS)),
        hedge=hedge,
        hedge_streams=streams,
        budget_spent=kind == "budget_spent",
        cloud=draw(CLOUDS),
        stream=kind == "budget_spent" or draw(st.booleans()),
        local_failed=kind == "local_failed",
        verifier_failed=draw(st.booleans()),
        continuation_failed=draw(st.booleans()),
    )


@given(any_facts())
def test_a_cut_draft_is_never_served_as_complete(facts: Facts) -> None:
    p = plan(facts)
    if p.step is Step.SERVE_DRAFT and facts.draft is not None and facts.draft.partial:
        assert p.degraded and p.outcome is Outcome.DEGRADED
        assert p.reasons[-1] == "truncated_draft_served"
    if p.reasons and p.reasons[-1] == "truncated_draft_served":
        assert facts.continuation_failed  # only once the local model could not finish it


@given(any_facts())
def test_no_verification_without_key_circuit_and_budget(facts: Facts) -> None:
    p = plan(facts)
    if p.step in VERIFY and not p.use_hedge:  # a fresh cloud call
        assert facts.cloud.blocked is None
    if (blocked := facts.cloud.blocked) and p.step in (Step.SERVE_DRAFT, Step.CONTINUE_LOCALLY):
        # a degrade the cloud's state caused tells why (unless the verifier failed first)
        assert (
            blocked in p.reasons or "verifier_failed" in p.reasons or p.outcome is Outcome.ACCEPTED
        )


@given(any_facts())
def test_no_local_continuation_after_a_local_failure(facts: Facts) -> None:
    p = plan(facts)
    if facts.local_failed or facts.continuation_failed:
        assert p.step is not Step.CONTINUE_LOCALLY


@given(any_facts(), st.lists(st.booleans(), min_size=3, max_size=3))
def test_the_plan_terminates_whatever_fails(facts: Facts, fails: list[bool]) -> None:
    """Carried out as ``_carry_out`` does: a step that answers ends the loop, a failed
    step adds its fact and the plan is asked again; three plans are always enough."""
    for step_fails in fails:
        p = plan(facts)
        if p.step in TERMINAL or not step_fails:
            break
        failed = "continuation_failed" if p.step is Step.CONTINUE_LOCALLY else "verifier_failed"
        facts = replace(facts, **{failed: True})
    else:
        pytest.fail(f"still {p.step} after three plans: {facts}")


@given(any_facts())
def test_every_failure_path_ends_within_three_plans(facts: Facts) -> None:
    plans = follow(facts)
    assert len(plans) <= 3
    assert plans[-1].step in TERMINAL
    assert len({p.step for p in plans}) == len(plans)  # no step is tried twice


@given(any_facts(), draft_signals())
def test_an_accepted_draft_is_served_without_the_cloud(facts: Facts, signals: DraftSignals) -> None:
    """Whatever the hedge, the cloud's state or the failure flags say."""
    whole = replace(signals, finish_reason="stop")
    facts = replace(
        facts,
        draft=whole,
        accepted=True,
        doubts=(),
        violation=None,
        local_failed=False,
        budget_spent=False,
    )
    assert plan(facts) == expect(Step.SERVE_DRAFT, Outcome.ACCEPTED, "passed_checks")


@given(any_facts())
def test_fail_only_when_both_upstreams_failed(facts: Facts) -> None:
    p = plan(facts)
    both_failed = facts.local_failed and facts.hedge is HedgeState.FAILED
    assert (p.step is Step.FAIL) == both_failed
    assert (p.outcome is Outcome.ERROR) == (both_failed or p.step is Step.REFUSE)


@given(any_facts())
def test_an_unusable_draft_is_never_served(facts: Facts) -> None:
    for p in follow(facts):
        if facts.violation is not None:
            assert p.step is not Step.SERVE_DRAFT
        if p.step is Step.REFUSE:
            assert facts.violation is not None


@given(any_facts())
def test_refuse_only_when_nothing_else_can_answer(facts: Facts) -> None:
    p = plan(facts)
    if p.step is Step.REFUSE:
        assert facts.verifier_failed or facts.cloud.blocked
        d = facts.draft
        assert d is not None
        assert not d.partial or facts.continuation_failed


@given(any_facts())
def test_the_hedge_is_used_only_when_under_way(facts: Facts) -> None:
    p = plan(facts)
    if p.use_hedge:
        assert facts.hedge in (HedgeState.PENDING, HedgeState.ANSWERED)


@given(any_facts())
def test_a_hedged_stream_is_relayed_live_unless_its_whole_answer_is_here(facts: Facts) -> None:
    """Under a first-token budget the client never waits for a whole cloud answer that
    has not come: the hedge's stream goes out as it arrives."""
    p = plan(facts)
    if p.step is Step.VERIFY_WHOLE and p.use_hedge and facts.stream and facts.hedge_streams:
        assert facts.hedge is HedgeState.ANSWERED
    if facts.budget_spent:
        assert p.step is Step.SERVE_HEDGE and p.use_hedge and "first_token_budget" in p.reasons


@given(any_facts())
def test_reasons_and_outcome_are_always_told(facts: Facts) -> None:
    p = plan(facts)
    assert p.reasons
    assert (p.outcome is None) == (p.step is Step.VERIFY_WHOLE)
    assert p.degraded == (p.outcome is Outcome.DEGRADED)
    if facts.draft is not None and not facts.accepted:
        assert p.reasons[: len(facts.doubts)] == facts.doubts  # the decision's doubts come first


@pytest.mark.parametrize(
    ("facts", "words"),
    [
        (lambda: Facts(None), "only a hedge that answered first"),
        (lambda: Facts(draft(), hedge=HedgeState.PENDING, budget_spent=True), "stops the draft"),
        (lambda: Facts(None, hedge=HedgeState.FAILED, budget_spent=True), "stops the draft"),
        (lambda: Facts(draft(), local_failed=True), "did not fail"),
        (lambda: Facts(draft("length", n=10), accepted=True), "only a whole draft"),
        (lambda: Facts(draft(), accepted=True, violation=BAD), "breaks the request's contract"),
    ],
)
def test_facts_the_path_cannot_gather_are_refused(facts: Callable[[], Facts], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        facts()
