"""The pure half of bench/routing_eval.py: draft records in, routing-quality tables out.

No I/O, no clock, no llama-server: every function takes plain data, so the report is
unit-tested on hand-made records and can be recomputed from a saved JSON file.

Conventions (see app/evaluation/metrics.py for the metric definitions):

* A policy's score is "how much the draft needs the cloud": higher = send to the cloud.
* A draft cut at the budget is wrong whatever the judge says: the proxy cannot serve a
  cut answer, so every scored policy sends it to the cloud (``judged_correct`` keeps the
  judge's own verdict).
* By default the cloud is perfect (``cloud_ok`` is True for every item, its answer being
  the item's reference), so q_cloud = 1 and PGR is defined whenever at least one draft is
  wrong. Records that carry ``cloud_correct`` (a real endpoint's answer, judged like the
  drafts; an error counts as wrong) give the measured q_cloud instead, and PGR is undefined
  (None) when that cloud does not beat the drafts.
* The seed router is binary (verify = 1, accept = 0): its curve has only the points it
  has, (0, q_local), (its verify share, its quality) and (1, 1), joined by straight lines.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.evaluation.metrics import (
    Curve,
    apgr,
    auroc,
    cpt,
    oracle_curve,
    pgr_curve,
    random_curve,
    routing_curve,
)
from app.routing.features import draft_features, hedged, token_margin
from app.routing.policy import Decision
from app.routing.scorer import Scorer
from app.routing.signals import DraftSignals


@dataclass(frozen=True, slots=True)
class DraftRecord:
    """One evaluation item drafted, judged and described by the signals a router can read.

    Token statistics are None when the draft has no tokens (an empty answer).
    """

    id: str
    kind: str
    context_type: str
    draft: str
    correct: bool
    judged_correct: bool
    n_tokens: int
    finish_reason: str | None
    truncated: bool
    mean_p: float | None
    min_p: float | None
    mean_entropy: float | None
    max_entropy: float | None
    mean_margin: float | None
    chars: int
    hedging: bool
    seed_accept: bool
    seed_reasons: tuple[str, ...]
    features: dict[str, float]
    cloud_correct: bool | None = None  # the real cloud's answer judged; None: perfect cloud
    cloud_error: str | None = None  # why the real cloud gave no answer (counted wrong)

    @classmethod
    def from_mapping(cls, raw: dict[str, Any]) -> DraftRecord:
        """Rebuild a record from its JSON form (``dataclasses.asdict``; cloud fields optional)."""
        return cls(**{**raw, "seed_reasons": tuple(raw["seed_reasons"])})


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def make_record(
    *,
    item_id: str,
    kind: str,
    context_type: str,
    signals: DraftSignals,
    correct: bool,
    decision: Decision,
    hedging_markers: Sequence[str],
) -> DraftRecord:
    """Summarise one judged draft; ``hedging`` uses the same markers as the seed policy."""
    entropies = [t.entropy for t in signals.tokens]
    return DraftRecord(
        id=item_id,
        kind=kind,
        context_type=context_type,
        draft=signals.text,
        correct=correct and not signals.truncated,
        judged_correct=correct,
        n_tokens=signals.n_tokens,
        finish_reason=signals.finish_reason,
        truncated=signals.truncated,
        mean_p=signals.mean_prob,
        min_p=signals.min_prob,
        mean_entropy=_mean(entropies),
        max_entropy=max(entropies) if entropies else None,
        mean_margin=_mean([token_margin(t) for t in signals.tokens]),
        chars=len(signals.text.strip()),
        hedging=hedged(signals.text, hedging_markers),
        seed_accept=decision.accept,
        seed_reasons=tuple(str(r) for r in decision.reasons),
        features=draft_features(signals, markers=hedging_markers, context_type=context_type),
    )


# ------------------------------------------------------------------------------- policies


def _doubt(confidence: float | None) -> float:
    """1 - confidence; a draft without tokens gives no confidence, so it is doubted most."""
    return 1.0 - (confidence if confidence is not None else 0.0)


@dataclass(frozen=True, slots=True)
class ScorePolicy:
    """A router that is one score per record: higher = send to the cloud."""

    name: str
    description: str
    score: Callable[[DraftRecord], float]


POLICIES: tuple[ScorePolicy, ...] = (
    ScorePolicy(
        "seed", "1 if decide() says verify, else 0", lambda r: 0.0 if r.seed_accept else 1.0
    ),
    ScorePolicy("mean_p", "1 - mean token p", lambda r: _doubt(r.mean_p)),
    ScorePolicy("min_p", "1 - min token p", lambda r: _doubt(r.min_p)),
    ScorePolicy(
        "entropy",
        "mean top-k entropy (nats)",
        lambda r: r.mean_entropy if r.mean_entropy is not None else math.inf,
    ),
    ScorePolicy("margin", "1 - mean top1-top2 margin", lambda r: _doubt(r.mean_margin)),
    # The seed's TOO_SHORT heuristic doubts short drafts, so shorter = more cloud.
    ScorePolicy("length", "-chars (shorter drafts doubted)", lambda r: -float(r.chars)),
)


CUT = 2.0  # a scored policy's score for a draft cut at the budget: above any probability


def scored_policy(scorer: Scorer) -> ScorePolicy:
    """The proxy's scored policy as the harness sees it: cut drafts always go to the cloud."""
    return ScorePolicy(
        scorer.name,
        f"P(wrong) from {len(scorer.features)} features (cut drafts: cloud)",
        lambda r: CUT if r.truncated else scorer.score(r.features),
    )


