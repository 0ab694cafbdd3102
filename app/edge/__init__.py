"""The HTTP edge: how a request reaches the app and how its answer reaches the client.

``server.edge`` picks one of two edges:

- ``standard``: FastAPI, Starlette and uvicorn as they come. The chat route is an
  ordinary FastAPI route with its dependencies, a stream is Starlette's
  ``StreamingResponse``, the server protocol and its limits are uvicorn's own.
- ``lean``: the parts built here by hand because they measured cheaper in CPU per
  request (docs/performance.md says which, by how much, and with what command).

Every hand-built part of the edge lives in this package and is used only when the lean
edge is chosen; the app, its checks and its test suites work on either edge. What the
standard edge cannot enforce (the limits only the lean protocol has) is listed in
docs/performance.md, "The HTTP edge: lean or standard".
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI
from starlette.responses import Response

from app.config import HttpLimits
from app.edge import heap
from app.edge.lane import Endpoint, LaneApp
from app.edge.stream import lean_stream, standard_stream

EdgeName = Literal["lean", "standard"]

StreamFactory = Callable[[AsyncGenerator[bytes], Mapping[str, str]], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Edge:
    """Which hand-built parts serve the edge; a part that is off is the framework's own."""

    chat_lane: bool  # POST /v1/chat/completions past the router (lane.py)
    event_stream: bool  # streams written by EventStream, not StreamingResponse (stream.py)
    protocol: bool  # GuardedHttpTools: head time and size limits, Hangup (protocol.py)
    settled_heap: bool  # gc.freeze and a higher young threshold once started (heap.py)

    @classmethod
    def named(cls, name: EdgeName) -> Edge:
        """The edge ``server.edge`` names."""
        lean = name == "lean"
        return cls(chat_lane=lean, event_stream=lean, protocol=lean, settled_heap=lean)

    def new_app(self, chat_endpoint: Endpoint, **options: Any) -> FastAPI:
        """``FastAPI(**options)``, with ``chat_endpoint`` in the chat lane on the lean edge."""
        if not self.chat_lane:
            return FastAPI(**options)
        app = LaneApp(**options)
        app.chat_endpoint = chat_endpoint
        return app

    @property
    def stream(self) -> StreamFactory:
        """What writes a stream of server-sent events."""
        return lean_stream if self.event_stream else standard_stream

    def uvicorn_options(self, limits: HttpLimits) -> dict[str, Any]:
        """uvicorn's arguments for ``limits`` (in this process: a worker process calls it
        again with its own settings)."""
        options: dict[str, Any] = {
            "timeout_keep_alive": limits.keep_alive_s,
            "limit_concurrency": limits.max_connections,
        }
        if self.protocol:
            # Imported only here: it reaches into uvicorn's internals, which the standard
            # edge never touches.
            from app.edge.protocol import GuardedHttpTools

            # uvicorn takes a protocol class (pickled by name into worker processes), not
            # an instance: the limits in force are set on the class.
            GuardedHttpTools.limits = limits
            options["http"] = GuardedHttpTools
        return options

    def started(self) -> None:
        """The app's long-lived objects are built (its lifespan has begun)."""
        if self.settled_heap:
            heap.settle()
