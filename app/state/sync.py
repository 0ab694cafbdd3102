"""Replicas sharing state through Redis, without the request path ever waiting on it.

Each process keeps deciding with its own in-memory breaker and rate budget. One
background task per process (``FleetSync``) publishes this replica's word to Redis
and reads the others' every ``state.sync_every_s``, and at once when a circuit
here opens; the rules that fold the others' word into this replica's state are
``app.state.fleet``'s. /stats reads what the last sync fetched, never Redis.

Redis down: every sync is bounded by ``state.timeout_s`` and its failure caught;
the replica carries on with its own state, says so in /stats (``state.redis``,
``fleet.warning``) and logs one line per outage (``app.state.health``). The first sync
that succeeds afterwards publishes everything again: the fleet catches up.

Keys (``state.key_prefix`` first): ``replicas`` (sorted set: id -> last seen),
``replica:<id>`` (its stats, expiring), ``circuit:<upstream>`` and
``budget:<upstream>`` (hashes: id -> that replica's entry).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import orjson

from app.config import StateConfig
from app.state import redis_client
from app.state.entries import BudgetEntry, CircuitEntry, as_dict, decode
from app.state.fleet import (
    Clocks,
    adopt_budget,
    adopt_circuit,
    breaker_entry,
    budget_entry,
    fleet_view,
    mergeable,
    shared_stats,
)
from app.state.health import RedisHealth
from app.upstreams.breaker import CircuitBreaker
from app.upstreams.ratelimit import RateBudget

log = logging.getLogger("specproxy.state")
_NOTICE_EVERY_S = 0.05  # how often the task looks for a circuit that opened here
_KEEP_ENTRIES_S = 86400  # circuit and budget hashes of a fleet gone quiet expire


class Guarded(Protocol):
    """What an upstream shares with the fleet."""

    breaker: CircuitBreaker
    budget: RateBudget


def replica_id() -> str:
    """This process's id in the fleet: host and pid (a worker of a replica is one too)."""
    return f"{socket.gethostname()}-{os.getpid()}"