def policy_scores(
    records: Sequence[DraftRecord], scorers: Sequence[Scorer] = ()
) -> dict[str, list[float]]:
    """Every policy's scores, plus the oracle's (1 for a wrong draft) and random's (constant)."""
    policies = [*POLICIES, *map(scored_policy, scorers)]
    scores = {p.name: [p.score(r) for r in records] for p in policies}
    scores["oracle"] = [0.0 if r.correct else 1.0 for r in records]
    scores["random"] = [0.0] * len(records)
    return scores


def cloud_verdicts(records: Sequence[DraftRecord]) -> list[bool] | None:
    """The cloud's verdict per record, or None for a perfect cloud (no record carries one)."""
    if all(r.cloud_correct is None for r in records):
        return None
    return [r.cloud_correct is not False for r in records]


def policy_curves(
    records: Sequence[DraftRecord], scorers: Sequence[Scorer] = ()
) -> dict[str, Curve]:
    """Quality-vs-cloud-share curve of every policy, the oracle and random."""
    draft_ok = [r.correct for r in records]
    cloud_ok = cloud_verdicts(records)
    curves = {
        name: routing_curve(scores, draft_ok, cloud_ok)
        for name, scores in policy_scores(records, scorers).items()
        if name not in ("oracle", "random")
    }
    curves["oracle"] = oracle_curve(draft_ok, cloud_ok)
    curves["random"] = random_curve(draft_ok, cloud_ok)
    return curves


# --------------------------------------------------------------------------------- report


def _or_none(metric: Callable[[], float]) -> float | None:
    """A PGR-based metric, or None when PGR is undefined (the cloud does not beat the drafts)."""
    try:
        return metric()
    except ValueError:
        return None


def _policy_row(
    curve: Curve, scores: Sequence[float], wrong: Sequence[bool], seed_share: float
) -> dict[str, Any]:
    return {
        "auroc": auroc(scores, wrong),
        "apgr": _or_none(lambda: apgr(curve)),
        "cpt50": _or_none(lambda: cpt(curve, 0.5)),
        "cpt80": _or_none(lambda: cpt(curve, 0.8)),
        "quality_at_seed_share": curve.value_at(seed_share),
        "pgr_at_seed_share": _or_none(lambda: pgr_curve(curve).value_at(seed_share)),
        "curve": [list(point) for point in curve.points],
    }


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def operating_point(
    scorer: Scorer, records: Sequence[DraftRecord], threshold: float | None = None
) -> dict[str, float]:
    """Cloud share and quality of a scored policy at its threshold (default: the scorer's)."""
    limit = scorer.threshold if threshold is None else threshold
    scores = scored_policy(scorer).score
    cloud = [scores(r) > limit for r in records]
    cloud_ok = cloud_verdicts(records) or [True] * len(records)
    served_ok = [
        (c and ok) or (not c and r.correct)
        for c, ok, r in zip(cloud, cloud_ok, records, strict=True)
    ]
    return {"threshold": limit, "cloud_share": _share(cloud), "quality": _share(served_ok)}


def margin_over(curve: Curve, other: Curve, steps: int = 1000) -> float:
    """The smallest quality gap ``curve - other`` over cloud shares strictly inside (0, 1).

    Both ends are shared by every router (all local, all cloud), so they are left out.
    """
    return min(curve.value_at(i / steps) - other.value_at(i / steps) for i in range(1, steps))


PERFECT_CLOUD = "perfect: every item's reference answer, correct by construction"


def _cloud_summary(records: Sequence[DraftRecord], cloud: str) -> dict[str, Any]:
    """q_cloud and what the cloud was: perfect, or a real endpoint with its error count."""
    cloud_ok = cloud_verdicts(records)
    if cloud_ok is None:
        return {"q_cloud": 1.0, "cloud": PERFECT_CLOUD}
    return {
        "q_cloud": _share(cloud_ok),
        "cloud": f"{cloud}: its answers judged like the drafts, an error counted wrong",
        "cloud_errors": sum(r.cloud_error is not None for r in records),
    }


