"""The decision: serve the draft as it is, or ask the verifier. Pure functions.

Two kinds of policy share one ``decide``:

* ``seed``: the seed's rules of thumb (too short, hedging words, incomplete, low token
  probability), each a reason of its own;
* a scored policy (``confidence``, ``combined``): a fitted scorer gives the probability that
  the draft is wrong and the draft goes to the cloud above a threshold. A draft cut at the
  draft budget always goes, and so does an empty one (no text, no tool call): neither can
  be served as an answer whatever its score.

A draft the pipeline stopped early (a token under the abort floor) always goes to the cloud.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.routing.features import draft_features
from app.routing.request_features import RequestFeatures
from app.routing.scorer import Scorer
from app.routing.signals import DraftSignals
from app.vocabulary import ContextType


class SpillReason(StrEnum):
    """Why a draft was sent for verification."""

    INCOMPLETE = "incomplete"
    TOO_SHORT = "too_short"
    UNCERTAINTY_MARKER = "uncertainty_marker"
    LOW_CONFIDENCE = "low_confidence"
    EARLY_ABORT = "early_abort"
    # the learner's: no threshold holds the quality target yet, so no score is trusted
    TARGET_UNPROVEN = "target_unproven"


@dataclass(frozen=True, slots=True)
class Policy:
    """The seed's thresholds (seed 004) and, for a scored policy, its scorer and threshold."""

    short_draft_chars: int = 50
    incomplete_ratio: float = 0.9
    uncertainty_markers: tuple[str, ...] = ("...", "I think", "maybe")
    min_mean_token_prob: float = 0.5
    min_token_prob: float = 0.05
    scorer: Scorer | None = None  # None: the seed's rules
    threshold: float = 0.5  # a scored draft goes to the cloud when its score is above this

    @property
    def name(self) -> str:
        return "seed" if self.scorer is None else self.scorer.name

    def score(
        self,
        signals: DraftSignals,
        context_type: ContextType | str,
        request: RequestFeatures | None = None,
    ) -> tuple[float, dict[str, float]]:
        """A scored policy's P(draft is wrong) and the features it read (the draft's, and the
        request's shape when ``request`` is given)."""
        assert self.scorer is not None, "the seed's rules have no score"
        features = draft_features(
            signals, markers=self.uncertainty_markers, context_type=context_type
        )
        if request is None:
            return self.scorer.score(features), features
        features.update(request.shape)
        return self.scorer.score(features, request.ngrams), features


@dataclass(frozen=True, slots=True)
class Decision:
    """``accept`` means serve the draft without verification; ``details`` explain each reason.

    ``score`` is a scored policy's P(draft is wrong) and ``features`` what it read; both
    are None for the seed's rules and for a draft that was never scored (cut at the budget).
    """

    accept: bool
    reasons: tuple[SpillReason, ...] = ()
    details: tuple[str, ...] = ()
    score: float | None = None
    features: dict[str, float] | None = None


def decide(
    signals: DraftSignals,
    policy: Policy,
    context_type: ContextType | str = ContextType.PROSE,
    request: RequestFeatures | None = None,
) -> Decision:
    """Serve the draft or verify it, by the policy's rules; name every doubt. ``request``:
    what a learned scorer reads of the request itself."""
    if signals.aborted:
        low = min((t.p for t in signals.tokens), default=0.0)
        detail = f"draft stopped early at token {signals.n_tokens} (lowest token p {low:.3f})"
        return Decision(False, (SpillReason.EARLY_ABORT,), (f"early_abort: {detail}",))
    if policy.scorer is None:
        return _decide_seed(signals, policy)
    if signals.cut:
        detail = f"{signals.n_tokens}/{signals.budget} tokens, cut at the draft budget"
        return Decision(False, (SpillReason.INCOMPLETE,), (f"incomplete: {detail}",))
    score, features = policy.score(signals, context_type, request)
    if not signals.text.strip() and not signals.tool_calls:  # nothing to serve, whatever the score
        reason = f"{SpillReason.TOO_SHORT}: an empty answer"
        return Decision(False, (SpillReason.TOO_SHORT,), (reason,), score, features)
    if score <= policy.threshold:
        return Decision(True, score=score, features=features)
    if policy.threshold < 0:  # the learner's: no threshold holds the quality target yet
        why = SpillReason.TARGET_UNPROVEN
        detail = f"{policy.scorer.name} score {score:.2f}, no threshold holds the target yet"
    else:
        why = SpillReason.LOW_CONFIDENCE
        detail = f"{policy.scorer.name} score {score:.2f} > {policy.threshold:.2f}"
    return Decision(False, (why,), (f"{why}: {detail}",), score, features)


