"""Several upstreams that answer as one: a pool of local servers, or a chain of verifiers.

    pool   one ``models:`` entry with several ``base_urls``: members share the entry's
           name and model, each with its own breaker and slots; the member with the
           fewest calls in flight goes first
    chain  ``verify_model: [a, b, ...]``: different entries, tried in order

Either way a member that cannot be called now (no key, its circuit open or its one
probe out, its rate budget under the reserve) is tried only after the others, and a
failure that is the upstream's (unreachable, 5xx, 429, timeout, a broken answer) falls
to the next member. A request the upstream found invalid does not: any other member
would refuse it too. The answer says which member gave it (``Completion.upstream``; a
stream: ``OpenStream.upstream``) and which failed before it (``fell_over``), so the
pipeline names the one that answered and counts the others. A group is an ``Upstream``
itself, and its members any ``Upstream`` (the tests' fake too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from app.config import ModelConfig
from app.errors import UpstreamError, UpstreamRejected
from app.protocol import JSONObject
from app.upstreams.breaker import BreakerStatus
from app.upstreams.interface import (
    CloudState,
    Completion,
    OpenStream,
    PassedAnswer,
    Props,
    Upstream,
    UpstreamStatus,
)

log = logging.getLogger("specproxy.upstream")

T = TypeVar("T")


class MemberStatus(UpstreamStatus):
    """One member of a group as /stats shows it."""

    name: str
    base_url: str | None
    in_flight: int
    last_ok_at: float | None
    last_error: str | None


class GroupStatus(UpstreamStatus):
    """A group's resilience state: its members' at a glance, and each member's."""

    fell_over: int
    members: list[MemberStatus]


def falls_over(error: UpstreamError) -> bool:
    """Whether the next member should be asked after this failure (not a request that the
    upstream found invalid: that is the client's, whoever is asked)."""
    return not (isinstance(error, UpstreamRejected) and error.about_request)


def order(members: Sequence[Upstream], *, balance: bool, turn: int = 0) -> list[Upstream]:
    """The members in the order to try them: callable ones first (balanced: fewest calls in
    flight first, ties taking turns: the configured order rotated by ``turn``), then the
    rest, so a call still fails with the upstream's own reason when none can take it."""
    if balance and members:
        start = turn % len(members)
        members = [*members[start:], *members[:start]]
    ready = [m for m in members if m.availability(0).callable_now]
    if balance:
        ready.sort(key=lambda m: m.in_flight)  # stable: ties keep the rotated order
    return ready + [m for m in members if m not in ready]


def all_failed(failures: list[UpstreamError], asked: list[UpstreamError]) -> UpstreamError:
    """The error a group raises when every member failed: the last member actually asked
    (a member skipped for its open circuit says less), its message naming every other
    member's failure too, carrying them all as ``fell_over``."""
    chosen = (asked or failures)[-1]
    others = [f for f in failures if f is not chosen]
    if others:
        chosen.message = f"{chosen.message} (also: {'; '.join(f.message for f in others)})"
        chosen.args = (chosen.message,)
    chosen.fell_over = tuple(others)
    return chosen


