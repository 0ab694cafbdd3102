"""The rules that fold other replicas' word into this one's state: pure, on set clocks."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.record import RequestRecord
from app.state.fleet import (
    MAX_SKEW_S,
    Clocks,
    adopt_budget,
    adopt_circuit,
    breaker_entry,
    budget_entry,
    fleet_view,
    mergeable,
    shared_stats,
)
from app.telemetry.stats import Stats
from app.upstreams.breaker import BreakerState, CircuitBreaker
from app.upstreams.ratelimit import RateBudget
from app.vocabulary import Outcome, Strategy


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# Replica A's monotonic clock reads 100 when the wall reads 1000; B's reads 5 then.
A = Clocks(wall=1000.0, mono=100.0)
B = Clocks(wall=1000.0, mono=5.0)


def test_a_circuit_opened_elsewhere_opens_here_until_the_same_wall_time() -> None:
    there = CircuitBreaker(1, cooldown_s=30, clock=Clock(100.0))
    there.failure()
    entry = breaker_entry(there, A)
    assert entry == {"open_until": 1030.0}
    clock = Clock(5.0)
    here = CircuitBreaker(5, cooldown_s=60, clock=clock)  # its own cool-down is not used
    assert adopt_circuit(here, [entry, {"open_until": None}], B)
    assert here.state is BreakerState.OPEN and not here.allow()
    assert here.retry_in() == 30.0
    assert here.opened_total == 0  # opened by the fleet: not this replica's own opening
    clock.now = 35.0
    assert here.state is BreakerState.HALF_OPEN and here.allow()  # then it probes itself


def test_a_closed_or_shorter_opening_elsewhere_changes_nothing() -> None:
    clock = Clock(5.0)
    here = CircuitBreaker(1, cooldown_s=60, clock=clock)
    assert not adopt_circuit(here, [{"open_until": None}, {}], B)
    assert not adopt_circuit(here, [{"open_until": 999.0}], B)  # already over
    assert here.state is BreakerState.CLOSED
    here.failure()  # open here for 60 s
    assert not adopt_circuit(here, [{"open_until": 1030.0}], B)
    assert here.retry_in() == 60.0
    clock.now = 25.0  # 20 s later: 40 s left here
    assert adopt_circuit(here, [{"open_until": 1050.0}, {"open_until": 1030.0}], B)
    assert here.retry_in() == 50.0  # the latest opening wins


def test_an_adopted_circuit_is_capped_by_the_local_cool_down_and_the_skew() -> None:
    here = CircuitBreaker(5, cooldown_s=60, clock=Clock(5.0))
    assert not adopt_circuit(here, [{"open_until": 1000.0 + 86400}], B)  # a day ahead
    assert not adopt_circuit(here, [{"open_until": 1000.0 + 60 + MAX_SKEW_S + 1}], B)
    assert here.state is BreakerState.CLOSED
    assert adopt_circuit(here, [{"open_until": 1000.0 + 60 + MAX_SKEW_S}], B)
    assert here.retry_in() == 60.0  # capped at the local cool-down
    assert "another replica" in here.why_open() and "failures" not in here.why_open()


@given(st.lists(st.floats(min_value=-100, max_value=100), max_size=5))
def test_after_adopting_a_replica_is_open_at_least_as_long_as_every_other(
    offsets: list[float],
) -> None:
    here = CircuitBreaker(3, cooldown_s=30, clock=Clock(5.0))
    adopt_circuit(here, [{"open_until": B.wall + o} for o in offsets], B)
    believed = [min(o, 30.0) for o in offsets if o <= 30 + MAX_SKEW_S]
    assert here.retry_in() >= max([0.0, *believed]) - 0.001  # within the rounding allowed
    assert here.retry_in() <= 30.0  # never past the local cool-down


def seen_budget(clock: Clock, remaining: str) -> RateBudget:
    budget = RateBudget(clock=clock)
    budget.update(
        {"x-ratelimit-remaining-tokens-minute": remaining, "x-ratelimit-reset-tokens-minute": "50"}
    )
    return budget


def test_the_newest_budget_numbers_win_across_replicas() -> None:
    older = budget_entry(seen_budget(Clock(90.0), "5000"), A)  # seen 10 s ago on A
    newer = budget_entry(seen_budget(Clock(98.0), "1234"), A)  # seen 2 s ago on A
    assert newer is not None and newer["seen_wall"] == 998.0
    here = RateBudget(clock=Clock(5.0))
    assert budget_entry(here, B) is None  # nothing seen yet: nothing to say
    assert adopt_budget(here, [older, newer], B)  # type: ignore[list-item]
    assert here.tokens == 1234 and here.tokens_reset_s == 50
    assert here.status()["seen_s_ago"] == 2.0  # the same moment, on B's clock
    # this replica's own numbers, newer still, are kept
    assert not adopt_budget(seen_budget(Clock(5.0), "777"), [newer], B)  # type: ignore[list-item]
    assert not adopt_budget(here, [], B)


def test_adopted_numbers_decide_like_ones_seen_here() -> None:
    clock = Clock(5.0)
    here = RateBudget(clock=clock)
    there = budget_entry(seen_budget(Clock(100.0), "100"), A)
    adopt_budget(here, [there], B)  # type: ignore[list-item]
    assert here.low(reserve_tokens=500, reserve_requests=0) is None  # a probe may go out
    here.sent()
    assert here.low(reserve_tokens=500, reserve_requests=0) is not None  # then: too little
    clock.now = 56.0  # the window of the numbers (50 s after A saw them) has rolled over
    assert here.low(reserve_tokens=500, reserve_requests=0) is None


def replica_stats(requests: int, outcome: Outcome) -> dict[str, object]:
    stats = Stats()
    for _ in range(requests):
        stats.record(RequestRecord(strategy=Strategy.SPECULATIVE, outcome=outcome, total_s=0.1))
    return shared_stats(stats.state())


def test_the_fleet_view_adds_up_every_replicas_requests() -> None:
    replicas = {
        "b-2": {"seen": 999.5, "stats": replica_stats(2, Outcome.SPILLED_OVER)},
        "a-1": {"seen": 1000.0, "stats": replica_stats(3, Outcome.ACCEPTED)},
    }
    view = fleet_view(replicas, me="a-1")
    assert view["requests"]["total"] == 5
    assert view["requests"]["by_outcome"] == {"accepted_without_verification": 3, "spilled_over": 2}
    assert view["replicas"] == [
        {"id": "a-1", "last_seen": 1000.0, "this": True},
        {"id": "b-2", "last_seen": 999.5, "this": False},
    ]
    assert view["warning"] is None
    assert all(not r["stats"]["latency"] for r in replicas.values())  # kept home


@pytest.mark.parametrize(
    "theirs",
    [
        b"not json",
        b'{"seen": 1.0}',  # no stats
        b'{"seen": 1.0, "stats": {"requests": "many"}}',  # another version's shape
        b'{"seen": "yesterday", "stats": null}',
    ],
)
def test_a_replica_whose_stats_do_not_merge_is_left_out_not_a_500(theirs: bytes) -> None:
    mine = {"seen": 1000.0, "stats": replica_stats(1, Outcome.ACCEPTED)}
    assert mergeable(theirs, mine) is None
    good = orjson.dumps({"seen": 999.0, "stats": replica_stats(2, Outcome.SPILLED_OVER)})
    assert mergeable(good, mine) is not None


def test_budget_numbers_from_the_future_are_not_believed() -> None:
    here = RateBudget(clock=Clock(5.0))
    spent = {"requests": 0.0, "requests_reset_s": 86400.0}
    assert not adopt_budget(here, [{**spent, "seen_wall": 1000.0 + 3600}], B)
    assert here.requests is None
    assert adopt_budget(here, [{**spent, "seen_wall": 1000.0 + MAX_SKEW_S}], B)
    assert here.status()["seen_s_ago"] == 0.0  # a little ahead: taken as seen now
