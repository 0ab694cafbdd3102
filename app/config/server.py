"""``server:``: where the proxy listens, who may call it, and the limits of a request."""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from app.config.keys import VirtualKeyConfig
from app.config.models import HttpLimits
from app.config.strict import Strict


class ServerConfig(Strict):
    host: str = Field("0.0.0.0", description="address to listen on; --host overrides")
    port: int = Field(8000, ge=0, le=65535, description="port to listen on; --port overrides")
    api_keys: list[SecretStr] = Field(
        default_factory=list,
        description="client keys (Authorization: Bearer), only as ${VAR}; empty = no auth",
    )
    keys: list[VirtualKeyConfig] = Field(
        default_factory=list,
        description="named client keys with a team, budgets and limits (docs/teams.md)",
    )
    admin_key: SecretStr | None = Field(
        None,
        description="guards the admin API (/admin/keys), only as ${VAR}; None = no admin API; "
        "set: every request needs a key, even while none exists",
    )
    telemetry_key: SecretStr | None = Field(
        None,
        description="guards /stats, /metrics and the dashboard's figures, only as ${VAR}: set, "
        "only it (or admin_key) reads them and a client key gets a 403; None or empty = any "
        "client key",
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
    limits: HttpLimits = Field(HttpLimits(), description="HTTP-layer limits per connection")
    edge: Literal["lean", "standard"] = Field(
        "lean",
        description="the HTTP edge: 'standard' FastAPI/Starlette/uvicorn as they come, or "
        "'lean' with the hand-built parts that measured cheaper (docs/performance.md); "
        "'standard' lacks the head time and size limits (408/431)",
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
