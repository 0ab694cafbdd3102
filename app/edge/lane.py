"""The lean edge's chat lane: ``POST /v1/chat/completions`` served without Starlette's
middleware stack, router and FastAPI's dependency solving.

The chat endpoint is the proxy's only hot path, and on a loopback upstream the
framework layers cost more than the proxy's own work (``bench/overhead.py``,
docs/performance.md). So ``LaneApp`` hands that one method and path straight to
``chat_endpoint``, with the same error envelopes as ``app.api.handlers``; everything
else (``/stats``, ``/metrics``, ``/docs``, CORS preflights) goes through FastAPI as
usual. The chat route stays registered there as an ordinary route (the standard
edge's): it documents the endpoint in the OpenAPI schema, and serves it on that edge.

Middleware is declared once, with ``add_middleware``: the lane is wrapped in the
same ``user_middleware`` list as FastAPI's own stack, so none is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.handlers import error_response

log = logging.getLogger("specproxy.api")

CHAT_PATH = "/v1/chat/completions"

Endpoint = Callable[[Request], Awaitable[Response]]


def fast_lane(endpoint: Endpoint) -> ASGIApp:
    """An ASGI app that runs ``endpoint``; its exceptions become OpenAI error envelopes."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except Exception as exc:
            response = error_response(request, exc)
        await response(scope, receive, send)

    return serve


class LaneApp(FastAPI):
    """FastAPI, with ``POST /v1/chat/completions`` dispatched to ``chat_endpoint`` directly
    (through the app's own middleware)."""

    chat_endpoint: Endpoint | None = None
    _chat_lane: ASGIApp | None = None

    def chat_lane(self) -> ASGIApp | None:
        """The chat endpoint's ASGI app inside every user middleware, built once."""
        if self._chat_lane is None and self.chat_endpoint is not None:
            lane = fast_lane(self.chat_endpoint)
            for cls, args, kwargs in reversed(self.user_middleware):
                lane = cls(lane, *args, **kwargs)
            self._chat_lane = lane
        return self._chat_lane

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == CHAT_PATH and scope["method"] == "POST":
            lane = self._chat_lane or self.chat_lane()
            if lane is not None:
                scope["app"] = self
                await lane(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
