"""``speculative_decoding:``: seed 004's keys, the routing policy's and the gate's.

Checked once here: a threshold out of range, a hedge that needs scores the policy does
not make, a trusted stream that would end before its budget.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from app.config.strict import Strict
from app.vocabulary import AgreementMode, PolicyName


class GateConfig(Strict):
    """The gate before the draft (docs/gate.md): a lane per request, from the learner's labels."""

    enabled: bool = Field(
        True, description="choose a lane before the draft (needs learning; cold: uncertain)"
    )
    cloud_max_agreement: float = Field(
        0.2,
        ge=0,
        le=1,
        description="cloud lane: requests scored where the labels' agreement (one-sided 95% "
        "upper bound) is under this go to the cloud without a draft",
    )
    explore: float = Field(
        0.2,
        ge=0,
        le=1,
        description="the share of cloud-lane requests whose draft is made in the background, "
        "never served, and judged against the cloud's answer for a label weighing 1/explore "
        "(at most learning.late_drafts at once; 0: off)",
    )


class SpeculativeConfig(Strict):
    """Seed 004's keys and the routing policy's; every default is the value config.yaml ships.

    tests/test_config.py keeps the two equal, so a key left out means what the shipped file
    says. The seed policy's thresholds are the seed's values (the shipped ones too); its
    budget and flow are not (seed 004: ``max_draft_tokens: 10``, ``policy: seed``).
    """

    enabled: bool = Field(True, description="false: the speculative strategy serves the draft only")
    draft_model: str = Field("local", description="the name under models: that drafts")
    verify_model: list[str] = Field(
        ["cerebras"],
        min_length=1,
        description="the name under models: that verifies, or a list of names: the first "
        "healthy one verifies, a failure falls to the next",
    )
    model_name: str = Field(
        "speculative",
        min_length=1,
        description="the model id that picks this strategy (listed in /v1/models)",
    )
    max_draft_tokens: int = Field(
        128, ge=1, description="draft budget: the longest answer served locally"
    )
    min_confidence: float = Field(
        0.8, ge=0, le=1, description="agreement: similarity, the similarity a verified draft needs"
    )
    agreement: AgreementMode = Field(
        AgreementMode.FACTS,
        description="when a verified draft is served: its facts match (facts) or it reads "
        "alike (similarity, the seed's)",
    )
    short_draft_chars: int = Field(
        50, ge=0, description="seed policy: shorter drafts are too_short"
    )
    incomplete_ratio: float = Field(
        0.9,
        gt=0,
        le=1,
        description="seed policy: a draft using this share of its budget is incomplete",
    )
    uncertainty_markers: list[str] = Field(
        default_factory=lambda: ["...", "I think", "maybe"],
        description="seed policy: hedging phrases (any case) that send a draft to the cloud",
    )
    min_mean_token_prob: float = Field(
        0.5, ge=0, le=1, description="seed policy: low_confidence under this mean token probability"
    )
    min_token_prob: float = Field(
        0.05, ge=0, le=1, description="seed policy: low_confidence if any token is under this"
    )
    top_logprobs: int = Field(
        5, ge=1, le=20, description="candidates asked for per draft token (for the entropy)"
    )
    policy: PolicyName = Field(
        PolicyName.COMBINED,
        description="what judges a draft: seed (rules of thumb), confidence or combined (scored)",
    )
    spill_threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        description="scored policies: cloud when P(draft wrong) is above this; None = the scorer's",
    )
    scorer_file: str | None = Field(
        None, description="a scorer JSON of your own instead of the shipped one"
    )
    target_agreement: float = Field(
        0.95,
        gt=0,
        le=1,
        description="the share of locally served answers that must agree with the cloud "
        "(one-sided 95% bound on the audits)",
    )
    early_abort: bool = Field(
        True,
        description="stream the draft and stop it early when it looks doubtful (with learning "
        "on: not while cold, nor while no threshold holds the target for the "
        "learning.whole_drafts share; a stopped draft gives no label)",
    )
    abort_min_token_prob: float = Field(
        0.01, ge=0, le=1, description="early abort: a token under this p stops the draft"
    )
    abort_min_score: float | None = Field(
        0.5,
        ge=0,
        le=1,
        description="early abort: stop when the scorer's P(wrong) so far passes this; "
        "None = the token floor only",
    )
    abort_check_tokens: int = Field(
        8, ge=1, description="early abort: score the draft every N tokens"
    )
    hedge: Literal["off", "streams", "auto", "always"] = Field(
        "streams",
        description="call the cloud with the draft: streams (a stream under its first-token "
        "budget only), auto (also a whole request when a spill is likely), always or off; "
        "the gate's cloud lane takes likely spills without a draft (docs/gate.md)",
    )
    hedge_min_prior: float = Field(
        0.8, ge=0, le=1, description="auto: hedge when the context type spills this often"
    )
    stream_first_token_s: float | None = Field(
        0.25,
        ge=0,
        description="streams: seconds a draft has to be accepted before the cloud's stream is "
        "relayed live (hedged from the start unless hedge is off; a likely spill by "
        "hedge_min_prior goes once that stream flows); None = wait for the draft",
    )
    stream_trust_score: float | None = Field(
        0.1,
        ge=0,
        le=1,
        description="streams: a draft still running at stream_first_token_s whose P(wrong) so "
        "far is at most this keeps going, to stream_trust_s (needs early_abort and a scored "
        "policy; at least abort_check_tokens streamed by then; not for tools, nor while the "
        "learner is cold or no threshold holds its target: drafts come whole); None = no "
        "draft is waited for",
    )
    stream_trust_s: float = Field(
        1.0,
        ge=0,
        description="streams: the most a draft trusted at the first-token budget may take, "
        "from the request's start (above stream_first_token_s)",
    )
    gate: GateConfig = Field(
        GateConfig(),
        description="the gate before the draft: cloud, local or uncertain lane (docs/gate.md)",
    )

    @field_validator("verify_model", mode="before")
    @classmethod
    def _one_name_is_a_chain_of_one(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @property
    def verifier(self) -> str:
        """The first verifier: the one a chain asks first, whose prices are the baseline's."""
        return self.verify_model[0]

    @field_validator("hedge", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare `off` as false: take it as meant.
        return "off" if value is False else value

    @model_validator(mode="after")
    def _hedge_needs_scores(self) -> SpeculativeConfig:
        # Whether the scorer itself loads is checked by app.composition at start-up.
        if self.policy is PolicyName.SEED and self.hedge == "auto":
            raise ValueError(
                "hedge: auto (also the default) reads the scorer's spill rates: set policy to "
                "confidence or combined, or hedge to off or always"
            )
        return self

    @model_validator(mode="after")
    def _trust_outlasts_the_budget(self) -> SpeculativeConfig:
        budget, trust = self.stream_first_token_s, self.stream_trust_score
        if trust is not None and budget is not None and self.stream_trust_s <= budget:
            raise ValueError(
                f"stream_trust_s ({self.stream_trust_s:g}) must be above stream_first_token_s "
                f"({budget:g}): a trusted draft may go on from the budget to stream_trust_s"
            )
        return self
