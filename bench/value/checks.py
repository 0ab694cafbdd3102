"""Issue 31's checks of a run's figures (``bench.value.report.evaluate``): the Done-when
of the ``shipped`` arm, and ``target_agreement``'s over the target arms. Each check is
(what is checked, passed or None when a figure is missing, the numbers)."""

from __future__ import annotations

import itertools

from app.routing.target import lower_bound
from bench.value.arms import arm_target
from bench.value.report import num, points, secs
from tests.fakes.script import JSON

Check = tuple[str, bool | None, str]


def done_when(summary: dict[str, JSON]) -> list[Check]:
    """Issue 31's Done-when checks of the ``shipped`` arm on this trace: (check, passed or
    None when a figure is missing, the numbers)."""
    shipped, cloud = summary.get("shipped"), summary.get("cloud_only")
    if shipped is None or cloud is None:
        return [("the shipped and cloud_only arms ran", None, "no: nothing to check")]
    checks: list[Check] = []
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
            f"{num(share, 3)} of it (spend {num(shipped['spend_vs_cloud'], 3)}, oracle "
            f"{num((summary.get('oracle') or {}).get('spend_vs_cloud'), 3)} of cloud-only)",
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
            f"{num(audits, 3)} + 0.02 = {num(bound, 3)}",
        )
    )
    mine, theirs = shipped["ttft_p90_s"], cloud["ttft_p90_s"]
    limit = None if theirs is None else theirs + 0.1
    checks.append(
        (
            "streamed TTFT p90 <= cloud-only's + 0.1 s",
            None if mine is None or limit is None else mine <= limit,
            f"{secs(mine)} vs {secs(theirs)} + 0.1 s = {secs(limit)}",
        )
    )
    said, billed = shipped["proxy_savings_pct"], shipped["bill_savings_pct"]
    gap = None if said is None or billed is None else abs(said - billed)
    checks.append(
        (
            "|/stats savings - the bill's| <= 2 points",
            None if gap is None else gap <= 2.0,
            f"|{points(said)} - {points(billed)}| = {num(gap, 1)} points",
        )
    )
    return checks


def done_when_text(checks: list[Check]) -> str:
    """The checks as lines: PASS, FAIL or n/a, the check, its numbers."""
    verdict = {True: "PASS", False: "FAIL", None: "n/a "}
    return "\n".join(f"{verdict[ok]}  {name}: {numbers}" for name, ok, numbers in checks)


def target_checks(summary: dict[str, JSON]) -> list[Check]:
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
    checks: list[Check] = []
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
