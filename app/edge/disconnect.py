"""A client that goes away cancels its request, whether it waits for an answer or a stream.

Once a chat request's body has been read, the next ASGI message can only be the
disconnect. The lean edge's server protocol (``app.edge.protocol``) tells a request so
itself: it puts a ``Hangup`` in each request's scope and, when the connection is lost
before the answer is complete, cancels the task registered there, with no task or wait
per request. On the standard edge (uvicorn's own protocol, or any other ASGI server)
``unless_disconnected`` runs one watcher task beside the work to read that message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from starlette.types import Receive, Scope

T = TypeVar("T")

HANGUP = "specproxy.hangup"  # the scope key of a request's ``Hangup``


class Hangup:
    """Set by the server in a request's scope: the task to cancel if the client hangs up
    before its answer is complete, and whether it has; and whether the request's whole
    body has arrived (``arrived``: reading it cannot wait, so it needs no timer)."""

    __slots__ = ("arrived", "gone", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.gone = False
        self.arrived = False

    def hang_up(self) -> None:
        """The client is gone: cancel the task waiting for it, if any (once)."""
        if self.gone:
            return
        self.gone = True
        if self.task is not None:
            self.task.cancel()


async def unless_disconnected(scope: Scope, receive: Receive, work: Awaitable[T]) -> T | None:
    """Await ``work`` in this task; if the client disconnects first, cancel it, return None."""
    task = asyncio.current_task()
    assert task is not None
    hangup: Hangup | None = scope.get(HANGUP)
    if hangup is None:
        hangup = Hangup()
        watcher = asyncio.get_running_loop().create_task(_watch(receive, hangup))
    else:
        watcher = None
    hangup.task = task
    if hangup.gone:
        task.cancel()  # gone before it got here: as a watcher would have found at once
    try:
        return await work
    except asyncio.CancelledError:
        if not hangup.gone or task.uncancel() > 0:
            raise  # not the client's doing (shutdown): stay cancelled
        return None
    finally:
        hangup.task = None
        if watcher is not None:
            watcher.cancel()


async def _watch(receive: Receive, hangup: Hangup) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    hangup.hang_up()
