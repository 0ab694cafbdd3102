"""The chat endpoint's fast lane: ``POST /v1/chat/completions`` served without
Starlette's middleware stack, router and FastAPI's dependency solving.

The chat endpoint is the proxy's only hot path, and on a loopback upstream the
framework layers cost more than the proxy's own work (``bench/overhead.py``,
README "Performance"). So ``SpecproxyApp`` hands that one method and path
straight to the route's own function, with the same error envelopes as
``app.api.handlers``; everything else (``/stats``, ``/metrics``, ``/docs``,
CORS preflights) goes through FastAPI as usual, and the route stays
registered there, which is what documents it in the OpenAPI schema.
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


class SpecproxyApp(FastAPI):
    """FastAPI, with ``POST /v1/chat/completions`` dispatched to ``chat_lane`` directly."""

    chat_lane: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane = self.chat_lane
        if (
            lane is not None
            and scope["type"] == "http"
            and scope["path"] == CHAT_PATH
            and scope["method"] == "POST"
        ):
            scope["app"] = self
            await lane(scope, receive, send)
            return
        await super().__call__(scope, receive, send)
