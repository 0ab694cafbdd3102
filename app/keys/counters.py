"""What each key has used: requests and tokens per minute, requests in flight, cloud spend
per UTC day and month. In this process (``state.backend: memory``) or in Redis for the
whole fleet (``redis``). The decisions are ``app.keys.limits``'s.

Redis: one MULTI/EXEC round trip counts a request (atomic counters per window, no lock),
and only for the counters its key's policy needs; a refused request's counts are taken
back in a second. A finished request's tokens and cloud cost are added off the request
path. Key names hold a hash of the key's id, never a key: ``<prefix>:limits:<hash>:`` then
``r:<minute>``, ``t:<minute>`` (requests, tokens), ``d:<YYYY-MM-DD>``, ``m:<YYYY-MM>``
(USD), ``slots`` (a sorted set of requests in flight, each by its start time; one older
than ``SLOT_LEASE_S`` is dropped, so a replica that died frees its slots).

Redis down or odd: no request fails. Each process counts in its own memory meanwhile (the
memory backend's view, per process), tries Redis again after ``RETRY_S``, logs one line
per outage; values read back are validated (a finite number >= 0) and a bad one is read
as 0 and counted.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

import msgspec

from app.keys.limits import Needs, Used, Windows
from app.state.health import RedisHealth

log = logging.getLogger("specproxy.keys")

SLOT_LEASE_S = 600  # a request in flight longer than this no longer holds its slot
RETRY_S = 1.0  # after Redis failed, the local view for this long before asking again
_MINUTE_TTL_S = 120
_DAY_TTL_S = 2 * 86400
_MONTH_TTL_S = 32 * 86400
_Amount = Annotated[float, msgspec.Meta(ge=0)]


@dataclass(frozen=True, slots=True)
class Hold:
    """What ``count`` added for one request, to be taken back or released by ``store``."""

    store: Store
    kid: str
    needs: Needs
    windows: Windows
    estimate: int
    slot: str


class Store(Protocol):
    async def count(
        self, kid: str, needs: Needs, windows: Windows, estimate: int, slot: str
    ) -> tuple[Used, Hold]: ...

    async def take_back(self, hold: Hold) -> None: ...

    def release(self, hold: Hold) -> None:
        """Free ``hold``'s slot now (the I/O it needs runs off the request path)."""

    def charge(self, kid: str, windows: Windows, tokens: int, usd: float) -> None: ...

    def status(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


@dataclass
class MemoryStore:
    """One process's counts (its own windows; the ones past are dropped as they pass)."""

    minutes: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # minute, r, t
    days: dict[str, tuple[str, float]] = field(default_factory=dict)
    months: dict[str, tuple[str, float]] = field(default_factory=dict)
    slots: dict[str, set[str]] = field(default_factory=dict)

    async def count(
        self, kid: str, needs: Needs, windows: Windows, estimate: int, slot: str
    ) -> tuple[Used, Hold]:
        requests, tokens = self._minute(kid, windows.minute)
        requests += needs.requests
        tokens += estimate if needs.tokens else 0
        self.minutes[kid] = (windows.minute, requests, tokens)
        in_flight = 0
        if needs.slots:
            held = self.slots.setdefault(kid, set())
            held.add(slot)
            in_flight = len(held)
        day = self._spent(self.days, kid, windows.day)
        month = self._spent(self.months, kid, windows.month)
        used = Used(requests, tokens, in_flight, day, month)
        return used, Hold(self, kid, needs, windows, estimate, slot)

    async def take_back(self, hold: Hold) -> None:
        requests, tokens = self._minute(hold.kid, hold.windows.minute)
        requests -= hold.needs.requests
        tokens -= hold.estimate if hold.needs.tokens else 0
        self.minutes[hold.kid] = (hold.windows.minute, max(0, requests), max(0, tokens))
        self.release(hold)

    def release(self, hold: Hold) -> None:
        if hold.needs.slots:
            self.slots.get(hold.kid, set()).discard(hold.slot)

    def charge(self, kid: str, windows: Windows, tokens: int, usd: float) -> None:
        if tokens:
            requests, before = self._minute(kid, windows.minute)
            self.minutes[kid] = (windows.minute, requests, before + tokens)
        if usd:
            self.days[kid] = (windows.day, self._spent(self.days, kid, windows.day) + usd)
            self.months[kid] = (windows.month, self._spent(self.months, kid, windows.month) + usd)

    def _minute(self, kid: str, minute: int) -> tuple[int, int]:
        at, requests, tokens = self.minutes.get(kid, (minute, 0, 0))
        return (requests, tokens) if at == minute else (0, 0)

    @staticmethod
    def _spent(book: dict[str, tuple[str, float]], kid: str, window: str) -> float:
        at, usd = book.get(kid, (window, 0.0))
        return usd if at == window else 0.0

    def status(self) -> dict[str, Any]:
        return {"backend": "memory"}

    async def close(self) -> None:
        return None


class RedisStore:
    """The fleet's counts in Redis (see the module doc), this process's own while it is down."""

    def __init__(self, client: Any, prefix: str, timeout_s: float, health: RedisHealth) -> None:
        self.client, self.prefix, self.timeout_s, self.health = client, prefix, timeout_s, health
        self.local = MemoryStore()  # the view while Redis is down
        self.down_until = 0.0
        self.local_counts = 0  # requests counted in the local view because Redis was down
        self.odd_values = 0  # values read back that were not a count (read as 0)
        self.tasks: set[asyncio.Task[object]] = set()

    def _key(self, kid: str, *parts: str | int) -> str:
        return ":".join((self.prefix, "limits", kid, *map(str, parts)))

    async def count(
        self, kid: str, needs: Needs, windows: Windows, estimate: int, slot: str
    ) -> tuple[Used, Hold]:
        if time.monotonic() < self.down_until:
            self.local_counts += 1
            return await self.local.count(kid, needs, windows, estimate, slot)
        pipe = self.client.pipeline(transaction=True)
        names: list[str] = []  # what each command's result is ("": not read)
        if needs.requests:
            pipe.incr(self._key(kid, "r", windows.minute))
            pipe.expire(self._key(kid, "r", windows.minute), _MINUTE_TTL_S)
            names += ["requests", ""]
        if needs.tokens:
            pipe.incrby(self._key(kid, "t", windows.minute), estimate)
            pipe.expire(self._key(kid, "t", windows.minute), _MINUTE_TTL_S)
            names += ["tokens", ""]
        if needs.slots:
            now = time.time()
            slots = self._key(kid, "slots")
            pipe.zremrangebyscore(slots, "-inf", now - SLOT_LEASE_S)
            pipe.zadd(slots, {slot: now})
            pipe.zcard(slots)
            pipe.expire(slots, SLOT_LEASE_S)
            names += ["", "", "in_flight", ""]
        if needs.spend:
            pipe.get(self._key(kid, "d", windows.day))
            pipe.get(self._key(kid, "m", windows.month))
            names += ["day", "month"]
        try:
            async with asyncio.timeout(self.timeout_s):
                results = await pipe.execute()
        except Exception as exc:  # down, slow or refusing: this process's own view
            self._failed(exc)
            self.local_counts += 1
            return await self.local.count(kid, needs, windows, estimate, slot)
        self.health.ok()
        got = {name: value for name, value in zip(names, results, strict=True) if name}
        requests, tokens, in_flight = (
            self._int(got.get(name, 0)) for name in ("requests", "tokens", "in_flight")
        )
        day, month = self._amount(got.get("day")), self._amount(got.get("month"))
        used = Used(requests, tokens, in_flight, day, month)
        return used, Hold(self, kid, needs, windows, estimate, slot)

    async def take_back(self, hold: Hold) -> None:
        pipe = self.client.pipeline(transaction=True)
        if hold.needs.requests:
            pipe.decr(self._key(hold.kid, "r", hold.windows.minute))
        if hold.needs.tokens:
            pipe.decrby(self._key(hold.kid, "t", hold.windows.minute), hold.estimate)
        if hold.needs.slots:
            pipe.zrem(self._key(hold.kid, "slots"), hold.slot)
        await self._send(pipe)

    def release(self, hold: Hold) -> None:
        if hold.needs.slots:
            pipe = self.client.pipeline(transaction=False)
            pipe.zrem(self._key(hold.kid, "slots"), hold.slot)
            self._spawn(self._send(pipe))

    def charge(self, kid: str, windows: Windows, tokens: int, usd: float) -> None:
        """Add a finished request's tokens and cloud cost, off the request path; while Redis
        is down, to this process's view."""
        if not tokens and not usd:
            return
        if time.monotonic() < self.down_until:
            self.local.charge(kid, windows, tokens, usd)
            return
        pipe = self.client.pipeline(transaction=True)
        if tokens:
            pipe.incrby(self._key(kid, "t", windows.minute), tokens)
            pipe.expire(self._key(kid, "t", windows.minute), _MINUTE_TTL_S)
        if usd:
            pipe.incrbyfloat(self._key(kid, "d", windows.day), usd)
            pipe.expire(self._key(kid, "d", windows.day), _DAY_TTL_S)
            pipe.incrbyfloat(self._key(kid, "m", windows.month), usd)
            pipe.expire(self._key(kid, "m", windows.month), _MONTH_TTL_S)
        self._spawn(self._charge(pipe, kid, windows, tokens, usd))

    def _spawn(self, work: Coroutine[Any, Any, object]) -> None:
        """Run ``work`` on the loop, kept referenced until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _charge(self, pipe: Any, kid: str, windows: Windows, tokens: int, usd: float) -> None:
        if not await self._send(pipe):
            self.local.charge(kid, windows, tokens, usd)  # kept here rather than lost

    async def _send(self, pipe: Any) -> bool:
        """Run ``pipe``; False if Redis is down (a command it refused, as INCRBYFLOAT on a
        value that is not a number, is an odd value: Redis is up, the rest was done)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                await pipe.execute()
        except Exception as exc:
            from redis.exceptions import ResponseError  # the client is there: so is redis

            if isinstance(exc, ResponseError):
                self.odd_values += 1
                return True
            self._failed(exc)
            return False
        self.health.ok()
        return True

    def _failed(self, exc: BaseException) -> None:
        self.health.failed(exc)
        self.down_until = time.monotonic() + RETRY_S

    def _int(self, value: Any) -> int:
        if isinstance(value, int) and value >= 0:
            return value
        self.odd_values += 1
        return 0

    def _amount(self, raw: bytes | str | None) -> float:
        """A spend read back: a finite number >= 0 (absent: 0; anything else: 0, counted)."""
        if raw is None:
            return 0.0
        try:
            value = msgspec.json.decode(raw, type=_Amount)
        except (msgspec.DecodeError, msgspec.ValidationError):
            value = math.nan
        if math.isfinite(value):
            return value
        self.odd_values += 1
        return 0.0

    def status(self) -> dict[str, Any]:
        return {
            "backend": "redis",
            "redis": self.health.status(),
            "local_counts": self.local_counts,
            "odd_values": self.odd_values,
        }

    async def close(self) -> None:
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        try:
            await self.client.aclose()
        except Exception:
            log.debug("closing the limits' redis client failed", exc_info=True)
