"""Deadlines of one length on one timer: each block that outlasts its deadline, and only
such a block, is cancelled and raises TimeoutError, in the order they began; other
cancellations pass through; nothing stays watched after its block."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from app.upstreams.deadlines import Deadlines


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """The test, run in an event loop of its own."""

    @functools.wraps(scenario)
    def test() -> None:
        asyncio.run(scenario())

    return test


async def held(deadlines: Deadlines, release: asyncio.Event) -> str:
    """A block that waits for ``release``: 'done', or 'timeout' when its deadline passed."""
    try:
        async with deadlines.new():
            await release.wait()
    except TimeoutError:
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # its own cancel taken back
        return "timeout"
    return "done"


@run
async def test_a_block_that_outlasts_its_deadline_times_out_and_others_do_not() -> None:
    deadlines = Deadlines(0.05)
    never, soon = asyncio.Event(), asyncio.Event()
    stuck = asyncio.create_task(held(deadlines, never))
    quick = asyncio.create_task(held(deadlines, soon))
    await asyncio.sleep(0)
    soon.set()
    assert await quick == "done"
    assert await stuck == "timeout"
    assert deadlines.pending == 0


class ClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when the test moves it (``now``)."""

    now = 0.0

    def time(self) -> float:
        return self.now


async def settle() -> None:
    """Let every task that can run, run (the clock standing still)."""
    for _ in range(10):
        await asyncio.sleep(0)


def test_overlapping_deadlines_expire_each_at_its_own_time() -> None:
    """10 s deadlines begun at 0 and at 5: at 10.5 only the first has expired; a block
    that ends in between is let be; at 15.5 the second expires."""
    loop = ClockLoop()

    async def scenario() -> None:
        deadlines = Deadlines(10)
        never, middle = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(held(deadlines, never))
        await settle()
        loop.now = 5
        second = asyncio.create_task(held(deadlines, never))
        third = asyncio.create_task(held(deadlines, middle))
        await settle()
        loop.now = 10.5
        await settle()
        assert first.done() and first.result() == "timeout"
        assert not second.done() and not third.done()
        middle.set()
        await settle()
        assert third.result() == "done"
        loop.now = 15.5
        await settle()
        assert second.done() and second.result() == "timeout"
        assert deadlines.pending == 0

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


@run
async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    deadlines = Deadlines(10)
    task = asyncio.create_task(held(deadlines, asyncio.Event()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert deadlines.pending == 0


@run
async def test_an_error_inside_the_block_passes_through_and_is_not_watched() -> None:
    deadlines = Deadlines(10)
    with pytest.raises(ValueError, match="inside"):
        async with deadlines.new():
            raise ValueError("inside")
    assert deadlines.pending == 0


def test_a_task_cancelled_from_elsewhere_as_its_deadline_passes_stays_cancelled() -> None:
    """Both cancel it: the outside one wins, as with ``asyncio.timeout``."""
    loop = ClockLoop()

    async def scenario() -> None:
        deadlines = Deadlines(10)
        task = asyncio.create_task(held(deadlines, asyncio.Event()))
        await settle()
        loop.now = 10.5
        await asyncio.sleep(0)  # the timer fires after this task in the loop's turn
        await asyncio.sleep(0)
        assert deadlines.pending == 0 and not task.done()  # expired, not yet woken
        task.cancel()
        await settle()
        assert task.cancelled()

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


def test_deadlines_outlive_the_event_loop_they_were_first_used_on() -> None:
    """An upstream's deadlines used under one loop, then under another (a timer set on a
    closed loop never fires)."""
    deadlines = Deadlines(0.05)

    async def stuck() -> str:
        return await asyncio.wait_for(held(deadlines, asyncio.Event()), 5)  # bounded if broken

    async def quick() -> str:
        done = asyncio.Event()
        done.set()
        return await held(deadlines, done)

    assert asyncio.run(quick()) == "done"  # its timer stays set on a loop now closed
    assert asyncio.run(stuck()) == "timeout"


@run
async def test_an_expired_block_that_ends_otherwise_leaves_its_task_uncancelled() -> None:
    """Code inside that turns the cancel into another error: the deadline's cancel is
    still taken back (as ``asyncio.timeout`` does), so later timeouts count right."""
    deadlines = Deadlines(0.01)
    with pytest.raises(ValueError, match="instead"):
        async with deadlines.new():
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise ValueError("instead") from None
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


# -- one deadline per call: started once, asked for the time left, blocks under it -------


def test_a_calls_deadline_counts_from_its_start_and_is_watched_until_closed() -> None:
    """Started at 0 (10 s): 4 s left at 6; blocks under it come and go without touching
    it; closed, it is no longer watched."""
    loop = ClockLoop()

    async def scenario() -> None:
        deadlines = Deadlines(10)
        deadline = deadlines.start()
        loop.now = 6
        assert deadline.left() == 4 and deadlines.pending == 1
        for _ in range(2):
            async with deadline:
                await asyncio.sleep(0)
        assert deadlines.pending == 1
        deadline.close()
        assert deadlines.pending == 0

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


def test_a_deadline_that_passes_between_its_blocks_cancels_nothing_and_the_next_raises() -> None:
    loop = ClockLoop()

    async def scenario() -> None:
        deadlines = Deadlines(10)
        deadline = deadlines.start()
        bystander = asyncio.create_task(asyncio.sleep(3600))
        loop.now = 10.5
        await settle()
        assert deadlines.pending == 0 and deadline.left() < 0
        assert not bystander.done()  # no block under way: nothing was cancelled
        with pytest.raises(TimeoutError):
            async with deadline:
                raise AssertionError("a block under a passed deadline does not run")
        bystander.cancel()

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


def test_a_deadline_that_passes_in_its_second_block_ends_that_block() -> None:
    loop = ClockLoop()

    async def call(deadlines: Deadlines, release: asyncio.Event) -> str:
        deadline = deadlines.start()
        try:
            async with deadline:
                await asyncio.sleep(0)  # the first block: ends in time
            try:
                async with deadline:
                    await release.wait()
            except TimeoutError:
                task = asyncio.current_task()
                assert task is not None and task.cancelling() == 0
                return "timeout"
            return "done"
        finally:
            deadline.close()

    async def scenario() -> None:
        deadlines = Deadlines(10)
        first = asyncio.create_task(call(deadlines, asyncio.Event()))
        await settle()
        loop.now = 5
        second = asyncio.create_task(call(deadlines, asyncio.Event()))
        await settle()
        loop.now = 10.5
        await settle()
        assert first.result() == "timeout" and not second.done()
        loop.now = 15.5
        await settle()
        assert second.result() == "timeout" and deadlines.pending == 0

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
