"""What one request did, as typed events: its story, written once.

Each step of a request (set up, draft, judge, plan, verify, serve, relay, audit) returns
what it did as the frozen events below, kept in order in its ``Call.events``
(``app.call``). Everything told of the request is derived from them: the seed's log
lines (``app.telemetry.narrative``), the response's ``speculative_decoding`` object and
headers (``app.wire.SpeculationReport.of``) and the record's fields (applied by the
pipeline's top module, ``app.pipeline.apply``, and read by the spec log). A leaf of the
request path: nothing here writes the record or calls an upstream.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import msgspec

from app.errors import ProxyError, UpstreamError
from app.record import Usage
from app.routing.acceptance import Acceptance
from app.routing.policy import Decision, Policy
from app.routing.signals import DraftSignals
from app.upstreams.parsing import Completion
from app.vocabulary import Outcome, Purpose

if TYPE_CHECKING:
    from app.routing.plan import CloudState, Plan


class Counted(msgspec.Struct, frozen=True):
    """One upstream call's tokens, purpose and latency (``estimated``: no counts given)."""

    model: str
    purpose: Purpose
    completion_tokens: int
    prompt_tokens: int = 0
    latency_s: float | None = None
    estimated: bool = False


class Failed(msgspec.Struct, frozen=True):
    """An upstream (and its group's members before it) failed; ``stage``: the step it failed."""

    error: UpstreamError
    stage: str | None = None


class FellOver(msgspec.Struct, frozen=True):
    """Members of a group that failed before another answered."""

    failures: tuple[UpstreamError, ...]


class Finished(msgspec.Struct, frozen=True):
    """How the request ended (a later result may still overrule it)."""

    outcome: Outcome

    @classmethod
    def of(cls, exc: BaseException) -> Finished:
        """How a request that raised ended: the client's mistake, gone, or an error."""
        if isinstance(exc, asyncio.CancelledError):
            return cls(Outcome.CLIENT_DISCONNECTED)
        if isinstance(exc, ProxyError) and exc.status < 500 and exc.status != 429:
            return cls(Outcome.CLIENT_ERROR)
        return cls(Outcome.ERROR)


class Prepared(msgspec.Struct, frozen=True):
    """What was read of the request before the draft: its hashed n-grams (learning on)."""

    ngrams: tuple[int, ...] | None


class Steered(msgspec.Struct, frozen=True):
    """Adaptive K sent to llama-server as ``speculative.n_max``."""

    server_depth: int


class Started(msgspec.Struct, frozen=True):
    """The draft is about to be asked for, with this budget."""

    budget: int


class Laned(msgspec.Struct, frozen=True):
    """The gate's lane (``app.routing.gate``) and its P(wrong) of the draft (None: cold)."""

    lane: str
    p_wrong: float | None = None


class Hedged(msgspec.Struct, frozen=True):
    """The cloud was called alongside the draft."""


class Trusted(msgspec.Struct, frozen=True):
    """A streamed draft was waited for past the first-token budget (P(wrong) at most this)."""

    trust_score: float | None


class Drafted(msgspec.Struct, frozen=True):
    """The whole draft: its signals, the prompt's tokens, llama-server's draft counters."""

    signals: DraftSignals
    prompt_tokens: int
    server_spec: dict[str, int] | None = None


class Stopped(msgspec.Struct, frozen=True):
    """The draft was cancelled for the cloud: out of first-token budget, or the hedge won."""

    signals: DraftSignals | None
    out_of_time: bool


class Judged(msgspec.Struct, frozen=True):
    """The decision on the draft: its reasons (with a broken contract), score, features,
    and what the log tells of it (accepted, the broken contract, each doubt's detail, the
    policy's name and threshold)."""

    reasons: tuple[str, ...]
    spill_score: float | None
    features: dict[str, float] | None
    accepted: bool = False
    violation: str | None = None
    details: tuple[str, ...] = ()
    policy: str = "seed"
    threshold: float = 0.5

    @classmethod
    def of(cls, decision: Decision, violation: str | None, policy: Policy) -> Judged:
        """The decision on a draft, a broken contract (``violation``) among its reasons."""
        broken = (violation,) if violation else ()
        reasons = (*map(str, decision.reasons), *broken)
        return cls(
            reasons,
            decision.score,
            decision.features,
            accepted=decision.accept,
            violation=violation,
            details=decision.details,
            policy=policy.name,
            threshold=policy.threshold,
        )


