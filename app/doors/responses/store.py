"""Stored responses, for ``previous_response_id`` and ``GET``/``DELETE /v1/responses/{id}``.

Each entry is a response object and the chat conversation that led to it (its turns,
without the request's instructions), kept per API key: the key is the SHA-256 of the
hashed API key and the response id, so neither a key nor another key's responses can
be read from it. Bounded in bytes and in age (``responses.store_max_bytes``,
``responses.store_max_age_s``), oldest out first, in this process's memory or in Redis
(``state.backend: redis``), by the cache's backends (``app.cache.backends``). A deleted
response leaves an empty value behind, read as gone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from app.cache.backends import Backend, MemoryBackend, RedisBackend
from app.config import ResponsesConfig, StateConfig

_GONE = b""


def owner_of(authorization: str) -> str:
    """Whose responses a request may see: the SHA-256 of its ``Authorization`` key."""
    _, _, presented = authorization.partition(" ")
    return hashlib.sha256(presented.strip().encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Stored:
    response: dict[str, Any]
    history: list[dict[str, Any]]  # the chat messages up to and with its answer


class ResponseStore:
    """Responses by (owner, id), bounded in bytes and age (``ResponsesConfig``)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @classmethod
    def build(cls, state: StateConfig, bounds: ResponsesConfig) -> ResponseStore:
        """In Redis with ``state.backend: redis``, else in memory; within ``bounds``."""
        max_bytes, max_age_s = bounds.store_max_bytes, bounds.store_max_age_s
        if state.backend == "redis":
            prefix = f"{state.key_prefix}:responses"
            return cls(RedisBackend.of(state, prefix, max_bytes, max_age_s, "stored responses"))
        return cls(MemoryBackend(max_bytes, max_age_s))

    @staticmethod
    def _key(owner: str, response_id: str) -> str:
        return hashlib.sha256(f"{owner}:{response_id}".encode()).hexdigest()

    async def put(self, owner: str, stored: Stored) -> None:
        value = orjson.dumps({"response": stored.response, "history": stored.history})
        await self.backend.put(self._key(owner, stored.response["id"]), value)

    async def get(self, owner: str, response_id: str) -> Stored | None:
        value = await self.backend.get(self._key(owner, response_id))
        if not value:  # absent, too old, deleted, or the store failed
            return None
        data = orjson.loads(value)
        return Stored(data["response"], data["history"])

    async def delete(self, owner: str, response_id: str) -> bool:
        """Forget a response; False when there was none to forget."""
        if await self.get(owner, response_id) is None:
            return False
        await self.backend.put(self._key(owner, response_id), _GONE)
        return True

    async def close(self) -> None:
        await self.backend.close()