class FleetSync:
    """This replica's side of the shared state: publish, read, adopt (see the module doc)."""

    def __init__(
        self,
        config: StateConfig,
        upstreams: Callable[[], Mapping[str, Guarded]],
        stats: Callable[[], Mapping[str, Any]],
        health: RedisHealth,
        replica: str | None = None,
    ) -> None:
        self.config = config
        self.upstreams = upstreams
        self.stats = stats
        self.health = health
        self.replica = replica or replica_id()
        self._others: dict[str, Any] = {}  # replica id -> {"seen", "stats"}, as last read
        self._redis: Any = None
        self._task: asyncio.Task[None] | None = None
        self.skipped_entries = 0  # the others' circuit and budget entries that did not read

    def key(self, *parts: str) -> str:
        return ":".join((self.config.key_prefix, *parts))

    async def start(self) -> None:
        """Connect (lazily: Redis may be down now) and start syncing in the background."""
        self._redis = redis_client(self.config, asyncio=True)
        self._task = asyncio.create_task(self._run(), name="fleet-sync")

    async def close(self) -> None:
        """Stop syncing and leave the fleet view (best effort: Redis may be down)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._redis is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.config.timeout_s):
                await self._redis.zrem(self.key("replicas"), self.replica)
                await self._redis.delete(self.key("replica", self.replica))
        with contextlib.suppress(Exception):
            await self._redis.aclose()

    def status(self) -> dict[str, Any]:
        """/stats → state."""
        return {
            "backend": "redis",
            "replica": self.replica,
            "redis": self.health.status(),
            "skipped_entries": self.skipped_entries,
        }

    def fleet(self) -> dict[str, Any]:
        """/stats → fleet: the live replicas as last read, this one's own stats live; only
        this one while Redis is down."""
        me = {"seen": time.time(), "stats": shared_stats(self.stats())}
        if not self.health.connected:
            reason = self.health.error or "not connected yet"
            warning = f"redis unreachable ({reason}): this replica's own state only"
            return fleet_view({self.replica: me}, self.replica, warning)
        return fleet_view({**self._others, self.replica: me}, self.replica)

    async def _run(self) -> None:
        due = 0.0
        opened = self._opened()
        while True:
            now = time.monotonic()
            if now >= due or self._opened() != opened:
                opened = self._opened()
                await self.sync()
                due = time.monotonic() + self.config.sync_every_s
            await asyncio.sleep(min(_NOTICE_EVERY_S, self.config.sync_every_s))

    def _opened(self) -> int:
        return sum(up.breaker.opened_total for up in self.upstreams().values())

    async def sync(self) -> None:
        """One exchange with Redis; a failure is noted, never raised."""
        try:
            async with asyncio.timeout(self.config.timeout_s):
                await self._exchange()
        except Exception as exc:  # down, slow or odd: this replica carries on alone
            self.health.failed(exc)
        else:
            self.health.ok()

    async def _exchange(self) -> None:
        clocks = Clocks(time.time(), time.monotonic())
        ttl = self.config.replica_ttl_s
        me = {"seen": clocks.wall, "stats": shared_stats(self.stats())}
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(self.key("replica", self.replica), orjson.dumps(me), px=int(ttl * 1000))
        pipe.zadd(self.key("replicas"), {self.replica: clocks.wall})
        pipe.zremrangebyscore(self.key("replicas"), "-inf", clocks.wall - ttl)
        reads: dict[str, tuple[int, int]] = {}
        position = 3
        upstreams = self.upstreams()  # the serving pipeline's (a reload replaces them)
        for name, upstream in upstreams.items():
            circuit, budget = self.key("circuit", name), self.key("budget", name)
            pipe.hset(circuit, self.replica, orjson.dumps(breaker_entry(upstream.breaker, clocks)))
            pipe.expire(circuit, _KEEP_ENTRIES_S)
            position += 2
            if (entry := budget_entry(upstream.budget, clocks)) is not None:
                pipe.hset(budget, self.replica, orjson.dumps(entry))
                pipe.expire(budget, _KEEP_ENTRIES_S)
                position += 2
            pipe.hgetall(circuit)
            pipe.hgetall(budget)
            reads[name] = (position, position + 1)
            position += 2
        pipe.zrangebyscore(self.key("replicas"), clocks.wall - ttl, "+inf")
        results = await pipe.execute()
        live = [_text(rid) for rid in results[-1] if _text(rid) != self.replica]
        snapshots = []
        if live:
            snapshots = await self._redis.mget([self.key("replica", rid) for rid in live])
        clocks = Clocks(time.time(), time.monotonic())
        for name, (circuit_at, budget_at) in reads.items():
            upstream = upstreams[name]
            circuits = self._theirs(results[circuit_at], CircuitEntry)
            if adopt_circuit(upstream.breaker, circuits, clocks):
                log.warning("%s: circuit opened by another replica", name)
            adopt_budget(upstream.budget, self._theirs(results[budget_at], BudgetEntry), clocks)
        self._others = {}
        for rid, raw in zip(live, snapshots, strict=True):
            if raw and (entry := mergeable(raw, me)) is not None:
                self._others[rid] = entry
            elif raw:  # another version's counters, or a stranger under our prefix
                log.debug("replica %s: its stats do not merge with ours; left out", rid)

    def _theirs(self, entries: Mapping[Any, Any], kind: type[Any]) -> list[dict[str, Any]]:
        """The other replicas' entries of one hash, validated (``app.state.entries``): a
        malformed one is skipped, counted (``skipped_entries``) and logged at debug."""
        found = []
        for rid, raw in entries.items():
            if _text(rid) == self.replica:
                continue
            if (entry := decode(raw, kind)) is None:
                self.skipped_entries += 1
                log.debug("replica %s: a malformed %s skipped", _text(rid), kind.__name__)
                continue
            found.append(as_dict(entry))
        return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
