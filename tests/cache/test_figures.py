"""The cache's figures across workers: counts add up through ``Stats.state``/``merged``; a
shared store (Redis) is counted once, each worker's memory added up; /metrics renders
the same."""

from __future__ import annotations

from typing import Any

from app.pricing import Bill
from app.record import RequestRecord
from app.telemetry.metrics import render
from app.telemetry.stats import Stats
from app.telemetry.workers import GroupSnapshot
from app.vocabulary import Outcome, Strategy


def recorded(*results: str) -> Stats:
    stats = Stats()
    for result in results:
        rec = RequestRecord(strategy=Strategy.SPECULATIVE, cache=result)
        rec.outcome = Outcome.CACHED if result == "hit" else Outcome.SPILLED_OVER
        rec.bill = Bill([], 0.25 if result == "hit" else 0.0, "verified")
        stats.record(rec)
    return stats


def worker(pid: int, stats: Stats, shared: bool, entries: int, size: int) -> dict[str, Any]:
    cache = {"enabled": True, "shared": shared, "entries": entries, "bytes": size}
    return {
        "pid": pid,
        "stats": stats.state(),
        "in_flight": 0,
        "asyncio_tasks": 1,
        "upstreams": {},
        "adaptive_depth": {},
        "learning": {"enabled": False},
        "config": {"version": 1, "loaded_at": "", "reload_error": None, "pending_restart": []},
        "cache": cache | {"audits": 1, "audit_replaced": 0},
    }


def test_counts_add_up_over_workers() -> None:
    a, b = recorded("hit", "miss"), recorded("hit", "bypass", "miss")
    merged = Stats.merged([a.state(), b.state()]).get_metrics()["cache"]
    assert merged == {"hits": 2, "misses": 2, "bypass": 1, "hit_rate": 0.5, "saved_usd": 0.5}


def test_memory_stores_add_up_and_a_shared_one_counts_once() -> None:
    a, b = recorded("hit"), recorded("miss")
    memory = GroupSnapshot([worker(1, a, False, 2, 100), worker(2, b, False, 4, 300)])
    assert memory.cache() == {"entries": 6, "bytes": 400, "audits": 2, "audit_replaced": 0}
    shared = GroupSnapshot([worker(1, a, True, 4, 300), worker(2, b, True, 4, 300)])
    assert shared.cache()["entries"] == 4 and shared.cache()["bytes"] == 300
    body, _ = render(shared.totals(), None, shared.workers, by_worker=True)
    text = body.decode()
    assert "specproxy_cache_bytes 300.0" in text
    assert 'specproxy_cache_requests_total{result="hit"} 1.0' in text
    assert "specproxy_cache_saved_usd_total 0.25" in text
