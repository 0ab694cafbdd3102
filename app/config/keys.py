"""A virtual key's settings (``server.keys`` in config.yaml; the admin API takes the same)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from app.config.strict import Strict
from app.vocabulary import Strategy


class VirtualKeyConfig(Strict):
    """One client key with a name, a team, what it may use and what it may spend
    (docs/teams.md). Unset limits are no limit."""

    name: str = Field(min_length=1, max_length=64, description="shown in /stats, logs, traces")
    key: SecretStr = Field(description="the key the client sends, only as ${VAR}")
    team: str | None = Field(None, max_length=64, description="usage is summed by team too")
    budget_usd_day: float | None = Field(None, ge=0, description="cloud spend per UTC day")
    budget_usd_month: float | None = Field(None, ge=0, description="cloud spend per UTC month")
    rpm: int | None = Field(None, ge=1, description="requests per minute")
    tpm: int | None = Field(None, ge=1, description="tokens per minute (prompt + completion)")
    max_concurrent: int | None = Field(None, ge=1, description="requests in flight at once")
    strategies: list[Strategy] | None = Field(None, description="allowed strategies (None: all)")
    on_budget: Literal["refuse", "local"] = Field(
        "refuse",
        description="budget spent: 'refuse' (429 budget_exceeded) or 'local' (local model only)",
    )
