"""The quality target: the threshold that keeps locally served answers right often enough.

``speculative_decoding.target_agreement`` (say 0.95) is the share of answers served
locally that must agree with what the cloud would have said. A scorer gives each
labelled draft a P(wrong); serving every draft scored at or under a threshold ``t``
serves locally the labels under ``t``, whose weighted agreement is an estimate of the
served quality. ``threshold_for`` picks a ``t`` whose agreement holds the target with
the given confidence: a one-sided Wilson lower bound on the labels under ``t`` (weights,
from audits' inverse propensity, count as that many trials: the effective sample size is
``sum(w)**2 / sum(w**2)``). Fewer labels widen the bound, so the rule is cautious when
cold: with none it serves nothing locally (``threshold`` None).

**Tested in a fixed order, stopped at the first that fails.** Taking the highest of many
thresholds that pass is taking the luckiest: some prefix of 60 labels agrees by chance
more than the drafts it stands for, and a bound at 95% for each is much less than 95% for
the best of them (drafts that agree 78% of the time whatever their score, a target of
0.8: it held on 62 of 400 such label sets; ``tests/routing/test_target.py``). So the
candidates are fixed by the number of labels alone (``_candidates``): 6 labels, then each
1.4 times more, and the tenths up to every label (a tie group is served whole). A
candidate is tested for a target only once it has room for a few disagreements
(``MIN_RUN`` times the run of agreeing labels the bound needs at least: 103 labels for
0.95, 22 for 0.8); smaller ones are passed over, whatever the labels say. The candidates
are tested in order at ``confidence``, and the first that fails ends the search. A
sequence fixed before the labels are read holds the chosen threshold at about
``confidence`` with no correction (fixed-sequence testing, as in Learn then Test).

**A lower target never serves less.** Tested alone, a lower target starts at a smaller
candidate (it has room sooner) and may fail there where a stricter one, starting later,
goes on: on one simulated label set in ten, a lower target served fewer drafts
(``bench/target_rule.py``). So the search is also run from every later candidate, each at
the level of the targets that start there (the lowest target that passes over the
candidate before it, or ``target`` if higher), and the loosest result is taken: the most
any target at least as strict would serve. Each search holds its own level; their
loosest is not proven to hold ``confidence`` jointly, so it is "about": on the 78% label
sets above it held 0.8 on 6 of 400, and on simulated sets it served under the target no
more often than one search alone did (``bench/target_rule.py``, docs/target.md).

Pure: the learner calls it at every refit, ``specproxy calibrate`` on logged labels, the
gate for its ``local`` lane.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ["CANDIDATES", "MIN_RUN", "Bound", "lower_bound", "threshold_for"]

CANDIDATES = 10  # the tenths of the labels are candidates
SMALLEST, GROWTH = 6, 1.4  # and 6 labels, then each 1.4 times the one before
MIN_RUN = 2.0  # a candidate is tested once it is this many times the shortest run that passes


@dataclass(frozen=True, slots=True)
class Bound:
    """What the labels say at the chosen threshold.

    ``threshold``: serve locally when P(wrong) <= it (None: no threshold holds the target,
    serve nothing locally). ``estimate``: the weighted agreement of the labels it serves;
    ``lower``: its one-sided lower bound; ``served``: how many labels it serves; ``n``: all
    labels read.
    """

    target: float
    confidence: float
    threshold: float | None
    estimate: float | None
    lower: float | None
    served: int
    n: int

    def as_mapping(self) -> dict[str, float | int | None]:
        return {
            "target": self.target,
            "confidence": self.confidence,
            "threshold": _round(self.threshold),
            "estimate": _round(self.estimate),
            "lower_bound": _round(self.lower),
            "served_labels": self.served,
            "labels": self.n,
        }


def lower_bound(agreed: float, trials: float, confidence: float = 0.95) -> float:
    """The one-sided Wilson lower bound of a rate: ``agreed`` of ``trials`` (weighted)."""
    if trials <= 0:
        return 0.0
    z = NormalDist().inv_cdf(confidence)
    p = min(1.0, max(0.0, agreed / trials))
    centre = p + z * z / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return max(0.0, (centre - spread) / (1 + z * z / trials))


def threshold_for(
    scores: Sequence[float],
    agreed: Sequence[bool],
    target: float,
    *,
    weights: Sequence[float] | None = None,
    confidence: float = 0.95,
) -> Bound:
    """The loosest of the candidate thresholds, tested in order, whose served labels hold
    ``target``; never less than a stricter target's (module doc)."""
    if not 0.0 < target <= 1.0 or not 0.5 <= confidence < 1.0:
        raise ValueError("target in (0, 1], confidence in [0.5, 1)")
    if len(scores) != len(agreed) or (weights is not None and len(weights) != len(scores)):
        raise ValueError("one score, one label and one weight per draft")
    none = Bound(target, confidence, None, None, None, 0, len(scores))
    if target >= 1.0:
        return none  # no finite number of labels bounds an agreement of 1
    prefixes = _prefixes(scores, agreed, weights)
    cuts = _candidates(prefixes[-1].served if prefixes else 0)
    best = none
    for j, cut in enumerate(cuts):
        if target > _testable_up_to(cut, confidence):
            continue  # too few labels to hold the target even if every one agreed
        # where a stricter target would start: at its level, so a lower target never
        # serves less than a stricter one would
        level = max(target, _testable_up_to(cuts[j - 1], confidence)) if j else target
        found = _sequence(prefixes, cuts[j:], level, none)
        best = found if found.served > best.served else best
    return best


