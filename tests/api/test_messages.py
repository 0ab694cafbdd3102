"""Anthropic's Messages API (``POST /v1/messages``) with the official ``anthropic`` SDK and
LangChain's ``ChatAnthropic``, in every strategy, streamed and not, on both edges.

The stand-ins answer as an agent's counterpart (``tests.fakes.agent``): a tool loop over
two turns ends with the tool's result in the final answer only when the tool_use block,
its id and its arguments survived the trip both ways.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import anthropic
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from app.doors.messages import chat_call_id
from tests.api.test_agent_clients import (
    QUESTION,
    STRATEGIES,
    TOOL_RESULT,
    agent_proxy,
    cerebras_class,
    get_weather,
    llama_server_class,
)
from tests.fakes import FakeCerebras, FakeLlamaServer, tokenize
from tests.fakes.agent import final_answer
from tests.support.proxy import Proxy, chat_bodies

pytestmark = pytest.mark.process
__all__ = ["agent_proxy", "cerebras_class", "llama_server_class"]  # fixtures used here

MODEL = "claude-sonnet-4-6"
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
ASK = [{"role": "user", "content": QUESTION}]


def client_for(proxy: Proxy, strategy: str, **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy.url,
        api_key="unused",
        max_retries=0,
        default_headers={"X-Routing-Strategy": strategy},
        **kwargs,
    )


def turn(client: anthropic.Anthropic, messages: list[Any], stream: bool) -> anthropic.types.Message:
    """One assistant turn, whole or put together from the stream by the SDK."""
    if not stream:
        return client.messages.create(
            model=MODEL, max_tokens=256, tools=[WEATHER], messages=messages
        )
    with client.messages.stream(
        model=MODEL, max_tokens=256, tools=[WEATHER], messages=messages
    ) as events:
        kinds = [event.type for event in events]
        final = events.get_final_message()
    assert kinds[0] == "message_start" and "message_stop" in kinds
    return final


def the_chat_calls(local: FakeLlamaServer, cloud: FakeCerebras) -> list[dict[str, Any]]:
    """The last chat request either stand-in got."""
    bodies = chat_bodies(local) + chat_bodies(cloud)
    return max(bodies, key=lambda b: len(b["messages"]))["messages"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("stream", [False, True])
@STRATEGIES
def test_anthropic_sdk_tool_loop(
    agent_proxy: Proxy,
    arm: tuple[str, dict[str, Any]],
    stream: bool,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
) -> None:
    client = client_for(agent_proxy, arm[0])
    first = turn(client, list(ASK), stream)
    assert first.stop_reason == "tool_use"
    [use] = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    assert use.id.startswith("toolu_")
    assert first.usage.output_tokens > 0
    messages: list[Any] = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": TOOL_RESULT}],
        },
    ]
    second = turn(client, messages, stream)
    assert second.stop_reason == "end_turn"
    assert [b.type for b in second.content] == ["text"]
    assert second.content[0].text == final_answer(TOOL_RESULT)  # type: ignore[union-attr]
    # the tool_use id came back as the chat tool_call_id the upstream gave
    sent = the_chat_calls(local, cloud)
    assert sent[-1] == {
        "role": "tool",
        "tool_call_id": chat_call_id(use.id),
        "content": TOOL_RESULT,
    }
    assert sent[-2]["tool_calls"][0]["id"] == chat_call_id(use.id)


@STRATEGIES
def test_anthropic_sdk_headers_and_report(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]]
) -> None:
    client = client_for(agent_proxy, arm[0])
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=64,
        messages=ASK,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        metadata={"user_id": "u-1"},
        extra_headers={"anthropic-beta": "prompt-caching-2024-07-31"},
        extra_query={"beta": "true"},
    )
    message = raw.parse()
    assert raw.headers["X-Model-Used"] in ("local", "cerebras")
    assert raw.headers["X-Routing-Strategy"] == arm[0]
    assert message.id.startswith("msg_") and message.model == MODEL
    report = (message.model_extra or {})["specproxy"]
    assert report["model_used"] == raw.headers["X-Model-Used"]
    assert ("speculative_decoding" in report) is (arm[0] == "speculative_decoding")


@pytest.mark.parametrize("stream", [False, True])
@STRATEGIES
def test_langchain_chat_anthropic_bind_tools(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], stream: bool
) -> None:
    llm = ChatAnthropic(  # type: ignore[call-arg]
        model=MODEL,
        anthropic_api_url=agent_proxy.url,
        api_key="unused",
        max_retries=0,
        max_tokens=256,
        default_headers={"X-Routing-Strategy": arm[0]},
    ).bind_tools([get_weather])

    def ask(messages: list[Any]) -> AIMessage:
        if not stream:
            return llm.invoke(messages)  # type: ignore[return-value]
        return functools.reduce(operator.add, llm.stream(messages))  # type: ignore[no-any-return]

    question = HumanMessage(QUESTION)
    first = ask([question])
    [call] = first.tool_calls
    assert call["name"] == "get_weather" and call["args"] == {"city": "Paris"}
    result = ToolMessage(content=TOOL_RESULT, tool_call_id=call["id"])
    final = ask([question, first, result])
    assert final.text == final_answer(TOOL_RESULT)


@STRATEGIES
def test_count_tokens_from_local_tokenizer(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], local: FakeLlamaServer
) -> None:
    counted = client_for(agent_proxy, arm[0]).messages.count_tokens(
        model=MODEL, messages=ASK, tools=[WEATHER], system="Be brief."
    )
    transcript = f"tools: get_weather\nsystem: Be brief.\nuser: {QUESTION}"
    assert counted.input_tokens == len(tokenize(transcript))
    assert [r.path for r in local.requests][-2:] == ["/apply-template", "/tokenize"]
