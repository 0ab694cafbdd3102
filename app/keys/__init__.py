"""Who sent a request: the caller its key names (docs/teams.md).

``check_api_key`` (app.api.deps) sets ``caller`` for the request; the pipeline copies
its name and team into the record, and the limits read its policy. A key itself never
leaves the auth check: the caller carries the key's id and name only.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

from app.config.keys import VirtualKeyConfig
from app.vocabulary import Strategy


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    """What a key may use and spend; None is no limit."""

    budget_usd_day: float | None = None
    budget_usd_month: float | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    strategies: frozenset[Strategy] | None = None
    on_budget: Literal["refuse", "local"] = "refuse"

    @classmethod
    def of(cls, config: VirtualKeyConfig) -> KeyPolicy:
        return cls(
            budget_usd_day=config.budget_usd_day,
            budget_usd_month=config.budget_usd_month,
            rpm=config.rpm,
            tpm=config.tpm,
            max_concurrent=config.max_concurrent,
            strategies=frozenset(config.strategies) if config.strategies is not None else None,
            on_budget=config.on_budget,
        )


NO_LIMITS = KeyPolicy()


@dataclass(frozen=True, slots=True)
class Caller:
    """The key a request presented, by id and name (never the key), its team and policy."""

    key_id: str = ""  # "": no key asked for (server.api_keys and server.keys empty)
    name: str = "anonymous"
    team: str | None = None
    policy: KeyPolicy = NO_LIMITS


ANONYMOUS = Caller()

caller: ContextVar[Caller] = ContextVar("caller", default=ANONYMOUS)


def key_hash(key: str | bytes) -> str:
    """A key's SHA-256 in hex: what is stored and compared in its place."""
    return hashlib.sha256(key.encode() if isinstance(key, str) else key).hexdigest()


def plain_caller(key: bytes) -> Caller:
    """The caller a key from the plain ``server.api_keys`` list names: ``key-<hash>``."""
    digest = key_hash(key)[:12]
    return Caller(key_id=f"key-{digest}", name=f"key-{digest}")


def configured_caller(config: VirtualKeyConfig) -> Caller:
    """The caller a ``server.keys`` entry names (its id is its name)."""
    return Caller(
        key_id=config.name, name=config.name, team=config.team, policy=KeyPolicy.of(config)
    )