class Planned(msgspec.Struct, frozen=True):
    """The next step the plan chose (``first``: the first one for this draft); ``cloud``:
    the cloud's state it was chosen with; ``why``: why the verifier cannot answer."""

    plan: Plan
    cloud: CloudState
    first: bool = False
    violation: str | None = None
    why: str = ""


class Opened(msgspec.Struct, frozen=True):
    """A cloud stream opened for relaying (``live``: a verification streamed live)."""

    upstream: str
    fell_over: tuple[UpstreamError, ...]
    live: bool = False


class Answered(msgspec.Struct, frozen=True):
    """An upstream's whole answer for the client, and the verifiers that failed before it."""

    upstream: str
    n_tokens: int
    local: bool
    fell_over: tuple[UpstreamError, ...] = ()


class Compared(msgspec.Struct, frozen=True):
    """A draft compared with the verified answer (``use_draft`` None: a live one)."""

    similarity: float | None
    agreement: bool | None
    acceptance: Acceptance | None
    verified_text: str | None = None
    verify_s: float | None = None
    n_tokens: int = 0
    n_chars: int = 0
    use_draft: bool | None = None
    reason: str | None = None
    upstream: str = ""
    fell_over: tuple[UpstreamError, ...] = ()


class Served(msgspec.Struct, frozen=True):
    """An answer on its way: the reasons the client is told, its tool calls, and when its
    first token went out (a replayed stream: now)."""

    reasons: tuple[str, ...] | None
    tool_calls: int
    first_token_s: float | None = None


class LocalCounters(msgspec.Struct, frozen=True):
    """llama-server's draft counters of one more local answer (added to those seen)."""

    counters: dict[str, int] | None


class Continued(msgspec.Struct, frozen=True):
    """A relayed stream broke and ``upstream`` continued it (``app.upstreams.continuation``)."""

    upstream: str
    local: bool
    broken: UpstreamError
    fell_over: tuple[UpstreamError, ...]
    n_tokens: int
    prompt_tokens: int
    estimated: bool

    @property
    def reason(self) -> str:
        """The reason the client and the log are told."""
        return f"continued_by:{self.upstream}"


class RelayOutcome(msgspec.Struct, frozen=True):
    """What a relayed stream did, told when its chunks end (or the client left); ``error``:
    the failure that cut it; ``compared``: a live verification's comparison."""

    upstream: str
    purpose: Purpose
    local: bool
    n_tokens: int
    prompt_tokens: int
    estimated: bool
    tool_calls: int
    first_token_at: float | None
    reasons: tuple[str, ...] | None
    counters: LocalCounters | None = None
    error: UpstreamError | None = None
    compared: Compared | None = None
    continued: tuple[Continued, ...] = ()  # the continuations after it broke, in order


class Audited(msgspec.Struct, frozen=True):
    """An accepted draft verified in the background: the agreement and the audit's call."""

    agreement: bool | None
    usage: Usage  # the audit's own call: spend, not the request's tokens


class LateDraft(msgspec.Struct, frozen=True):
    """A draft finished beside the cloud's served answer, judged against it (``agreement``
    None: not judged, no label); ``counted``: its tokens past those counted when stopped."""

    agreement: bool | None
    counted: Counted


class CacheLooked(msgspec.Struct, frozen=True):
    """The cache's ``result`` (hit, miss, bypass); a hit's model and cloud counts (free)."""

    result: str
    model_used: str | None = None
    baseline: Usage | None = None


Event = (
    Counted
    | Failed
    | FellOver
    | Finished
    | Prepared
    | Steered
    | Started
    | Hedged
    | Laned
    | Trusted
    | Drafted
    | Stopped
    | Judged
    | Planned
    | Opened
    | Answered
    | Compared
    | Served
    | LocalCounters
    | RelayOutcome
    | Audited
    | CacheLooked
    | LateDraft
)


def cloud_counted(verified: Completion, purpose: Purpose) -> list[Event]:
    """The cloud's answer's tokens, on the upstream that gave it; the ones that failed first."""
    n, prompt = verified.completion_tokens, verified.prompt_tokens
    counted = Counted(verified.upstream, purpose, n, prompt, latency_s=verified.latency_s)
    return [FellOver(verified.fell_over), counted]
