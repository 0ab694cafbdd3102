"""The report of bench/speculative.py: pure arithmetic over per-request records.

Every figure is a ratio of sums, never a mean of per-request ratios, so a long answer
weighs as much as its tokens:

* tokens/s: completion tokens / client-side wall seconds;
* acceptance rate: accepted draft tokens / drafted tokens (llama-server's ``timings``);
* mean acceptance length (seed 003): 1 + accepted / drafts, a draft being one verification
  step of the target (``llamacpp:spec_decode_num_drafts_total``);
* per-position acceptance: tokens accepted at draft position i / drafts (first 8 positions);
* across context types: the population standard deviation of the per-context tokens/s and
  its coefficient of variation (std / mean), the figure seed 001's second criterion reads;
* noise: the min-max spread of each arm's tokens/s over the repeats.

The seed 001 verdict compares the adaptive arm with the best fixed K (highest tokens/s).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

VANILLA = "vanilla"
NGRAM = "ngram"
ADAPTIVE = "adaptive"
POSITIONS = 8  # per-position acceptance reported for draft positions 0..7
FASTER_BY = 0.10  # seed 001: ">= 10% higher t/s than the best fixed K"
SAME_WITHIN = 0.05  # "same t/s": adaptive at most this much slower than the best fixed K
CONTEXT_ORDER = ("code", "prose", "math", "json", "list")


def fixed_arm(k: int) -> str:
    """The name of the fixed-depth arm for K."""
    return f"K={k}"


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One measured request: which arm and prompt, what it cost and what was drafted.

    ``k`` is the depth the request was drafted with (None for vanilla and ngram);
    ``drafts`` and ``accepted_per_pos`` come from the server's /metrics delta.
    """

    arm: str
    repeat: int
    prompt_id: str
    context_type: str
    k: int | None
    wall_s: float
    tokens: int
    draft_n: int
    draft_n_accepted: int
    drafts: int
    accepted_per_pos: tuple[int, ...] = field(default_factory=tuple)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> RequestRecord:
        """Rebuild a record from its JSON form (``dataclasses.asdict``)."""
        return cls(**{**raw, "accepted_per_pos": tuple(raw["accepted_per_pos"])})


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def group_stats(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Tokens/s, acceptance, mean acceptance length and per-position acceptance of a group."""
    tokens = sum(r.tokens for r in records)
    wall = math.fsum(r.wall_s for r in records)
    drafted = sum(r.draft_n for r in records)
    accepted = sum(r.draft_n_accepted for r in records)
    drafts = sum(r.drafts for r in records)
    per_pos = [
        sum(r.accepted_per_pos[i] for r in records if i < len(r.accepted_per_pos))
        for i in range(POSITIONS)
    ]
    mean_length = _ratio(accepted, drafts)
    return {
        "n": len(records),
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": _ratio(tokens, wall),
        "drafted": drafted,
        "accepted": accepted,
        "drafts": drafts,
        "acceptance_rate": _ratio(accepted, drafted),
        "mean_acceptance_length": None if mean_length is None else 1 + mean_length,
        "per_position": [_ratio(a, drafts) for a in per_pos] if drafts else None,
    }


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Population std dev and coefficient of variation (std / mean) of some rates."""
    if not values:
        return {"std": None, "cv": None}
    std = statistics.pstdev(values)
    mean = statistics.fmean(values)
    return {"std": std, "cv": _ratio(std, mean)}


def _ordered(names: Iterable[str], order: Sequence[str]) -> list[str]:
    """Names in ``order`` first, then any others sorted."""
    unique = set(names)
    return [n for n in order if n in unique] + sorted(unique - set(order))


def arm_order(arms: Iterable[str]) -> list[str]:
    """vanilla, ngram, the fixed K arms by K, adaptive, then anything else."""
    unique = set(arms)
    fixed = sorted((a for a in unique if a.startswith("K=")), key=lambda a: int(a[2:]))
    head = [a for a in (VANILLA, NGRAM) if a in unique]
    tail = [ADAPTIVE] if ADAPTIVE in unique else []
    return head + fixed + tail + sorted(unique - set(head) - set(fixed) - set(tail))


def arm_report(records: Sequence[RequestRecord], contexts: Sequence[str]) -> dict[str, Any]:
    """One arm on the mixed workload, per context type and per repeat."""
    by_context = {c: group_stats([r for r in records if r.context_type == c]) for c in contexts}
    rates = [s["tokens_per_s"] for s in by_context.values() if s["tokens_per_s"] is not None]
    repeats = sorted({r.repeat for r in records})
    per_repeat = [
        group_stats([r for r in records if r.repeat == n])["tokens_per_s"] for n in repeats
    ]
    per_repeat_rates = [v for v in per_repeat if v is not None]
    return {
        "all": group_stats(records),
        "by_context": by_context,
        "across_contexts": spread(rates),
        "per_repeat_tokens_per_s": per_repeat,
        "repeat_spread": {
            "min": min(per_repeat_rates, default=None),
            "max": max(per_repeat_rates, default=None),
        },
    }


def verdict(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Seed 001's success criteria for the adaptive arm against the best fixed K.

    ``faster``: adaptive tokens/s at least 10% above the best fixed K; ``steadier``: not
    more than 5% slower than it (the same tokens/s, within noise) with a lower coefficient
    of variation across context types. ``holds`` names the criterion met, or is None.
    """
    fixed = {a: s for a, s in arms.items() if a.startswith("K=")}
    if ADAPTIVE not in arms or not fixed:
        raise ValueError("the verdict needs the adaptive arm and at least one fixed K arm")
    best = max(fixed, key=lambda a: fixed[a]["all"]["tokens_per_s"] or 0.0)
    adaptive_rate = arms[ADAPTIVE]["all"]["tokens_per_s"]
    best_rate = fixed[best]["all"]["tokens_per_s"]
    gain = None if not best_rate or adaptive_rate is None else adaptive_rate / best_rate - 1
    adaptive_cv = arms[ADAPTIVE]["across_contexts"]["cv"]
    best_cv = fixed[best]["across_contexts"]["cv"]
    faster = gain is not None and gain >= FASTER_BY
    steadier = (
        gain is not None
        and gain >= -SAME_WITHIN
        and adaptive_cv is not None
        and best_cv is not None
        and adaptive_cv < best_cv
    )
    holds = "faster" if faster else "steadier" if steadier else None
    return {
        "best_fixed": best,
        "best_fixed_tokens_per_s": best_rate,
        "adaptive_tokens_per_s": adaptive_rate,
        "gain": gain,
        "best_fixed_cv": best_cv,
        "adaptive_cv": adaptive_cv,
        "faster": faster,
        "steadier": steadier,
        "holds": holds,
        "statement": _statement(best, gain, adaptive_cv, best_cv, holds),
    }


def _statement(
    best: str, gain: float | None, cv: float | None, best_cv: float | None, holds: str | None
) -> str:
    figures = (
        f"adaptive {_signed_pct(gain)} tokens/s vs the best fixed {best}; "
        f"CV across context types {_fmt(cv)} vs {_fmt(best_cv)}"
    )
    if holds == "faster":
        return f"{figures}: HOLDS: >= {FASTER_BY:.0%} higher tokens/s than the best fixed K"
    if holds == "steadier":
        return (
            f"{figures}: HOLDS: the same tokens/s (within {SAME_WITHIN:.0%}) with lower "
            "variance across context types"
        )
    return (
        f"{figures}: NEITHER holds (not >= {FASTER_BY:.0%} faster, nor the same tokens/s "
        "with lower variance across context types)"
    )


def build_report(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """The whole report as JSON-ready data: per arm, per context type, and the verdict."""
    if not records:
        raise ValueError("need at least one record")
    contexts = _ordered((r.context_type for r in records), CONTEXT_ORDER)
    arms = {
        arm: arm_report([r for r in records if r.arm == arm], contexts)
        for arm in arm_order(r.arm for r in records)
    }
    vanilla_rate = arms[VANILLA]["all"]["tokens_per_s"] if VANILLA in arms else None
    for row in arms.values():
        rate = row["all"]["tokens_per_s"]
        row["speedup"] = None if not vanilla_rate or rate is None else rate / vanilla_rate
    has_verdict = ADAPTIVE in arms and any(a.startswith("K=") for a in arms)
    return {
        "contexts": contexts,
        "arms": arms,
        "verdict": verdict(arms) if has_verdict else None,
    }


# ------------------------------------------------------------------------------- markdown


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _signed_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def markdown(report: Mapping[str, Any]) -> str:
    """The report as markdown: the mixed workload, tokens/s and acceptance per context type,
    per-position acceptance, and the verdict."""
    arms, contexts = report["arms"], report["contexts"]
    lines = [
        "| arm | tokens/s | vs vanilla | acceptance | mean acc. length | CV across contexts "
        "| std across contexts | per-repeat tokens/s (min-max) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, row in arms.items():
        s, spread_ = row["all"], row["repeat_spread"]
        speedup = "n/a" if row["speedup"] is None else f"{row['speedup']:.2f}x"
        lines.append(
            f"| {arm} | {_fmt(s['tokens_per_s'], 1)} | {speedup} "
            f"| {_pct(s['acceptance_rate'])} | {_fmt(s['mean_acceptance_length'], 2)} "
            f"| {_fmt(row['across_contexts']['cv'])} | {_fmt(row['across_contexts']['std'], 1)} "
            f"| {_fmt(spread_['min'], 1)}-{_fmt(spread_['max'], 1)} |"
        )
    header = "| arm | " + " | ".join(contexts) + " |"
    rule = "|---|" + "---:|" * len(contexts)
    for title, key, cell in (
        ("tokens/s", "tokens_per_s", lambda v: _fmt(v, 1)),
        ("acceptance rate", "acceptance_rate", _pct),
        ("mean acceptance length", "mean_acceptance_length", lambda v: _fmt(v, 2)),
    ):
        lines += ["", f"{title} per context type:", "", header, rule]
        for arm, row in arms.items():
            cells = [cell(row["by_context"][c][key]) for c in contexts]
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "per-position acceptance (accepted at position i / drafts), mixed workload:",
        "",
        "| arm | " + " | ".join(str(i) for i in range(POSITIONS)) + " |",
        "|---|" + "---:|" * POSITIONS,
    ]
    for arm, row in arms.items():
        per_pos = row["all"]["per_position"]
        if per_pos is not None:
            lines.append(f"| {arm} | " + " | ".join(_fmt(v, 2) for v in per_pos) + " |")
    if (v := report.get("verdict")) is not None:
        lines += ["", f"seed 001 verdict: {v['statement']}"]
    return "\n".join(lines)
