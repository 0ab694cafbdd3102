"""What happens before the draft: ``setup``, pure, as ``app.routing.plan`` decides what
happens after it.

From the request, the policy's view of it, the cloud's state, the gate's lane and the
speculative settings, ``setup`` decides the draft's budget, whether the cloud is called
alongside it (whole or as a stream) or answers instead, the first-token budget of a stream, and
whether the draft may be stopped early. No I/O happens here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Literal

from app.routing.gate import Lane
from app.vocabulary import CloudState


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
    unheld: bool = False  # no threshold holds: the cloud answers, the draft is a label


def setup(
    request: RequestFacts,
    knobs: Knobs,
    *,
    depth_budget: int,
    likely_spill: bool,
    wants_labels: bool,
    cloud: CloudState,
    lane: Lane = Lane.UNCERTAIN,
    unheld: bool = False,
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
    Unless the caller says no threshold holds the target (``unheld``: the draft would be
    verified whatever it scores, and a slot is free to finish it beside the cloud's answer):
    then, in the uncertain lane, the cloud answers at once and the draft beside it is a
    label. The local lane is held by the gate's own bound (``app.routing.gate.judged_in``).
    """
    budget = depth_budget if request.token_limit is None else min(depth_budget, request.token_limit)
    if request.n > 1:
        return Setup(budget, refused=True)
    if cloud.blocked is not None:
        return Setup(budget)  # whatever the gate said: only the draft can answer now
    # a local-lane draft is served, not labelled (only audits label it): it may be stopped
    may_abort = not request.has_tools and (not wants_labels or lane is Lane.LOCAL)
    streams_draft = knobs.early_abort and may_abort
    if lane is Lane.CLOUD:
        return Setup(budget, lane=lane)
    if lane is Lane.LOCAL:
        return Setup(budget, HedgeMode.OFF, None, may_abort, streams_draft, lane=lane)
    if unheld:
        return Setup(budget, unheld=True)
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
