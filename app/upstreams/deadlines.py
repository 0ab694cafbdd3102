"""One call's deadline, and many of one length on one loop timer (``timeout.total``).

A call to an upstream has one clock: the ``Deadline`` made where it starts
(``Deadlines.start()``, as its concurrency slot is held) and passed down. The layers
below ask it for the time left (``left()``: the retry wait, whether the first-byte
window matters) or run a block under it (``async with deadline:``: the wait for the
answer, for a stream's first chunk, for every block of a bounded draft stream), so
there is no second clock to drift from the first. A block ``async with
deadlines.new():`` is a deadline of its own, counted from entering it.

``asyncio.timeout`` schedules a loop timer on entry and cancels it on exit: ~4.5 µs a use
under uvloop here, and ~5% of a ``local_only`` request's samples at c=64 in
``bench/profile_hot_path.py``, though a whole answer's deadline (seconds) almost never
fires. Every call to one upstream has the same deadline, so they expire in the order they
began: ``Deadlines`` keeps them in that order and one timer, set for the oldest; when it
fires it marks the deadlines whose time has passed, oldest first, cancels the tasks of
those inside a block, and is set again for the oldest still pending. Starting and ending
a deadline is a dict insert and delete; entering and leaving its block, two assignments.

Like ``asyncio.timeout``, an expired deadline turns the cancellation it caused into
``TimeoutError`` (or the error its ``Deadlines`` names) as its block exits; any other
cancellation passes through. A block entered after its deadline's timer has fired
raises that error at once. A deadline's block must not yield to other code of its task (no
``yield`` inside it in a generator): the task is cancelled wherever it is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from types import TracebackType


class Deadlines:
    """Deadlines ``seconds`` long: one per call (``start()``) or one over an ``async with``
    block (``new()``); an expired block raises ``expired()`` (``TimeoutError`` unless told
    otherwise)."""

    def __init__(self, seconds: float, expired: Callable[[], BaseException] = TimeoutError) -> None:
        self.seconds = seconds
        self.expired = expired
        self._pending: dict[Deadline, None] = {}  # oldest first: insertion order
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the timer's

    def new(self) -> Deadline:
        """A deadline, counted from entering its block and ended with it."""
        return Deadline(self)

    def start(self) -> Deadline:
        """A call's deadline, counted from now until ``close()``; its blocks
        (``async with``) may be entered any number of times (in a running loop)."""
        deadline = Deadline(self)
        deadline.start(asyncio.get_running_loop())
        return deadline

    @property
    def pending(self) -> int:
        """Deadlines started and not passed nor closed."""
        return len(self._pending)

    def add(self, deadline: Deadline, loop: asyncio.AbstractEventLoop) -> None:
        """Watch a deadline just started on ``loop`` (the newest: it ends last)."""
        self._pending[deadline] = None
        if self._timer is None or loop is not self._loop:  # none set, or on a loop gone
            self._loop = loop
            self._set_timer(deadline.until)

    def discard(self, deadline: Deadline) -> None:
        """Stop watching a deadline whose call has ended."""
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
    """One call's (or one block's) deadline: ``left()`` tells the time to it, and a block
    under it (``async with``) has its task cancelled when it passes and raises its
    ``Deadlines``' error."""

    __slots__ = ("_cancelling", "_loop", "_owner", "_task", "_whole_block", "expired", "until")

    def __init__(self, owner: Deadlines) -> None:
        self._owner = owner
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[object] | None = None  # the task of the block under way
        self._cancelling = 0
        self._whole_block = False  # started by its block (``new()``): ended with it
        self.until = 0.0  # the loop's time when it passes
        self.expired = False

    @property
    def seconds(self) -> float:
        """Its whole length."""
        return self._owner.seconds

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Count it from now."""
        self._loop = loop
        self.until = loop.time() + self._owner.seconds
        self._owner.add(self, loop)

    def left(self) -> float:
        """Seconds until it passes (negative once it has)."""
        assert self._loop is not None, "a deadline counts from its start"
        return self.until - self._loop.time()

    def close(self) -> None:
        """The call has ended: no longer watched."""
        self._owner.discard(self)

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline needs a task")
        if self._loop is None:
            self._whole_block = True
            self.start(asyncio.get_running_loop())
        elif self.expired:  # passed (a block entered as it passes: the timer cancels it)
            raise self._owner.expired()
        self._task, self._cancelling = task, task.cancelling()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task = self._task
        assert task is not None
        self._task = None
        if self._whole_block:
            self._owner.discard(self)
        # As asyncio.timeout: the cancel it made is taken back however the block ends.
        if self.expired and task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
            raise self._owner.expired() from error

    def expire(self) -> None:
        """Its time has passed: cancel the task of the block under way, if any."""
        if self.expired:
            return
        self.expired = True
        if self._task is not None:
            self._task.cancel()
