"""Many deadlines of one length on one loop timer: ``timeout.total`` for an upstream's calls.

``asyncio.timeout`` schedules a loop timer on entry and cancels it on exit: ~4.5 µs a use
under uvloop here, and ~5% of a ``local_only`` request's samples at c=64 in
``bench/profile_hot_path.py``, though a whole answer's deadline (seconds) almost never
fires. Every call to one upstream has the same deadline, so they expire in the order they
began: ``Deadlines`` keeps them in that order and one timer, set for the oldest; when it
fires it cancels the tasks whose time has passed, oldest first, and is set again for the
oldest still pending. Entering and leaving a deadline is a dict insert and delete.

Like ``asyncio.timeout``, an expired deadline turns the cancellation it caused into
``TimeoutError`` (or the error its ``Deadlines`` names) as its block exits; any other
cancellation passes through. A deadline's block must not yield to other code of its task
(no ``yield`` inside it in a generator): the task is cancelled wherever it is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from types import TracebackType


class Deadlines:
    """Deadlines ``seconds`` long, each over one ``async with`` block (``new()``); an
    expired block raises ``expired()`` (``TimeoutError`` unless told otherwise)."""

    def __init__(self, seconds: float, expired: Callable[[], BaseException] = TimeoutError) -> None:
        self.seconds = seconds
        self.expired = expired
        self._pending: dict[Deadline, None] = {}  # oldest first: insertion order
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the timer's

    def new(self) -> Deadline:
        """A deadline, counted from entering its block."""
        return Deadline(self)

    @property
    def pending(self) -> int:
        """Blocks under way with their deadline not passed."""
        return len(self._pending)

    def add(self, deadline: Deadline, loop: asyncio.AbstractEventLoop) -> None:
        """Watch a deadline whose block has begun on ``loop`` (the newest: it ends last)."""
        self._pending[deadline] = None
        if self._timer is None or loop is not self._loop:  # none set, or on a loop gone
            self._loop = loop
            self._set_timer(deadline.until)

    def discard(self, deadline: Deadline) -> None:
        """Stop watching a deadline whose block has ended."""
        self._pending.pop(deadline, None)

    def _set_timer(self, when: float) -> None:
        assert self._loop is not None
        self._timer = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer = None
        assert self._loop is not None
        now = self._loop.time()
        expired = []
        while self._pending:
            oldest = next(iter(self._pending))
            if oldest.until > now:
                self._set_timer(oldest.until)
                break
            del self._pending[oldest]
            expired.append(oldest)
        for deadline in expired:  # after the timer is set again
            # A task whose loop is closed raises: nothing is left there to cancel.
            with contextlib.suppress(RuntimeError):
                deadline.expire()


class Deadline:
    """One block's deadline (``async with``): its task is cancelled when it passes, and the
    block raises its ``Deadlines``' error."""

    __slots__ = ("_cancelling", "_owner", "_task", "expired", "until")

    def __init__(self, owner: Deadlines) -> None:
        self._owner = owner
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self.until = 0.0
        self.expired = False

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline needs a task")
        self._task, self._cancelling = task, task.cancelling()
        loop = asyncio.get_running_loop()
        self.until = loop.time() + self._owner.seconds
        self._owner.add(self, loop)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._owner.discard(self)
        task = self._task
        assert task is not None
        # As asyncio.timeout: the cancel it made is taken back however the block ends.
        if self.expired and task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
            raise self._owner.expired() from error

    def expire(self) -> None:
        """Its time has passed: cancel its task."""
        self.expired = True
        assert self._task is not None
        self._task.cancel()
