"""Where entries live, behind one small protocol: this process's memory, or Redis.

``MemoryBackend`` is bounded in bytes (least recently used out first) and in age (an
entry older than ``max_age_s`` is gone when next looked at). ``RedisBackend`` keeps each
entry under ``<state.key_prefix>:cache:<sha256>`` with a TTL of ``max_age_s``, and an
index (a sorted set by expiry, with each entry's bytes in a hash) that bounds the bytes
too, oldest out first, and gives ``/stats`` its figures. A Redis that fails is a miss,
never an error: the answer is simply asked for again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("specproxy.cache")
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
    ) -> None:
        self.client, self.clock = client, clock
        self.max_bytes, self.max_age_s = max_bytes, max_age_s
        self.prefix = f"{prefix}:cache"
        self._index, self._sizes = f"{self.prefix}:index", f"{self.prefix}:bytes"
        self._usage = (0, 0)
        self._counted_at = -math.inf  # when the figures were last read (a look-up reads
        self._counting: asyncio.Task[None] | None = None  # them now and then, off its path)

    def _key(self, key: str) -> str:
        return f"{self.prefix}:e:{key}"

    async def get(self, key: str) -> bytes | None:
        try:
            value = await self.client.get(self._key(key))
        except Exception as exc:  # redis' errors, a timeout: a miss
            log.warning("cache: Redis did not answer a look-up: %r", exc)
            return None
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
            log.warning("cache: Redis did not give the cache's size: %r", exc)
        finally:
            self._counting = None

    async def put(self, key: str, value: bytes) -> None:
        name, now = self._key(key), self.clock()
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.set(name, value, ex=max(1, math.ceil(self.max_age_s)))
                pipe.zadd(self._index, {name: now + self.max_age_s})
                pipe.hset(self._sizes, name, len(value))
                await pipe.execute()
            await self._trim(now)
        except Exception as exc:
            log.warning("cache: Redis did not keep an entry: %r", exc)

    async def _trim(self, now: float) -> None:
        """Forget expired entries in the index, then the oldest while over the byte bound."""
        expired = await self.client.zrangebyscore(self._index, "-inf", now)
        if expired:
            await self.client.zrem(self._index, *expired)
            await self.client.hdel(self._sizes, *expired)
        sizes = await self.client.hgetall(self._sizes)
        total = sum(int(v) for v in sizes.values())
        if total > self.max_bytes:
            for name in await self.client.zrange(self._index, 0, -1):  # oldest first
                if total <= self.max_bytes:
                    break
                total -= int(sizes.get(name, 0))
                await self.client.delete(name)
                await self.client.zrem(self._index, name)
                await self.client.hdel(self._sizes, name)
        self._usage = (await self.client.zcard(self._index), total)

    def usage(self) -> tuple[int, int]:
        return self._usage

    async def close(self) -> None:
        if self._counting is not None:
            self._counting.cancel()
        await self.client.aclose()
