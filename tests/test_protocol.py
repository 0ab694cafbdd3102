"""The chat request's tool choice: which kinds demand a call, and how OpenAI's
``allowed_tools`` reaches the upstreams (pure: ``app.protocol``)."""

from __future__ import annotations

from typing import Any

import pytest

from app.protocol import TOOL_CALLS, ChatCompletionRequest


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {}}}


def function(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def allowed(mode: str, *names: str) -> dict[str, Any]:
    return {
        "type": "allowed_tools",
        "allowed_tools": {"mode": mode, "tools": [*map(function, names)]},
    }


ASK = [{"role": "user", "content": "hi"}]
TOOLS = [tool("a"), tool("b")]


@pytest.mark.parametrize(
    ("choice", "demands"),
    [
        ("auto", False),
        ("none", False),
        ("required", True),
        (function("a"), True),
        (allowed("auto", "a"), False),  # the model may answer in words
        (allowed("required", "a"), True),
        ({"type": "custom", "custom": {"name": "a"}}, True),  # another kind names its call
    ],
)
def test_which_choices_demand_a_call(choice: Any, demands: bool) -> None:
    asked = ChatCompletionRequest.model_validate(
        {"messages": ASK, "tools": TOOLS, "tool_choice": choice}
    )
    assert (TOOL_CALLS in asked.needs()) is demands


def test_allowed_tools_are_sent_as_the_tools_they_allow_and_their_mode() -> None:
    raw = {"messages": ASK, "tools": TOOLS, "tool_choice": allowed("required", "b")}
    asked = ChatCompletionRequest.model_validate(raw)
    asked.narrow_to_allowed(raw)
    assert raw["tools"] == [tool("b")] and raw["tool_choice"] == "required"
    assert [t.function.name for t in asked.tools or () if t.function] == ["b"]
    assert asked.tool_choice == "required"


def test_only_an_allowed_tools_choice_is_narrowed() -> None:
    """A function choice that also carries an ``allowed_tools`` member is a function choice:
    narrowed by it, the call it demands was dropped."""
    choice = function("a") | {"allowed_tools": allowed("auto", "b")["allowed_tools"]}
    raw = {"messages": ASK, "tools": TOOLS, "tool_choice": choice}
    asked = ChatCompletionRequest.model_validate(raw)
    asked.narrow_to_allowed(raw)
    assert raw["tools"] == TOOLS and raw["tool_choice"] == choice
    assert TOOL_CALLS in asked.needs()
