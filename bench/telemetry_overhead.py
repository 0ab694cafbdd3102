"""Per-request cost of the telemetry sinks, and of the /stats and /metrics snapshots.

    cd /work/main && .venv/bin/python -m bench.telemetry_overhead [--records N]

Each finished request hands one ``RequestRecord`` to ``Stats.record`` (the one
place it is counted) and ``SpecLog.write`` (on the event loop, so this is time
no request is served). The records are realistic: a 10-token draft with top-5
candidates per token, an acceptance, a similarity, latencies, reasons. Each
call is timed alone with ``perf_counter_ns`` after a warm-up; the spec log is
timed on the caller's side (its writer thread does the disk I/O) and then
drained. ``/stats`` (``Stats.get_metrics``) walks the event window, so its
cost is shown with 1,000 and 10,000 events in it; ``/metrics`` is ``render``
of the same ``Stats`` (its ``state()`` merged, as a scrape does) with and without
llama-server's recorded text.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import orjson

from app.record import RequestRecord
from app.routing.acceptance import Acceptance
from app.routing.signals import DraftSignals, TokenSignal
from app.telemetry import Telemetry
from app.telemetry.metrics import render
from app.telemetry.spec_log import SpecLog, spec_log_entry
from app.telemetry.stats import Stats
from app.vocabulary import Outcome, Strategy

LOCAL_METRICS = Path(__file__).resolve().parents[1] / "tests/fixtures/llama_server/metrics.txt"
WORDS = [" The", " capital", " of", " France", " is", " Paris", ",", " a", " city", "."]
T = TypeVar("T")
CONTEXTS = ["prose", "code", "math", "list", "json"]


def draft(seed: int) -> DraftSignals:
    """A 10-token draft, top-5 candidates per token, as the pipeline builds it."""
    tokens = []
    for pos, word in enumerate(WORDS):
        p = 0.55 + 0.04 * ((seed + pos) % 10)
        top = [(1000 + 17 * pos + k, p / (k + 1) if k else p) for k in range(5)]
        entropy = -sum(q * math.log(q) for _, q in top)
        tokens.append(TokenSignal(word, p, entropy, 1000 + 17 * pos, tuple(top)))
    return DraftSignals("".join(WORDS), 10, 10, "length", tuple(tokens))


def record(i: int) -> RequestRecord:
    """Cycle through the speculative paths: accepted, verified-similar, spilled over."""
    kind = i % 3
    accepted = (7 + i) % 11
    verified = kind != 0
    return RequestRecord(
        strategy=Strategy.SPECULATIVE,
        stream=i % 4 == 0,
        request_id=f"{i:016x}",
        context_type=CONTEXTS[i % len(CONTEXTS)],
        draft_model="local",
        verify_model="cerebras",
        outcome=(Outcome.ACCEPTED, Outcome.VERIFIED_DRAFT_USED, Outcome.SPILLED_OVER)[kind],
        reasons=["uncertainty_marker", "similar_to_verified"] if verified else ["passed_checks"],
        decision_reasons=("uncertainty_marker",) if verified else (),
        draft=draft(i),
        acceptance=Acceptance(10, accepted, -1 if accepted == 10 else accepted, " x")
        if verified
        else None,
        similarity=0.9 if kind == 1 else 0.42 if kind == 2 else None,
        prompt_tokens=24,
        local_tokens=10,
        cloud_tokens=38 if verified else 0,
        server_spec=None,
        draft_s=0.08 + (i % 7) / 1000,
        verify_s=0.45 + (i % 13) / 100 if verified else None,
        total_s=0.6 + (i % 13) / 100,
        upstream_errors=[("cerebras", "429")] if i % 97 == 0 else [],
    )


def windowed_stats(recs: Sequence[RequestRecord]) -> Stats:
    """Stats whose 5 min window holds every record (spread over 250 s; the last 30 s in both)."""
    ticks = itertools.count()
    step = 250.0 / len(recs)
    now = 0.0

    def clock() -> float:
        return now

    stats = Stats(clock=clock)
    for rec in recs:
        now = next(ticks) * step
        stats.record(rec)
    return stats


def timed(call: Callable[[T], object], items: Sequence[T]) -> list[int]:
    """Nanoseconds of each call."""
    clock = time.perf_counter_ns
    out = []
    for item in items:
        start = clock()
        call(item)
        out.append(clock() - start)
    return out


def timed_calls(call: Callable[[], object], n: int) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        start = clock()
        call()
        out.append(clock() - start)
    return out


def row(name: str, ns: list[int]) -> str:
    ordered = sorted(ns)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    mean = statistics.fmean(ns)
    return f"  {name:<44} {len(ns):>7,} {mean / 1000:>10.2f} {p99 / 1000:>10.2f}"


HEADER = f"  {'':<44} {'n':>7} {'mean µs':>10} {'p99 µs':>10}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000, help="timed records per sink")
    parser.add_argument("--warmup", type=int, default=2_000)
    args = parser.parse_args()
    recs = [record(i) for i in range(args.records)]
    warm = [record(i) for i in range(args.warmup)]

    command = [Path(sys.executable).name, "-m", "bench.telemetry_overhead", *sys.argv[1:]]
    print(f"$ {' '.join(command)}")
    print(
        f"python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; {args.records:,} records after {args.warmup:,} warm-up"
    )
    print("\nper request (one call per finished request):")
    print(HEADER)
    with tempfile.TemporaryDirectory() as tmp:
        stats = Stats()
        spec_log = SpecLog(Path(tmp, "spec.jsonl"), max_bytes=1 << 30, backups=0)
        for sink in (stats.record, spec_log.write):
            timed(sink, warm)
        results = {
            "Stats.record": timed(stats.record, recs),
            "SpecLog.write (caller side)": timed(spec_log.write, recs),
        }
        started = time.perf_counter()
        spec_log.close()
        drain_s = time.perf_counter() - started
        with Path(tmp, "spec.jsonl").open() as written:
            lines = sum(1 for _ in written)
        # Its parts, timed once the writer thread is idle (no GIL contention).
        entries = [spec_log_entry(r, 1) for r in recs]
        results["  of which spec_log_entry() (the dict)"] = timed(
            lambda r: spec_log_entry(r, 1), recs
        )
        results["  of which orjson.dumps(entry)"] = timed(orjson.dumps, entries)

        telemetry = Telemetry(
            Stats(), spec_log=SpecLog(Path(tmp, "all.jsonl"), max_bytes=1 << 30, backups=0)
        )
        timed(telemetry.record, warm)
        results["Telemetry.record (every sink)"] = timed(telemetry.record, recs)
        telemetry.close()
    for name, ns in results.items():
        print(row(name, ns))
    print(f"  spec log: {lines:,} lines; close() drained the queue in {drain_s * 1000:.1f} ms")

    print("\nsnapshots (per call):")
    print(HEADER)
    for events in (1_000, 10_000):
        windowed = windowed_stats(recs[:events])
        runs = 200 if events <= 1_000 else 50
        name = f"/stats Stats.get_metrics, {events:,} events"
        print(row(name, timed_calls(windowed.get_metrics, runs)))
    local_text = LOCAL_METRICS.read_text()
    state = stats.state()  # what this worker hands a scrape (``GroupSnapshot.totals``)
    print(
        row("/metrics render()", timed_calls(lambda: render(Stats.merged([state]), None, []), 500))
    )
    print(
        row(
            "/metrics render(llama-server text)",
            timed_calls(lambda: render(Stats.merged([state]), local_text, []), 500),
        )
    )


if __name__ == "__main__":
    main()
