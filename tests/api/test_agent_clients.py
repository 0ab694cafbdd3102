"""The agent clients people use, pointed at the proxy, in every strategy, streaming and not.

The official openai SDK runs a whole agent loop by hand; LangChain's ``ChatOpenAI``
binds tools and asks for structured output; a LangGraph ReAct agent runs a real
Python tool; a pydantic-ai agent runs one too, through the chat door and the Responses
door, and asks for structured output. The stand-ins answer as an agent's counterpart
(``tests.fakes.agent``), so each loop must end with the tool's result in the final
answer: a tool call lost, cut or mangled on the way breaks it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.fakes.agent import WEATHER_JSON, AgentCerebras, AgentLlamaServer, final_answer
from tests.support.answers import collect_calls
from tests.support.proxy import MakeProxy, Proxy

SHIPPED_FLOW = {
    "early_abort": True,
    "abort_min_score": 0.5,
    "abort_check_tokens": 8,
    "hedge": "auto",
    "policy": "combined",
    "stream_first_token_s": 0.25,
    "stream_trust_score": 0.1,
}
# (the strategy header, the speculative settings): the shipped flow, and the draft judged
# whole (early abort off), so that a draft is replayed as a stream, not only relayed
ARMS = {
    "local_only": ("local_only", SHIPPED_FLOW),
    "cerebras_only": ("cerebras_only", SHIPPED_FLOW),
    "speculative": ("speculative_decoding", SHIPPED_FLOW),
    "speculative-whole-draft": ("speculative_decoding", {**SHIPPED_FLOW, "early_abort": False}),
}
STRATEGIES = pytest.mark.parametrize("arm", ARMS.values(), ids=ARMS.keys())
QUESTION = "What is the weather in Paris?"
TOOL_RESULT = "21 degrees and sunny"
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture
def llama_server_class() -> type[FakeLlamaServer]:
    return AgentLlamaServer


@pytest.fixture
def cerebras_class() -> type[FakeCerebras]:
    return AgentCerebras


@pytest.fixture
def agent_proxy(make_proxy: MakeProxy, arm: tuple[str, dict[str, Any]]) -> Iterator[Proxy]:
    """The proxy with the arm's speculative settings."""
    with make_proxy(speculative_decoding=arm[1]) as proxy:
        yield proxy


def chat_model(proxy: Proxy, arm: tuple[str, dict[str, Any]], **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model="auto",
        base_url=f"{proxy.url}/v1",
        api_key="unused",  # type: ignore[arg-type]
        default_headers={"X-Routing-Strategy": arm[0]},
        max_retries=0,
        temperature=0,
        **kwargs,
    )


calls_seen: list[str] = []


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    calls_seen.append(city)
    return TOOL_RESULT


# -- the openai SDK -----------------------------------------------------------------------


def sdk_turn(client: openai.OpenAI, messages: list[Any], stream: bool) -> dict[str, Any]:
    """One assistant turn as a message dict, streamed tool calls put back together."""
    if not stream:
        answer = client.chat.completions.create(
            model="auto", messages=messages, tools=[WEATHER_TOOL]
        )
        return answer.choices[0].message.to_dict() | {"finish": answer.choices[0].finish_reason}
    content, calls, finish, _ = collect_calls(
        chunk.to_dict()
        for chunk in client.chat.completions.create(
            model="auto", messages=messages, tools=[WEATHER_TOOL], stream=True
        )
    )
    message: dict[str, Any] = {"role": "assistant", "content": content or None, "finish": finish}
    if calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ]
    return message


