"""The figures: each arm's from its rows, its bill and its ``/stats``; the table, the
cloud calls by purpose, issue 31's Done-when checks, and the table of targets."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Sequence

from app.routing.target import lower_bound
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


def _pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _num(value: float | None, digits: int = 2) -> str:
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
            f"| {arm} | {_pct(s['quality'])} | {_pct(s['quality_vs_cloud'])} | {spend} "
            f"| {_pct(s['oracle_saving_share'], 0)} | {s['calls_per_request']:.2f} "
            f"| {_num(s['audit_share'])} | {_pct(s['cloud_served'])} "
            f"| {_pct(s['cache_hit_share'])} | {_lane_cell(s['lane_shares'])} "
            f"| {_s(s['ttft_p50_s'])} | {_s(s['ttft_p90_s'])} "
            f"| {_s(s['whole_mean_s'])} | {_points(s['proxy_savings_pct'])} "
            f"| {_points(s['bill_savings_pct'])} |"
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
        cells = " | ".join(_num(calls.get(p, 0.0)) for p in purposes)
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


def done_when(summary: dict[str, JSON]) -> list[tuple[str, bool | None, str]]:
    """Issue 31's Done-when checks of the ``shipped`` arm on this trace: (check, passed or
    None when a figure is missing, the numbers)."""
    shipped, cloud = summary.get("shipped"), summary.get("cloud_only")
    if shipped is None or cloud is None:
        return [("the shipped and cloud_only arms ran", None, "no: nothing to check")]
    checks: list[tuple[str, bool | None, str]] = []
    floor = 0.95 * cloud["quality"]
    checks.append(
        (
            "quality >= 0.95 x cloud-only's",
            shipped["quality"] >= floor,
            f"{shipped['quality']:.3f} vs 0.95 x {cloud['quality']:.3f} = {floor:.3f}",
        )
    )
    share = shipped["oracle_saving_share"]
    checks.append(
        (
            "recovers >= half of the oracle's saving",
            None if share is None else share >= 0.5,
            f"{_num(share, 3)} of it (spend {_num(shipped['spend_vs_cloud'], 3)}, oracle "
            f"{_num((summary.get('oracle') or {}).get('spend_vs_cloud'), 3)} of cloud-only)",
        )
    )
    audits = shipped["audit_share"]
    # strict: a cache hit of a cloud answer is served without a cloud call
    served = shipped.get("cloud_called_served", shipped["cloud_served"])
    bound = None if audits is None else served + audits + 0.02
    checks.append(
        (
            "cloud calls / request <= cloud-served (cache hits not) + audits + 0.02",
            None if bound is None else shipped["calls_per_request"] <= bound,
            f"{shipped['calls_per_request']:.3f} vs {served:.3f} + "
            f"{_num(audits, 3)} + 0.02 = {_num(bound, 3)}",
        )
    )
    mine, theirs = shipped["ttft_p90_s"], cloud["ttft_p90_s"]
    limit = None if theirs is None else theirs + 0.1
    checks.append(
        (
            "streamed TTFT p90 <= cloud-only's + 0.1 s",
            None if mine is None or limit is None else mine <= limit,
            f"{_s(mine)} vs {_s(theirs)} + 0.1 s = {_s(limit)}",
        )
    )
    said, billed = shipped["proxy_savings_pct"], shipped["bill_savings_pct"]
    gap = None if said is None or billed is None else abs(said - billed)
    checks.append(
        (
            "|/stats savings - the bill's| <= 2 points",
            None if gap is None else gap <= 2.0,
            f"|{_points(said)} - {_points(billed)}| = {_num(gap, 1)} points",
        )
    )
    return checks


def done_when_text(checks: list[tuple[str, bool | None, str]]) -> str:
    """The checks as lines: PASS, FAIL or n/a, the check, its numbers."""
    verdict = {True: "PASS", False: "FAIL", None: "n/a "}
    return "\n".join(f"{verdict[ok]}  {name}: {numbers}" for name, ok, numbers in checks)


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
        audited = f"{_pct(served.get('agreement'))} ({served.get('audits')})" if served else "-"
        lines.append(
            f"| {target:g} | {_pct(1 - s['cloud_served'])} | {_pct(s.get('local_drafts'))} "
            f"| {_pct(s.get('local_unverified'))} | {audited} "
            f"| {_pct(served.get('lower_bound'))} | {_pct(s['local_right'])} "
            f"| {_pct(s['quality'])} | {_num(s['spend_vs_cloud'], 3)} |"
        )
    return "\n".join(lines)


def target_checks(summary: dict[str, JSON]) -> list[tuple[str, bool | None, str]]:
    """Issue 31's ``target_agreement`` check over the target arms: at each target the
    audited agreement of the locally served answers, and the judges' share of right ones
    among them, at least the target minus the audits' bound's width (n/a without audits or
    without a locally served answer); and a lower target serves at least as much locally.

    The width is taken on the side towards the target: from the agreement up to its
    one-sided 95% upper bound (Wilson, as the proxy's lower one), so the audits pass when
    they do not show the served agreement under the target with 95% confidence. (The
    lower side's width is no width at the ends: 0 agreeing of 1 audit has a lower bound of
    0, which would ask that one audit to reach the target.)"""
    arms = sorted((arm_target(arm), arm) for arm in summary if arm_target(arm) is not None)
    checks: list[tuple[str, bool | None, str]] = []
    for target, arm in arms:
        s = summary[arm]
        served = s["served_agreement"] or {}
        agreement, audits = served.get("agreement"), served.get("audits")
        if agreement is None or not audits:
            checks.append((f"target {target:g}: audited agreement", None, "no audits"))
        else:
            high = 1 - lower_bound((1 - agreement) * audits, audits)
            floor = target - (high - agreement)
            checks.append(
                (
                    f"target {target:g}: audited agreement >= target - the bound's width",
                    agreement >= floor,
                    f"{agreement:.3f} ({audits} audits) vs {target:g} - "
                    f"({high:.3f} - {agreement:.3f}) = {floor:.3f}",
                )
            )
        right = s["local_right"]
        if right is None or agreement is None or not audits:
            checks.append((f"target {target:g}: judges' count", None, "n/a"))
        else:
            checks.append(
                (
                    f"target {target:g}: judged right among served locally >= the same floor",
                    right >= floor,
                    f"{right:.3f} vs {floor:.3f}",
                )
            )
    # Drafts served with no cloud call before them: what a threshold serves, and what saves.
    # (A merged draft is served locally too, but after its verification's call, and a
    # higher target verifies more drafts, so more of them merge; cache hits, likewise.)
    local = [(t, _unverified(summary[arm])) for t, arm in arms]
    if len(local) >= 2:
        ordered = all(a[1] >= b[1] for a, b in itertools.pairwise(local))
        strictly = local[0][1] > local[-1][1]
        checks.append(
            (
                "a lower target serves more locally (drafts with no cloud call)",
                ordered and strictly,
                ", ".join(f"{t:g}: {100 * share:.1f}%" for t, share in local),
            )
        )
    return checks


def _unverified(s: JSON) -> float:
    """The share served by a draft with no cloud call before it (hand-made figures
    without it: by a draft, else served locally)."""
    return float(s.get("local_unverified", s.get("local_drafts", 1 - s["cloud_served"])))