class UpstreamGroup:
    """Members that answer as one upstream (``balance``: a pool; else a chain)."""

    def __init__(self, name: str, members: Sequence[Upstream], *, balance: bool) -> None:
        assert members, "a group needs members"
        self.name = name
        self.members = list(members)
        self.balance = balance
        self.fell_over_total = 0  # failures another member answered for
        self._turn = 0  # a pool's next call starts its ties from this member

    @property
    def config(self) -> ModelConfig:
        """The first member's configuration (its model, provider and reserves)."""
        return self.members[0].config

    @property
    def base_url(self) -> str | None:
        return self.members[0].base_url

    @property
    def has_props(self) -> bool:
        """Its first member's (a pool's servers are taken to be one build)."""
        return self.members[0].has_props

    @property
    def streams_usage(self) -> bool:
        return all(m.streams_usage for m in self.members)

    @property
    def continues_prefill(self) -> bool:
        return all(m.continues_prefill for m in self.members)

    @property
    def in_flight(self) -> int:
        return sum(m.in_flight for m in self.members)

    @property
    def last_ok_at(self) -> float | None:
        """When any member last answered."""
        return max((m.last_ok_at for m in self.members if m.last_ok_at), default=None)

    @property
    def last_error(self) -> str | None:
        """The members' last errors, while none has answered since its own."""
        errors = [m.last_error for m in self.members if m.last_error]
        return "; ".join(errors) if len(errors) == len(self.members) else None

    @property
    def configured(self) -> bool:
        return any(m.configured for m in self.members)

    @property
    def unavailable_reason(self) -> str | None:
        """None when any member can be called; else the first member's reason."""
        reasons = [m.unavailable_reason for m in self.members]
        return None if None in reasons else reasons[0]

    def availability(self, need: int) -> CloudState:
        """The first member's that may be called now for ``need`` tokens, else the
        first member's (its reason is the group's)."""
        states = [m.availability(need) for m in self.members]
        return next((s for s in states if s.blocked is None), states[0])

    def order(self) -> list[Upstream]:
        """The members in the order the next call tries them (a pool's ties take turns)."""
        turn = self._turn
        if self.balance:
            self._turn += 1
        return order(self.members, balance=self.balance, turn=turn)

    async def first_answer(
        self, attempt: Callable[[Upstream], Awaitable[T]]
    ) -> tuple[Upstream, T, list[UpstreamError]]:
        """``attempt`` on each member in turn until one succeeds: that member, its result
        and the failures before it. All failing: the last failure, carrying the others."""
        failures: list[UpstreamError] = []
        asked: list[UpstreamError] = []  # failures of members that were callable when tried
        for member in self.order():
            callable_now = member.availability(0).callable_now
            try:
                result = await attempt(member)
            except UpstreamError as error:
                if not falls_over(error):
                    error.fell_over = tuple(failures)
                    raise
                failures.append(error)
                if callable_now:
                    asked.append(error)
                continue
            if failures:
                self.fell_over_total += len(failures)
                log.warning(
                    "%s at %s answered after %s",
                    member.name,
                    member.base_url,
                    "; ".join(f.message for f in failures),
                )
            return member, result, failures
        raise all_failed(failures, asked)

    async def complete(self, body: JSONObject) -> Completion:
        """The first member's answer that comes; it names who gave it and who failed."""
        member, completion, failures = await self.first_answer(lambda m: m.complete(body))
        return replace(completion, upstream=member.name, fell_over=tuple(failures))

    async def pass_on(self, body: JSONObject) -> PassedAnswer:
        """The first member's answer that comes, to pass on as it came; named as above."""
        member, answer, failures = await self.first_answer(lambda m: m.pass_on(body))
        return replace(answer, upstream=member.name, fell_over=tuple(failures))

    async def open_stream(
        self, body: JSONObject, *, unread: bool = False, bounded: bool = False
    ) -> OpenStream:
        """The first member's stream whose first chunks come (a member that fails before
        sending one falls over to the next); it names who sends it and who failed."""

        async def attempt(member: Upstream) -> OpenStream:
            return await member.open_stream(body, unread=unread, bounded=bounded)

        _, opened, failures = await self.first_answer(attempt)
        opened.fell_over = tuple(failures)
        return opened

    async def props(self) -> Props | None:
        """The first member's (a pool's servers are taken to be one build)."""
        return await self.members[0].props()

    async def metrics_text(self) -> str | None:
        """None: whose would it be? A pool's servers are not scraped."""
        return None

    async def healthy(self) -> bool | None:
        """Whether any member answers its probe (None when none has a probe); probed at once."""
        answers = await asyncio.gather(*(m.healthy() for m in self.members))
        return None if all(a is None for a in answers) else any(answers)

    def status(self) -> GroupStatus:
        """Each member's circuit, budget and queue, and the group's at a glance: closed
        while any member's circuit is, opened as often as its members' together, the
        first member's rate budget."""
        members: list[MemberStatus] = [
            {
                "name": m.name,
                "base_url": m.base_url,
                "in_flight": m.in_flight,
                "last_ok_at": m.last_ok_at,
                "last_error": m.last_error,
                **m.status(),
            }
            for m in self.members
        ]
        states = [m["circuit"]["state"] for m in members]
        circuit = next(
            (m["circuit"] for m in members if m["circuit"]["state"] == "closed"),
            members[states.index("half_open")]["circuit"]
            if "half_open" in states
            else members[0]["circuit"],
        )
        opened = sum(m["circuit"]["opened_total"] for m in members)
        whole: BreakerStatus = {**circuit, "opened_total": opened}
        return {
            "circuit": whole,
            "rate_limit": members[0]["rate_limit"],
            "queued": sum(m["queued"] for m in members),
            "fell_over": self.fell_over_total,
            "members": members,
        }
