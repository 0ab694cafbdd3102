"""D10: ill-typed fields are the client's 400 naming the field, never coerced and forwarded."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.support.proxy import Proxy, chat_bodies

ASK = [{"role": "user", "content": "Say hello"}]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", "10"),
        ("max_tokens", True),
        ("max_tokens", 10.0),
        ("max_completion_tokens", "10"),
        ("stream", "true"),
        ("stream", 1),
        ("logprobs", "yes"),
        ("top_logprobs", 2.5),
        ("n", "1"),
        ("temperature", "0.2"),
        ("seed", "abc"),  # llama-server's own raw 400 came back before
        ("seed", True),
        ("presence_penalty", "x"),
        ("presence_penalty", 3),
        ("frequency_penalty", -2.5),
        ("logit_bias", "x"),
        ("logit_bias", {"50256": "a lot"}),
        ("user", 5),
    ],
)
def test_an_ill_typed_field_is_refused_naming_it(
    proxy: Proxy, local: FakeLlamaServer, field: str, value: Any
) -> None:
    answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK, field: value})
    assert answer.status_code == 400
    param = answer.json()["error"]["param"]
    assert param == field or param.startswith(f"{field}.")  # logit_bias.50256: the entry
    assert chat_bodies(local) == []  # nothing was forwarded


@pytest.mark.parametrize("strategy", ["speculative_decoding", "local_only", "cerebras_only"])
def test_top_logprobs_without_logprobs_is_the_same_400_in_every_strategy(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, strategy: str
) -> None:
    """The draft asks for logprobs itself, so only local_only used to refuse it (the real
    server's 400), as OpenAI does."""
    body = {"messages": ASK, "top_logprobs": 3}
    headers = {"X-Routing-Strategy": strategy}
    answer = proxy.http.post("/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "top_logprobs" and "requires logprobs" in error["message"]
    assert chat_bodies(local) == chat_bodies(cloud) == []


@pytest.mark.parametrize("strategy", ["speculative_decoding", "local_only", "cerebras_only"])
def test_a_content_part_of_no_kind_chat_takes_is_the_same_400_in_every_strategy(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, strategy: str
) -> None:
    """Once only local_only refused it (as a kind the local model cannot read); the other
    strategies sent it to the cloud as an image would go."""
    bogus = [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "bogus"}]}]
    headers = {"X-Routing-Strategy": strategy}
    answer = proxy.http.post("/v1/chat/completions", json={"messages": bogus}, headers=headers)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "messages.0.content.1.type"
    assert "'bogus' is not a kind of content part" in error["message"]
    assert chat_bodies(local) == chat_bodies(cloud) == []


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
NOPE = {"type": "function", "function": {"name": "nope"}}


def allowed(mode: str, *tools: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's ``allowed_tools`` tool choice."""
    named = [{"type": "function", "function": {"name": t["function"]["name"]}} for t in tools]
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": named}}


@pytest.mark.parametrize("strategy", ["speculative_decoding", "local_only", "cerebras_only"])
@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"tools": [WEATHER], "tool_choice": NOPE}, "names 'nope', which is not among the tools"),
        ({"tool_choice": NOPE}, "is only allowed when tools are specified"),
        ({"tool_choice": "required"}, "is only allowed when tools are specified"),
        (
            {"tools": [WEATHER], "tool_choice": allowed("required", WEATHER, NOPE)},
            "names 'nope', which is not among the tools",
        ),
        ({"tool_choice": allowed("auto", NOPE)}, "is only allowed when tools are specified"),
    ],
    ids=[
        "not-offered",
        "named-no-tools",
        "required-no-tools",
        "allowed-not-offered",
        "allowed-no-tools",
    ],
)
def test_a_tool_choice_that_demands_a_call_no_tool_can_make_is_a_400_in_every_strategy(
    proxy: Proxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    strategy: str,
    extra: dict[str, Any],
    says: str,
) -> None:
    """A cloud that obeys would answer with a call to a function never offered."""
    body = {"messages": ASK, **extra}
    headers = {"X-Routing-Strategy": strategy}
    answer = proxy.http.post("/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "tool_choice" and says in error["message"]
    assert chat_bodies(local) == chat_bodies(cloud) == []


def test_well_typed_numbers_still_pass(proxy: Proxy, local: FakeLlamaServer) -> None:
    body = {
        **{"messages": ASK, "max_tokens": 10, "temperature": 0, "top_p": 1, "seed": 7},
        **{"presence_penalty": 0, "frequency_penalty": -1.5, "logit_bias": {"50256": -100}},
        "user": "someone",
    }
    assert proxy.http.post("/v1/chat/completions", json=body).status_code == 200


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tools", "x"),
        ("tools", [{"type": "function"}]),  # no function
        ("tools", [{"type": "function", "function": {"description": "no name"}}]),
        ("tools", [{"function": {"name": "f"}}]),  # no type
        ("tool_choice", 5),
        ("tool_choice", "always"),
        ("response_format", "json"),
        ("response_format", {"type": "xml"}),
        ("response_format", {"type": "json_schema"}),  # no json_schema
        ("response_format", {"type": "json_schema", "json_schema": {"schema": {}}}),  # no name
        ("tool_choice", {"type": "function"}),  # no function named
        ("messages", [{"role": "user"}]),  # no content: OpenAI's 400 (the trial: a 200)
        ("messages", [{"role": "system", "content": None}, {"role": "user", "content": "hi"}]),
        ("tool_choice", {"type": "allowed_tools"}),  # no allowed_tools
        ("tool_choice", {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}),
        (
            "tool_choice",
            {"type": "allowed_tools", "allowed_tools": {"mode": "often", "tools": [NOPE]}},
        ),
        (
            "tool_choice",
            {
                "type": "allowed_tools",
                "allowed_tools": {"mode": "auto", "tools": [{"type": "custom"}]},
            },
        ),
    ],
)
def test_malformed_tools_and_formats_are_the_clients_400_and_never_trip_a_circuit(
    proxy: Proxy, local: FakeLlamaServer, field: str, value: Any
) -> None:
    """llama-server answers a malformed ``tools`` with a 500: forwarded, a handful of such
    requests from one client would open its circuit for everyone."""
    body = {"messages": ASK, field: value}
    headers = {"X-Routing-Strategy": "local_only"}
    for _ in range(6):  # more than the circuit's failure count
        answer = proxy.http.post("/v1/chat/completions", json=body, headers=headers)
        assert answer.status_code == 400
        assert answer.json()["error"]["param"].split(".")[0] == field
    assert chat_bodies(local) == []
    assert proxy.stats()["features"]["upstreams"]["local"]["circuit"]["state"] == "closed"


