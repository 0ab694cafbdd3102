"""What happens before the draft and after it: ``setup`` and ``plan``, pure functions
beside the decision on the draft (``policy.decide``).

``setup`` decides, from the request, the policy's view of it, the cloud's state and
the speculative settings, what happens before the draft: its budget, whether the
cloud is called alongside it (whole or as a stream), the first-token budget of a
stream, and whether the draft may be stopped early. From the facts gathered so far
(the draft's signals, the decision's doubts, the hedge's state, the cloud's state and
the request), ``plan`` returns the next step, the outcome it leads to and the reasons
the client is told. The speculative
path carries a step out and, when it fails, asks again with one more fact
(``verifier_failed``, ``continuation_failed``); no I/O happens here.

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

from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Literal

from app.routing.gate import Lane
from app.routing.signals import DraftSignals
from app.vocabulary import CloudState, Outcome, Purpose  # CloudState: what the upstream answers

__all__ = ["EXPLORED", "GATED", "Facts", "HedgeState", "Plan", "Setup", "Step", "plan", "setup"]


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


class HedgeMode(StrEnum):
    """How the cloud is called alongside the draft."""

    OFF = "off"  # not now (a streamed request may still open the cloud's stream at its deadline)
    WHOLE = "whole"  # its whole answer, in the background
    STREAM = "stream"  # its stream, read into a buffer that can be relayed live


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What ``setup`` reads of the request."""

    n: int = 1
    stream: bool = False
    token_limit: int | None = None  # the client's own max_tokens, if any
    has_tools: bool = False


@dataclass(frozen=True, slots=True)
class Knobs:
    """The speculative settings ``setup`` reads (``SpeculativeConfig``'s names)."""

    hedge: Literal["off", "streams", "auto", "always"] = "off"
    stream_first_token_s: float | None = None
    stream_trust_s: float = 0.0
    stream_trust_score: float | None = None
    abort_check_tokens: int = 1
    early_abort: bool = False

    @classmethod
    def of(cls, spec: object) -> Knobs:
        """The knobs as configured (``spec``: a ``SpeculativeConfig``, read by name)."""
        return cls(**{f.name: getattr(spec, f.name) for f in fields(cls)})


@dataclass(frozen=True, slots=True)
class FirstTokenBudget:
    """A streamed request's first-token budget, in seconds from the draft's start: the
    draft has ``wait_s``; one still running then whose P(wrong) so far is at most
    ``trust_score`` (with at least ``min_tokens`` to be judged by) has ``trust_s``."""

    wait_s: float
    trust_s: float
    trust_score: float | None = None
    min_tokens: int = 1


@dataclass(frozen=True, slots=True)
class Setup:
    """What happens before the draft; ``refused``: the strategy cannot serve the request."""

    budget: int
    hedge: HedgeMode = HedgeMode.OFF
    first_token: FirstTokenBudget | None = None
    may_abort: bool = False  # the draft may be stopped early (a cloud can take over)
    streams_draft: bool = False  # the draft is streamed (early abort), so a cut one is known
    refused: bool = False
    lane: Lane = Lane.UNCERTAIN  # the gate's lane (cloud: no draft at all)


def setup(
    request: RequestFacts,
    knobs: Knobs,
    *,
    depth_budget: int,
    likely_spill: bool,
    wants_labels: bool,
    cloud: CloudState,
    lane: Lane = Lane.UNCERTAIN,
) -> Setup:
    """What happens before the draft, for this request.

    The budget is adaptive depth's, capped by the client's own limit. Nothing that needs
    the cloud (a hedge, a first-token budget, an early stop) is set up unless the cloud
    could take over from the draft now. A stream under a first-token budget is hedged
    with the cloud's stream unless ``hedge`` is off; ``auto`` also hedges a whole request
    that is a likely spill, ``always`` every one; a likely spill stops waiting for the
    draft as soon as that stream flows. llama-server refuses logprobs with tools on a
    stream, so tool drafts come whole; a learner that ``wants_labels`` (cold, or no
    threshold holds its target yet) needs whole drafts: one stopped early gives no label.

    The gate's ``lane`` (``app.routing.gate``), when the cloud could answer: ``cloud``
    drafts nothing (no hedge either); ``local`` drafts with no hedge and no first-token
    budget (the cloud only for a doubted draft or an audit); ``uncertain`` is the above.
    """
    budget = depth_budget if request.token_limit is None else min(depth_budget, request.token_limit)
    if request.n > 1:
        return Setup(budget, refused=True)
    if cloud.blocked is not None:
        return Setup(budget)  # whatever the gate said: only the draft can answer now
    may_abort = not request.has_tools and not wants_labels
    streams_draft = knobs.early_abort and may_abort
    if lane is Lane.CLOUD:
        return Setup(budget, lane=lane)
    if lane is Lane.LOCAL:
        return Setup(budget, HedgeMode.OFF, None, may_abort, streams_draft, lane=lane)
    first_token, wait_s = None, knobs.stream_first_token_s
    if wait_s is not None and request.stream:
        trust = (knobs.stream_trust_s, knobs.stream_trust_score, knobs.abort_check_tokens)
        # a likely spill goes as soon as the cloud's stream flows
        first_token = FirstTokenBudget(0, 0) if likely_spill else FirstTokenBudget(wait_s, *trust)
    whole = knobs.hedge == "always" or (knobs.hedge == "auto" and likely_spill)
    if knobs.hedge == "off" or (first_token is None and not whole):
        hedge = HedgeMode.OFF
    else:
        hedge = HedgeMode.STREAM if first_token is not None else HedgeMode.WHOLE
    return Setup(budget, hedge, first_token, may_abort, streams_draft)
