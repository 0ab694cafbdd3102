"""Circuit breaker, rate-limit budget and retry policy: pure, on a controlled clock; then
the resilience layer carrying them out around a fake transport (no sockets, no parsing)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import ModelConfig
from app.errors import (
    UpstreamBusy,
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamTransportError,
    UpstreamUnavailable,
)
from app.upstreams.breaker import BreakerState, CircuitBreaker
from app.upstreams.deadlines import Deadline
from app.upstreams.ratelimit import RateBudget
from app.upstreams.resilience import Resilience
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
    budget.sent()
    budget.update(HEADERS)
    assert budget.low(2000, 10) == "1500 tokens left this minute (need 0 + reserve 2000)"
    assert budget.low(1000, 10) is None
    assert budget.low(1000, 10, need_tokens=600) is not None
    clock.now = 31  # the token window rolled over
    assert budget.low(2000, 10) is None
    assert budget.status()["remaining_tokens_minute"] == 1500


def test_budget_lets_one_probe_through_while_low() -> None:
    clock = Clock()
    budget = RateBudget(clock=clock, probe_every_s=30)
    budget.sent()
    budget.update(HEADERS)
    assert budget.low(2000, 10) is not None
    assert budget.status()["next_probe_s"] == 30
    clock.now = 29.9
    assert budget.low(2000, 10) is not None
    clock.now = 30  # still within the token window (30.5 s), but a probe is due
    assert budget.low(2000, 10) is None
    budget.sent()  # the probe went out: the next one in 30 s
    assert budget.low(2000, 10) is not None


@pytest.mark.parametrize(
    "headers",
    [
        {"x-ratelimit-remaining-requests-day": "0"},  # no reset header at all
        {"x-ratelimit-remaining-requests-day": "0", "x-ratelimit-reset-requests-day": "nan"},
        {"x-ratelimit-remaining-requests-day": "0", "x-ratelimit-reset-requests-day": "inf"},
        {"x-ratelimit-remaining-tokens-minute": "-5"},
        {"x-ratelimit-remaining-tokens-minute": "-5", "x-ratelimit-reset-tokens-minute": "-1"},
    ],
)
def test_numbers_without_a_usable_reset_go_stale(headers: dict[str, str]) -> None:
    clock = Clock()
    budget = RateBudget(clock=clock, probe_every_s=1000, stale_s=60)
    budget.sent()
    budget.update(headers)
    assert budget.low(2000, 10) is not None
    clock.now = 60
    assert budget.low(2000, 10) is None


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


# -- the layer around a fake transport ----------------------------------------


@dataclass
class FakeResponse:
    """What the resilience layer reads of an answer: status, headers, an error body."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    released: bool = False

    async def error_body(self) -> bytes:
        self.released = True
        return self.body


class FakeTransport:
    """Answers each post with the next scripted response, or raises the scripted error."""

    def __init__(self, *outcomes: FakeResponse | UpstreamError) -> None:
        self.outcomes = deque(outcomes)
        self.posts = 0

    async def post(
        self,
        url: str,
        content: bytes,
        headers: Mapping[str, str],
        deadline: Deadline | None = None,
        *,
        streamed: bool = True,
    ) -> FakeResponse:
        self.posts += 1
        outcome = self.outcomes.popleft()
        if isinstance(outcome, UpstreamError):
            raise outcome
        return outcome


def layer(transport: FakeTransport, max_retries: int = 0, **config: Any) -> Resilience:
    model = ModelConfig(provider="openai", model="m", base_url="http://unused", **config)
    return Resilience("up", model, transport, max_retries=max_retries)  # type: ignore[arg-type]


def send(resilience: Resilience) -> Any:
    async def call() -> Any:
        async with resilience.call() as deadline:
            return await resilience.send("http://unused/v1/chat/completions", b"{}", {}, deadline)

    return asyncio.run(call())


def test_retries_what_the_upstream_asks_then_returns_the_answer() -> None:
    busy = FakeResponse(503, {"retry-after": "0"}, b'{"message": "overloaded"}')
    ok = FakeResponse(200, {"x-ratelimit-remaining-tokens-minute": "900"})
    resilience = layer(FakeTransport(busy, ok), max_retries=1)
    assert send(resilience) is ok
    assert busy.released and not ok.released  # the 2xx body is left for the caller to read
    assert resilience.breaker.status()["consecutive_failures"] == 0
    assert resilience.budget.tokens == 900


def test_last_failure_is_raised_when_retries_run_out() -> None:
    transport = FakeTransport(FakeResponse(500, body=b'{"error": {"message": "boom"}}'))
    resilience = layer(transport, max_retries=0)
    with pytest.raises(UpstreamRejected, match=r"up: HTTP 500: boom") as caught:
        send(resilience)
    assert caught.value.kind == "500" and transport.posts == 1
    assert resilience.breaker.status()["consecutive_failures"] == 1


def test_client_errors_are_not_retried_and_do_not_count_against_the_upstream() -> None:
    transport = FakeTransport(FakeResponse(400))
    resilience = layer(transport, max_retries=3)
    with pytest.raises(UpstreamRejected):
        send(resilience)
    assert transport.posts == 1 and resilience.breaker.state is BreakerState.CLOSED


def test_transport_errors_pass_through_unchanged() -> None:
    dropped = UpstreamTransportError("up", "connection dropped before a response (X)")
    with pytest.raises(UpstreamTransportError) as caught:
        send(layer(FakeTransport(dropped)))
    assert caught.value is dropped


def test_open_circuit_refuses_without_calling_the_transport() -> None:
    transport = FakeTransport(FakeResponse(502))
    resilience = layer(transport, circuit_breaker={"failures": 1, "cooldown_s": 60})
    with pytest.raises(UpstreamRejected):
        send(resilience)
    with pytest.raises(UpstreamUnavailable, match="circuit open after 1 consecutive failures"):
        send(resilience)
    assert transport.posts == 1


def test_full_slots_queue_then_refuse_with_retry_after() -> None:
    resilience = layer(FakeTransport(), concurrency={"max_in_flight": 1, "queue_timeout_s": 0})

    async def scenario() -> None:
        async with resilience.call():
            with pytest.raises(UpstreamBusy) as caught:
                async with resilience.call():
                    pass
        assert caught.value.headers == {"retry-after": "1"}
        assert "1 requests in flight; no slot freed within 0 s" in caught.value.message
        async with resilience.call():  # freed again
            pass

    asyncio.run(scenario())
    assert resilience.queued == 0


def test_a_waiting_call_is_counted_as_queued_until_it_gets_the_slot() -> None:
    resilience = layer(FakeTransport(), concurrency={"max_in_flight": 1, "queue_timeout_s": 30})

    async def scenario() -> list[int]:
        seen = []
        got_it = asyncio.Event()

        async def second() -> None:
            async with resilience.call():
                got_it.set()

        async with resilience.call():
            waiting = asyncio.create_task(second())
            while resilience.queued == 0:
                await asyncio.sleep(0)
            seen.append(resilience.queued)
        await got_it.wait()
        await waiting
        seen.append(resilience.queued)
        return seen

    assert asyncio.run(scenario()) == [1, 0]


def test_deadline_bounds_the_wait_for_an_answer() -> None:
    resilience = layer(FakeTransport(), timeout={"total": 0.05})

    async def scenario() -> None:
        async with resilience.call() as deadline, deadline:
            await asyncio.Event().wait()  # an answer that never comes

    with pytest.raises(UpstreamTimeout, match=r"up: no answer within 0\.05 s"):
        asyncio.run(scenario())
