"""Adaptive speculation depth (seed 001): a small pure state machine per context type.

Each context type (prose, code, math, json, list) has a lane holding its depth K and
a rolling window of (accepted, drafted) token counts. Every ``interval`` drafted
tokens the lane compares the window's acceptance rate with the target, as the
seed's ``compute_new_k`` does with ``target`` = 0.55:

    rate > target + 0.10  ->  K + step_large      rate < target - 0.20  ->  K - step_large
    rate > target         ->  K + step_small      rate < target - 0.10  ->  K - step_small

and K stays within [k_min, k_max]. The seed's context heuristics set each lane's
start and bounds: code starts higher (``start_offsets``), math lower, and JSON
keeps a tight ceiling (``ceilings``). The same machine drives two knobs with
different numbers (app.config.DepthConfig): llama-server's ``speculative.n_max``
and the proxy's own draft budget. No clock and no I/O here: the caller logs
the ``Adjustment`` it gets back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

HIGH_MARGIN = 0.10  # above target + this: a large step up
LOW_MARGIN = 0.10  # below target - this: a small step down
POOR_MARGIN = 0.20  # below target - this: a large step down


@dataclass(frozen=True, slots=True)
class DepthRule:
    """The numbers of one knob (seed 001's ``SpecConfig`` plus the context heuristics)."""

    k_min: int = 4
    k_max: int = 24
    k_start: int = 8
    target: float = 0.55
    interval: int = 64  # drafted tokens between adjustments
    window: int = 128  # drafted tokens in the rolling acceptance rate
    step_small: int = 2
    step_large: int = 4
    start_offsets: Mapping[str, int] = field(default_factory=dict)  # code: +8, math: -4
    ceilings: Mapping[str, int] = field(default_factory=dict)  # json: 6

    def __post_init__(self) -> None:
        if not 1 <= self.k_min <= self.k_max:
            raise ValueError(f"need 1 <= k_min <= k_max, got {self.k_min} and {self.k_max}")
        if not LOW_MARGIN < self.target < 1:
            raise ValueError(f"target must be in ({LOW_MARGIN}, 1), or K cannot move both ways")
        if min(self.interval, self.window, self.step_small, self.step_large) < 1:
            raise ValueError("interval, window and the steps must be at least 1")

    def bounds(self, context: str) -> tuple[int, int]:
        """A context's K range: the ceiling (if any) lowers k_max, never below k_min."""
        ceiling = self.ceilings.get(context, self.k_max)
        return self.k_min, max(self.k_min, min(self.k_max, ceiling))

    def start(self, context: str) -> int:
        low, high = self.bounds(context)
        return min(high, max(low, self.k_start + self.start_offsets.get(context, 0)))

    def step(self, k: int, rate: float, context: str) -> tuple[int, str]:
        """The seed's rule: the new K for a rolling acceptance ``rate``, and why."""
        low, high = self.bounds(context)
        if rate > self.target + HIGH_MARGIN:
            return min(k + self.step_large, high), "high acceptance"
        if rate > self.target:
            return min(k + self.step_small, high), "above target"
        if rate < self.target - POOR_MARGIN:
            return max(k - self.step_large, low), "poor acceptance"
        if rate < self.target - LOW_MARGIN:
            return max(k - self.step_small, low), "below target"
        return k, "on target"


@dataclass(frozen=True, slots=True)
class Adjustment:
    """One change of K, for the audit log (seed 001's ``log_adjustment``)."""

    context: str
    old: int
    new: int
    acceptance: float
    reason: str


@dataclass(slots=True)
class _Lane:
    k: int
    history: deque[tuple[int, int]] = field(default_factory=deque)  # (accepted, drafted)
    accepted: int = 0  # sums over history
    drafted: int = 0
    since_adjustment: int = 0  # drafted tokens


class DepthController:
    """K per context type, moved by the acceptance each lane observes."""

    def __init__(self, rule: DepthRule) -> None:
        self.rule = rule
        self._lanes: dict[str, _Lane] = {}

    def k(self, context: str) -> int:
        """The depth to use now for a request of this context type."""
        return self._lane(context).k

    def acceptance(self, context: str) -> float | None:
        """The lane's rolling acceptance rate, None before any draft token."""
        lane = self._lanes.get(context)
        return lane.accepted / lane.drafted if lane and lane.drafted else None

    def record(self, context: str, accepted: int, drafted: int) -> Adjustment | None:
        """Feed one observation; returns the adjustment when K changed."""
        if drafted <= 0:
            return None
        accepted = min(max(accepted, 0), drafted)
        lane = self._lane(context)
        lane.history.append((accepted, drafted))
        lane.accepted += accepted
        lane.drafted += drafted
        # Keep the newest observations that cover the window (at least one).
        while len(lane.history) > 1 and lane.drafted - lane.history[0][1] >= self.rule.window:
            old_accepted, old_drafted = lane.history.popleft()
            lane.accepted -= old_accepted
            lane.drafted -= old_drafted
        lane.since_adjustment += drafted
        if lane.since_adjustment < self.rule.interval:
            return None
        lane.since_adjustment = 0
        rate = lane.accepted / lane.drafted
        new, reason = self.rule.step(lane.k, rate, context)
        if new == lane.k:
            return None
        change = Adjustment(context, lane.k, new, rate, reason)
        lane.k = new
        return change

    def _lane(self, context: str) -> _Lane:
        lane = self._lanes.get(context)
        if lane is None:
            lane = self._lanes[context] = _Lane(self.rule.start(context))
        return lane
