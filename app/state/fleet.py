"""What replicas tell each other, and what each makes of the others' word. Pure.

Every replica writes only entries of its own (one per upstream per kind, one stats
snapshot), so writers never race; readers fold the entries with the rules here:

* circuit: the latest ``open_until`` any replica reports wins (open in all until then),
  capped by this replica's own cool-down; one further ahead than the cool-down plus
  ``MAX_SKEW_S`` is not believed (a clock running fast, or a stranger's entry);
* rate budget: the numbers seen most recently by any replica win; a ``seen_wall`` more
  than ``MAX_SKEW_S`` in the future is not believed, and none is taken as later than now;
* /stats → fleet: every live replica's ``Stats.state()`` added up by ``Stats.merged``,
  the code that merges the workers of one host.

Replicas compare wall-clock times (their monotonic clocks do not agree across hosts);
each converts to and from its own monotonic clock at the edge, with ``now`` and
``mono_now`` read once per sync.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from app.telemetry.stats import Stats
from app.upstreams.breaker import CircuitBreaker
from app.upstreams.ratelimit import RateBudget

BUDGET_FIELDS = (
    "tokens",
    "requests",
    "tokens_limit",
    "requests_limit",
    "tokens_reset_s",
    "requests_reset_s",
)
# A fleet entry must be this much newer than what a replica holds to replace it
# (wall <-> monotonic conversions round differently on each sync).
_NEWER_S = 0.001
# How far another replica's wall clock may run ahead of this one's and still be believed.
MAX_SKEW_S = 5.0

Entry = Mapping[str, Any]


@dataclass(frozen=True)
class Clocks:
    """Wall and monotonic time read at the same moment: one converts to the other."""

    wall: float
    mono: float

    def to_wall(self, mono: float) -> float:
        return self.wall - (self.mono - mono)

    def to_mono(self, wall: float) -> float:
        return self.mono - (self.wall - wall)


def breaker_entry(breaker: CircuitBreaker, clocks: Clocks) -> dict[str, Any]:
    """This replica's word on an upstream's circuit: open until when (None: not open)."""
    wait = breaker.retry_in()
    return {"open_until": clocks.wall + wait if wait > 0 else None}


def adopt_circuit(breaker: CircuitBreaker, others: Iterable[Entry], clocks: Clocks) -> bool:
    """Open ``breaker`` until the latest time another replica has it open, at most for this
    replica's own cool-down (an entry further ahead than that plus ``MAX_SKEW_S`` is
    ignored); whether it opened (or stays open longer) because of them."""
    bound = breaker.cooldown_s + MAX_SKEW_S
    until = max(
        (
            e["open_until"]
            for e in others
            if e.get("open_until") and e["open_until"] - clocks.wall <= bound
        ),
        default=None,
    )
    if until is None:
        return False
    seconds = min(until - clocks.wall, breaker.cooldown_s)
    if seconds - breaker.retry_in() <= _NEWER_S:
        return False
    breaker.open_for(seconds)
    return True


def budget_entry(budget: RateBudget, clocks: Clocks) -> dict[str, Any] | None:
    """The numbers this replica holds and when they were seen (None: it has none yet)."""
    if budget.seen_at is None:
        return None
    return {
        **{name: getattr(budget, name) for name in BUDGET_FIELDS},
        "seen_wall": clocks.to_wall(budget.seen_at),
    }


def adopt_budget(budget: RateBudget, others: Iterable[Entry], clocks: Clocks) -> bool:
    """Take the numbers another replica saw most recently, when newer than this one's;
    whether they were taken. Numbers seen more than ``MAX_SKEW_S`` in this replica's
    future are ignored; ones a little ahead count as seen now."""
    believed = [e for e in others if e["seen_wall"] <= clocks.wall + MAX_SKEW_S]
    newest = max(believed, key=lambda e: e["seen_wall"], default=None)
    if newest is None:
        return False
    seen_wall = min(newest["seen_wall"], clocks.wall)
    if budget.seen_at is not None and seen_wall <= clocks.to_wall(budget.seen_at) + _NEWER_S:
        return False
    for name in BUDGET_FIELDS:
        setattr(budget, name, newest.get(name))
    budget.seen_at = clocks.to_mono(seen_wall)
    return True


def shared_stats(state: Mapping[str, Any]) -> dict[str, Any]:
    """A ``Stats.state()`` as published: the latency samples stay home (they are the bulk;
    percentiles stay per replica, in /stats and /metrics)."""
    return {**state, "latency": {}}


def mergeable(raw: bytes | str, mine: Entry) -> dict[str, Any] | None:
    """A replica's published entry, if it reads and its stats merge with ours (a replica
    of another version, or anything else under the prefix, must not break /stats)."""
    try:
        entry: dict[str, Any] = orjson.loads(raw)
        Stats.merged([mine["stats"], entry["stats"]]).get_metrics()
        float(entry["seen"])
    except Exception:
        return None
    return entry


def fleet_view(
    replicas: Mapping[str, Entry], me: str, warning: str | None = None
) -> dict[str, Any]:
    """/stats → fleet: each replica by id with when it was last seen, and the requests
    of them all (``requests``' own shape). ``replicas``: id -> {"seen": wall, "stats"}."""
    merged = Stats.merged(r["stats"] for r in replicas.values()).get_metrics()
    return {
        "replicas": [
            {"id": rid, "last_seen": round(r["seen"], 3), "this": rid == me}
            for rid, r in sorted(replicas.items())
        ],
        "requests": merged["requests"],
        "tokens": merged["tokens"],
        "warning": warning,
    }
