"""Stand-ins that answer by prompt, not by arrival order, for the load and fuzz tests.

Hundreds of concurrent requests reach a stand-in in no fixed order, so a FIFO
script cannot say which request gets which reply. ``ByPrompt`` looks the reply
up by the request's last message instead: each request names its scenario, and
the outcome of every request, and so every count, is known in advance.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .cerebras import FakeCerebras
from .llama_server import FakeLlamaServer
from .script import JSON, Reply, ScriptedServer

_prompt: ContextVar[str] = ContextVar("prompt", default="")


def last_message(body: JSON) -> str:
    """The text of a chat request's last message ("" when there is none)."""
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    content = last.get("content") if isinstance(last, dict) else None
    return content if isinstance(content, str) else ""


class ByPrompt(ScriptedServer):
    """Mixin: ``script[last message]`` answers the request; anything else gets ``default``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.script: dict[str, Reply] = {}

    async def play(self, request: Request, body: JSON, limit: int | None) -> Response:
        # Each request runs in its own task, so the context variable is this request's.
        token = _prompt.set(last_message(body))
        try:
            return await super().play(request, body, limit)
        finally:
            _prompt.reset(token)

    def next_reply(self) -> Reply:
        return self.script.get(_prompt.get(), self.default)


class ScriptedLlamaServer(ByPrompt, FakeLlamaServer):
    """The llama-server stand-in, answering by prompt."""


class ScriptedCerebras(ByPrompt, FakeCerebras):
    """The Cerebras stand-in, answering by prompt."""
