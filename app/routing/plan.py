"""What happens after the draft: ``plan``, a pure function beside the decision on the
draft (``policy.decide``); what happens before it is ``app.routing.setup``'s.

From the facts gathered so far (the draft's signals, the decision's doubts, the hedge's
state, the cloud's state and the request), ``plan`` returns the next step, the outcome it
leads to and the reasons the client is told. The speculative path carries a step out and,
when it fails, asks again with one more fact (``verifier_failed``,
``continuation_failed``); no I/O happens here.

Rules worth keeping in mind (each a hypothesis property in the tests):
- a draft cut at its budget is served only as the last resort, marked degraded;
- no verification is asked of the cloud without a key, a closed circuit and budget
  (a hedge already under way is used: it was started when all three allowed it);
  only when the local model has failed is the cloud asked whatever its budget;
- the local model is never asked to continue once it has failed;
- a draft that breaks the request's contract (a bad tool call, JSON that does not
  parse) is never served: without a verifier the local model may go on from a cut
  draft (its answer marked degraded), else the client gets an error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from app.routing.signals import DraftSignals
from app.vocabulary import CloudState, Outcome, Purpose  # CloudState: what the upstream answers

__all__ = [
    "EXPLORED",
    "GATED",
    "UNHELD",
    "Facts",
    "HedgeState",
    "Plan",
    "Step",
    "plan",
]


class Step(StrEnum):
    """The next thing the speculative path does."""

    SERVE_DRAFT = "serve_draft"
    SERVE_HEDGE = "serve_hedge"  # the hedged cloud answer came first: no draft to compare
    CLOUD_INSTEAD = "cloud_instead"  # the local model failed: the cloud answers alone
    VERIFY_WHOLE = "verify_whole"  # ask the cloud (or await the hedge), then merge
    VERIFY_LIVE = "verify_live"  # stream the cloud's answer straight to the client
    CONTINUE_LOCALLY = "continue_locally"  # the local model answers to the client's budget
    FAIL = "fail"  # both upstreams failed
    REFUSE = "refuse"  # the draft is unusable and the verifier cannot answer: an error
    SERVE_CLOUD = "serve_cloud"  # the gate's cloud lane: no draft, the cloud's answer


class HedgeState(StrEnum):
    """Where the cloud call started alongside the draft stands."""

    OFF = "off"
    PENDING = "pending"
    ANSWERED = "answered"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Facts:
    """What is known when the next step is chosen.

    ``draft`` is None when there is no draft: the local model failed
    (``local_failed``), the hedged cloud answer came first, or a streamed request's
    first-token budget ran out with the hedge's stream flowing (``budget_spent``).
    ``violation`` names how the draft breaks the request's contract
    (``app.routing.validity``). ``hedge_streams``: the hedge is a stream that can be
    relayed as it arrives.
    """

    draft: DraftSignals | None
    accepted: bool = False
    violation: str | None = None
    doubts: tuple[str, ...] = ()  # the decision's reasons for verifying
    hedge: HedgeState = HedgeState.OFF
    hedge_streams: bool = False
    budget_spent: bool = False
    cloud: CloudState = CloudState()
    stream: bool = False
    local_failed: bool = False
    verifier_failed: bool = False
    continuation_failed: bool = False

    def __post_init__(self) -> None:
        # The facts the speculative path can gather; plan() relies on them.
        hedged = self.hedge in (HedgeState.PENDING, HedgeState.ANSWERED)
        if self.budget_spent and not (self.draft is None and hedged and self.hedge_streams):
            raise ValueError("a spent budget stops the draft for a hedged stream")
        if (
            self.draft is None
            and not self.local_failed
            and not self.budget_spent
            and self.hedge is not HedgeState.ANSWERED
        ):
            raise ValueError("no draft and no local failure: only a hedge that answered first")
        if self.draft is not None and self.local_failed:
            raise ValueError("a draft was made: the local model did not fail")
        if self.accepted and (self.draft is None or self.draft.partial):
            raise ValueError("only a whole draft can be accepted")
        if self.accepted and self.violation is not None:
            raise ValueError("a draft that breaks the request's contract cannot be accepted")


@dataclass(frozen=True, slots=True)
class Plan:
    """The next step; ``outcome`` None means the merge decides it (after verifying)."""

    step: Step
    outcome: Outcome | None
    reasons: tuple[str, ...] = ()
    degraded: bool = False
    use_hedge: bool = False  # the hedged call's answer (or stream) stands in for a cloud call
    hedge_as: Purpose = Purpose.HEDGE  # what that call's tokens are counted as


# The gate's cloud lane: the cloud answers (live for a stream) and nothing is drafted.
GATED = Plan(Step.SERVE_CLOUD, Outcome.SPILLED_OVER, ("gate_cloud",))
# Explored (``gate.explore``): that call made as a hedge for a draft beside it; still a spill.
EXPLORED = replace(GATED, use_hedge=True, hedge_as=Purpose.SPILL)
# No threshold holds the target, so the draft would be verified whatever it scores: the
# certain call made at once and served, the draft beside it for a label
# (``learning.cloud_until_held``).
UNHELD = replace(EXPLORED, reasons=("verifies_all",))


def plan(facts: Facts) -> Plan:
    """The next step for these facts."""
    hedged = facts.hedge in (HedgeState.PENDING, HedgeState.ANSWERED)
    draft = facts.draft
    if draft is None:
        if facts.budget_spent:
            reasons = ("hedged", "first_token_budget")
            return Plan(Step.SERVE_HEDGE, Outcome.SPILLED_OVER, reasons, use_hedge=True)
        if not facts.local_failed:
            reasons = ("hedged", "cloud_first")
            return Plan(Step.SERVE_HEDGE, Outcome.SPILLED_OVER, reasons, use_hedge=True)
        if hedged:
            reasons = ("local_unavailable", "hedged")
            return Plan(Step.CLOUD_INSTEAD, Outcome.LOCAL_DOWN_CLOUD_USED, reasons, use_hedge=True)
        if facts.hedge is HedgeState.FAILED:
            return Plan(Step.FAIL, Outcome.ERROR, ("local_unavailable",))
        # The last way to answer: asked even with the budget low (the upstream itself
        # refuses at once, without a network call, when it has no key or its circuit is open).
        return Plan(Step.CLOUD_INSTEAD, Outcome.LOCAL_DOWN_CLOUD_USED, ("local_unavailable",))
    if facts.accepted:
        return Plan(Step.SERVE_DRAFT, Outcome.ACCEPTED, ("passed_checks",))
    broken = (facts.violation,) if facts.violation else ()
    doubts = facts.doubts + broken + (("hedged",) if hedged else ())
    if facts.verifier_failed:
        return _degrade(facts, (*doubts, "verifier_failed"))
    if hedged:
        if facts.stream and facts.hedge_streams and facts.hedge is HedgeState.PENDING:
            # Its whole answer did not come within the first-token budget: relay it live.
            live = _live(doubts, draft)
            return Plan(Step.VERIFY_LIVE, Outcome.SPILLED_OVER, live, use_hedge=True)
        return Plan(Step.VERIFY_WHOLE, None, doubts, use_hedge=True)
    if blocked := facts.cloud.blocked:
        return _degrade(facts, (*doubts, blocked))
    if facts.stream and (draft.partial or facts.violation):
        # A partial or unusable draft can never be served, so nothing is gained by
        # waiting for the whole verified answer: pass it through live.
        return Plan(Step.VERIFY_LIVE, Outcome.SPILLED_OVER, _live(doubts, draft))
    return Plan(Step.VERIFY_WHOLE, None, doubts)


def _live(doubts: tuple[str, ...], draft: DraftSignals) -> tuple[str, ...]:
    """The reasons of a live verification: a partial draft's cut is named."""
    if not draft.partial:
        return doubts
    return (*doubts, "draft_truncated" if draft.cut else "draft_aborted")


def _degrade(facts: Facts, reasons: tuple[str, ...]) -> Plan:
    """The verifier cannot answer: the draft if it is whole (stopped at the client's own
    limit included), else the local model goes on to the client's budget, else (that
    failed too) the truncated draft beats nothing; a draft that breaks the request's
    contract is never served (an error instead)."""
    draft = facts.draft
    assert draft is not None
    if facts.violation is not None and (not draft.partial or facts.continuation_failed):
        # Nothing left that could still become a valid answer: never the broken draft.
        return Plan(Step.REFUSE, Outcome.ERROR, (*reasons, "no_valid_answer"))
    if not draft.partial:
        return Plan(Step.SERVE_DRAFT, Outcome.DEGRADED, reasons, degraded=True)
    if not facts.continuation_failed:
        reasons = (*reasons, "local_continuation")
        return Plan(Step.CONTINUE_LOCALLY, Outcome.DEGRADED, reasons, degraded=True)
    reasons = (*reasons, "truncated_draft_served")
    return Plan(Step.SERVE_DRAFT, Outcome.DEGRADED, reasons, degraded=True)
