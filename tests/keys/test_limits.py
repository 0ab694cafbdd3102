"""The admission rules (``app.keys.limits``) and the limits over the in-memory counts
(``app.keys.admission`` with ``MemoryStore``), property-tested: no limit is ever exceeded
by admitted requests, every refusal says when to retry, a spent budget refuses or goes
local as the key says, and a key without limits is never counted."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import BudgetExceeded, KeyForbidden, ProxyError, RateLimited
from app.keys import ANONYMOUS, Caller, KeyPolicy
from app.keys.admission import Limits, kid_of
from app.keys.counters import MemoryStore
from app.keys.limits import Used, Windows, decide
from app.vocabulary import Strategy

# 2026-11-26 12:00:10 UTC: 50 s left in the minute, 12 h in the day, 4 days + 12 h in the month
NOON = datetime(2026, 11, 26, 12, 0, 10, tzinfo=UTC).timestamp()

policies = st.builds(
    KeyPolicy,
    budget_usd_day=st.none() | st.floats(0, 10),
    budget_usd_month=st.none() | st.floats(0, 100),
    rpm=st.none() | st.integers(1, 20),
    tpm=st.none() | st.integers(1, 5000),
    max_concurrent=st.none() | st.integers(1, 5),
    strategies=st.none() | st.frozensets(st.sampled_from(list(Strategy))),
    on_budget=st.sampled_from(["refuse", "local"]),
)
used = st.builds(
    Used,
    requests=st.integers(1, 40),
    tokens=st.integers(0, 10_000),
    in_flight=st.integers(1, 10),
    spent_day=st.floats(0, 20),
    spent_month=st.floats(0, 200),
)
moments = st.floats(0, 4e9)


@given(moments)
def test_every_window_ends_within_its_length(now: float) -> None:
    w = Windows.at(now)
    assert 0 < w.minute_left_s <= 60
    assert 0 < w.day_left_s <= 86400
    assert w.day_left_s <= w.month_left_s <= 31 * 86400
    assert w.day == datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")


def test_the_windows_of_a_known_moment() -> None:
    w = Windows.at(NOON)
    assert (w.day, w.month) == ("2026-11-26", "2026-11")
    assert w.minute_left_s == pytest.approx(50)
    assert w.day_left_s == pytest.approx(12 * 3600 - 10)
    assert w.month_left_s == pytest.approx(4 * 86400 + 12 * 3600 - 10)


@given(policies, st.sampled_from(list(Strategy)), used, st.integers(0, 2000), moments)
def test_a_verdict_keeps_every_limit(
    policy: KeyPolicy, strategy: Strategy, now_used: Used, estimate: int, now: float
) -> None:
    estimate = min(estimate, now_used.tokens)  # the totals include the request's estimate
    windows = Windows.at(now)
    verdict = decide(policy, strategy, now_used, estimate, windows)
    if policy.strategies is not None and strategy not in policy.strategies:
        assert not verdict.admit and verdict.code == "strategy_not_allowed"
        assert verdict.retry_after_s is None and strategy.value in verdict.message
        return
    spent = (policy.budget_usd_day is not None and now_used.spent_day >= policy.budget_usd_day) or (
        policy.budget_usd_month is not None and now_used.spent_month >= policy.budget_usd_month
    )
    if not verdict.admit:
        assert verdict.retry_after_s is not None and verdict.retry_after_s >= 1
        assert verdict.code in ("budget_exceeded", "rate_limit_exceeded")
    if verdict.code == "budget_exceeded":
        assert spent and policy.on_budget == "refuse"
        assert verdict.retry_after_s is not None
        assert verdict.retry_after_s <= windows.month_left_s + 1
    if verdict.code == "rate_limit_exceeded":
        assert verdict.retry_after_s is not None and verdict.retry_after_s <= 60
    if verdict.admit:
        assert verdict.local == spent  # served locally exactly when the budget is spent
        assert policy.rpm is None or now_used.requests <= policy.rpm
        assert policy.max_concurrent is None or now_used.in_flight <= policy.max_concurrent
        before = now_used.tokens - estimate
        assert policy.tpm is None or now_used.tokens <= policy.tpm or before <= 0
    elif spent and policy.on_budget == "local":
        assert verdict.code == "rate_limit_exceeded"  # only a rate limit refuses it


@given(policies)
def test_an_embeddings_call_to_a_cloud_model_is_refused_once_the_budget_is_spent(
    policy: KeyPolicy,
) -> None:
    spent = Used(1, 0, 1, spent_day=1e9, spent_month=1e9)
    verdict = decide(policy, None, spent, 0, Windows.at(NOON), local_possible=False)
    if policy.budget_usd_day is not None or policy.budget_usd_month is not None:
        assert not verdict.admit and verdict.code == "budget_exceeded"
        assert not verdict.local


def test_a_spent_days_budget_says_when_it_resets() -> None:
    policy = KeyPolicy(budget_usd_day=0.5)
    verdict = decide(policy, Strategy.SPECULATIVE, Used(spent_day=0.5), 0, Windows.at(NOON))
    assert verdict.code == "budget_exceeded"
    assert verdict.retry_after_s == 12 * 3600 - 10
    assert "day" in verdict.message and f"{12 * 3600 - 10} s" in verdict.message


def run(
    limits: Limits, who: Caller, n: int, *, strategy: Strategy = Strategy.SPECULATIVE
) -> list[str]:
    """``n`` requests admitted one after the other (none ends): each one's verdict."""

    async def go() -> list[str]:
        out = []
        for i in range(n):
            try:
                ticket = await limits.admit(who, strategy, "x" * 40, f"r{i}")
            except ProxyError as exc:
                out.append(exc.code or "")
            else:
                out.append("local" if ticket.local else "ok")
        return out

    return asyncio.run(go())


