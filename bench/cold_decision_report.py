"""The pure half of bench/cold_decision.py: judged drafts in, the cold decision's table out.

No I/O, no clock, no llama-server, so it is unit-tested on hand-made drafts.

**The cold decision** is what the shipped proxy does with a speculative request before it
has any label (no learner, no calibration): a draft cut at the budget goes to the cloud;
with ``early_abort`` the streamed draft is stopped, and goes to the cloud, at the first
token under ``abort_min_token_prob`` or when, every ``abort_check_tokens`` tokens, the
scorer's P(wrong) of the draft so far is above ``abort_min_score``
(``app.pipeline.drafting``); a whole draft goes to the cloud when its score is above the
policy's threshold (``app.routing.policy.decide``). The hedge of likely spills and the
first-token budget of streams are races against the clock, not decisions, and are left out.

**Compared on the uncut drafts** (the issue's framing, as bench/learning_eval.py): a cut
draft goes to the cloud under every policy, so the choice is only among the others. With
a perfect cloud, PGR at a decision is the share of the wrong drafts it sends to the cloud.
At the decision's cloud share ``s``:

* random routing recovers ``s`` of the gap (expected);
* mean token probability alone (the drafts with the lowest mean p go first) recovers the
  value of its PGR curve at ``s`` (ties split at random, in expectation);
* the decision passes when its PGR is at least both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.evaluation.metrics import auroc, pgr_curve, routing_curve
from app.routing.policy import Policy, decide, doomed_prefix
from app.routing.signals import DraftSignals

EPS = 1e-9  # PGRs equal up to float rounding count as equal


@dataclass(frozen=True, slots=True)
class Judged:
    """One item drafted: its signals, context type, and whether the draft is right (None:
    the set has no judge). A cut draft is never right: it cannot be served."""

    id: str
    context_type: str
    signals: DraftSignals
    correct: bool | None


@dataclass(frozen=True, slots=True)
class Abort:
    """The config's early-abort knobs (``speculative_decoding``)."""

    enabled: bool = True
    min_token_prob: float = 0.01
    check_tokens: int = 8
    min_score: float | None = 0.5


def aborted(signals: DraftSignals, policy: Policy, context: str, abort: Abort) -> bool:
    """Whether early abort would stop this draft as the pipeline reads its stream."""
    if not abort.enabled:
        return False
    if any(t.p < abort.min_token_prob for t in signals.tokens):
        return True
    if abort.min_score is None or policy.scorer is None:
        return False
    every = max(1, abort.check_tokens)
    for k in range(every, len(signals.tokens) + 1, every):
        tokens = signals.tokens[:k]
        prefix = DraftSignals("".join(t.text for t in tokens), k, signals.budget, None, tokens)
        if doomed_prefix(prefix, policy, context, abort.min_score) is not None:
            return True
    return False


def to_cloud(draft: Judged, policy: Policy, abort: Abort) -> bool:
    """The cold decision for one draft: True sends it to the cloud."""
    signals = draft.signals
    if signals.truncated or aborted(signals, policy, draft.context_type, abort):
        return True
    return not decide(signals, policy, draft.context_type).accept


def score(draft: Judged, policy: Policy) -> float:
    """The whole draft's P(wrong) under the policy's scorer (its ranking, for AUROC)."""
    if policy.scorer is None:
        return 0.0 if decide(draft.signals, policy, draft.context_type).accept else 1.0
    value, _ = policy.score(draft.signals, draft.context_type)
    return value


def mean_p_doubt(draft: Judged) -> float:
    """Mean token probability alone as a router: the least sure drafts go first."""
    mean = draft.signals.mean_prob
    return 1.0 - (mean if mean is not None else 0.0)


def _pgr_at(scores: Sequence[float], ok: Sequence[bool], share: float) -> float | None:
    try:
        return pgr_curve(routing_curve(scores, ok)).value_at(share)
    except ValueError:  # every draft right: no gap to recover
        return None


def _ge(a: float | None, b: float | None) -> bool | None:
    return None if a is None or b is None else a >= b - EPS


def evaluate(drafts: Sequence[Judged], policy: Policy, abort: Abort) -> dict[str, Any]:
    """The cold decision on one set against random and mean token p at the same share."""
    if not drafts:
        raise ValueError("need at least one draft")
    cloud = [to_cloud(d, policy, abort) for d in drafts]
    n = len(drafts)
    row: dict[str, Any] = {
        "items": n,
        "cut": sum(d.signals.truncated for d in drafts),
        "cloud_share_all": sum(cloud) / n,
    }
    uncut = [(d, c) for d, c in zip(drafts, cloud, strict=True) if not d.signals.truncated]
    row["uncut"] = len(uncut)
    row["aborted"] = sum(aborted(d.signals, policy, d.context_type, abort) for d, _ in uncut)
    judged = [(d, c) for d, c in uncut if d.correct is not None]
    row["judged"] = bool(judged) and len(judged) == len(uncut)
    if not uncut:
        return row
    share = sum(c for _, c in uncut) / len(uncut)
    row["share"] = share
    if not row["judged"]:
        return row  # no judge: the share is all there is to say
    ok = [bool(d.correct) for d, _ in judged]
    wrong = [not x for x in ok]
    shipped = [score(d, policy) for d, _ in judged]
    doubt = [mean_p_doubt(d) for d, _ in judged]
    caught = sum(c and w for (_, c), w in zip(judged, wrong, strict=True))
    pgr = caught / sum(wrong) if any(wrong) else None
    mean_p = _pgr_at(doubt, ok, share)
    row.update(
        q_local=sum(ok) / len(ok),
        quality=(sum(ok) + caught) / len(ok),
        pgr=pgr,
        auroc=auroc(shipped, wrong),
        random_pgr=share if pgr is not None else None,
        mean_p_pgr=mean_p,
        mean_p_auroc=auroc(doubt, wrong),
        beats_random=_ge(pgr, share if pgr is not None else None),
        beats_mean_p=_ge(pgr, mean_p),
    )
    return row


# ------------------------------------------------------------------------------ markdown


def _f(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _verdict(row: dict[str, Any]) -> str:
    flags = (row.get("beats_random"), row.get("beats_mean_p"))
    if None in flags:
        return "n/a (no judge)" if not row.get("judged") else "n/a"
    return "**pass**" if all(flags) else "FAIL"


def markdown(rows: dict[str, dict[str, Any]]) -> str:
    """One line per set: the decision's share and PGR, random's and mean token p's."""
    lines = [
        "| set | items (cut) | uncut right | cloud share (uncut) | aborted | PGR | AUROC "
        "| random PGR | mean p PGR | mean p AUROC | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in rows.items():
        right = "n/a" if "q_local" not in r else f"{_pct(r['q_local'])} of {r['uncut']}"
        lines.append(
            f"| {name} | {r['items']} ({r['cut']}) | {right} | {_pct(r.get('share'))} "
            f"| {r['aborted']} | {_f(r.get('pgr'))} | {_f(r.get('auroc'))} "
            f"| {_f(r.get('random_pgr'))} | {_f(r.get('mean_p_pgr'))} "
            f"| {_f(r.get('mean_p_auroc'))} | {_verdict(r)} |"
        )
    return "\n".join(lines)