@pytest.mark.parametrize("stream", [False, True])
@STRATEGIES
def test_openai_sdk_agent_loop(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], stream: bool
) -> None:
    client = openai.OpenAI(
        base_url=f"{agent_proxy.url}/v1",
        api_key="unused",
        max_retries=0,
        default_headers={"X-Routing-Strategy": arm[0]},
    )
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    first = sdk_turn(client, messages, stream)
    assert first["finish"] == "tool_calls"
    [call] = first["tool_calls"]
    assert call["id"] and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    first.pop("finish")
    messages += [first, {"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT}]
    final = sdk_turn(client, messages, stream)
    assert final["finish"] == "stop" and not final.get("tool_calls")
    assert final["content"] == final_answer(TOOL_RESULT)


# -- LangChain ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@STRATEGIES
def test_langchain_bind_tools(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], stream: bool
) -> None:
    model = chat_model(agent_proxy, arm).bind_tools([get_weather])
    if stream:
        gathered: AIMessageChunk | None = None
        for piece in model.stream(QUESTION):
            assert isinstance(piece, AIMessageChunk)
            gathered = piece if gathered is None else gathered + piece
        assert gathered is not None
        message: AIMessage = gathered
    else:
        result = model.invoke(QUESTION)
        assert isinstance(result, AIMessage)
        message = result
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert message.invalid_tool_calls == []
    assert message.response_metadata.get("finish_reason") == "tool_calls"


class Weather(BaseModel):
    """The weather in a city."""

    city: str
    temperature: int


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
@STRATEGIES
def test_langchain_with_structured_output(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], method: str
) -> None:
    model = chat_model(agent_proxy, arm).with_structured_output(Weather, method=method)
    assert model.invoke(QUESTION) == Weather(**WEATHER_JSON)


# -- LangGraph ----------------------------------------------------------------------------


def react_agent(model: ChatOpenAI) -> CompiledStateGraph[Any]:
    """LangGraph's ReAct loop: the model, then its tool calls run, until it answers."""
    bound = model.bind_tools([get_weather])

    def think(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", think)
    graph.add_node("tools", ToolNode([get_weather]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


@pytest.mark.parametrize("stream", [False, True])
@STRATEGIES
def test_langgraph_react_agent(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], stream: bool
) -> None:
    calls_seen.clear()
    agent = react_agent(chat_model(agent_proxy, arm, streaming=stream))
    question = {"messages": [("user", QUESTION)]}
    if stream:
        streamed = list(agent.stream(question, stream_mode="messages"))
        tool_messages = [m for m, _ in streamed if isinstance(m, ToolMessage)]
        final_text = "".join(
            str(m.content)
            for m, meta in streamed
            if isinstance(m, AIMessageChunk) and meta.get("langgraph_step") == 3
        )
    else:
        messages = agent.invoke(question)["messages"]
        tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
        final_text = str(messages[-1].content)
    assert calls_seen == ["Paris"]  # the real tool ran once, with the call's argument
    assert [m.content for m in tool_messages] == [TOOL_RESULT]
    assert final_text == final_answer(TOOL_RESULT)


# -- pydantic-ai --------------------------------------------------------------------------


def pydantic_agent(client: openai.AsyncOpenAI, api: str, **kwargs: Any) -> Any:
    """A pydantic-ai agent on the proxy's chat (``api`` ``chat``) or Responses door, with
    ``get_weather`` as its tool."""
    kind = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    agent = Agent(kind("auto", provider=OpenAIProvider(openai_client=client)), **kwargs)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        calls_seen.append(city)
        return TOOL_RESULT

    return agent


def async_client(proxy: Proxy, arm: tuple[str, dict[str, Any]]) -> openai.AsyncOpenAI:
    """The client pydantic-ai drives (made and closed on the loop that uses it)."""
    return openai.AsyncOpenAI(
        base_url=f"{proxy.url}/v1",
        api_key="unused",
        default_headers={"X-Routing-Strategy": arm[0]},
        max_retries=0,
    )


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("stream", [False, True])
@STRATEGIES
def test_pydantic_ai_agent_calls_its_tool(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], stream: bool, api: str
) -> None:
    calls_seen.clear()

    async def run() -> str:
        async with async_client(agent_proxy, arm) as client:
            agent = pydantic_agent(client, api)
            if not stream:
                return str((await agent.run(QUESTION)).output)
            async with agent.run_stream(QUESTION) as result:
                return "".join([delta async for delta in result.stream_text(delta=True)])

    assert asyncio.run(run()) == final_answer(TOOL_RESULT)
    assert calls_seen == ["Paris"]


@pytest.mark.parametrize("api", ["chat", "responses"])
@STRATEGIES
def test_pydantic_ai_structured_output(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], api: str
) -> None:
    async def run() -> Any:
        async with async_client(agent_proxy, arm) as client:
            agent = pydantic_agent(client, api, output_type=NativeOutput(Weather))
            return (await agent.run(QUESTION)).output

    assert asyncio.run(run()) == Weather(**WEATHER_JSON)
