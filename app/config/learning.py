"""``learning:``: the online learner's settings (docs/learning.md, docs/target.md)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from app.config.strict import Strict


class LearningConfig(Strict):
    """The online learner: labels from verifications and audits (docs/learning.md)."""

    enabled: bool = Field(
        True,
        description="learn the spill scorer from this proxy's own verifications (left unset "
        "under policy: seed: off)",
    )
    audit_rate: float = Field(
        0.1, ge=0, le=1, description="share of accepted drafts also verified in the background"
    )
    cold_audit_rate: float = Field(
        0.5, ge=0, le=1, description="the audit share until min_labels labels exist"
    )
    state_dir: str = Field("state", description="where labels and the learned scorer are kept")
    min_labels: int = Field(50, ge=10, description="labels before the first refit")
    refit_every: int = Field(25, ge=1, description="new labels between refits")
    max_labels: int = Field(5000, ge=100, description="labels kept (the newest)")
    holdout: float = Field(
        0.2, gt=0, lt=1, description="share of the newest labels a candidate is checked on"
    )
    prior_strength: float = Field(
        10.0,
        ge=0,
        description="how firmly a refit is held to the configured scorer (L2 toward its "
        "weights; 0: fit from scratch)",
    )
    late_drafts: int = Field(
        1,
        ge=0,
        description="drafts finished in the background for a label (a stream relayed from "
        "the cloud past its first-token budget, an explored cloud-lane request, an unheld "
        "one: cloud_until_held), at most this many at once (0: none; unheld off too)",
    )
    cloud_until_held: bool = Field(
        True,
        description="while no threshold holds target_agreement (every draft outside the "
        "gate's local lane would be verified, so the cloud call is certain): the cloud's "
        "answer is served at once and the draft, made beside it, is judged against it for "
        "a label (a late_drafts slot; none free: the draft goes first, verified and merged "
        "as before)",
    )
    whole_drafts: float = Field(
        1.0,
        ge=0,
        le=1,
        description="past min_labels, while no threshold holds target_agreement: the share "
        "of drafts not stopped early, so they are judged whole and labelled (1: every one, "
        "at the latency of a whole draft; 0: early abort from min_labels on)",
    )

    @field_validator("state_dir")
    @classmethod
    def _a_directory(cls, value: str) -> str:
        if Path(value).exists() and not Path(value).is_dir():
            raise ValueError(f"{value} is a file: state_dir must be a directory (made if missing)")
        return value
