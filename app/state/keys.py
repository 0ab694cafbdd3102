"""Managed keys shared by every replica through Redis (``state.backend: redis``).

Redis holds each key as ``StoredKey`` JSON (its id, its key's SHA-256, its settings:
never the key) in one hash, ``<prefix>:keys`` (field: the id). A write (``/admin/keys``
on any replica) goes to Redis first and is announced on ``<prefix>:keys:changed`` (the
id); every replica follows that channel and reads the one entry again, so a key made or
revoked through one replica is accepted or refused by the others within milliseconds,
and requests never wait on Redis: they read the local view. The whole hash is read
again on (re)subscribing and every ``REREAD_S`` (a message lost while Redis was away).

Redis down: the view stays as last read (revocations made meanwhile reach this replica
when Redis is back), the admin API answers 503, one line is logged per outage. What is
read is validated (``app.keys.managed.decode``): an entry that is not a key is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from app.config import StateConfig
from app.errors import ProxyError
from app.keys.managed import StoredKey, decode, encode
from app.keys.registry import KeyStore
from app.state import redis_client
from app.state.health import RedisHealth

log = logging.getLogger("specproxy.state")
REREAD_S = 5.0  # the whole set again, in case a change's message was lost
_WAIT_S = 1.0  # the longest one wait for a message (then the reread is looked at)
_RETRY_S = 0.5  # after Redis failed, before subscribing again

# Replace a key only if Redis still holds it with the key it had (its hash): a rotation
# racing a revocation (or another rotation) on another replica loses, it does not undo it.
_SWAP = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and cjson.decode(current)['hash'] == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  redis.call('PUBLISH', KEYS[2], ARGV[1])
  return 1
end
return 0
"""


class KeyStoreUnavailable(ProxyError):
    """Redis did not answer a write of the admin API: nothing was changed."""

    status = 503
    type = "server_error"


class RedisKeyStore(KeyStore):
    """The managed keys in Redis, followed through its pub/sub (see the module doc)."""

    backend = "redis"

    def __init__(self, config: StateConfig, health: RedisHealth) -> None:
        super().__init__()
        self.config = config
        self.health = health
        self.hash = f"{config.key_prefix}:keys"
        self.channel = f"{config.key_prefix}:keys:changed"
        self.skipped_entries = 0  # entries under the hash not keys, as of the last full read
        self._redis: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Read the keys Redis holds (Redis down: none for now), then follow the changes."""
        self._redis = redis_client(self.config, asyncio=True, retries=1)
        try:
            async with asyncio.timeout(self.config.timeout_s):
                await self._reread()
        except Exception as exc:
            self.health.failed(exc)
        self._task = asyncio.create_task(self._follow(), name="keys-follow")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.aclose()

    async def _follow(self) -> None:
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis down or odd: the view stays as it was
                self.health.failed(exc)
                await asyncio.sleep(_RETRY_S)

    async def _listen(self) -> None:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            async with asyncio.timeout(self.config.timeout_s):
                await pubsub.subscribe(self.channel)
                await self._reread()  # after subscribing: no change is missed in between
            self.health.ok()
            due = time.monotonic() + REREAD_S
            while True:
                message = await pubsub.get_message(timeout=_WAIT_S)
                async with asyncio.timeout(self.config.timeout_s):
                    if message is not None and isinstance(message.get("data"), bytes):
                        await self._read_one(message["data"].decode(errors="replace"))
                    if time.monotonic() >= due:
                        await self._reread()
                        due = time.monotonic() + REREAD_S
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def _reread(self) -> None:
        entries = await self._redis.hgetall(self.hash)
        keys = {}
        for field, raw in entries.items():
            if (stored := decode(raw)) is not None and stored.id == _text(field):
                keys[stored.id] = stored
        if (skipped := len(entries) - len(keys)) != self.skipped_entries:
            log.debug("%d entries under %s that are not keys: skipped", skipped, self.hash)
        self.skipped_entries = skipped
        self.view.reset(keys)

    async def _read_one(self, key_id: str) -> None:
        raw = await self._redis.hget(self.hash, key_id)
        stored = decode(raw) if raw is not None else None
        if stored is None or stored.id != key_id:
            self.view.drop(key_id)
        else:
            self.view.set(stored)

    async def _write(self, work: Any) -> Any:
        """One write, bounded by ``state.timeout_s``; Redis failing is a 503."""
        try:
            async with asyncio.timeout(self.config.timeout_s):
                return await work
        except Exception as exc:
            self.health.failed(exc)
            raise KeyStoreUnavailable(
                "the key store (redis) did not answer; nothing was changed: try again",
                code="key_store_unavailable",
            ) from None

    async def _put(self, stored: StoredKey) -> None:
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(self.hash, stored.id, encode(stored))
        pipe.publish(self.channel, stored.id)
        await self._write(pipe.execute())

    async def _current(self, key_id: str) -> StoredKey | None:
        raw = await self._write(self._redis.hget(self.hash, key_id))
        return decode(raw) if raw is not None else None

    async def _swap(self, old: StoredKey, new: StoredKey) -> bool:
        keys_and_args = (self.hash, self.channel, new.id, old.hash, encode(new))
        return bool(await self._write(self._redis.eval(_SWAP, 2, *keys_and_args)))

    async def _remove(self, key_id: str) -> bool:
        pipe = self._redis.pipeline(transaction=True)
        pipe.hdel(self.hash, key_id)
        pipe.publish(self.channel, key_id)
        removed, _ = await self._write(pipe.execute())
        return bool(removed)

    def status(self) -> dict[str, object]:
        return {
            **super().status(),
            "redis": self.health.status(),
            "skipped_entries": self.skipped_entries,
        }


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
