"""Where entries live, behind one small protocol: this process's memory, or Redis.

``MemoryBackend`` is bounded in bytes (least recently used out first) and in age (an
entry older than ``max_age_s`` is gone when next looked at). ``RedisBackend`` keeps each
entry under ``<state.key_prefix>:cache:e:<sha256>`` with a TTL of ``max_age_s``, and an
index (a sorted set by expiry, each entry's bytes in a hash, their total) that bounds the
bytes too, oldest out first, in one Lua script per store (replicas never race on it), and
gives ``/stats`` its figures. A Redis that fails is a miss, never an error: the answer is
simply asked for again; each outage is logged once (``RedisHealth``), not once per call.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from app.config import StateConfig
from app.state.health import RedisHealth

COUNT_EVERY_S = 2.0  # Redis: how often a look-up reads the entries' figures again


class Backend(Protocol):
    """A byte store with an age and a size bound."""

    shared: bool  # replicas see the same entries (their sizes are not added up)

    async def get(self, key: str) -> bytes | None:
        """The value under ``key``, or None (absent, too old, or the store failed)."""
        ...

    async def put(self, key: str, value: bytes) -> None:
        """Keep ``value`` under ``key``, older or colder entries out to stay in bounds."""
        ...

    def usage(self) -> tuple[int, int]:
        """Entries and their bytes, as last known."""
        ...

    async def close(self) -> None:
        """Let go of connections."""
        ...


POINTER = b"@"  # a near key's value: the exact key it stands for (an entry is JSON: "{")


async def keep(backend: Backend, exact: str, near: str | None, value: bytes) -> None:
    """An entry under its exact key, and its near key pointing there (kept once, in bytes)."""
    await backend.put(exact, value)
    if near is not None:
        await backend.put(near, POINTER + exact.encode())


async def through_near(backend: Backend, near: str) -> tuple[str, bytes] | None:
    """The exact key and entry a near key points to (None: none, or gone since)."""
    pointer = await backend.get(near)
    if pointer is None or not pointer.startswith(POINTER):
        return None
    exact = pointer[len(POINTER) :].decode(errors="replace")
    value = await backend.get(exact)
    return (exact, value) if value is not None else None


class MemoryBackend:
    """An LRU dict bounded in bytes and in age; ``clock`` is monotonic seconds."""

    shared = False

    def __init__(
        self, max_bytes: int, max_age_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_bytes, self.max_age_s, self.clock = max_bytes, max_age_s, clock
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0

    async def get(self, key: str) -> bytes | None:
        found = self._entries.get(key)
        if found is None:
            return None
        stored_at, value = found
        if self.clock() - stored_at > self.max_age_s:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    async def put(self, key: str, value: bytes) -> None:
        if len(value) > self.max_bytes:
            return
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (self.clock(), value)
        self._bytes += len(value)
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def usage(self) -> tuple[int, int]:
        return len(self._entries), self._bytes

    async def close(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def _drop(self, key: str) -> None:
        _, value = self._entries.pop(key)
        self._bytes -= len(value)


# Redis' side of the byte bound, run as one script so replicas never race on it: forget the
# expired entries, then drop the oldest while the total is over the bound; answers
# {entries, bytes}. KEYS: index (sorted set: entry -> expiry), sizes (hash: entry -> bytes),
# total; ARGV: now, max_bytes. O(entries dropped), never a scan of them all.
_TRIM = """
local function drop(name)
  local size = tonumber(redis.call('HGET', KEYS[2], name) or '0')
  redis.call('DEL', name)
  redis.call('ZREM', KEYS[1], name)
  redis.call('HDEL', KEYS[2], name)
  redis.call('DECRBY', KEYS[3], size)
end
for _, name in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1000)) do
  drop(name)
end
local total = tonumber(redis.call('GET', KEYS[3]) or '0')
while total > tonumber(ARGV[2]) do
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #oldest == 0 then break end
  drop(oldest[1])
  total = tonumber(redis.call('GET', KEYS[3]) or '0')
