"""The gate before the draft: from the request alone, which lane it takes. Pure.

A request-only scorer (a ``Scorer`` reading only the request's shape and hashed n-grams,
``app.routing.request_features``; fitted by the learner from its labels,
``app.learning.gate_fit``) gives the request a P(wrong) of the draft it would get, before
any local work. Two thresholds chosen from the labels cut it into three lanes:

* ``local`` (P(wrong) at or under ``local_at``): the draft, with no hedge and no
  first-token budget; the cloud is called only when the judge doubts the draft, or as a
  sampled audit. ``local_at`` is ``app.routing.target.threshold_for`` on the labels'
  gate scores: the labels it serves agree with the cloud at least ``target_agreement``
  with about 95% confidence (one-sided), so fewer labels mean fewer local requests. That bound
  holds the target for the lane: while no threshold of the judge's own holds it, the
  lane's draft is doubted only when it cannot be served whatever its score
  (``judged_in``).
* ``cloud`` (P(wrong) at or above ``cloud_from``): no draft, no hedge, the cloud's
  answer (streamed live for streams): drafting would be wasted work. ``cloud_from`` is
  the lowest score of a disagreeing label whose labels at or above it agree so rarely
  that even the one-sided 95% upper bound of their agreement is under
  ``cloud_max_agreement`` (with at least ``MIN_CLOUD_LABELS`` of them).
* ``uncertain``: everything else, today's flow unchanged.

Cold-safe: no gate (learning off, fewer labels than the learner's ``min_labels``, or
none fitted yet) puts every request in ``uncertain``.

Exploring (``gate.explore``): a cloud-lane request makes no draft, so without more it
would never give a label, and a kind the gate once sent to the cloud would stay there
however good the local model became for it. So a share ``explore`` of them
(``explores``) has its draft made in the background and judged against the cloud's
answer it was served: a label only, weighing ``1 / explore`` (``explored_weight``: its
inverse propensity, as an audit's ``1 / audit_rate``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from app.routing.policy import Policy
from app.routing.request_features import RequestFeatures
from app.routing.scorer import Scorer
from app.routing.target import lower_bound, threshold_for

__all__ = [
    "MIN_CLOUD_LABELS",
    "Gate",
    "Lane",
    "cloud_threshold",
    "explored_weight",
    "explores",
    "fit_thresholds",
    "judged_in",
    "lane_of",
]

MIN_CLOUD_LABELS = 10  # labels at or above a cloud threshold before it is trusted


class Lane(StrEnum):
    """The way a speculative request takes, chosen before the draft."""

    CLOUD = "cloud"  # no draft: the cloud's answer
    LOCAL = "local"  # the draft, no hedge: the cloud only for a doubted draft or an audit
    UNCERTAIN = "uncertain"  # today's flow: the draft, judged, hedged for streams


@dataclass(frozen=True, slots=True)
class Gate:
    """A fitted gate: its request-only scorer and the lanes' thresholds (None: no
    request takes that lane)."""

    scorer: Scorer
    local_at: float | None = None
    cloud_from: float | None = None
    labels: int = 0  # labels it was fitted on
    target: float | None = None  # the target_agreement its local lane holds (None: unknown)

    def __post_init__(self) -> None:
        if any(f.startswith("req_") is False for f in self.scorer.features):
            raise ValueError("a gate's scorer reads the request only (req_* features)")
        if (
            self.local_at is not None
            and self.cloud_from is not None
            and self.cloud_from <= self.local_at
        ):
            raise ValueError("the cloud lane starts above the local one")

    def score(self, request: RequestFeatures) -> float:
        """The request's P(wrong) of its draft."""
        return self.scorer.score(request.shape, request.ngrams)

    def lane(self, p_wrong: float) -> Lane:
        """The lane of a request with this P(wrong)."""
        if self.local_at is not None and p_wrong <= self.local_at:
            return Lane.LOCAL
        if self.cloud_from is not None and p_wrong >= self.cloud_from:
            return Lane.CLOUD
        return Lane.UNCERTAIN

    def as_mapping(self) -> dict[str, Any]:
        return {
            "scorer": self.scorer.as_mapping(),
            "local_at": self.local_at,
            "cloud_from": self.cloud_from,
            "labels": self.labels,
            "target": self.target,
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Gate:
        """A gate from its JSON form; ValueError when it is not one."""
        try:
            local_at, cloud_from = data.get("local_at"), data.get("cloud_from")
            target = data.get("target")
            return cls(
                Scorer.from_mapping(data["scorer"]),
                None if local_at is None else float(local_at),
                None if cloud_from is None else float(cloud_from),
                int(data.get("labels", 0)),
                None if target is None else float(target),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a gate: {exc}") from exc


def lane_of(gate: Gate | None, request: RequestFeatures | None) -> tuple[Lane, float | None]:
    """The request's lane and its P(wrong); ``uncertain`` (no score) without a gate."""
    if gate is None or request is None:
        return Lane.UNCERTAIN, None
    p_wrong = gate.score(request)
    return gate.lane(p_wrong), p_wrong


def judged_in(lane: Lane, policy: Policy) -> Policy:
    """The policy a draft of ``lane`` is judged by. The gate's ``local_at`` holds the quality
    target for its lane (the labels under it, scored out of fold, agree at least
    ``target_agreement`` with about 95% confidence: ``app.routing.target``): so in the local
    lane, while no threshold of the judge's own holds the target (a negative one: every
    draft would be verified), the lane's bound stands in and the judge accepts any score; a
    draft cut at the budget, stopped early or empty is still doubted (``decide``), a broken
    contract still refused. A threshold of the judge's, when one holds, still doubts the
    drafts that score above it (so the lane serves a little less from then on)."""
    if lane is Lane.LOCAL and policy.scorer is not None and policy.threshold < 0:
        return replace(policy, threshold=1.0)  # P(wrong) is never above 1
    return policy


def explores(lane: Lane, share: float, draw: float) -> bool:
    """Whether this request's draft is made in the background for a label: a cloud-lane
    request whose ``draw`` (uniform in [0, 1)) falls under the ``explore`` share."""
    return lane is Lane.CLOUD and draw < share


def explored_weight(share: float) -> float:
    """An explored label's weight: ``1 / share``, the inverse of the chance a cloud-lane
    request had of being explored, so the cloud lane counts in the labels as it does in
    the traffic (the labels of the other lanes are taken at rate 1, audits aside)."""
    if not 0 < share <= 1:
        raise ValueError("a share of cloud-lane requests is in (0, 1]")
    return 1.0 / share


def cloud_threshold(
    scores: Sequence[float],
    agreed: Sequence[bool],
    max_agreement: float,
    *,
    weights: Sequence[float] | None = None,
    confidence: float = 0.95,
    min_labels: int = MIN_CLOUD_LABELS,
    above: float | None = None,
) -> float | None:
    """The lowest score ``t`` whose labels agree so rarely that the one-sided upper bound
    of their (weighted) agreement is under ``max_agreement``: both all the labels at or
    above ``t`` (at least ``min_labels``) and the ``2 * min_labels`` nearest above it, so
    a wrong-heavy top cannot carry a middling band into the cloud lane. Only the scores of
    disagreeing labels over ``above`` (the local lane's threshold) are candidates: the
    lane starts at a draft that was wrong, so a request scored in a gap no label is in
    (under every wrong one, over every right one) stays uncertain rather than going to the
    cloud on no evidence. None: no score."""
    if len(scores) != len(agreed) or (weights is not None and len(weights) != len(scores)):
        raise ValueError("one score, one label and one weight per draft")
    w = list(weights) if weights is not None else [1.0] * len(scores)
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    # running sums, highest score first: weight, disagreeing weight, squared weight
    sums = [(0.0, 0.0, 0.0)]
    for i in order:
        total, wrong, squares = sums[-1]
        sums.append((total + w[i], wrong + (0.0 if agreed[i] else w[i]), squares + w[i] * w[i]))
    wrong_at = {s for s, a in zip(scores, agreed, strict=True) if not a}
    best = None
    for rank, i in enumerate(order):
        if rank + 1 < len(order) and scores[order[rank + 1]] == scores[i]:
            continue  # tied labels go to the cloud together
        if rank + 1 < min_labels or (above is not None and scores[i] <= above):
            continue
        if scores[i] not in wrong_at:
            continue
        band = max(0, rank + 1 - 2 * min_labels)
        if _upper(sums[rank + 1], confidence) < max_agreement and (
            _upper(_minus(sums[rank + 1], sums[band]), confidence) < max_agreement
        ):
            best = scores[i]
    return best


def _minus(a: tuple[float, float, float], b: tuple[float, float, float]) -> tuple[float, ...]:
    return tuple(x - y for x, y in zip(a, b, strict=True))


def _upper(sums: tuple[float, ...], confidence: float) -> float:
    """The one-sided upper bound of agreement: one minus the lower bound of disagreement
    (weights count as their effective number of trials)."""
    total, wrong, squares = sums
    if total <= 0 or squares <= 0:
        return 1.0
    effective = total * total / squares
    return 1.0 - lower_bound(wrong / total * effective, effective, confidence)


def fit_thresholds(
    scores: Sequence[float],
    agreed: Sequence[bool],
    *,
    target: float,
    cloud_max_agreement: float,
    weights: Sequence[float] | None = None,
) -> tuple[float | None, float | None]:
    """The local lane's threshold (``threshold_for`` at ``target``) and the cloud lane's
    (``cloud_threshold`` over the scores above it)."""
    local_at = threshold_for(scores, agreed, target, weights=weights).threshold
    cloud_from = cloud_threshold(
        scores, agreed, cloud_max_agreement, weights=weights, above=local_at
    )
    return local_at, cloud_from
