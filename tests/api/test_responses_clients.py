"""``POST /v1/responses`` with the clients that speak it, in every strategy, streamed and not.

The official openai SDK (``responses.create`` and ``responses.stream``: text, a
function-calling loop over two turns by ``previous_response_id`` and by sending the items
back whole, ``json_schema`` output) and the OpenAI Agents SDK (an ``Agent`` with one
function tool, ``Runner.run`` and ``Runner.run_streamed``) against the proxy, whose
stand-ins answer as an agent's counterpart (``tests.fakes.agent``): a loop ends with the
tool's result in the final answer only if the call and its result crossed the door whole.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from tests.api.test_agent_clients import QUESTION, STRATEGIES, TOOL_RESULT
from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.fakes.agent import WEATHER_JSON, AgentCerebras, AgentLlamaServer, final_answer
from tests.support.proxy import MakeProxy, Proxy

GREETING = "Hello! How can I help you with the weather today?"
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])


class Weather(BaseModel):
    city: str
    temperature: int


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


def client_for(proxy: Proxy, arm: tuple[str, dict[str, Any]]) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{proxy.url}/v1",
        api_key="unused",
        max_retries=0,
        default_headers={"X-Routing-Strategy": arm[0]},
    )


def respond(client: openai.OpenAI, stream: bool, **kwargs: Any) -> Any:
    """One response, by ``create`` or by ``stream`` (its events checked in order)."""
    if not stream:
        return client.responses.create(model="auto", **kwargs)
    with client.responses.stream(model="auto", **kwargs) as events:
        seen = [event for event in events]
        final = events.get_final_response()
    kinds = [event.type for event in seen]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [event.sequence_number for event in seen] == list(range(len(seen)))
    assert kinds.count("response.output_item.added") == len(final.output)
    assert kinds.count("response.output_item.done") == len(final.output)
    return final


@STREAMED
@STRATEGIES
def test_text(agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], stream: bool) -> None:
    client = client_for(agent_proxy, arm)
    response = respond(client, stream, input="Hi", instructions="Be brief.", metadata={"run": "7"})
    assert response.status == "completed"
    assert response.output_text == GREETING
    assert response.usage is not None and response.usage.output_tokens > 0
    assert response.metadata == {"run": "7"}  # the client's metadata, echoed as it came
    assert response.specproxy["model_used"]  # type: ignore[attr-defined]  # the proxy's
    again = client.responses.retrieve(response.id)
    assert again.output_text == GREETING


def function_call(response: Any) -> Any:
    [call] = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id
    return call


@STREAMED
@STRATEGIES
def test_function_loop_by_previous_response_id(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], stream: bool
) -> None:
    client = client_for(agent_proxy, arm)
    first = respond(client, stream, input=QUESTION, tools=[WEATHER_TOOL])
    call = function_call(first)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT}
    final = respond(
        client, stream, previous_response_id=first.id, input=[result], tools=[WEATHER_TOOL]
    )
    assert final.output_text == final_answer(TOOL_RESULT)
    assert final.previous_response_id == first.id


@STREAMED
@STRATEGIES
def test_function_loop_with_items_sent_back(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], stream: bool
) -> None:
    client = client_for(agent_proxy, arm)
    items: list[Any] = [{"role": "user", "content": QUESTION}]
    first = respond(client, stream, input=items, tools=[WEATHER_TOOL], store=False)
    call = function_call(first)
    items += first.output  # the items as they came, ids and status with them
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT})
    final = respond(client, stream, input=items, tools=[WEATHER_TOOL], store=False)
    assert final.output_text == final_answer(TOOL_RESULT)
    with pytest.raises(openai.NotFoundError):  # store=False: nothing kept
        client.responses.retrieve(final.id)


@STREAMED
@STRATEGIES
def test_json_schema_output(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], stream: bool
) -> None:
    client = client_for(agent_proxy, arm)
    if stream:
        with client.responses.stream(model="auto", input=QUESTION, text_format=Weather) as s:
            parsed = s.get_final_response().output_parsed
    else:
        parsed = client.responses.parse(model="auto", input=QUESTION, text_format=Weather)
        parsed = parsed.output_parsed
    assert parsed == Weather(**WEATHER_JSON)


# -- the OpenAI Agents SDK ----------------------------------------------------------------


@STREAMED
@STRATEGIES
def test_agents_sdk_runner(
    agent_proxy: Proxy, arm: tuple[str, dict[str, Any]], stream: bool
) -> None:
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        ran.append(city)
        return TOOL_RESULT

    async def run() -> Any:
        client = openai.AsyncOpenAI(
            base_url=f"{agent_proxy.url}/v1",
            api_key="unused",
            max_retries=0,
            default_headers={"X-Routing-Strategy": arm[0]},
        )
        model = OpenAIResponsesModel(model="auto", openai_client=client)
        agent = Agent(name="weather", instructions="Answer.", tools=[get_weather], model=model)
        try:
            if not stream:
                return (await Runner.run(agent, QUESTION)).final_output
            streamed = Runner.run_streamed(agent, QUESTION)
            async for _ in streamed.stream_events():
                pass
            return streamed.final_output
        finally:
            await client.close()

    assert asyncio.run(run()) == final_answer(TOOL_RESULT)
    assert ran == ["Paris"]
