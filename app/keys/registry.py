"""The managed keys (made through ``/admin/keys``): this process's view, and the store
that keeps them (docs/teams.md, "Admin API").

Every request reads the view only (``KeyView.joined``: the configured ring and the
managed one as one ``KeyRing``, built again only when either changes), never a store.
``KeyStore`` keeps the keys in this process's memory (``state.backend: memory``: each
process its own); ``app.state.keys.RedisKeyStore`` keeps them in Redis and keeps the
view up to date with every replica's writes. Either outlives a reload (``Lasting``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from pydantic import BaseModel

from app.keys.managed import StoredKey, caller_of, made, rotated
from app.keys.ring import KeyRing

log = logging.getLogger("specproxy.keys")


class KeyView:
    """The managed keys as this process knows them, by id, and their ring."""

    def __init__(self) -> None:
        self._keys: dict[str, StoredKey] = {}
        self.ring = KeyRing()
        self._joined: tuple[KeyRing, KeyRing, KeyRing] | None = None  # (base, ring, both)

    def get(self, key_id: str) -> StoredKey | None:
        return self._keys.get(key_id)

    def all(self) -> list[StoredKey]:
        """Every managed key, oldest first."""
        return sorted(self._keys.values(), key=lambda k: (k.created_at, k.id))

    def __len__(self) -> int:
        return len(self._keys)

    def set(self, stored: StoredKey) -> None:
        self._keys[stored.id] = stored
        self._rebuild()

    def drop(self, key_id: str) -> None:
        if self._keys.pop(key_id, None) is not None:
            self._rebuild()

    def reset(self, keys: Mapping[str, StoredKey]) -> None:
        """Take ``keys`` as the whole set (what Redis holds)."""
        if dict(keys) != self._keys:
            self._keys = dict(keys)
            self._rebuild()

    def _rebuild(self) -> None:
        # One assignment: a request reads the old ring or the new one, never half of one.
        self.ring = KeyRing(tuple((k.hash.encode(), caller_of(k)) for k in self._keys.values()))

    def joined(self, base: KeyRing) -> KeyRing:
        """``base`` (the configuration's keys) and the managed ones, as one ring."""
        memo, ring = self._joined, self.ring
        if memo is not None and memo[0] is base and memo[1] is ring:
            return memo[2]
        both = base if not ring.entries else KeyRing(base.entries + ring.entries, base.required)
        self._joined = (base, ring, both)
        return both


class KeyStore:
    """Managed keys in this process's memory; ``app.state.keys.RedisKeyStore`` overrides
    the four storage steps (``_put``, ``_current``, ``_swap``, ``_remove``) to keep them
    in Redis. Every change is written to the store first, then to the view."""

    backend = "memory"

    def __init__(self) -> None:
        self.view = KeyView()

    async def start(self) -> None:
        """Read what the store holds (nothing in memory) and follow its changes."""

    async def close(self) -> None:
        """Stop following the store."""

    async def create(self, settings: BaseModel) -> tuple[StoredKey, str]:
        """A new key with these settings: stored, and the key itself (shown once)."""
        stored, key = made(settings, time.time())
        await self._put(stored)
        self.view.set(stored)
        log.info("key %s (%s) created", stored.id, stored.settings["name"])
        return stored, key

    async def rotate(self, key_id: str) -> tuple[StoredKey, str] | None:
        """A new key for ``key_id`` (the old key is refused from now on); None: no such
        key, or it changed (revoked, rotated) while this was under way."""
        current = await self._current(key_id)
        if current is None:
            return None
        stored, key = rotated(current, time.time())
        if not await self._swap(current, stored):
            return None
        self.view.set(stored)
        log.info("key %s (%s) rotated", key_id, stored.settings["name"])
        return stored, key

    async def revoke(self, key_id: str) -> bool:
        """Forget ``key_id`` (refused from now on); False: there was no such key."""
        gone = await self._remove(key_id)
        self.view.drop(key_id)
        if gone:
            log.info("key %s revoked", key_id)
        return gone

    async def _put(self, stored: StoredKey) -> None:
        """Store a new key."""

    async def _current(self, key_id: str) -> StoredKey | None:
        """The key as the store holds it now."""
        return self.view.get(key_id)

    async def _swap(self, old: StoredKey, new: StoredKey) -> bool:
        """Replace ``old`` by ``new`` if the store still holds ``old``."""
        return self.view.get(old.id) == old

    async def _remove(self, key_id: str) -> bool:
        """Remove a key; whether there was one."""
        return self.view.get(key_id) is not None

    def status(self) -> dict[str, object]:
        return {"backend": self.backend, "managed": len(self.view)}
