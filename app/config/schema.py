"""The validated shape of config.yaml: one pydantic model per section.

Every section has ``extra="forbid"`` so a mistyped key fails at start-up with its
path, and every threshold is checked once, in its section's module. Reading the file,
``${VAR}`` interpolation and the refusal of literal secrets are ``app.config.loading``'s.
Nothing here imports the routing code: ``app.composition`` builds policies and
controllers from these settings.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from app.config.depth import AdaptiveDepthConfig
from app.config.learning import LearningConfig
from app.config.models import ModelConfig
from app.config.server import ServerConfig
from app.config.speculative import SpeculativeConfig
from app.config.state import CacheConfig, ResponsesConfig, StateConfig
from app.config.strict import Strict
from app.config.telemetry import LoggingConfig, TelemetryConfig
from app.vocabulary import PolicyName, Strategy


class RoutingConfig(Strict):
    strategy: Strategy = Field(
        Strategy.SPECULATIVE,
        description="used when neither X-Routing-Strategy nor the model name picks one",
    )


class Settings(Strict):
    server: ServerConfig = Field(
        ServerConfig(), description="listening, client keys, request limits"
    )
    routing: RoutingConfig = Field(RoutingConfig(), description="the default strategy")
    models: dict[str, ModelConfig] = Field(description="the upstreams, by the name used elsewhere")
    speculative_decoding: SpeculativeConfig = Field(
        SpeculativeConfig(), description="drafting, judging and verifying"
    )
    adaptive_depth: AdaptiveDepthConfig = Field(
        AdaptiveDepthConfig(), description="seed 001's adaptive K per context type"
    )
    logging: LoggingConfig = Field(LoggingConfig(), description="log level and the JSON-lines logs")
    telemetry: TelemetryConfig = Field(TelemetryConfig(), description="/stats alerts, /metrics")
    learning: LearningConfig = Field(
        LearningConfig(), description="learning the spill scorer from verified drafts"
    )
    state: StateConfig = Field(
        StateConfig(), description="state shared by replicas: memory (none) or redis"
    )
    cache: CacheConfig = Field(
        CacheConfig(), description="the cache of verified answers (state.backend: where)"
    )
    responses: ResponsesConfig = Field(
        ResponsesConfig(), description="the Responses API's stored responses (state.backend: where)"
    )

    @model_validator(mode="before")
    @classmethod
    def _seed_learns_nothing(cls, data: Any) -> Any:
        """Learning is on by default, but the seed's rules have nothing to learn: under
        ``policy: seed`` a ``learning.enabled`` left unset means off."""
        if not isinstance(data, dict):
            return data
        spec, learning = data.get("speculative_decoding"), data.get("learning")
        policy = spec.get("policy") if isinstance(spec, dict) else None
        if policy in (PolicyName.SEED, PolicyName.SEED.value) and (
            learning is None or (isinstance(learning, dict) and "enabled" not in learning)
        ):
            data = {**data, "learning": {**(learning or {}), "enabled": False}}
        return data

    @model_validator(mode="after")
    def _learning_needs_scores(self) -> Settings:
        if self.learning.enabled and self.speculative_decoding.policy is PolicyName.SEED:
            raise ValueError(
                "learning.enabled needs a scored policy (speculative_decoding.policy: "
                "confidence or combined): the seed's rules have nothing to learn"
            )
        return self

    @model_validator(mode="after")
    def _budget_starts_in_range(self) -> Settings:
        budget, start = self.adaptive_depth.draft_budget, self.speculative_decoding.max_draft_tokens
        if budget.enabled and budget.k_start is None and not budget.k_min <= start <= budget.k_max:
            raise ValueError(
                f"adaptive_depth.draft_budget starts at speculative_decoding.max_draft_tokens "
                f"({start}), outside its k_min..k_max ({budget.k_min}..{budget.k_max}): "
                "set k_start or widen the range"
            )
        return self

    @model_validator(mode="after")
    def _roles_exist(self) -> Settings:
        spec = self.speculative_decoding
        roles = [("draft_model", spec.draft_model)]
        roles += [("verify_model", name) for name in spec.verify_model]
        for role, name in roles:
            if name not in self.models:
                raise ValueError(
                    f"speculative_decoding.{role} names '{name}', "
                    f"which is not under models ({', '.join(self.models) or 'none'})"
                )
        if len(set(spec.verify_model)) < len(spec.verify_model):
            raise ValueError("speculative_decoding.verify_model names a model twice")
        if spec.draft_model in spec.verify_model:
            raise ValueError("speculative_decoding.verify_model names the draft model")
        if spec.model_name in self.models:
            raise ValueError(
                f"speculative_decoding.model_name '{spec.model_name}' is also a name under "
                "models: a request naming it could not tell which strategy it wants"
            )
        return self

    def secrets(self) -> list[str]:
        """Every secret value in force, for redaction."""
        keys = [k.get_secret_value() for k in self.server.api_keys]
        keys += [m.api_key.get_secret_value() for m in self.models.values() if m.api_key]
        keys += [k.key.get_secret_value() for k in self.server.keys]
        guards = (self.server.admin_key, self.server.telemetry_key)
        keys += [k.get_secret_value() for k in guards if k is not None]
        keys += self.state.secrets()
        return [k for k in keys if k]
