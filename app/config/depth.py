"""``adaptive_depth:``: seed 001's controller numbers for its two knobs (docs/adaptive-depth.md)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from app.config.strict import Strict
from app.vocabulary import CONTEXT_TYPES

# The adaptive-depth controller steps K down when acceptance is this far under its
# target, so a target at or under it could never step down (app.routing.depth.LOW_MARGIN;
# a test keeps the two equal).
DEPTH_LOW_MARGIN = 0.10


class DepthConfig(Strict):
    """One adaptive-depth knob: seed 001's controller numbers (docs/adaptive-depth.md)."""

    enabled: bool = Field(False, description="false = K stays fixed")
    k_min: int = Field(4, ge=1, description="lowest K")
    k_max: int = Field(24, ge=1, description="highest K")
    k_start: int | None = Field(8, ge=1, description="K before any feedback")
    target_acceptance: float = Field(
        0.55,
        gt=DEPTH_LOW_MARGIN,
        lt=1,
        description="acceptance K steers to (over 0.1, or K could never step down)",
    )
    interval: int = Field(64, ge=1, description="drafted tokens between adjustments")
    window: int = Field(128, ge=1, description="drafted tokens in the rolling acceptance")
    step_small: int = Field(2, ge=1, description="step when acceptance is a little off the target")
    step_large: int = Field(4, ge=1, description="step when acceptance is far off the target")
    start_offsets: dict[str, int] = Field(
        default_factory=dict, description="added to k_start per context type"
    )
    ceilings: dict[str, int] = Field(
        default_factory=dict, description="a lower k_max per context type"
    )

    @field_validator("start_offsets", "ceilings")
    @classmethod
    def _known_contexts(cls, value: dict[str, int]) -> dict[str, int]:
        if unknown := sorted(set(value) - set(CONTEXT_TYPES)):
            raise ValueError(f"unknown context type {unknown}; known: {', '.join(CONTEXT_TYPES)}")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> DepthConfig:
        if self.k_min > self.k_max:
            raise ValueError(f"k_min ({self.k_min}) is above k_max ({self.k_max})")
        return self


class ServerDepthConfig(DepthConfig):
    """llama-server's ``speculative.n_max`` per request; seed 001's numbers and heuristics."""

    enabled: bool = Field(True, description="false = K stays fixed")
    start_offsets: dict[str, int] = Field(
        default_factory=lambda: {"code": 8, "math": -4},
        description="added to k_start per context type",
    )
    ceilings: dict[str, int] = Field(
        default_factory=lambda: {"json": 6}, description="a lower k_max per context type"
    )


class BudgetDepthConfig(DepthConfig):
    """The proxy's draft budget per context type; k_start None = max_draft_tokens."""

    k_min: int = Field(16, ge=1, description="smallest draft budget")
    k_max: int = Field(512, ge=1, description="largest draft budget")
    k_start: int | None = Field(
        None, ge=1, description="budget before any feedback; None = max_draft_tokens"
    )
    interval: int = Field(256, ge=1, description="drafted tokens between adjustments")
    window: int = Field(512, ge=1, description="drafted tokens in the rolling acceptance")
    step_small: int = Field(16, ge=1, description="step when acceptance is a little off the target")
    step_large: int = Field(32, ge=1, description="step when acceptance is far off the target")
    start_offsets: dict[str, int] = Field(
        default_factory=lambda: {"code": 64}, description="added to k_start per context type"
    )


class AdaptiveDepthConfig(Strict):
    """Seed 001's adaptive K on two knobs; off = fixed K (docs/adaptive-depth.md)."""

    server_n_max: ServerDepthConfig = Field(
        ServerDepthConfig(), description="llama-server's speculative.n_max per request"
    )
    draft_budget: BudgetDepthConfig = Field(
        BudgetDepthConfig(), description="the proxy's max_draft_tokens per context type"
    )
