"""Pooling samples into figures, the markdown tables, and the verdict on the issue's targets."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.overhead_parts.loadgen import CellResult

VARIANT_TITLES = {
    "json": "JSON, instant upstream",
    "sse": "SSE stream (64 events), instant upstream",
    "delay": "JSON, upstream answers after a fixed delay",
}


def percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks; ``ordered`` is sorted, q in [0, 100]."""
    if not ordered:
        return float("nan")
    at = (len(ordered) - 1) * q / 100
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


@dataclass
class Pool:
    """Every round's cells of one (arm, variant, concurrency), pooled."""

    arm: str
    variant: str
    clients: int
    cells: list[CellResult] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        lat = sorted(x for c in self.cells for x in c.latencies)
        ttfb = sorted(x for c in self.cells for x in c.ttfb)
        seconds = sum(c.seconds for c in self.cells)
        requests = len(lat)
        cpu: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        for c in self.cells:
            cpu.update(c.cpu)
            errors.update(c.errors)
        per_req = (lambda s: s / requests * 1e6) if requests else (lambda s: float("nan"))
        return {
            "arm": self.arm,
            "variant": self.variant,
            "c": self.clients,
            "rounds": len(self.cells),
            "requests": requests,
            "seconds": round(seconds, 3),
            "warmup_s_max": round(max(c.warmup for c in self.cells), 3),
            "rps": requests / seconds if seconds else 0.0,
            "p50_ms": percentile(lat, 50) * 1e3,
            "p99_ms": percentile(lat, 99) * 1e3,
            "ttfb_p50_ms": percentile(ttfb, 50) * 1e3,
            "ttfb_p99_ms": percentile(ttfb, 99) * 1e3,
            "cpu_us_per_req": per_req(cpu["arm"]),
            "cpu_us_per_req_by_round": [round(cell_cpu_us(c), 1) for c in self.cells],
            "upstream_cpu_us_per_req": per_req(cpu["upstream"]),
            **self.cpu_use(cpu, seconds),
            "draft_accepted": sum(c.accepted for c in self.cells),
            "errors": sum(errors.values()),
            "error_kinds": dict(errors),
        }

    def cpu_use(self, cpu: Counter[str], seconds: float) -> dict[str, float | None]:
        """Percent of one core: the arm's process, and each pinned core's busy time.

        ``unattributed`` is what the two cores did beyond the arm, the upstream and the
        load generator: other processes on the machine, and kernel work (softirq).
        """
        if not seconds:
            return {"arm_cpu_pct": None, "load_core_cpu_pct": None}
        ours = cpu["arm"] + cpu["load"] + (cpu["upstream"] if self.arm != "direct" else 0.0)
        pinned = "load_core" in cpu
        load_core = cpu["load_core"] if pinned else cpu["load"] + cpu["upstream"]
        return {
            "arm_cpu_pct": 100 * cpu["arm"] / seconds,
            "load_core_cpu_pct": 100 * load_core / seconds,
            "arm_core_cpu_pct": 100 * cpu["arm_core"] / seconds if pinned else None,
            "unattributed_cpu_pct": 100 * (load_core + cpu["arm_core"] - ours) / seconds
            if pinned
            else None,
        }


def add_overheads(rows: list[dict[str, Any]]) -> None:
    """``added_*`` = arm minus direct, same variant and concurrency."""
    direct = {(r["variant"], r["c"]): r for r in rows if r["arm"] == "direct"}
    for row in rows:
        base = direct.get((row["variant"], row["c"]))
        for key in ("p50_ms", "p99_ms", "ttfb_p50_ms", "ttfb_p99_ms"):
            added = row[key] - base[key] if base and row["arm"] != "direct" else None
            row[f"added_{key}"] = added


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None or value != value:  # None or NaN
        return "–"
    return f"{value:,.{digits}f}"


