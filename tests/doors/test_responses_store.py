"""The response store: per owner, deleted is gone, too old is gone (memory backend)."""

from __future__ import annotations

import asyncio

from app.cache.backends import MemoryBackend
from app.config import ResponsesConfig, StateConfig
from app.doors.responses.store import ResponseStore, Stored, owner_of


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_responses_are_per_owner_deletable_and_age_out() -> None:
    clock = Clock()
    store = ResponseStore(MemoryBackend(1 << 20, 60.0, clock))
    alice, bob = owner_of("Bearer sk-alice"), owner_of("Bearer sk-bob")
    assert "sk-alice" not in alice and alice != bob
    stored = Stored({"id": "resp_1", "output": []}, [{"role": "user", "content": "hi"}])

    async def scenario() -> None:
        await store.put(alice, stored)
        assert await store.get(alice, "resp_1") == stored
        assert await store.get(bob, "resp_1") is None
        assert not await store.delete(bob, "resp_1")
        assert await store.delete(alice, "resp_1")
        assert await store.get(alice, "resp_1") is None
        assert not await store.delete(alice, "resp_1")
        await store.put(alice, stored)
        clock.now = 61.0
        assert await store.get(alice, "resp_1") is None

    asyncio.run(scenario())


def test_the_configured_bound_holds_oldest_out_first() -> None:
    """``responses.store_max_bytes``: entries beyond it are evicted, the oldest first."""
    bounds = ResponsesConfig(store_max_bytes=4096, store_max_age_s=60.0)
    store = ResponseStore.build(StateConfig(), bounds)
    owner = owner_of("Bearer sk-alice")

    def entry(n: int) -> Stored:
        return Stored({"id": f"resp_{n}", "output": []}, [{"role": "user", "content": "x" * 1500}])

    async def scenario() -> list[bool]:
        for n in range(4):
            await store.put(owner, entry(n))
        return [await store.get(owner, f"resp_{n}") is not None for n in range(4)]

    assert asyncio.run(scenario()) == [False, False, True, True]
    shipped = ResponseStore.build(StateConfig(), ResponsesConfig()).backend
    assert isinstance(shipped, MemoryBackend) and shipped.max_bytes == 64 << 20