def evaluate(
    records: Sequence[DraftRecord], scorers: Sequence[Scorer] = (), *, cloud: str = "real cloud"
) -> dict[str, Any]:
    """The whole report as JSON-ready data: summary, per-policy metrics, per-kind accuracy.

    ``cloud`` names the endpoint when the records carry its verdicts (unused otherwise).
    """
    if not records:
        raise ValueError("need at least one record")
    wrong = [not r.correct for r in records]
    seed_share = _share([not r.seed_accept for r in records])
    scores = policy_scores(records, scorers)
    curves = policy_curves(records, scorers)
    descriptions = {p.name: p.description for p in [*POLICIES, *map(scored_policy, scorers)]}
    descriptions["oracle"] = "1 if the draft is wrong (knows the answer)"
    if cloud_verdicts(records) is not None:
        descriptions["oracle"] += "; curve: drafts the cloud fixes first"
    descriptions["random"] = "constant (expected random routing)"
    policies = {
        name: {"score": descriptions[name], **_policy_row(curve, scores[name], wrong, seed_share)}
        for name, curve in curves.items()
    }
    for scorer in scorers:
        row = policies[scorer.name]
        row["at_threshold"] = operating_point(scorer, records)
        row["margin_over_seed"] = margin_over(curves[scorer.name], curves["seed"])
    kinds = sorted({r.kind for r in records})
    by_kind = {
        kind: {
            "n": len(group),
            "accuracy": _share([r.correct for r in group]),
            "seed_verify_share": _share([not r.seed_accept for r in group]),
            "truncated_share": _share([r.truncated for r in group]),
        }
        for kind in kinds
        for group in [[r for r in records if r.kind == kind]]
    }
    accepted = [r.correct for r in records if r.seed_accept]
    reasons = Counter(reason for r in records for reason in r.seed_reasons)
    return {
        "n": len(records),
        "q_local": _share([r.correct for r in records]),
        **_cloud_summary(records, cloud),
        "seed": {
            "cloud_share": seed_share,
            "quality": curves["seed"].value_at(seed_share),
            "accuracy_of_accepted": _share(accepted) if accepted else None,
            "accepted": sum(r.seed_accept for r in records),
            "reasons": dict(reasons.most_common()),
        },
        "truncated_share": _share([r.truncated for r in records]),
        "judged_correct_share": _share([r.judged_correct for r in records]),
        "hedging_share": _share([r.hedging for r in records]),
        "policies": policies,
        "by_kind": by_kind,
    }


# ------------------------------------------------------------------------------- markdown


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def markdown(report: dict[str, Any]) -> str:
    """The report as markdown tables, in the order a reader needs them."""
    seed = report["seed"]
    cloud = (
        f"{report['cloud']}; {report['cloud_errors']} errors"
        if "cloud_errors" in report
        else "perfect cloud"
    )
    lines = [
        f"items: {report['n']}   q_local (draft accuracy): {_pct(report['q_local'])}   "
        f"q_cloud: {_pct(report['q_cloud'])} ({cloud})",
        f"seed router: sends {_pct(seed['cloud_share'])} to the cloud "
        f"({seed['accepted']} drafts accepted, {_pct(seed['accuracy_of_accepted'])} of them "
        f"correct); quality {_pct(seed['quality'])}",
        f"drafts cut at the budget (counted wrong): {_pct(report['truncated_share'])}; "
        f"judged correct before that rule: {_pct(report['judged_correct_share'])}; "
        f"with a hedging marker: {_pct(report['hedging_share'])}",
    ]
    for name, row in report["policies"].items():
        if point := row.get("at_threshold"):
            lines.append(
                f"{name} at its threshold {point['threshold']:.2f}: sends "
                f"{_pct(point['cloud_share'])} to the cloud, quality {_pct(point['quality'])}; "
                f"smallest quality margin over seed at any share: {row['margin_over_seed']:+.3f}"
            )
    if seed["cloud_share"] in (0.0, 1.0):
        lines.append(
            "note: the seed's operating point is an end of every curve (all local or all "
            "cloud), so PGR/quality @ seed share say nothing there"
        )
    lines += [
        "",
        "| policy | score (higher = cloud) | AUROC | APGR | CPT(50%) | CPT(80%) "
        "| PGR @ seed share | quality @ seed share |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in report["policies"].items():
        lines.append(
            f"| {name} | {row['score']} | {_fmt(row['auroc'])} | {_fmt(row['apgr'])} "
            f"| {_pct(row['cpt50'])} | {_pct(row['cpt80'])} "
            f"| {_fmt(row['pgr_at_seed_share'])} | {_pct(row['quality_at_seed_share'])} |"
        )
    lines += [
        "",
        "| kind | n | draft accuracy | seed verifies | truncated |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, row in report["by_kind"].items():
        lines.append(
            f"| {kind} | {row['n']} | {_pct(row['accuracy'])} "
            f"| {_pct(row['seed_verify_share'])} | {_pct(row['truncated_share'])} |"
        )
    lines += ["", "| seed spill reason | drafts |", "|---|---:|"]
    lines += [f"| {reason} | {count} |" for reason, count in seed["reasons"].items()]
    return "\n".join(lines)
