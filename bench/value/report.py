"""The figures: each arm's from its rows, its bill and its ``/stats``; the table, the
cloud calls by purpose, and the table of targets (issue 31's checks of them:
``bench.value.checks``)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from bench.routing_latency import percentile
from bench.value.arms import TARGET_PREFIX, arm_target, oracle_rows, random_rows
from bench.value.cloud import Bill
from tests.fakes.script import JSON

LANES = ("cloud", "local", "uncertain")


def summarise(
    rows: Sequence[JSON],
    prices: tuple[float, float],
    cost: JSON | None = None,
    bill: Bill | None = None,
    quality: JSON | None = None,
) -> JSON:
    """One arm's figures from its rows; spend and calls from ``bill`` (a proxy arm's whole
    bill, its audits' included) or else the sum of the rows' bills; the proxy's own
    figures from its ``/stats`` ``cost`` and ``quality`` (a proxy arm's)."""
    n = len(rows)
    streamed = [r["ttft_s"] for r in rows if r["stream"]]
    whole = [r["total_s"] for r in rows if not r["stream"]]
    if bill is None:
        bill = Bill()
        for r in rows:
            bill = Bill(
                bill.calls + r["bill"]["calls"],
                bill.prompt_tokens + r["bill"]["prompt_tokens"],
                bill.completion_tokens + r["bill"]["completion_tokens"],
            )
    cost = cost or {}
    by_purpose = (cost.get("cloud_calls") or {}).get("by_purpose")
    per_purpose = None if by_purpose is None or not n else {p: c / n for p, c in by_purpose.items()}
    local = [r for r in rows if not r["cloud_served"]]
    return {
        "n": n,
        "quality": statistics.fmean(r["correct"] for r in rows) if rows else 0.0,
        "spend_usd": bill.usd(*prices),
        "cloud_calls": bill.calls,
        "calls_per_request": bill.calls / n if rows else 0.0,
        "calls_by_purpose": per_purpose,  # the proxy's count, per request
        "audit_share": None if per_purpose is None else per_purpose.get("audit", 0.0),
        "cloud_served": statistics.fmean(r["cloud_served"] for r in rows) if rows else 0.0,
        # served by a cloud call made for the request (a cache hit of a cloud answer is not)
        "cloud_called_served": (
            statistics.fmean(r["cloud_served"] and not _hit(r) for r in rows) if rows else 0.0
        ),
        "local_right": statistics.fmean(r["correct"] for r in local) if local else None,
        # served by a draft of the local model (a cache hit of a stored answer aside)
        "local_drafts": sum(not _hit(r) for r in local) / n if n else 0.0,
        # of them, served with no cloud call before it (a threshold's, not a merge's)
        "local_unverified": sum(bool(r.get("accepted")) and not _hit(r) for r in local) / n
        if n
        else 0.0,
        "cache_hit_share": _cache_hits(rows),
        "lane_shares": _lanes(rows),
        "ttft_p50_s": percentile(streamed, 0.5) if streamed else None,
        "ttft_p90_s": percentile(streamed, 0.9) if streamed else None,
        "whole_mean_s": statistics.fmean(whole) if whole else None,
        "proxy_savings_pct": cost.get("savings_pct"),
        "proxy_baseline": cost.get("baseline"),
        "served_agreement": served_agreement(quality),
        "errors": sum(r.get("error") is not None for r in rows),
    }


def _cache_hits(rows: Sequence[JSON]) -> float | None:
    """The share of requests answered from a cache (``X-Cache: hit``, or the oracle's own);
    None when no answer said either way (no cache)."""
    told = [r for r in rows if r.get("cache") is not None or r.get("cache_hit") is not None]
    if not told or not rows:
        return None
    return sum(r.get("cache") == "hit" or bool(r.get("cache_hit")) for r in rows) / len(rows)


def _hit(row: JSON) -> bool:
    """The answer came from a cache (``X-Cache: hit``, or the oracle's own)."""
    return row.get("cache") == "hit" or bool(row.get("cache_hit"))


def _lanes(rows: Sequence[JSON]) -> dict[str, float] | None:
    """The share of requests in each lane of the gate (``speculative_decoding.lane``);
    None when no answer told one."""
    lanes = Counter(r["lane"] for r in rows if r.get("lane"))
    return {lane: k / len(rows) for lane, k in sorted(lanes.items())} if lanes else None


def served_agreement(quality: JSON | None) -> JSON | None:
    """The audited agreement of the locally served answers and its lower bound, from
    ``/stats`` → ``quality``: the target's block when the proxy has one, else its audits'
    rate and the low end of their 95% interval; None without audits."""
    if not quality:
        return None
    target = quality.get("target")
    if isinstance(target, dict) and isinstance(target.get("served"), dict):
        served = target["served"]
        return {
            "target": target.get("target"),
            "audits": served.get("audits"),
            "agreement": served.get("agreement"),
            "lower_bound": served.get("lower_bound"),
            "bound": "one-sided 95%",
        }
    audits = quality.get("audits")
    if isinstance(audits, dict) and audits.get("n"):
        ci = audits.get("ci95") or [None, None]
        return {
            "target": None,
            "audits": audits["n"],
            "agreement": audits.get("agree_rate"),
            "lower_bound": ci[0],
            "bound": "Wilson 95% (low end)",
        }
    return None


def with_ratios(summary: dict[str, JSON]) -> dict[str, JSON]:
    """Each arm's quality and spend against cloud-only, its bill's savings, and the share of
    the oracle's saving it recovers."""
    cloud = summary.get("cloud_only")
    base_spend = cloud["spend_usd"] if cloud else 0.0
    base_quality = cloud["quality"] if cloud else 0.0
    oracle_saving = None
    out: dict[str, JSON] = {}
    for arm, s in summary.items():
        ratio = s["spend_usd"] / base_spend if base_spend else None
        out[arm] = s | {
            "quality_vs_cloud": s["quality"] / base_quality if base_quality else None,
            "spend_vs_cloud": ratio,
            "bill_savings_pct": 100 * (1 - ratio) if ratio is not None else None,
        }
    if "oracle" in out and out["oracle"]["spend_vs_cloud"] is not None:
        oracle_saving = 1 - out["oracle"]["spend_vs_cloud"]
    for s in out.values():
        ratio = s["spend_vs_cloud"]
        s["oracle_saving_share"] = (
            (1 - ratio) / oracle_saving if ratio is not None and oracle_saving else None
        )
    return out


def evaluate(measured: JSON, prices: tuple[float, float], seed: int = 0) -> dict[str, JSON]:
    """Every arm's figures: the proxies' from their rows, bills and ``/stats``; ``random``
    and ``oracle`` from ``local_only`` and ``cloud_only`` (``random`` also needs
    ``shipped``)."""
    rows: dict[str, list[JSON]] = dict(measured["rows"])
    if "local_only" in rows and "cloud_only" in rows:
        if "shipped" in rows:
            share = statistics.fmean(r["cloud_served"] for r in rows["shipped"])
            rows["random"] = random_rows(rows["local_only"], rows["cloud_only"], share, seed)
        rows["oracle"] = oracle_rows(rows["local_only"], rows["cloud_only"])
    summary = {}
    costs, qualities = measured["stats_cost"], measured.get("stats_quality", {})
    for arm, arm_rows in rows.items():
        bill = Bill(**measured["bills"][arm]) if arm in measured["bills"] else None
        summary[arm] = summarise(arm_rows, prices, costs.get(arm), bill, qualities.get(arm))
    return with_ratios(summary)


def pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def points(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _lane_cell(shares: dict[str, float] | None) -> str:
    if not shares:
        return "-"
    return " / ".join(f"{100 * shares.get(lane, 0.0):.0f}" for lane in LANES)


def markdown(summary: dict[str, JSON]) -> str:
    """The table: one row per arm (the target arms have their own, ``targets_markdown``)."""
    lines = [
        "| arm | quality | vs cloud-only | cloud spend vs cloud-only | of the oracle's saving "
        "| cloud calls / request | audits / request | cloud-served | cache hits "
        "| lanes cloud / local / uncertain % | TTFT p50 | TTFT p90 | whole answer mean "
        "| savings: /stats | savings: bill |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, s in summary.items():
        if arm.startswith(TARGET_PREFIX):
            continue
        spend = "-" if s["spend_vs_cloud"] is None else f"{s['spend_vs_cloud']:.3f}"
        lines.append(
            f"| {arm} | {pct(s['quality'])} | {pct(s['quality_vs_cloud'])} | {spend} "
            f"| {pct(s['oracle_saving_share'], 0)} | {s['calls_per_request']:.2f} "
            f"| {num(s['audit_share'])} | {pct(s['cloud_served'])} "
            f"| {pct(s['cache_hit_share'])} | {_lane_cell(s['lane_shares'])} "
            f"| {secs(s['ttft_p50_s'])} | {secs(s['ttft_p90_s'])} "
            f"| {secs(s['whole_mean_s'])} | {points(s['proxy_savings_pct'])} "
            f"| {points(s['bill_savings_pct'])} |"
        )
    return "\n".join(lines)


def calls_markdown(summary: dict[str, JSON]) -> str:
    """Cloud calls per request by purpose, as each proxy counted them (``/stats`` →
    ``cost.cloud_calls``), and how its savings figure estimated the baseline."""
    purposes = sorted({p for s in summary.values() for p in (s["calls_by_purpose"] or {})})
    lines = [
        "| arm | " + " | ".join(purposes) + " | all (proxy) | all (bill) | baseline estimated by |",
        "|---|" + "---:|" * (len(purposes) + 2) + "---|",
    ]
    for arm, s in summary.items():
        calls = s["calls_by_purpose"]
        if calls is None:
            continue
        cells = " | ".join(num(calls.get(p, 0.0)) for p in purposes)
        baseline = s["proxy_baseline"] or {}
        how = (
            f"{baseline.get('method')} ({baseline.get('pairs')} pairs, "
            f"{baseline.get('cloud_answers', '-')} cloud answers)"
            if baseline.get("method")
            else "-"
        )
        lines.append(
            f"| {arm} | {cells} | {sum(calls.values()):.2f} | {s['calls_per_request']:.2f} "
            f"| {how} |"
        )
    return "\n".join(lines)


def targets_markdown(summary: dict[str, JSON]) -> str:
    """One row per target arm: the target, the share served locally, the audited agreement
    of the locally served answers (``/stats``) and its bound, the judges' share of right
    answers among them, quality and spend against cloud-only."""
    lines = [
        "| target | served locally | of them by a draft (cache hits aside) "
        "| of those, unverified | audited agreement (audits) | its lower bound "
        "| judged right, served locally | quality | cloud spend vs cloud-only |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    arms = sorted((arm_target(arm), arm) for arm in summary if arm_target(arm) is not None)
    for target, arm in arms:
        s = summary[arm]
        served = s["served_agreement"] or {}
        audited = f"{pct(served.get('agreement'))} ({served.get('audits')})" if served else "-"
        lines.append(
            f"| {target:g} | {pct(1 - s['cloud_served'])} | {pct(s.get('local_drafts'))} "
            f"| {pct(s.get('local_unverified'))} | {audited} "
            f"| {pct(served.get('lower_bound'))} | {pct(s['local_right'])} "
            f"| {pct(s['quality'])} | {num(s['spend_vs_cloud'], 3)} |"
        )
    return "\n".join(lines)