@given(st.integers(1, 15), st.integers(1, 40))
def test_a_minute_admits_rpm_requests_and_no_more(rpm: int, n: int) -> None:
    limits = Limits(MemoryStore(), clock=lambda: NOON)
    got = run(limits, Caller("k", "k", policy=KeyPolicy(rpm=rpm)), n)
    assert got.count("ok") == min(n, rpm)
    assert got == ["ok"] * min(n, rpm) + ["rate_limit_exceeded"] * max(0, n - rpm)


@given(st.integers(1, 5), st.integers(1, 12))
def test_requests_in_flight_are_capped_and_a_finished_one_frees_its_slot(cap: int, n: int) -> None:
    limits = Limits(MemoryStore(), clock=lambda: NOON)
    who = Caller("k", "k", policy=KeyPolicy(max_concurrent=cap))
    got = run(limits, who, n)
    assert got.count("ok") == min(n, cap)

    async def one_more() -> None:
        ticket = await limits.admit(who, Strategy.SPECULATIVE, None, "again")
        limits.release(ticket)

    if n >= cap:  # full: one released, one more fits
        with pytest.raises(RateLimited) as refused:
            asyncio.run(one_more())
        assert refused.value.headers == {"retry-after": "1"}
        hold = limits.holds.pop("r0")
        hold.store.release(hold)
    asyncio.run(one_more())


def test_the_next_minute_admits_again() -> None:
    now = [NOON]
    limits = Limits(MemoryStore(), clock=lambda: now[0])
    who = Caller("k", "k", policy=KeyPolicy(rpm=2))
    assert run(limits, who, 3) == ["ok", "ok", "rate_limit_exceeded"]
    now[0] += 50
    assert run(limits, who, 1) == ["ok"]


def test_a_budget_spent_refuses_or_serves_locally_as_the_key_says() -> None:
    limits = Limits(MemoryStore(), clock=lambda: NOON)
    refuse = Caller("a", "a", policy=KeyPolicy(budget_usd_day=0.01))
    local = Caller("b", "b", policy=KeyPolicy(budget_usd_month=0.01, on_budget="local"))
    assert run(limits, refuse, 1) == run(limits, local, 1) == ["ok"]
    limits.charge(refuse, 10, 0.02)
    limits.charge(local, 10, 0.02)
    with pytest.raises(BudgetExceeded) as refused:
        asyncio.run(limits.admit(refuse, Strategy.SPECULATIVE))
    assert refused.value.status == 429 and refused.value.code == "budget_exceeded"
    assert refused.value.headers["retry-after"] == str(12 * 3600 - 10)
    assert run(limits, local, 2) == ["local", "local"]
    assert limits.status()["served_locally"] == 2


def test_a_strategy_the_key_may_not_use_is_forbidden_and_not_counted() -> None:
    store = MemoryStore()
    limits = Limits(store, clock=lambda: NOON)
    who = Caller("k", "k", policy=KeyPolicy(rpm=1, strategies=frozenset({Strategy.LOCAL_ONLY})))
    with pytest.raises(KeyForbidden) as forbidden:
        asyncio.run(limits.admit(who, Strategy.CEREBRAS_ONLY))
    assert forbidden.value.status == 403 and forbidden.value.code == "strategy_not_allowed"
    assert "local_only" in forbidden.value.message
    assert store.minutes == {}  # refused before anything was counted
    assert run(limits, who, 1, strategy=Strategy.LOCAL_ONLY) == ["ok"]


def test_tokens_per_minute_count_the_prompt_then_the_answer() -> None:
    limits = Limits(MemoryStore(), clock=lambda: NOON)
    who = Caller("k", "k", policy=KeyPolicy(tpm=100))
    assert run(limits, who, 1) == ["ok"]  # ~11 tokens of prompt
    limits.charge(who, 95, 0.0)  # its answer
    assert run(limits, who, 1) == ["rate_limit_exceeded"]


def test_a_caller_without_limits_is_never_counted() -> None:
    store = MemoryStore()
    limits = Limits(store, clock=lambda: NOON)
    plain = Caller("key-abc", "key-abc")
    assert run(limits, ANONYMOUS, 3) == run(limits, plain, 3) == ["ok"] * 3
    limits.charge(plain, 100, 1.0)
    assert store.minutes == store.days == store.slots == {}


def test_a_keys_counts_are_named_by_a_hash_of_its_id() -> None:
    kid = kid_of(Caller("team-a", "team-a"))
    assert len(kid) == 32 and "team-a" not in kid
