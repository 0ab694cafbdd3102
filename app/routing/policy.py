"""The decision: serve the draft as it is, or ask the verifier. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.config import SpeculativeConfig
from app.routing.signals import DraftSignals


class SpillReason(StrEnum):
    """Why a draft was sent for verification."""

    INCOMPLETE = "incomplete"
    TOO_SHORT = "too_short"
    UNCERTAINTY_MARKER = "uncertainty_marker"
    LOW_CONFIDENCE = "low_confidence"


@dataclass(frozen=True, slots=True)
class Policy:
    """Thresholds of the seed's heuristics (seed 004), plus token confidence floors."""

    short_draft_chars: int = 50
    incomplete_ratio: float = 0.9
    uncertainty_markers: tuple[str, ...] = ("...", "I think", "maybe")
    min_mean_token_prob: float = 0.5
    min_token_prob: float = 0.05

    @classmethod
    def from_config(cls, config: SpeculativeConfig) -> Policy:
        return cls(
            short_draft_chars=config.short_draft_chars,
            incomplete_ratio=config.incomplete_ratio,
            uncertainty_markers=tuple(config.uncertainty_markers),
            min_mean_token_prob=config.min_mean_token_prob,
            min_token_prob=config.min_token_prob,
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """``accept`` means serve the draft without verification; ``details`` explain each reason."""

    accept: bool
    reasons: tuple[SpillReason, ...] = ()
    details: tuple[str, ...] = ()


def decide(signals: DraftSignals, policy: Policy) -> Decision:
    """Accept the draft unless one of the heuristics doubts it; name every doubt."""
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
