"""Routing-quality metrics after RouteLLM (Ong et al., 2024): curves, PGR, APGR, CPT, AUROC.

Inputs, per request: a router score (higher = more likely to need the cloud), whether the
local draft was correct, and whether the cloud answer is correct (a "perfect cloud", always
correct, when not given).

Definitions and choices:

* Routing: a threshold ``t`` sends every request with ``score > t`` to the cloud. Requests
  with equal scores therefore always move together; sweeping ``t`` gives one curve point
  per distinct score (plus the all-local origin), not one per request.
* Quality ``q`` at a threshold is the mean correctness of the served answers (the cloud's
  for requests sent there, the draft's otherwise). ``q_local`` (nothing sent) is the first
  point of every curve, ``q_cloud`` (everything sent) the last.
* Between points curves are linear: a router reaches any share between two adjacent
  thresholds by sending the straddling tie group to the cloud at random, and the expected
  quality of that mix lies on the segment.
* PGR = (q - q_local) / (q_cloud - q_local). It is only defined when the cloud beats the
  local model on the data (q_cloud > q_local); otherwise there is no gap to recover and
  :func:`pgr_curve`, :func:`apgr` and :func:`cpt` raise ``ValueError`` (a negative gap would
  also turn "better router" into "lower PGR", so it is refused rather than computed).
* APGR is the exact area under the piecewise-linear PGR curve over cloud share [0, 1]
  (trapezoids between points, endpoints (0, 0) and (1, 1) included). RouteLLM sums PGR
  over a discretised grid of thresholds; the exact area does not depend on a grid. A
  constant score (the random router's expected curve) gives exactly 0.5.
* CPT(x) is the smallest cloud share at which the interpolated PGR curve reaches x.
* Scores may be +/-inf but never NaN (a NaN has no place in the order: ``ValueError``).

Standard library only: numpy is not a runtime dependency of the proxy.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby, pairwise


@dataclass(frozen=True)
class Curve:
    """Piecewise-linear curve of (cloud_share, value) points, shares strictly rising 0 to 1.

    ``value`` is quality for curves from :func:`routing_curve` and friends, PGR for
    :func:`pgr_curve`. Validated on construction so the metrics can rely on the endpoints.
    """

    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if len(self.points) < 2:
            raise ValueError("a curve needs at least two points")
        shares = [share for share, _ in self.points]
        if shares[0] != 0.0 or shares[-1] != 1.0:
            raise ValueError("a curve must run from cloud share 0 to cloud share 1")
        if any(b <= a for a, b in pairwise(shares)):
            raise ValueError("cloud shares must be strictly increasing")
        if any(math.isnan(value) for _, value in self.points):
            raise ValueError("curve values must not be NaN")

    @property
    def start(self) -> float:
        """Value with nothing sent to the cloud (q_local for a quality curve)."""
        return self.points[0][1]

    @property
    def end(self) -> float:
        """Value with everything sent to the cloud (q_cloud for a quality curve)."""
        return self.points[-1][1]

    def value_at(self, share: float) -> float:
        """The linearly interpolated value at a cloud share, e.g. quality at 30% cloud."""
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"cloud share must be in [0, 1], got {share}")
        shares = [s for s, _ in self.points]
        i = bisect.bisect_left(shares, share)
        if shares[i] == share:  # exact hit: no interpolation rounding
            return self.points[i][1]
        (c0, v0), (c1, v1) = self.points[i - 1], self.points[i]
        return v0 + (share - c0) / (c1 - c0) * (v1 - v0)


def _check_scores(scores: Sequence[float]) -> None:
    """Refuse NaN: it compares false with everything, so it would silently break the order."""
    if any(math.isnan(s) for s in scores):
        raise ValueError("scores must not be NaN")


def _served_inputs(
    scores: Sequence[float], draft_ok: Sequence[bool], cloud_ok: Sequence[bool] | None
) -> list[bool]:
    """Validate one request per position and return cloud_ok (a perfect cloud by default)."""
    n = len(scores)
    if n == 0:
        raise ValueError("need at least one request")
    cloud = [True] * n if cloud_ok is None else list(cloud_ok)
    if len(draft_ok) != n or len(cloud) != n:
        raise ValueError("scores, draft_ok and cloud_ok must have the same length")
    _check_scores(scores)
    return cloud


def routing_curve(
    scores: Sequence[float], draft_ok: Sequence[bool], cloud_ok: Sequence[bool] | None = None
) -> Curve:
    """(cloud share, quality) for every threshold: tie groups of scores move to the cloud whole.

    The first point is (0, q_local), the last (1, q_cloud); one point per distinct score
    in between, because no threshold can split requests with equal scores.
    """
    cloud = _served_inputs(scores, draft_ok, cloud_ok)
    n = len(scores)
    correct = sum(bool(ok) for ok in draft_ok)
    points = [(0.0, correct / n)]
    sent = 0
    order = sorted(range(n), key=lambda i: scores[i], reverse=True)
    for _, group in groupby(order, key=lambda i: scores[i]):
        for i in group:
            sent += 1
            correct += int(bool(cloud[i])) - int(bool(draft_ok[i]))
        points.append((sent / n, correct / n))
    return Curve(tuple(points))


def oracle_curve(draft_ok: Sequence[bool], cloud_ok: Sequence[bool] | None = None) -> Curve:
    """The best possible router: first the drafts the cloud fixes, last those it would break.

    Its score is the gain of sending a request (cloud_ok - draft_ok, in {-1, 0, 1}); the
    resulting curve is concave and lies on or above every router's curve.
    """
    cloud = [True] * len(draft_ok) if cloud_ok is None else cloud_ok
    gains = [float(int(bool(c)) - int(bool(d))) for d, c in zip(draft_ok, cloud, strict=True)]
    return routing_curve(gains, draft_ok, cloud)


def random_curve(draft_ok: Sequence[bool], cloud_ok: Sequence[bool] | None = None) -> Curve:
    """The random router's expected curve: the straight line from (0, q_local) to (1, q_cloud).

    A constant score puts every request in one tie group, which is exactly that line.
    """
    return routing_curve([0.0] * len(draft_ok), draft_ok, cloud_ok)


def pgr_curve(curve: Curve) -> Curve:
    """Turn a quality curve into (cloud share, PGR), from (0, 0) to (1, 1).

    q_local and q_cloud are the curve's own endpoints. Raises ValueError unless
    q_cloud > q_local: without a gap there is no performance to recover.
    """
    q_local, q_cloud = curve.start, curve.end
    gap = q_cloud - q_local
    if not gap > 0.0:
        raise ValueError(f"PGR undefined: q_cloud ({q_cloud}) must exceed q_local ({q_local})")
    return Curve(tuple((share, (q - q_local) / gap) for share, q in curve.points))


def apgr(curve: Curve) -> float:
    """Exact area under the PGR curve over cloud share [0, 1]; 0.5 for a random router.

    Trapezoids between consecutive points are exact for a piecewise-linear curve, unlike
    RouteLLM's sum over a fixed grid of thresholds.
    """
    points = pgr_curve(curve).points
    return math.fsum((c1 - c0) * (v0 + v1) / 2.0 for (c0, v0), (c1, v1) in pairwise(points))


def cpt(curve: Curve, target: float) -> float:
    """Call-performance threshold: the least cloud share at which PGR reaches target.

    ``target`` is a fraction in [0, 1] (0.5 for CPT(50%)); always reachable because PGR
    is 1 at share 1. Within the segment that first reaches it the share is interpolated
    (achievable by randomising the straddling tie group), so CPT can fall between points.
    """
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"target must be in [0, 1], got {target}")
    points = pgr_curve(curve).points
    if points[0][1] >= target:
        return 0.0
    for (c0, v0), (c1, v1) in pairwise(points):
        if v1 >= target:  # v0 < target here, so v1 > v0
            return c0 + (target - v0) / (v1 - v0) * (c1 - c0)
    raise AssertionError("unreachable: the PGR curve ends at 1")  # pragma: no cover


def auroc(scores: Sequence[float], wrong: Sequence[bool]) -> float | None:
    """How well a score ranks wrong drafts above right ones: P(s_wrong > s_right), ties half.

    The Mann-Whitney U statistic over all (wrong, right) pairs, counted per tie group in
    integer arithmetic. None when only one class is present (no pairs to compare).
    """
    if len(scores) != len(wrong):
        raise ValueError("scores and wrong must have the same length")
    _check_scores(scores)
    n_pos = sum(bool(w) for w in wrong)
    n_neg = len(wrong) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    twice_u = 0  # doubled so that half-counted ties stay integral
    neg_below = 0
    ranked = sorted(zip(scores, (bool(w) for w in wrong), strict=True))
    for _, group in groupby(ranked, key=lambda pair: pair[0]):
        flags = [w for _, w in group]
        pos = sum(flags)
        neg = len(flags) - pos
        twice_u += pos * (2 * neg_below + neg)
        neg_below += neg
    return twice_u / (2 * n_pos * n_neg)


def cloud_share_at(scores: Sequence[float], threshold: float) -> float:
    """The share of requests a threshold sends to the cloud (those with score > threshold)."""
    if not scores:
        raise ValueError("need at least one score")
    _check_scores(scores)
    return sum(s > threshold for s in scores) / len(scores)


def threshold_for_cloud_share(scores: Sequence[float], share: float) -> float:
    """The threshold sending the largest achievable share <= ``share`` to the cloud.

    The basis of calibrating a target cloud rate, like RouteLLM's calibrate_threshold (the
    (1 - share) quantile of the scores). Treats the share as a budget: a tie group that
    would push past it stays local whole, so the achieved share falls short by less than
    that group's size. The result is the highest score kept local (requests go to the cloud
    when score > threshold); -inf when everything fits, in which case requests scored -inf
    still stay local.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"cloud share must be in [0, 1], got {share}")
    if not scores:
        raise ValueError("need at least one score")
    _check_scores(scores)
    allowed = math.floor(share * len(scores) + 1e-9)  # 0.3 * 10 must allow 3 requests
    sent = 0
    for value, group in groupby(sorted(scores, reverse=True)):
        size = sum(1 for _ in group)
        if sent + size > allowed:
            return value
        sent += size
    return -math.inf


def wilson(successes: int, n: int, z: float = 1.96) -> list[float] | None:
    """The Wilson score interval of a rate (95% by default); None with no trials."""
    if n == 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]
