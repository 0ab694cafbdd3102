"""A key's limits at work: admit a request (or refuse it), free its slot and charge it once
its record is finished (docs/teams.md, "Budgets and limits").

``Limits.admit`` is called by every door before its call starts (``app.api.deps``
``admitted``); the decision is ``app.keys.limits.decide``'s, the counts
``app.keys.counters``'s. ``Limits.finished`` is a telemetry observer
(``app.telemetry.Telemetry``): it reads a finished request's record (never writes it),
frees the request's slot and charges its completion tokens and its cloud cost (the bill's
cloud charges) to its key. A caller with no policy costs nothing here: no count, no I/O.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from app.config import StateConfig
from app.errors import BudgetExceeded, KeyForbidden, RateLimited
from app.keys import NO_LIMITS, Caller, key_hash
from app.keys.counters import Hold, MemoryStore, RedisStore, Store
from app.keys.limits import EXHAUSTED, Needs, Used, Windows, allowed, decide
from app.record import RequestRecord
from app.state.health import RedisHealth
from app.vocabulary import Strategy

log = logging.getLogger("specproxy.keys")


@dataclass(frozen=True, slots=True)
class Ticket:
    """An admitted request: ``local``: the local model alone serves it (budget spent,
    ``on_budget: local``); ``hold``: what it counted (its slot is freed when it ends)."""

    local: bool = False
    hold: Hold | None = None

    @property
    def headers(self) -> dict[str, str]:
        """``X-Budget: exhausted`` (and the reason) on an answer served locally for it."""
        return dict(EXHAUSTED) if self.local else {}


FREE = Ticket()


def kid_of(who: Caller) -> str:
    """A key's name in the counters: a hash of its id (never the key)."""
    return _kid(who.key_id)


@functools.lru_cache(maxsize=4096)
def _kid(key_id: str) -> str:
    return key_hash(f"limits:{key_id}")[:32]


def prompt_estimate(body: Any) -> int:
    """A prompt's tokens before any tokenizer saw it: its JSON's length / 4."""
    try:
        return len(orjson.dumps(body)) // 4
    except (TypeError, orjson.JSONEncodeError):
        return 0


class Limits:
    """Admission and charging for keys with a policy, over one ``Store``."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store, self.clock = store, clock
        self.charged: dict[str, Caller] = {}  # by name: the keys whose requests are charged
        self.holds: dict[str, Hold] = {}  # by request id: slots freed when the record ends
        self.refused: Counter[str] = Counter()  # by code
        self.local = 0  # requests served locally because their budget was spent

    @classmethod
    def build(
        cls, state: StateConfig, secrets: list[str], clock: Callable[[], float] = time.time
    ) -> Limits:
        """Counts in Redis with ``state.backend: redis`` (the fleet's), else in memory."""
        if state.backend != "redis":
            return cls(MemoryStore(), clock)
        from app.state import redis_client

        client = redis_client(state, asyncio=True)
        health = RedisHealth(secrets, "key limits")
        return cls(RedisStore(client, state.key_prefix, state.timeout_s, health), clock)

    async def admit(
        self,
        who: Caller,
        strategy: Strategy | None,
        prompt: Any = None,
        request_id: str = "",
        *,
        local_possible: bool = True,
    ) -> Ticket:
        """The request's ticket, or a ``ProxyError``: 403 for a strategy the key may not use,
        429 for a limit or a spent budget (``retry-after`` set). ``prompt``: what its
        prompt's tokens are estimated from (for ``tpm``)."""
        policy = who.policy
        if policy is NO_LIMITS:  # no key, a plain key: nothing to count
            return FREE
        needs = Needs.of(policy)
        if not allowed(policy, strategy):
            verdict = decide(policy, strategy, _NOTHING, 0, Windows.at(self.clock()))
            self.refused[verdict.code or ""] += 1
            raise KeyForbidden(verdict.message, param="model", code=verdict.code)
        if not needs.any:
            return FREE
        windows = Windows.at(self.clock())
        estimate = prompt_estimate(prompt) if needs.tokens else 0
        slot = request_id or os.urandom(8).hex()
        used, hold = await self.store.count(kid_of(who), needs, windows, estimate, slot)
        verdict = decide(policy, strategy, used, estimate, windows, local_possible=local_possible)
        if not verdict.admit:
            await hold.store.take_back(hold)
            code, wait = verdict.code or "rate_limit_exceeded", verdict.retry_after_s or 1
            self.refused[code] += 1
            if code == "budget_exceeded":
                raise BudgetExceeded(verdict.message, retry_after_s=wait)
            raise RateLimited(verdict.message, code=code, retry_after_s=wait)
        if needs.charged:
            self.charged[who.name] = who
        if needs.slots and request_id:
            self.holds[request_id] = hold
        if verdict.local:
            self.local += 1
            log.info("key %s: its cloud budget is spent; the local model answers", who.name)
        return Ticket(verdict.local, hold if needs.slots else None)

    def release(self, ticket: Ticket) -> None:
        """Free a request's slot now (a call that leaves no record: embeddings)."""
        if ticket.hold is not None:
            self.holds.pop(ticket.hold.slot, None)
            ticket.hold.store.release(ticket.hold)

    def charge(self, who: Caller, tokens: int, usd: float) -> None:
        """Charge a finished call's tokens and cloud cost to its key."""
        if Needs.of(who.policy).charged:
            self.store.charge(kid_of(who), Windows.at(self.clock()), tokens, usd)

    def finished(self, rec: RequestRecord) -> None:
        """A request's record is finished (a telemetry observer): free its slot, charge its
        key the answer's completion tokens and the bill's cloud cost."""
        if (hold := self.holds.pop(rec.request_id, None)) is not None:
            hold.store.release(hold)
        who = self.charged.get(rec.key) if rec.key is not None else None
        if who is None:
            return
        tokens = max((u.completion_tokens for u in rec.usage), default=0)
        usd = sum(c.usd for c in rec.bill.charges if c.cloud) if rec.bill is not None else 0.0
        self.charge(who, tokens, usd)

    def status(self) -> dict[str, Any]:
        """What the limits did in this process, and their store's health."""
        return {
            "refused": dict(self.refused),
            "served_locally": self.local,
            "store": self.store.status(),
        }

    async def close(self) -> None:
        await self.store.close()


_NOTHING = Used()