@dataclass(frozen=True, slots=True)
class _Prefix:
    """The labels at or under one score: a threshold's worth (tied labels together)."""

    threshold: float
    served: int
    total: float  # their weight
    good: float  # the weight of those that agree
    squares: float  # their squared weights (the effective sample size's)


def _prefixes(
    scores: Sequence[float], agreed: Sequence[bool], weights: Sequence[float] | None
) -> list[_Prefix]:
    """Every threshold between distinct scores, most confident first (a label with no
    finite score is served by none)."""
    w = list(weights) if weights is not None else [1.0] * len(scores)
    order = sorted((i for i, x in enumerate(scores) if math.isfinite(x)), key=lambda i: scores[i])
    out: list[_Prefix] = []
    total = good = squares = 0.0
    for rank, i in enumerate(order):
        total += w[i]
        good += w[i] if agreed[i] else 0.0
        squares += w[i] * w[i]
        if rank + 1 == len(order) or scores[order[rank + 1]] != scores[i]:
            out.append(_Prefix(scores[i], rank + 1, total, good, squares))
    return out


def _sequence(
    prefixes: Sequence[_Prefix], cuts: Sequence[int], level: float, nothing: Bound
) -> Bound:
    """The candidates ``cuts`` tested in order at ``level`` (each at the first threshold
    serving at least as many labels; one serving past several candidates is tested once),
    stopped at the first that fails: the last that passed, else ``nothing`` (no threshold)."""
    best, cuts = nothing, list(cuts)
    for p in prefixes:
        if not cuts:
            break
        if p.served < cuts[0]:
            continue
        cuts = [cut for cut in cuts if cut > p.served]
        effective = p.total * p.total / p.squares
        estimate = p.good / p.total
        low = lower_bound(estimate * effective, effective, nothing.confidence)
        if low < level:
            break  # the sequence stops at its first failure
        best = Bound(
            nothing.target, nothing.confidence, p.threshold, estimate, low, p.served, nothing.n
        )
    return best


def _candidates(n: int) -> list[int]:
    """How many labels each candidate serves: every ``GROWTH`` times more from ``SMALLEST``
    (so a target is tested close to where it first has room), and the tenths up to all
    ``n``. Fixed by ``n`` alone, never by the labels nor the target."""
    if n <= 0:
        return []
    tenth = math.ceil(n / CANDIDATES)
    cuts = {tenth + math.ceil(k * (n - tenth) / CANDIDATES) for k in range(CANDIDATES + 1)}
    size = SMALLEST
    while size < n:
        cuts.add(size)
        size = math.ceil(size * GROWTH)
    return sorted(cuts)


def _testable_up_to(cut: int, confidence: float) -> float:
    """The highest target a candidate of ``cut`` labels is tested for: one with room for a
    few disagreements, ``MIN_RUN`` times the shortest all-agreeing run that holds it."""
    z = NormalDist().inv_cdf(confidence)
    return cut / (cut + MIN_RUN * z * z)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