def _decide_seed(signals: DraftSignals, policy: Policy) -> Decision:
    found: list[tuple[SpillReason, str]] = []

    if signals.truncated or signals.n_tokens >= policy.incomplete_ratio * signals.budget:
        found.append(
            (
                SpillReason.INCOMPLETE,
                f"{signals.n_tokens}/{signals.budget} tokens, "
                f"finish_reason={signals.finish_reason}",
            )
        )
    if len(signals.text.strip()) < policy.short_draft_chars:
        found.append(
            (
                SpillReason.TOO_SHORT,
                f"{len(signals.text.strip())} < {policy.short_draft_chars} chars",
            )
        )
    lowered = signals.text.lower()
    markers = [m for m in policy.uncertainty_markers if m.lower() in lowered]
    if markers:
        found.append((SpillReason.UNCERTAINTY_MARKER, f"contains {', '.join(map(repr, markers))}"))
    mean_p, min_p = signals.mean_prob, signals.min_prob
    if mean_p is not None and min_p is not None:
        if mean_p < policy.min_mean_token_prob:
            found.append(
                (SpillReason.LOW_CONFIDENCE, f"mean p {mean_p:.2f} < {policy.min_mean_token_prob}")
            )
        elif min_p < policy.min_token_prob:
            found.append(
                (SpillReason.LOW_CONFIDENCE, f"min p {min_p:.3f} < {policy.min_token_prob}")
            )

    return Decision(
        accept=not found,
        reasons=tuple(r for r, _ in found),
        details=tuple(f"{r}: {d}" for r, d in found),
    )


def prefix_score(
    prefix: DraftSignals,
    policy: Policy,
    context_type: ContextType | str,
    request: RequestFeatures | None = None,
) -> float | None:
    """The scorer's P(wrong) of a draft so far; None for the seed's rules (no scorer)."""
    if policy.scorer is None:
        return None
    score, _ = policy.score(prefix, context_type, request)
    return score


def doomed_prefix(
    prefix: DraftSignals,
    policy: Policy,
    context_type: ContextType | str,
    min_score: float,
    request: RequestFeatures | None = None,
) -> float | None:
    """The scorer's P(wrong) of a draft so far when it is already above ``min_score`` (the
    draft will spill: stop it), else None. Always None for the seed's rules."""
    score = prefix_score(prefix, policy, context_type, request)
    return score if score is not None and score > min_score else None


def likely_spill(policy: Policy, context_type: ContextType | str, min_prior: float) -> bool:
    """Whether the request's kind alone makes a spill likely: the share of drafts of this
    context type the scorer sent to the cloud when it was fitted is at least ``min_prior``."""
    if policy.scorer is None:
        return False
    prior = policy.scorer.spill_prior.get(str(context_type))
    return prior is not None and prior >= min_prior


@dataclass(frozen=True, slots=True)
class Judge:
    """What a request's draft is judged by: the policy in force when it started, the
    request's context type, and what a learned scorer reads of the request."""

    policy: Policy
    context: ContextType
    request: RequestFeatures | None = None

    def decide(self, signals: DraftSignals) -> Decision:
        return decide(signals, self.policy, self.context, self.request)

    def trusts(self, prefix: DraftSignals, max_score: float) -> bool:
        """The scorer's P(wrong) of the draft so far is at most ``max_score`` (never
        without a scorer)."""
        score = prefix_score(prefix, self.policy, self.context, self.request)
        return score is not None and score <= max_score

    def doomed(self, prefix: DraftSignals, min_score: float) -> bool:
        """The draft so far already doubted past ``min_score``: stop it."""
        score = doomed_prefix(prefix, self.policy, self.context, min_score, self.request)
        return score is not None
