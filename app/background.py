"""Tasks that outlive the request that started them (audits, late drafts, a cache hit's
audit): held until they end, so none is collected mid-flight, and cancelled at shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """The tasks still running; ``len`` is how many."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[T]] = set()

    def __len__(self) -> int:
        return len(self.tasks)

    def start(self, work: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """``work`` as a task, held until it ends."""
        task = asyncio.create_task(work, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def close(self) -> None:
        """Cancel the tasks still running and wait for them to end (shutdown)."""
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