def latency_table(rows: list[dict[str, Any]], variant: str, skipped: dict[str, str]) -> str:
    stream = variant == "sse"
    cols = ["arm", "c", "p50 ms", "p99 ms", "added p50", "added p99"]
    cols += ["TTFB p50", "added TTFB p50"] if stream else []
    cols += ["req/s", "CPU µs/req", "arm CPU %", "load core %", "errors"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        if r["variant"] != variant:
            continue
        cells = [
            r["arm"],
            str(r["c"]),
            fmt(r["p50_ms"]),
            fmt(r["p99_ms"]),
            fmt(r["added_p50_ms"]),
            fmt(r["added_p99_ms"]),
        ]
        if stream:
            cells += [fmt(r["ttfb_p50_ms"]), fmt(r["added_ttfb_p50_ms"])]
        cells += [
            fmt(r["rps"], 0),
            fmt(r["cpu_us_per_req"], 0),
            fmt(r["arm_cpu_pct"], 0),
            fmt(r["load_core_cpu_pct"], 0),
            error_text(r),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [f"| {arm} | not run: {why} |" for arm, why in skipped.items()]
    return "\n".join(lines)


def error_text(row: dict[str, Any]) -> str:
    if not row["errors"]:
        return "0"
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(row["error_kinds"].items()))
    return f"**{row['errors']}** ({kinds})"


def memory_table(memory: list[dict[str, Any]], skipped: dict[str, str]) -> str:
    cols = ["arm", "streams", "opened", "RSS idle MB", "RSS open MB", "KB/stream"]
    cols += ["finished ok", "errors", "RSS at end MB"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for m in memory:
        if "not_run" in m:
            lines.append(f"| {m['arm']} | not run: {m['not_run']} |")
            continue
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(m["error_kinds"].items()))
        cells = [
            m["arm"],
            str(m["streams"]),
            str(m["opened"]),
            fmt(m["rss_idle_kb"] / 1024, 1),
            fmt(m["rss_open_kb"] / 1024, 1),
            fmt(m["kb_per_stream"], 1),
            str(m["completed"]),
            f"**{m['errors']}** ({kinds})" if m["errors"] else "0",
            fmt(m.get("rss_end_kb", float("nan")) / 1024, 1),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [f"| {arm} | not run: {why} |" for arm, why in skipped.items()]
    return "\n".join(lines)


def notes(rows: list[dict[str, Any]]) -> list[str]:
    """What a reader should know before trusting a cell."""
    out = []
    noisy = sorted(
        r["unattributed_cpu_pct"] for r in rows if (r.get("unattributed_cpu_pct") or 0) > 15
    )
    if noisy:
        out.append(
            f"other work on the two cores (other processes, kernel softirq) took > 15% of a "
            f"core in {len(noisy)} of {len(rows)} cells (median {percentile(noisy, 50):.0f}%, "
            f"max {noisy[-1]:.0f}%; `unattributed_cpu_pct` in the JSON): there, latencies "
            "and req/s are pessimistic"
        )
    where = ", ".join(
        f"{r['arm']} {r['variant']} c={r['c']}"
        for r in rows
        if r["arm"] != "direct" and (r["load_core_cpu_pct"] or 0) >= 90 and r["arm_cpu_pct"] < 80
    )
    if where:
        out.append(
            f"the load side limited (load core >= 90%, arm process < 80%): {where}; "
            "the arm's req/s there is a floor, not its capacity"
        )
    where = ", ".join(
        f"{r['variant']} c={r['c']}"
        for r in rows
        if r["arm"] == "direct" and r["c"] > 1 and (r["load_core_cpu_pct"] or 0) >= 90
    )
    if where:
        out.append(
            f"direct saturated the load core (upstream + load generator + all kernel TCP work "
            f"on one core) at {where}: arms that move part of that work to the arm core can "
            "show a small or even negative 'added' there"
        )
    return out


def finite(node: Any) -> Any:
    """The result tree for JSON: NaN (no samples) becomes null, paths become strings."""
    if isinstance(node, dict):
        return {k: finite(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [finite(v) for v in node]
    if isinstance(node, float) and not math.isfinite(node):
        return None
    return str(node) if isinstance(node, Path) else node


def cell_cpu_us(res: CellResult) -> float:
    """The arm's CPU microseconds per request in one cell (NaN: no request)."""
    return res.cpu.get("arm", 0.0) / res.requests * 1e6 if res.requests else float("nan")


def cell_line(r: int, key: tuple[str, str, int], res: CellResult) -> str:
    lat = sorted(res.latencies)
    p50 = percentile(lat, 50) * 1e3
    err = f" errors {dict(res.errors)}" if res.errors else ""
    rps = res.requests / res.seconds if res.seconds else 0
    where = f"round {r + 1} {key[1]:5} c={key[2]:<3} {key[0]:11}"
    cpu = cell_cpu_us(res)
    return f"{where} {rps:8.0f} req/s  p50 {p50:.3f} ms  CPU {cpu:.0f} µs/req{err}"


def print_report(result: dict[str, Any], skipped: dict[str, str]) -> None:
    rows, memory = result["results"], result["memory"]
    print("\n### Arms\n")
    for name, status in result["arms"].items():
        print(f"- {name}: {status}")
    for variant, title in VARIANT_TITLES.items():
        if any(r["variant"] == variant for r in rows):
            print(f"\n### {title}\n")
            print(latency_table(rows, variant, skipped))
    if memory:
        print(f"\n### Memory: {result['settings']['streams']} open streams\n")
        print(memory_table(memory, {}))
    if cautions := notes(rows):
        print("\n### Notes\n")
        print("\n".join(f"- {n}" for n in cautions))
    print("\n### Targets\n")
    print(targets_text(result["targets"]))


def targets_text(verdicts: list[dict[str, Any]]) -> str:
    return "\n".join(f"- **{v['status']}** {v['target']}: {v['detail']}" for v in verdicts)
