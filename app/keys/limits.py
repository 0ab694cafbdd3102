"""Whether a key's request may start, and how: its policy against what it has used. Pure.

A request of a caller with a policy (``app.keys.KeyPolicy``) is admitted in this order
(docs/teams.md, "Budgets and limits"):

1. ``strategies``: a strategy the key may not use is refused (403).
2. the cloud budget (USD per UTC day and month): spent, ``on_budget: refuse`` refuses it
   (429 ``budget_exceeded``, retry after the window's end); ``local`` serves it from the
   local model alone (``Verdict.local``).
3. ``max_concurrent``, ``rpm``, ``tpm``: over, 429 ``rate_limit_exceeded`` with the seconds
   until a slot or the minute's window frees up.

The counters (``app.keys.counters``) count the request first (its request, its prompt's
estimated tokens, its slot) and hand back the totals with it counted, so concurrent
requests each see a different total and no more than the limit are admitted; a refused
request's counts are taken back. Windows are fixed: the epoch minute, the UTC day and
month.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from app.keys import KeyPolicy
from app.vocabulary import Strategy

BUDGET_LOCAL = "budget_local"  # the reason a request was served locally
EXHAUSTED = {"X-Budget": "exhausted", "X-Budget-Reason": BUDGET_LOCAL}


@dataclass(frozen=True, slots=True)
class Needs:
    """Which counters a policy reads: none for a key without limits (no I/O at all)."""

    requests: bool = False
    tokens: bool = False
    slots: bool = False
    spend: bool = False

    @classmethod
    @functools.lru_cache(maxsize=1024)
    def of(cls, policy: KeyPolicy) -> Needs:
        """(Worked out once per policy: a request's admission reads it.)"""
        return cls(
            requests=policy.rpm is not None,
            tokens=policy.tpm is not None,
            slots=policy.max_concurrent is not None,
            spend=policy.budget_usd_day is not None or policy.budget_usd_month is not None,
        )

    @property
    def any(self) -> bool:
        return self.requests or self.tokens or self.slots or self.spend

    @property
    def charged(self) -> bool:
        """Whether a finished request is charged (its tokens, its cloud cost)."""
        return self.tokens or self.spend


@dataclass(frozen=True, slots=True)
class Windows:
    """The windows a moment falls in (the epoch minute, the UTC day and month) and the
    seconds left in each."""

    minute: int
    day: str
    month: str
    minute_left_s: float
    day_left_s: float
    month_left_s: float

    @classmethod
    def at(cls, now: float) -> Windows:
        day, month, day_ends, month_ends = _calendar(int(now // 86400))
        return cls(
            minute=int(now // 60),
            day=day,
            month=month,
            minute_left_s=60 - now % 60,
            day_left_s=day_ends - now,
            month_left_s=month_ends - now,
        )


@functools.lru_cache(maxsize=4)
def _calendar(day_number: int) -> tuple[str, str, float, float]:
    """A UTC day's name, its month's, and when each ends (worked out once a day)."""
    midnight = datetime.fromtimestamp(day_number * 86400, UTC)
    following = (midnight.replace(day=1) + timedelta(days=32)).replace(day=1)
    ends = (midnight + timedelta(days=1)).timestamp()
    return midnight.strftime("%Y-%m-%d"), midnight.strftime("%Y-%m"), ends, following.timestamp()


@dataclass(frozen=True, slots=True)
class Used:
    """A key's counts with this request counted (requests and tokens this minute, requests
    in flight) and its cloud spend so far this day and month."""

    requests: int = 0
    tokens: int = 0
    in_flight: int = 0
    spent_day: float = 0.0
    spent_month: float = 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """Admitted (``local``: by the local model alone) or refused, with why and when to retry."""

    admit: bool
    local: bool = False
    code: str | None = None  # strategy_not_allowed, budget_exceeded, rate_limit_exceeded
    message: str = ""
    retry_after_s: int | None = None


ADMIT = Verdict(True)


def retry_after(seconds: float) -> int:
    """Whole seconds for ``retry-after``, at least 1."""
    return max(1, math.ceil(seconds))


def allowed(policy: KeyPolicy, strategy: Strategy | None) -> bool:
    """Whether the key may use ``strategy`` (None: a call with no strategy, embeddings)."""
    return strategy is None or policy.strategies is None or strategy in policy.strategies


def spent(policy: KeyPolicy, used: Used, windows: Windows) -> tuple[str, float] | None:
    """The budget that is spent ("day" or "month") and the seconds until it resets (the
    later one when both are), or None."""
    over = []
    if policy.budget_usd_day is not None and used.spent_day >= policy.budget_usd_day:
        over.append(("day", windows.day_left_s))
    if policy.budget_usd_month is not None and used.spent_month >= policy.budget_usd_month:
        over.append(("month", windows.month_left_s))
    return max(over, key=lambda found: found[1]) if over else None


def decide(
    policy: KeyPolicy,
    strategy: Strategy | None,
    used: Used,
    estimate: int,
    windows: Windows,
    *,
    local_possible: bool = True,
) -> Verdict:
    """The verdict on one request (see the module doc). ``estimate``: its prompt's tokens,
    already in ``used.tokens``; ``local_possible``: the local model could serve it (an
    embeddings call to a cloud model cannot be)."""
    if not allowed(policy, strategy):
        assert strategy is not None and policy.strategies is not None
        names = ", ".join(sorted(s.value for s in policy.strategies)) or "none"
        return Verdict(
            False,
            code="strategy_not_allowed",
            message=f"this key may not use the strategy '{strategy.value}' (allowed: {names})",
        )
    local = False
    if (budget := spent(policy, used, windows)) is not None:
        window, left = budget
        if policy.on_budget == "refuse" or not local_possible:
            limit = policy.budget_usd_day if window == "day" else policy.budget_usd_month
            return Verdict(
                False,
                code="budget_exceeded",
                message=f"this key's cloud budget for the {window} (${limit:g}) is spent; "
                f"it resets at the start of the next UTC {window}, in {retry_after(left)} s",
                retry_after_s=retry_after(left),
            )
        local = True
    if policy.max_concurrent is not None and used.in_flight > policy.max_concurrent:
        return _rate(f"{policy.max_concurrent} requests in flight at once", 1)
    if policy.rpm is not None and used.requests > policy.rpm:
        return _rate(f"{policy.rpm} requests per minute", windows.minute_left_s)
    before = used.tokens - estimate  # an empty window takes any one request
    if policy.tpm is not None and used.tokens > policy.tpm and before > 0:
        return _rate(f"{policy.tpm} tokens per minute", windows.minute_left_s)
    return Verdict(True, local=True) if local else ADMIT


def _rate(limit: str, wait_s: float) -> Verdict:
    return Verdict(
        False,
        code="rate_limit_exceeded",
        message=f"this key's limit of {limit} is reached; retry in {retry_after(wait_s)} s",
        retry_after_s=retry_after(wait_s),
    )
