"""Circuit breaker, rate-limit budget and retry policy: pure, on a controlled clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.upstreams.breaker import BreakerState, CircuitBreaker
from app.upstreams.ratelimit import RateBudget
from app.upstreams.retry import retry_delay, upstream_wait


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_breaker_opens_after_n_failures_then_probes() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, cooldown_s=10, clock=clock)
    for _ in range(2):
        assert breaker.allow()
        breaker.failure()
    assert breaker.state is BreakerState.CLOSED
    breaker.failure()
    assert breaker.state is BreakerState.OPEN and not breaker.allow()
    assert breaker.retry_in() == 10
    clock.now = 10
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.allow() and not breaker.allow()  # one probe at a time
    breaker.failure()  # the probe failed: open again for a whole cool-down
    assert breaker.state is BreakerState.OPEN and breaker.retry_in() == 10
    clock.now = 20
    assert breaker.allow()
    breaker.success()
    assert breaker.state is BreakerState.CLOSED and breaker.status()["opened_total"] == 2


def test_success_resets_the_count() -> None:
    breaker = CircuitBreaker(failure_threshold=2, cooldown_s=1, clock=Clock())
    breaker.failure()
    breaker.success()
    breaker.failure()
    assert breaker.state is BreakerState.CLOSED


@given(st.lists(st.sampled_from(["ok", "fail", "tick"]), max_size=60))
def test_breaker_never_lets_calls_through_while_open(events: list[str]) -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, cooldown_s=5, clock=clock)
    for event in events:
        if event == "tick":
            clock.now += 1
            continue
        if breaker.state is BreakerState.OPEN:
            assert not breaker.allow()
            continue
        if breaker.allow():
            breaker.success() if event == "ok" else breaker.failure()


HEADERS = {
    "x-ratelimit-remaining-tokens-minute": "1500",
    "x-ratelimit-remaining-requests-day": "9000",
    "x-ratelimit-reset-tokens-minute": "30.5",
    "x-ratelimit-reset-requests-day": "40000",
    "x-ratelimit-limit-tokens-minute": "60000",
    "x-ratelimit-limit-requests-day": "14400",
}


def test_budget_low_until_the_window_resets() -> None:
    clock = Clock()
    budget = RateBudget(clock=clock)
    assert budget.low(2000, 10) is None  # nothing seen yet
    budget.update(HEADERS)
    assert budget.low(2000, 10) == "1500 tokens left this minute (need 0 + reserve 2000)"
    assert budget.low(1000, 10) is None
    assert budget.low(1000, 10, need_tokens=600) is not None
    clock.now = 31  # the token window rolled over
    assert budget.low(2000, 10) is None
    assert budget.status()["remaining_tokens_minute"] == 1500


def test_budget_ignores_bad_headers() -> None:
    budget = RateBudget(clock=Clock())
    budget.update({"x-ratelimit-remaining-tokens-minute": "lots"})
    assert budget.tokens is None and budget.seen_at is None


@pytest.mark.parametrize(
    ("status", "headers", "remaining", "expected"),
    [
        (400, {}, 10, None),  # the client's mistake: never retried
        (401, {}, 10, None),
        (429, {"retry-after": "1.5"}, 10, 1.5),
        (429, {"retry-after-ms": "250"}, 10, 0.25),
        (429, {"x-ratelimit-reset-tokens-minute": "1.25"}, 10, 1.25),
        (429, {"retry-after": "30"}, 60, None),  # longer than max_wait_s
        (503, {"retry-after": "1"}, 0.5, None),  # does not fit the time left
        (503, {"x-ratelimit-reset-tokens-minute": "1"}, 10, 0.125),  # reset headers: 429 only
        (500, {}, 10, 0.125),
        (None, {}, 10, 0.125),  # connection error
    ],
)
def test_retry_delay(status, headers, remaining, expected) -> None:
    def half(low: float, high: float) -> float:
        return (low + high) / 2

    assert retry_delay(0, status, headers, remaining, max_wait_s=2, jitter=half) == expected


def test_upstream_wait_prefers_milliseconds() -> None:
    assert upstream_wait({"retry-after-ms": "100", "retry-after": "5"}) == 0.1
