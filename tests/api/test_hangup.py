"""``unless_disconnected`` with the ``Hangup`` the proxy's protocol puts in a request's
scope: the client's hang-up cancels the work and is answered with None; any other
cancellation (a shutdown) stays a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from app.edge.disconnect import HANGUP, Hangup, unless_disconnected


async def never_receive() -> dict[str, str]:
    raise AssertionError("a scope with a Hangup needs no receive()")


async def waiting(started: asyncio.Event, cancelled: list[bool]) -> str:
    started.set()
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        cancelled.append(True)
        raise
    return "answered"


async def waiting_in_a_task() -> tuple[Hangup, asyncio.Task[str | None], list[bool]]:
    """``waiting`` under ``unless_disconnected`` in a task of its own, once it is waiting:
    the request's ``Hangup``, the task, and where the work notes its cancellation."""
    hangup, started, cancelled = Hangup(), asyncio.Event(), []
    task = asyncio.create_task(
        unless_disconnected({HANGUP: hangup}, never_receive, waiting(started, cancelled))
    )
    await started.wait()
    return hangup, task, cancelled


def test_a_hang_up_cancels_the_work_and_returns_none() -> None:
    async def main() -> None:
        hangup, task, cancelled = await waiting_in_a_task()
        hangup.hang_up()
        assert await task is None
        assert cancelled == [True] and not task.cancelled() and hangup.task is None

    asyncio.run(main())


def test_a_client_gone_before_the_wait_cancels_it_at_once() -> None:
    async def main() -> None:
        hangup, started, cancelled = Hangup(), asyncio.Event(), []
        hangup.hang_up()
        scope = {HANGUP: hangup}
        assert await unless_disconnected(scope, never_receive, waiting(started, cancelled)) is None
        assert cancelled == [True]

    asyncio.run(main())


def test_a_shutdown_stays_a_cancellation() -> None:
    async def main() -> None:
        hangup, task, cancelled = await waiting_in_a_task()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cancelled == [True] and hangup.task is None

    asyncio.run(main())


def test_a_shutdown_during_a_hang_up_stays_a_cancellation() -> None:
    async def main() -> None:
        hangup, task, _ = await waiting_in_a_task()
        hangup.hang_up()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_the_work_done_first_is_its_answer() -> None:
    async def main() -> None:
        hangup = Hangup()

        async def quick() -> str:
            return "answered"

        assert await unless_disconnected({HANGUP: hangup}, never_receive, quick()) == "answered"
        hangup.hang_up()  # after the answer: nothing to cancel
        assert hangup.task is None

    asyncio.run(main())
