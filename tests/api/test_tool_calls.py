"""Agents' traffic through the speculative strategy, with the official openai client.

Tool calls are assembled, judged, compared and replayed as OpenAI streams them;
a draft that breaks what the request asks for (a bad call, JSON that does not
parse) is never served; the client's own mistakes stay its 4xx; the client gets
exactly the logprobs it asked for.
"""

from __future__ import annotations

import logging
from typing import Any

import openai
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.fakes.llama_server import llama_error
from tests.support.answers import GOOD_DRAFT, HEDGED, collect_calls, spec
from tests.support.proxy import MakeProxy, Proxy, chat_bodies

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "weather",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "temperature": {"type": "integer"}},
            "required": ["city", "temperature"],
            "additionalProperties": False,
        },
    },
}
PARIS = {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def call_reply(*calls: dict[str, str], text: str = "") -> Reply:
    return Reply(text, tool_calls=list(calls))


def calls_of(answer: Any) -> list[tuple[str, str]]:
    return [(c.function.name, c.function.arguments) for c in answer.choices[0].message.tool_calls]


def streamed(stream: Any) -> tuple[str, list[dict[str, str]], str | None, dict[str, Any]]:
    """``collect_calls`` over an openai stream."""
    return collect_calls(chunk.to_dict() for chunk in stream)


# -- tool calls carried through every path ------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_draft_that_makes_the_verified_call_is_served(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, stream: bool
) -> None:
    local.enqueue(call_reply({"name": "get_weather", "arguments": '{"city":"Paris"}'}))
    cloud.enqueue(call_reply({"name": "get_weather", "arguments": '{ "city": "Paris" }'}))
    if stream:
        chunks = proxy.openai.chat.completions.create(
            model="auto", messages=ASK, tools=[WEATHER_TOOL], stream=True
        )
        _, calls, finish, final = streamed(chunks)
        assert [(c["name"], c["arguments"]) for c in calls] == [
            ("get_weather", '{"city":"Paris"}')  # the draft's own spelling: it was served
        ]
        assert calls[0]["id"]
        assert finish == "tool_calls"
        assert final["model_used"] == "local"
        assert spec(final)["reasons"][-1] == "same_tool_calls"
    else:
        answer = proxy.openai.chat.completions.create(
            model="auto", messages=ASK, tools=[WEATHER_TOOL]
        )
        assert calls_of(answer) == [("get_weather", '{"city":"Paris"}')]
        assert answer.choices[0].finish_reason == "tool_calls"
        assert answer.to_dict()["model_used"] == "local"
        assert spec(answer)["reasons"][-1] == "same_tool_calls"
    assert proxy.stats()["requests"]["by_outcome"]["verified_draft_used"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_draft_with_another_call_is_replaced_by_the_verified_one(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, stream: bool
) -> None:
    local.enqueue(call_reply({"name": "get_weather", "arguments": '{"city": "Lyon"}'}))
    cloud.enqueue(call_reply(PARIS, {"name": "get_weather", "arguments": '{"city": "Nice"}'}))
    kwargs: dict[str, Any] = {"model": "auto", "messages": ASK, "tools": [WEATHER_TOOL]}
    if stream:
        _, calls, finish, final = streamed(
            proxy.openai.chat.completions.create(**kwargs, stream=True)
        )
        got = [(c["name"], c["arguments"]) for c in calls]
        assert spec(final)["reasons"][-1] == "tool_calls_differ"
    else:
        answer = proxy.openai.chat.completions.create(**kwargs)
        got, finish = calls_of(answer), answer.choices[0].finish_reason
        assert spec(answer)["reasons"][-1] == "tool_calls_differ"
    assert got == [
        ("get_weather", '{"city": "Paris"}'),
        ("get_weather", '{"city": "Nice"}'),  # parallel calls, in order
    ]
    assert finish == "tool_calls"


def test_a_streamed_cloud_first_answer_keeps_its_tool_calls(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    """The hedged cloud answer came first and is replayed: its calls go out as deltas."""
    local.enqueue(Reply(GOOD_DRAFT, delay=1.0))
    cloud.enqueue(call_reply(PARIS))
    with make_proxy(speculative_decoding={"hedge": "always", "early_abort": True}) as proxy:
        chunks = proxy.openai.chat.completions.create(
            model="auto", messages=ASK, tools=[WEATHER_TOOL], stream=True
        )
        _, calls, finish, final = streamed(chunks)
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", '{"city": "Paris"}')]
    assert finish == "tool_calls"
    assert spec(final)["reasons"] == ["hedged", "cloud_first"]


def test_a_tool_request_is_drafted_whole_with_early_abort_on(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    """llama-server refuses logprobs with tools on a stream: the draft is asked whole,
    so a healthy local server is never counted as failing."""
    local.enqueue(call_reply(PARIS))
    cloud.enqueue(call_reply(PARIS))
    with make_proxy(speculative_decoding={"early_abort": True}) as proxy:
        chunks = proxy.openai.chat.completions.create(
            model="auto", messages=ASK, tools=[WEATHER_TOOL], stream=True
        )
        _, calls, finish, final = streamed(chunks)
        stats = proxy.stats()
    assert [c["name"] for c in calls] == ["get_weather"]
    draft = chat_bodies(local)[0]
    assert "stream" not in draft and draft["logprobs"] is True and draft["tools"]
    assert final["model_used"] == "local" and finish == "tool_calls"
    assert "local_unavailable" not in spec(final)["reasons"]
    assert stats["upstream_errors"] == {}


# -- invalid drafts are never served ------------------------------------------------------

CURRENT_TIME = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
NAMED_TIME = {
    "tools": [WEATHER_TOOL, CURRENT_TIME],
    "tool_choice": {"type": "function", "function": {"name": "get_time"}},
}
SUNNY = "It is sunny in Paris."
# (request fields, the draft, how it breaks the contract, the cloud's answer)
INVALID = {
    "arguments not JSON": (
        {},
        call_reply({"name": "get_weather", "arguments": '{"city": "Paris", "unit": '}),
        "tool_call_arguments_not_json",
        call_reply(PARIS),
    ),
    "wrong schema": (
        {},
        call_reply({"name": "get_weather", "arguments": '{"city": 42}'}),
        "tool_call_arguments_invalid",
        call_reply(PARIS),
    ),
    "unknown function": (
        {},
        call_reply({"name": "get_wether", "arguments": '{"city": "Paris"}'}),
        "tool_call_unknown_function",
        call_reply(PARIS),
    ),
    "text when a call is required": (
        {"tool_choice": "required"},
        Reply("The weather in Paris is sunny and warm today, about 24 degrees."),
        "tool_call_required",
        call_reply(PARIS),
    ),
    "a call when none is allowed": (
        {"tool_choice": "none"},
        call_reply(PARIS),
        "tool_call_forbidden",
        Reply(SUNNY),
    ),
    "another function than the one named": (
        NAMED_TIME,
        call_reply(PARIS),
        "tool_call_wrong_function",
        call_reply({"name": "get_time", "arguments": "{}"}),
    ),
}


@pytest.mark.parametrize(
    ("fields", "draft", "violation", "verified"), INVALID.values(), ids=INVALID.keys()
)
@pytest.mark.parametrize("stream", [False, True])
def test_an_invalid_tool_call_draft_is_never_served(
    proxy: Proxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    fields: dict[str, Any],
    draft: Reply,
    violation: str,
    verified: Reply,
    stream: bool,
) -> None:
    local.enqueue(draft)
    cloud.enqueue(verified)
    kwargs = {"model": "auto", "messages": ASK, "tools": [WEATHER_TOOL], **fields}
    if stream:
        chunks = proxy.openai.chat.completions.create(**kwargs, stream=True)
        text, calls, _, body = streamed(chunks)
        served = [(c["name"], c["arguments"]) for c in calls]
    else:
        answer = proxy.openai.chat.completions.create(**kwargs)
        message, body = answer.choices[0].message, answer.to_dict()
        text = message.content or ""
        served = [(c.function.name, c.function.arguments) for c in message.tool_calls or []]
    # the cloud's answer, whole: its text or its calls
    assert text == verified.text
    assert served == [(c["name"], c["arguments"]) for c in verified.tool_calls or []]
    assert body["model_used"] == "cerebras"
    assert spec(body)["reasons"].count(violation) == 1  # named once, not per step
    assert spec(body)["spilled_over"] is True


@pytest.mark.parametrize("stream", [False, True])
def test_an_invalid_draft_without_a_verifier_is_an_error_not_an_answer(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, stream: bool
) -> None:
    local.enqueue(call_reply({"name": "get_wether", "arguments": '{"city": "Paris"}'}))
    with make_proxy(env={}) as proxy:  # no cloud key: verification is off
        with pytest.raises(openai.APIStatusError) as info:
            proxy.openai.chat.completions.create(
                model="auto", messages=ASK, tools=[WEATHER_TOOL], stream=stream
            )
        stats = proxy.stats()
    assert info.value.status_code == 503
    error = info.value.body
    assert isinstance(error, dict) and error["code"] == "no_valid_answer"
    assert "tool_call_unknown_function" in error["message"]
    assert cloud.requests == []
    assert stats["requests"]["by_outcome"]["error"] == 1


@pytest.mark.parametrize(
    ("response_format", "draft", "violation"),
    [
        ({"type": "json_object"}, "Sure! Here it is: {name: Ada}", "output_not_json"),
        (
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "person",
                    "schema": {
                        "type": "object",
                        "properties": {"age": {"type": "integer"}},
                        "required": ["age"],
                    },
                },
            },
            '{"age": "thirty-six years old and counting, as of this year"}',
            "output_schema_invalid",
        ),
    ],
)
def test_structured_output_that_does_not_validate_spills(
    proxy: Proxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    response_format: dict[str, Any],
    draft: str,
    violation: str,
) -> None:
    local.enqueue(Reply(draft))
    cloud.enqueue(Reply('{"age": 36}'))
    answer = proxy.openai.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": "Ada's age as JSON"}],
        response_format=response_format,  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content == '{"age": 36}'
    assert violation in spec(answer)["reasons"]


@pytest.mark.parametrize(
    ("draft", "verified", "served", "reason"),
    [
        # alike as text (similarity 0.96), but a different value: a wrong answer
        (
            '{"city":"Paris","temperature":25}',
            '{"city": "Paris", "temperature": 21}',
            "cloud",
            "json_differs",
        ),
        (
            '{"city":"Paris","temperature":21}',
            '{"temperature": 21, "city": "Paris"}',
            "draft",
            "same_json",
        ),
    ],
)
@pytest.mark.parametrize("response_format", [{"type": "json_object"}, WEATHER_FORMAT])
def test_json_output_agrees_only_when_it_holds_the_same_value(
    proxy: Proxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    response_format: dict[str, Any],
    draft: str,
    verified: str,
    served: str,
    reason: str,
) -> None:
    local.enqueue(Reply(draft))
    cloud.enqueue(Reply(verified))
    answer = proxy.openai.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": "The weather in Paris as JSON"}],
        response_format=response_format,  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content == (draft if served == "draft" else verified)
    assert spec(answer)["reasons"][-1] == reason
    assert len(cloud.requests) == 1  # it was verified


def test_the_log_tells_what_follows_a_failed_verification(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It said "serving the local answer" before the client got a 503 (a new user's trial)."""
    caplog.set_level(logging.INFO, logger="specproxy.pipeline")
    local.enqueue(call_reply({"name": "get_wether", "arguments": "{}"}), Reply(HEDGED))
    cloud.enqueue(Reply(status=500), Reply(status=500))
    with make_proxy(models={"cerebras": {"max_retries": 0}}) as proxy:
        with pytest.raises(openai.APIStatusError) as refused:
            proxy.openai.chat.completions.create(model="auto", messages=ASK, tools=[WEATHER_TOOL])
        log = caplog.text
        caplog.clear()
        degraded = proxy.openai.chat.completions.create(model="auto", messages=ASK)
    assert refused.value.status_code == 503
    assert "Verification failed" in log and "serving" not in log.lower()
    assert "No valid answer: the draft breaks the request (tool_call_unknown_function)" in log
    assert spec(degraded)["degraded"] is True
    assert "Serving the local answer, degraded (" in caplog.text


# -- the client's own errors and parameters -----------------------------------------------


def test_a_request_the_local_server_rejects_is_the_clients_400_without_a_cloud_call(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(status=400, error=llama_error(400, "failed to parse grammar")))
    with pytest.raises(openai.BadRequestError, match="failed to parse grammar"):
        proxy.openai.chat.completions.create(
            model="auto", messages=ASK, response_format={"type": "json_object"}
        )
    assert cloud.requests == []
    assert len(chat_bodies(local)) == 1  # one call: a 400 is not retried by the SDK
    assert proxy.stats()["requests"]["by_outcome"]["client_error"] == 1


def test_when_both_upstreams_reject_the_request_the_client_gets_the_4xx(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    # Too long for the local context (another model may take it), then the cloud refuses it.
    local.enqueue(
        Reply(
            status=400,
            error=llama_error(
                400, "too long", "exceed_context_size_error", n_ctx=8, n_prompt_tokens=9
            ),
        )
    )
    cloud.enqueue(Reply(status=400))
    with pytest.raises(openai.BadRequestError):
        proxy.openai.chat.completions.create(model="auto", messages=ASK)
    assert len(chat_bodies(cloud)) == 1


@pytest.mark.parametrize(("logprobs", "top"), [(None, None), (True, 3), (True, 0), (True, None)])
@pytest.mark.parametrize("stream", [False, True])
def test_a_served_draft_carries_exactly_the_logprobs_the_client_asked_for(
    proxy: Proxy, local: FakeLlamaServer, logprobs: bool | None, top: int | None, stream: bool
) -> None:
    local.enqueue(Reply(GOOD_DRAFT))
    kwargs: dict[str, Any] = {"model": "auto", "messages": ASK}
    if logprobs:
        kwargs["logprobs"] = True
    if top is not None:
        kwargs["top_logprobs"] = top
    if stream:
        entries = []
        for chunk in proxy.openai.chat.completions.create(**kwargs, stream=True):
            for choice in chunk.choices:
                entries += (choice.logprobs.content or []) if choice.logprobs else []
    else:
        answer = proxy.openai.chat.completions.create(**kwargs)
        assert spec(answer)["accepted"] is True
        lp = answer.choices[0].logprobs
        entries = (lp.content or []) if lp else []
    if not logprobs:
        assert entries == []
    else:
        assert entries and {len(e.top_logprobs) for e in entries} == {top or 0}
    assert local.last_json["top_logprobs"] == 5  # the proxy's own count for its judgement


def test_answers_name_the_configured_model_not_the_servers_file(
    proxy: Proxy, local: FakeLlamaServer
) -> None:
    answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
    assert answer.model == "smollm2"
    chunks = list(proxy.openai.chat.completions.create(model="auto", messages=ASK, stream=True))
    assert {c.model for c in chunks} == {"smollm2"}


# -- OpenAI's allowed_tools ------------------------------------------------------------

TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}


@pytest.mark.parametrize("mode", ["auto", "required"])
@pytest.mark.parametrize("strategy", ["local_only", "cerebras_only"])
def test_allowed_tools_reach_each_upstream_as_the_tools_it_may_call(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, strategy: str, mode: str
) -> None:
    """llama-server reads no ``allowed_tools`` object; narrowed, every upstream gets the
    same request in a form it takes, and the answer's contract is the narrowed one."""
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": mode,
            "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        },
    }
    (local if strategy == "local_only" else cloud).enqueue(call_reply(PARIS))
    answer = proxy.openai.chat.completions.create(
        model="auto",
        messages=ASK,
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice=choice,
        extra_headers={"X-Routing-Strategy": strategy},
    )
    assert calls_of(answer) == [("get_weather", '{"city": "Paris"}')]
    (sent,) = chat_bodies(local if strategy == "local_only" else cloud)
    assert sent["tools"] == [WEATHER_TOOL] and sent["tool_choice"] == mode


def test_an_allowed_tools_auto_choice_does_not_demand_a_call(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    """Counted once as a demanded call, it made a text answer break the contract: verified
    and spilled, though ``auto`` lets the model answer in words."""
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [WEATHER_TOOL]}}
    local.enqueue(Reply(GOOD_DRAFT))
    answer = proxy.openai.chat.completions.create(
        model="auto", messages=ASK, tools=[WEATHER_TOOL, TIME_TOOL], tool_choice=choice
    )
    assert answer.choices[0].message.content == GOOD_DRAFT
    assert spec(answer)["accepted"] is True and chat_bodies(cloud) == []
