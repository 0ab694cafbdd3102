"""Managed llama-servers for a process whose main thread is busy elsewhere.

With several workers, uvicorn's supervisor loop owns the main thread of
``main.py``, and the workers must share one llama-server rather than each
launch its own. So the supervisor runs the ``ManagedLlamaServer``s here, on an
event loop in a thread of their own, and the workers are pointed at their URLs.
The thread lives until ``stop()`` has stopped the servers: Linux's
``PR_SET_PDEATHSIG`` (see ``managed.py``) fires when the *thread* that spawned
a child ends, so ending it early would kill the servers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from app.config import LaunchConfig
from app.local_server.managed import ManagedLlamaServer
from app.telemetry.workers import close_server, serve_state


class BackgroundServers:
    """Start, supervise and stop managed llama-servers from any thread; their status is
    served on ``status_socket`` (``{"pid", "local_servers": {name: status}}``)."""

    def __init__(
        self, launches: Mapping[str, LaunchConfig], status_socket: Path | None = None
    ) -> None:
        self.launches = dict(launches)
        self.status_socket = status_socket
        self.servers: dict[str, ManagedLlamaServer] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._started: concurrent.futures.Future[dict[str, str]] = concurrent.futures.Future()

    def start(self) -> dict[str, str]:
        """Launch every server and wait until each is healthy; returns name -> base URL.

        Raises what ``ManagedLlamaServer.start`` raises (``LocalServerError``);
        the servers already started are stopped again first.
        """
        self._loop = asyncio.new_event_loop()
        # Created before the loop runs, in this thread: create_task is not thread-safe later.
        self._main = self._loop.create_task(self._run())
        self._thread = threading.Thread(target=self._serve, name="llama-servers", daemon=True)
        self._thread.start()
        return self._started.result()

    def stop(self) -> None:
        """Stop the servers (SIGTERM, then SIGKILL after a grace period) and the thread."""
        thread, main, loop = self._thread, self._main, self._loop
        if thread is None or main is None or loop is None:
            return
        if thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(main.cancel)
        thread.join()

    def status(self) -> dict[str, Any]:
        """What the workers' ``/stats`` shows under ``local_servers``."""
        return {
            "pid": os.getpid(),
            "local_servers": {name: server.status() for name, server in self.servers.items()},
        }

    def _serve(self) -> None:
        loop = self._loop
        assert loop is not None and self._main is not None
        try:
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(self._main)
        except BaseException as exc:  # recorded for start(); nobody else can see it
            if not self._started.done():
                self._started.set_exception(exc)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
            if not self._started.done():
                self._started.set_exception(RuntimeError("stopped before the servers started"))

    async def _run(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                urls = {}
                for name, launch in self.launches.items():
                    server = ManagedLlamaServer(launch, name)
                    stack.push_async_callback(server.stop)
                    self.servers[name] = server
                    urls[name] = await server.start()
                if self.status_socket is not None:
                    status = await serve_state(self.status_socket, self.status)
                    stack.push_async_callback(close_server, status, self.status_socket)
                self._started.set_result(urls)
                await asyncio.Event().wait()  # until stop() cancels this task
        except BaseException as exc:
            # Only now, with every server stopped again: start() must not return before.
            if not self._started.done():
                self._started.set_exception(exc)
            raise
