"""The proxy's shared nouns: strategies, context types, policies, outcomes, stop reasons,
and the cloud's state as an upstream tells it and the plan reads it.

A leaf module (it imports nothing from the app), so the pure packages (``routing``,
``evaluation``), the config schema and telemetry can all speak the same words
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Strategy(StrEnum):
    """How a request is served: drafted and judged, or passed to one upstream."""

    SPECULATIVE = "speculative_decoding"
    LOCAL_ONLY = "local_only"
    CEREBRAS_ONLY = "cerebras_only"


class ContextType(StrEnum):
    """What kind of request this is (seed 001's heuristics)."""

    CODE = "code"
    MATH = "math"
    JSON = "json"
    LIST = "list"
    PROSE = "prose"


class PolicyName(StrEnum):
    """Which rules decide between the draft and the cloud (docs/routing-quality.md)."""

    SEED = "seed"
    CONFIDENCE = "confidence"
    COMBINED = "combined"


class AgreementMode(StrEnum):
    """How a verified draft is judged against the verified answer (``agreement``)."""

    FACTS = "facts"  # the facts must match (app.routing.agreement)
    SIMILARITY = "similarity"  # the seed's: rapidfuzz ratio >= min_confidence


class Outcome(StrEnum):
    """How a request ended."""

    ACCEPTED = "accepted_without_verification"
    VERIFIED_DRAFT_USED = "verified_draft_used"
    SPILLED_OVER = "spilled_over"
    DEGRADED = "degraded"
    LOCAL_DOWN_CLOUD_USED = "local_down_cloud_used"
    PASSED_THROUGH = "passed_through"
    CACHED = "cached"  # a verified answer served again from the cache (app.cache)
    CLIENT_ERROR = "client_error"
    CLIENT_DISCONNECTED = "client_disconnected"
    ERROR = "error"


class Purpose(StrEnum):
    """Why an upstream was called: what its tokens are spent on (``/stats`` → ``cost``)."""

    DRAFT = "draft"  # the local model's draft (or its whole answer, continuing locally)
    VERIFICATION = "verification"  # the cloud checked a draft that was then served
    SPILL = "spill"  # the cloud's answer was served instead of the draft
    HEDGE = "hedge"  # the cloud called alongside the draft, whatever came of it
    HEDGE_CANCELLED = "hedge_cancelled"  # a hedge the draft made needless, stopped in flight
    AUDIT = "audit"  # an accepted draft verified after it was served
    PASS_THROUGH = "pass_through"  # local_only / cerebras_only: one upstream answers
    EMBEDDINGS = "embeddings"  # POST /v1/embeddings: the embeddings upstream's input tokens


class StopReason(StrEnum):
    """Why drafting stopped (seed 000's ``draft.stop_reason``)."""

    COMPLETE = "complete"  # the model finished
    N_MAX = "n_max"  # cut at the draft budget
    P_MIN = "p_min"  # stopped early at a doubtful token (also the draft's finish_reason)


@dataclass(frozen=True, slots=True)
class CloudState:
    """Whether an upstream may be called now (``Upstream.availability``)."""

    has_key: bool = True
    circuit_open: bool = False
    budget_low: bool = False
    # Half-open with its one probe out: a call now would be refused until it ends (a
    # group tries such a member last; the plan does not tell it from a closed circuit).
    probe_out: bool = False
    detail: str = field(default="", compare=False)  # the blocking condition, for the log

    @property
    def reachable(self) -> bool:
        """A call could go out at all (a key and a closed or probing circuit)."""
        return self.has_key and not self.circuit_open

    @property
    def blocked(self) -> str | None:
        """Why it must not verify now, as the reason the client is told; None if it may."""
        if not self.reachable:
            return "verifier_unavailable"
        return "cloud_budget_low" if self.budget_low else None

    @property
    def callable_now(self) -> bool:
        """A call would go out now: not blocked, and no probe of the circuit under way."""
        return self.blocked is None and not self.probe_out


CONTEXT_TYPES = tuple(c.value for c in ContextType)