end
if total < 0 or redis.call('ZCARD', KEYS[1]) == 0 then
  total = 0
  redis.call('SET', KEYS[3], 0)
end
return {redis.call('ZCARD', KEYS[1]), total}
"""
# KEYS: entry, index, sizes, total; ARGV: value, ttl_s, expires_at. The total counts a
# rewritten entry once.
_PUT = """
local old = tonumber(redis.call('HGET', KEYS[3], KEYS[1]) or '0')
local size = string.len(ARGV[1])
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1])
redis.call('HSET', KEYS[3], KEYS[1], size)
redis.call('INCRBY', KEYS[4], size - old)
return size
"""


class RedisBackend:
    """Entries in Redis with a TTL; an index by expiry bounds their bytes."""

    shared = True

    def __init__(
        self,
        client: Any,
        prefix: str,
        max_bytes: int,
        max_age_s: float,
        clock: Callable[[], float] = time.time,
        purpose: str = "the cache",
        secrets: Sequence[str] = (),
    ) -> None:
        self.client, self.clock = client, clock
        # look-ups and writes apart: a Redis that refuses writes alone (full, read-only)
        # is one outage of the writes, not one outage and recovery per request
        self.reads = RedisHealth(list(secrets), f"{purpose} (look-ups)")
        self.writes = RedisHealth(list(secrets), f"{purpose} (writes)")
        self.max_bytes, self.max_age_s = max_bytes, max_age_s
        self.prefix = f"{prefix}:cache"
        self._meta = [f"{self.prefix}:index", f"{self.prefix}:bytes", f"{self.prefix}:total"]
        self._put, self._trim_script = client.register_script(_PUT), client.register_script(_TRIM)
        self._usage = (0, 0)
        self._counted_at = -math.inf  # when the figures were last read (a look-up reads
        self._counting: asyncio.Task[None] | None = None  # them now and then, off its path)

    @classmethod
    def of(
        cls, state: StateConfig, prefix: str, max_bytes: int, max_age_s: float, purpose: str
    ) -> RedisBackend:
        """Entries under ``prefix`` in ``state``'s Redis, its outages logged as ``purpose``'s."""
        from app.state import redis_client

        client = redis_client(state, asyncio=True)
        return cls(client, prefix, max_bytes, max_age_s, purpose=purpose, secrets=state.secrets())

    def _key(self, key: str) -> str:
        return f"{self.prefix}:e:{key}"

    async def get(self, key: str) -> bytes | None:
        try:
            value = await self.client.get(self._key(key))
        except Exception as exc:  # redis' errors, a timeout: a miss
            self.reads.failed(exc)
            return None
        self.reads.ok()
        self._count_now_and_then()
        return bytes(value) if value is not None else None

    def _count_now_and_then(self) -> None:
        """Read the fleet's figures again in the background, at most every few seconds (a
        replica that keeps nothing itself still shows what the others kept)."""
        now = self.clock()
        if now - self._counted_at < COUNT_EVERY_S or self._counting is not None:
            return
        self._counted_at = now
        self._counting = asyncio.create_task(self._count(now), name="cache-count")

    async def _count(self, now: float) -> None:
        try:
            await self._trim(now)
        except Exception as exc:
            self.writes.failed(exc)
        finally:
            self._counting = None

    async def put(self, key: str, value: bytes) -> None:
        name, now = self._key(key), self.clock()
        ttl = max(1, math.ceil(self.max_age_s))
        try:
            await self._put(keys=[name, *self._meta], args=[value, ttl, now + self.max_age_s])
            await self._trim(now)
        except Exception as exc:
            self.writes.failed(exc)
            return
        self.writes.ok()

    async def _trim(self, now: float) -> None:
        """Forget expired entries, then the oldest while over the byte bound (``_TRIM``)."""
        entries, total = await self._trim_script(keys=self._meta, args=[now, self.max_bytes])
        self._usage = (int(entries), int(total))

    def usage(self) -> tuple[int, int]:
        return self._usage

    async def close(self) -> None:
        if self._counting is not None:
            self._counting.cancel()
        await self.client.aclose()
