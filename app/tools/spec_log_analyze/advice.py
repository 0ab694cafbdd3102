"""Seed 003's tuning rules applied to an analysis report: what to change, and on which number.

Each piece of advice names the figure it rests on, so a person can check it against the
report; the thresholds are seed 003's and live here, next to the rules that use them.
"""

from __future__ import annotations

from typing import Any

from app.routing.signals import OUT_OF_TIME
from app.tools import pct

MIN_ROUNDS_TO_JUDGE = 5  # rounds a context type needs before it gets its own advice

# seed 003's thresholds
RAISE_K_ABOVE = 0.30
LOWER_K_BELOW = 0.10
NOT_PAYING_BELOW = 1.2
POOR_BELOW, GOOD_ABOVE, EXCELLENT_ABOVE = 0.40, 0.60, 0.80
POSITION_0_POOR_BELOW = 0.70


def advise(report: dict[str, Any]) -> dict[str, Any]:
    """Seed 003's tuning rules applied to a report; each advice names the number it rests on."""
    overall, positions = report["overall"], report["positions"]
    rounds = overall["rounds"]
    advice: list[dict[str, Any]] = []

    def say(topic: str, value: float | None, text: str) -> None:
        advice.append({"topic": topic, "value": value, "advice": text})

    k = _k(positions, rounds)
    tuning: dict[str, Any] = {"k": k, "longest_draft": overall["longest_draft"], "advice": advice}
    if not rounds:
        say(
            "rounds",
            0,
            f"no verified rounds ({overall['unverified_drafts']} drafts not verified): "
            "no acceptance to tune on",
        )
        return tuning

    rate = overall["acceptance_rate"]
    if rate is not None:
        band, threshold = _band(rate)
        hint = "; the draft model often disagrees with the verifier" if band == "poor" else ""
        say("acceptance_rate", rate, f"acceptance rate {pct(rate)} {threshold}: {band}{hint}")
    length = overall["mean_acceptance_length"]
    if length < NOT_PAYING_BELOW:
        say(
            "mean_acceptance_length",
            length,
            f"mean acceptance length {length:.2f} < {NOT_PAYING_BELOW}: speculation is not "
            "paying; use a closer draft model or turn speculative_decoding off",
        )
    else:
        say(
            "mean_acceptance_length",
            length,
            f"mean acceptance length {length:.2f} >= {NOT_PAYING_BELOW}: speculation pays",
        )

    first = positions[0]["rate"] if positions else None
    if first is not None and first < POSITION_0_POOR_BELOW:
        say(
            "position_0",
            first,
            f"position 0 acceptance {pct(first)} < 70%: drafts already go wrong at the first token",
        )

    if k is not None:
        at = positions[k - 1]["rate_per_round"]
        basis = (
            f"position {k - 1} acceptance {pct(at)} of rounds (k = {k}, the longest draft "
            f"at least half the rounds reach; longest seen {overall['longest_draft']})"
        )
        budget = _budget_note(report["stop_reasons"])
        if at > RAISE_K_ABOVE:
            text = f"{basis} > 30%: raise K (speculative_decoding.max_draft_tokens){budget}"
        elif at < LOWER_K_BELOW:
            text = f"{basis} < 10%: lower K (speculative_decoding.max_draft_tokens){budget}"
        else:
            text = f"{basis} is within 10-30%: K looks balanced"
        say("max_draft_tokens", at, text)

    few = []
    for name, group in report["by_context_type"].items():
        n = group["num_drafts"]
        if n >= MIN_ROUNDS_TO_JUDGE:
            group_rate, group_length = group["acceptance_rate"], group["mean_acceptance_length"]
            if group_rate is None:  # rounds of empty drafts only
                continue
            band, threshold = _band(group_rate)
            paying = "" if group_length >= NOT_PAYING_BELOW else " (< 1.2: not paying)"
            say(
                f"context_type:{name}",
                group_rate,
                f"context '{name}': acceptance {pct(group_rate)} {threshold} over {n} rounds: "
                f"{band}; mean length {group_length:.2f}{paying}",
            )
        elif n:
            few.append(f"{name} ({n})")
    if few:
        say(
            "context_type",
            None,
            f"too few rounds (< {MIN_ROUNDS_TO_JUDGE}) to judge: {', '.join(few)}",
        )
    return tuning


def _k(positions: list[dict[str, Any]], rounds: int) -> int | None:
    """Seed 003's k: one past the last position that at least half the rounds reach."""
    reached = [row["pos"] for row in positions if 2 * row["drafted"] >= rounds > 0]
    return reached[-1] + 1 if reached else None


def _band(rate: float) -> tuple[str, str]:
    """Seed 003's verdict on an acceptance rate, and the threshold it rests on."""
    if rate > EXCELLENT_ABOVE:
        return "excellent", "> 80%"
    if rate > GOOD_ABOVE:
        return "good", "> 60%"
    if rate < POOR_BELOW:
        return "poor", "< 40%"
    return "fair", "within 40-60%"


def _budget_note(stop_reasons: dict[str, int]) -> str:
    """How many drafts the budget cut: K only matters for those (of the drafts that ran
    their course: one a stream's first-token budget stopped did not)."""
    total = sum(n for stop, n in stop_reasons.items() if stop != OUT_OF_TIME)
    if not total:
        return ""
    share = stop_reasons.get("n_max", 0) / total
    return f"; {pct(share)} of drafts stopped at the budget (n_max)"
