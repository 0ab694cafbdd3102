"""Stand-ins that play an agent's counterpart, answering by what the conversation holds.

An agent loop asks the local model and the cloud a different number of times in
each strategy, so a FIFO script cannot say who answers what. These answer by the
request itself: a user's question with tools gets a ``get_weather`` call; once the
tool's result is the last message, a final answer quoting it; a request for JSON
output (``response_format`` json_schema, or a named function to call) gets
``WEATHER_JSON``, which fits the tests' schema.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from .cerebras import FakeCerebras
from .llama_server import FakeLlamaServer
from .script import JSON, Reply, ScriptedServer

CITY_CALL = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
WEATHER_JSON = {"city": "Paris", "temperature": 21}

_body: ContextVar[JSON | None] = ContextVar("body", default=None)


def final_answer(tool_result: str) -> str:
    """The counterpart's last word once the tool has answered."""
    return f"It is {tool_result} in Paris today."


def agent_reply(body: JSON) -> Reply:
    """What the counterpart answers to this request."""
    messages: list[Any] = body.get("messages") or [{}]
    last = messages[-1] if isinstance(messages[-1], dict) else {}
    if last.get("role") == "tool":
        return Reply(final_answer(str(last.get("content"))))
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return Reply(orjson.dumps(WEATHER_JSON).decode())
    choice = body.get("tool_choice")
    if isinstance(choice, dict):  # a named function: structured output by function calling
        name = choice["function"]["name"]
        return Reply(
            "", tool_calls=[{"name": name, "arguments": orjson.dumps(WEATHER_JSON).decode()}]
        )
    if body.get("tools"):
        return Reply("", tool_calls=[CITY_CALL])
    return Reply("Hello! How can I help you with the weather today?")


class ByConversation(ScriptedServer):
    """Mixin: ``agent_reply(request body)`` answers every chat request."""

    async def play(self, request: Request, body: JSON, limit: int | None) -> Response:
        token = _body.set(body)  # each request runs in its own task
        try:
            return await super().play(request, body, limit)
        finally:
            _body.reset(token)

    def next_reply(self) -> Reply:
        return agent_reply(_body.get() or {})


class AgentLlamaServer(ByConversation, FakeLlamaServer):
    """The llama-server stand-in as an agent's counterpart (a template with tool support)."""


class AgentCerebras(ByConversation, FakeCerebras):
    """The Cerebras stand-in as an agent's counterpart."""
