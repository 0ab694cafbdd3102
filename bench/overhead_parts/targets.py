"""Issue 20's targets (a leaner hot path), judged from the pooled figures: PASS, FAIL or
NOT EVALUATED (and why)."""

from __future__ import annotations

from typing import Any

from bench.overhead_parts.report import fmt

OURS = ("local_only", "speculative")
LATENCY_P50_MS, LATENCY_P99_MS = 0.45, 2.0
RPS_VS_STACK_FLOOR = 0.6
KB_PER_STREAM = 30.0
SPECULATIVE_EXTRA_MS = 0.3


def _row(rows: list[dict[str, Any]], arm: str, variant: str, c: int) -> dict[str, Any] | None:
    return next((r for r in rows if (r["arm"], r["variant"], r["c"]) == (arm, variant, c)), None)


def _verdict(name: str, ok: bool | None, detail: str, **figures: Any) -> dict[str, Any]:
    status = "NOT EVALUATED" if ok is None else "PASS" if ok else "FAIL"
    return {"target": name, "status": status, "detail": detail, **figures}


def latency(rows: list[dict[str, Any]]) -> dict[str, Any]:
    name = (
        f"local_only added latency at c=1: p50 <= {LATENCY_P50_MS} ms, p99 <= {LATENCY_P99_MS} ms"
    )
    row = _row(rows, "local_only", "json", 1)
    if row is None or row["added_p50_ms"] is None:
        return _verdict(name, None, "needs the local_only and direct arms at c=1")
    p50, p99 = row["added_p50_ms"], row["added_p99_ms"]
    ok = p50 <= LATENCY_P50_MS and p99 <= LATENCY_P99_MS
    detail = f"added p50 {fmt(p50)} ms, added p99 {fmt(p99)} ms (JSON variant)"
    return _verdict(name, ok, detail, added_p50_ms=p50, added_p99_ms=p99)


def throughput(rows: list[dict[str, Any]]) -> dict[str, Any]:
    name = f"req/s at c=64: local_only >= {RPS_VS_STACK_FLOOR:g}x stack_floor (its bare stack)"
    ours, floor = _row(rows, "local_only", "json", 64), _row(rows, "stack_floor", "json", 64)
    if ours is None or floor is None or not floor["rps"]:
        return _verdict(name, None, "needs the local_only and stack_floor arms at c=64")
    ratio = ours["rps"] / floor["rps"]
    detail = (
        f"local_only {fmt(ours['rps'], 0)} req/s = {fmt(ratio, 2)}x stack_floor "
        f"({fmt(floor['rps'], 0)} req/s)"
    )
    return _verdict(name, ratio >= RPS_VS_STACK_FLOOR, detail, ratio_vs_stack_floor=ratio)


def memory(mem: list[dict[str, Any]]) -> dict[str, Any]:
    name = f"RSS growth <= {KB_PER_STREAM:g} KB per open stream at 1,000 open streams"
    row = next((m for m in mem if m["arm"] == "local_only" and "not_run" not in m), None)
    if row is None:
        return _verdict(name, None, "needs the local_only memory test")
    kb = row["kb_per_stream"]
    ok: bool | None = kb is not None and kb <= KB_PER_STREAM and row["opened"] == row["streams"]
    detail = f"local_only {fmt(kb, 1)} KB/stream, {row['opened']}/{row['streams']} streams opened"
    if row["streams"] != 1000:
        ok, detail = None, f"{detail}; run with --streams 1000 to judge"
    return _verdict(name, ok, detail, kb_per_stream=kb)


def errors(rows: list[dict[str, Any]], mem: list[dict[str, Any]]) -> dict[str, Any]:
    name = "no errors at any concurrency (local_only, speculative)"
    ours = [r for r in rows if r["arm"] in OURS] + [m for m in mem if m["arm"] in OURS]
    ours = [r for r in ours if "not_run" not in r]
    if not ours:
        return _verdict(name, None, "needs the local_only or speculative arm")
    bad = [r for r in ours if r["errors"]]
    where = "; ".join(
        f"{r['arm']} {r.get('variant', 'memory')} c={r.get('c', r.get('streams'))}: "
        f"{r['error_kinds']}"
        for r in bad
    )
    detail = f"{len(ours)} cells, {sum(r['errors'] for r in ours)} errors" + (
        f" ({where})" if bad else ""
    )
    return _verdict(name, not bad, detail)


def speculative(rows: list[dict[str, Any]]) -> dict[str, Any]:
    name = (
        f"speculative (draft accepted) adds <= {SPECULATIVE_EXTRA_MS} ms p50 over local_only at c=1"
    )
    spec, local = _row(rows, "speculative", "json", 1), _row(rows, "local_only", "json", 1)
    if spec is None or local is None or spec["added_p50_ms"] is None:
        return _verdict(name, None, "needs the speculative, local_only and direct arms at c=1")
    extra = spec["added_p50_ms"] - local["added_p50_ms"]
    all_accepted = spec["draft_accepted"] == spec["requests"]
    detail = (
        f"speculative minus local_only added p50: {fmt(extra)} ms; "
        f"drafts accepted {spec['draft_accepted']}/{spec['requests']}"
    )
    return _verdict(name, extra <= SPECULATIVE_EXTRA_MS and all_accepted, detail, extra_ms=extra)


def judge(rows: list[dict[str, Any]], mem: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [latency(rows), throughput(rows), memory(mem), errors(rows, mem), speculative(rows)]