CALLED = {"role": "assistant", "content": None}


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        # each a 500 from llama-server (measured), not a 400
        ([{"role": "user", "content": [{"type": "text"}]}], "messages.0.content.0"),
        ([{"role": "user", "content": [{"type": "text", "text": 5}]}], "messages.0.content.0.text"),
        ([{"role": "user", "content": "hi", "name": 5}], "messages.0.name"),
        ([{"role": "tool", "content": "r", "tool_call_id": 5}], "messages.0.tool_call_id"),
        ([*ASK, {**CALLED, "tool_calls": [{"id": "a"}]}], "messages.1.tool_calls.0.type"),
        (
            [*ASK, {**CALLED, "tool_calls": [{"id": "a", "type": "function"}]}],
            "messages.1.tool_calls.0",
        ),
        (
            [
                *ASK,
                {**CALLED, "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]},
            ],
            "messages.1.tool_calls.0.function.name",
        ),
        ([{"role": "user", "content": 5}], "messages.0.content"),  # a union: no member's tag
    ],
)
def test_malformed_messages_are_the_clients_400_naming_the_part_and_never_trip_a_circuit(
    proxy: Proxy, local: FakeLlamaServer, messages: list[dict[str, Any]], param: str
) -> None:
    headers = {"X-Routing-Strategy": "local_only"}
    for _ in range(6):  # more than the circuit's failure count
        answer = proxy.http.post(
            "/v1/chat/completions", json={"messages": messages}, headers=headers
        )
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["param"] == param
        assert error["message"].startswith(f"{param}: ")
    assert chat_bodies(local) == []
    assert proxy.stats()["features"]["upstreams"]["local"]["circuit"]["state"] == "closed"


def test_a_union_field_of_no_kind_it_takes_says_what_each_kind_wanted(proxy: Proxy) -> None:
    body = {"messages": [{"role": "user", "content": 5}]}
    error = proxy.http.post("/v1/chat/completions", json=body).json()["error"]
    assert error["message"] == (
        "messages.0.content: Input should be a valid string, or: Input should be a valid list"
    )
    body = {"messages": ASK, "tool_choice": {"type": "function"}}  # the object kind matched
    error = proxy.http.post("/v1/chat/completions", json=body).json()["error"]
    assert error["message"] == "tool_choice: a function tool choice needs its function's name"


def test_a_whole_agent_conversation_passes(proxy: Proxy, local: FakeLlamaServer) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}], "name": "ann"},
        {**CALLED, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]},
    ]
    headers = {"X-Routing-Strategy": "local_only"}
    answer = proxy.http.post("/v1/chat/completions", json={"messages": messages}, headers=headers)
    assert answer.status_code == 200
    assert chat_bodies(local)[0]["messages"] == messages  # forwarded as the client sent it


def test_tools_of_other_kinds_and_named_choices_pass_through(
    proxy: Proxy, local: FakeLlamaServer
) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body = {
        "messages": ASK,
        "tools": [tool, {"type": "custom", "custom": {"name": "grammar"}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {}}},
    }
    answer = proxy.http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200
    assert chat_bodies(local)[0]["tools"] == body["tools"]  # forwarded as the client sent it
