"""``state:``, ``cache:`` and ``responses:``: where shared state, verified answers and
stored responses live."""

from __future__ import annotations

import importlib.util
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, model_validator

from app.config.strict import Strict


class StateConfig(Strict):
    """Where the state replicas share lives (docs/state.md): this process, or Redis."""

    backend: Literal["memory", "redis"] = Field(
        "memory",
        description="memory: each process keeps its own; redis: replicas share budget, "
        "circuits, learning and /stats → fleet",
    )
    redis_url: SecretStr | None = Field(
        None,
        description="redis://[:password@]host:port/db, only as ${VAR} (it may hold a password)",
    )
    key_prefix: str = Field(
        "specproxy", min_length=1, description="prefix of every Redis key (one fleet per prefix)"
    )
    sync_every_s: float = Field(
        0.5,
        gt=0,
        le=60,
        description="how often a replica publishes its state and reads the fleet's",
    )
    timeout_s: float = Field(
        0.5,
        gt=0,
        le=10,
        description="the longest a sync with Redis (or a learner's call) may take: longer is down",
    )
    replica_ttl_s: float = Field(
        10.0, gt=0, description="a replica not heard from for this long leaves the fleet view"
    )

    def secrets(self) -> list[str]:
        """``redis_url`` and the password inside it, for redaction (where the URL is not
        written whole too)."""
        if self.redis_url is None:
            return []
        url = self.redis_url.get_secret_value()
        password = urlsplit(url).password
        return [url, password] if password else [url]

    @model_validator(mode="after")
    def _redis_needs_url(self) -> StateConfig:
        if self.backend == "redis" and not (self.redis_url and self.redis_url.get_secret_value()):
            raise ValueError(
                "backend redis needs redis_url: write it as ${REDIS_URL} and export the variable"
            )
        return self

    @model_validator(mode="after")
    def _redis_needs_its_extra(self) -> StateConfig:
        if self.backend == "redis" and importlib.util.find_spec("redis") is None:
            raise ValueError(
                "backend redis needs the redis package: pip install 'specproxy[redis]'"
            )
        return self


class CacheConfig(Strict):
    """The cache of verified answers (docs/cache.md): answers the cloud gave, or drafts that
    agreed with it, served again to the same client key for the same request."""

    enabled: bool = Field(True, description="look up and store verified answers")
    max_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="memory backend: the entries' bytes at most (LRU)"
    )
    max_age_s: float = Field(
        86400.0, gt=0, description="an entry older than this is not served (Redis: its TTL)"
    )
    near: bool = Field(
        True,
        description="also serve a request whose question differs only in case, spacing or "
        "final punctuation, when its numbers, negations, quoted literals and names match",
    )
    audit_rate: float = Field(
        0.02,
        ge=0,
        le=1,
        description="share of hits re-asked of the cloud in the background; an entry the "
        "cloud no longer agrees with is replaced",
    )


class ResponsesConfig(Strict):
    """The Responses API door's store of responses (docs/agents.md), for
    ``previous_response_id`` and ``GET``/``DELETE /v1/responses/{id}``; where it lives is
    ``state.backend``'s."""

    store_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="all stored responses together, in bytes at most (oldest out first)",
    )
    store_max_age_s: float = Field(
        86400.0, gt=0, description="a stored response older than this is gone (Redis: its TTL)"
    )
