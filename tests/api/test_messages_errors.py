"""``POST /v1/messages`` against the queue-backed stand-ins: streamed tool calls arrive
whole and in order (two calls, arguments in many deltas: LiteLLM #25321), and errors
come in Anthropic's shape and status with no upstream key in them."""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import httpx
import pytest

from tests.api.test_messages import ASK, MODEL, WEATHER, client_for
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.proxy import CLOUD_KEY, MakeProxy, chat_bodies

pytestmark = pytest.mark.process


# -- streamed tool calls arrive whole and in order -------------------------------------------

TWO_CALLS = [
    {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius", "days": [1, 2, 3]}'},
    {
        "name": "get_weather",
        "arguments": '{"city": "Saint-Étienne", "note": "a \\"quoted\\" word"}',
    },
]


@pytest.mark.parametrize("strategy", ["local_only", "cerebras_only", "speculative_decoding"])
def test_two_streamed_tool_calls_split_in_many_deltas(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, strategy: str
) -> None:
    """Speculating, both upstreams answer the same two calls: whichever is served (a
    draft replayed, or the cloud's relayed), its arguments arrive whole and in order."""
    reply = Reply("Checking both.", tool_calls=TWO_CALLS)
    if strategy != "cerebras_only":
        local.enqueue(reply)
    if strategy != "local_only":
        cloud.enqueue(reply)
    with (
        make_proxy() as proxy,
        client_for(proxy, strategy).messages.stream(
            model=MODEL, max_tokens=256, tools=[WEATHER], messages=ASK
        ) as events,
    ):
        seen = list(events)
        final = events.get_final_message()
    deltas = [
        e for e in seen if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(deltas) > 6  # the arguments did come in many pieces
    blocks = [b for b in final.content if b.type == "tool_use"]
    assert [b.input for b in blocks] == [
        {"city": "Paris", "unit": "celsius", "days": [1, 2, 3]},
        {"city": "Saint-Étienne", "note": 'a "quoted" word'},
    ]
    assert final.content[0].type == "text" and final.stop_reason == "tool_use"
    assert len({b.id for b in blocks}) == 2


# -- errors in Anthropic's shape -------------------------------------------------------------


def test_errors_in_anthropic_shape(make_proxy: MakeProxy) -> None:
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "PROXY_KEYS": "sk-proxy-1"}
    with make_proxy(env=env, server={"api_keys": "${PROXY_KEYS}"}) as proxy:
        url = f"{proxy.url}/v1/messages"
        good = {"model": MODEL, "max_tokens": 16, "messages": ASK}
        no_key = httpx.post(url, json=good)
        assert no_key.status_code == 401
        assert no_key.json()["type"] == "error"
        assert no_key.json()["error"]["type"] == "authentication_error"
        assert "send 'x-api-key: <key>'" in no_key.json()["error"]["message"]  # this door's way
        headers = {"x-api-key": "sk-proxy-1", "anthropic-version": "2023-06-01"}
        no_budget = httpx.post(url, json={"model": MODEL, "messages": ASK}, headers=headers)
        assert no_budget.status_code == 400
        assert no_budget.json()["error"] == {
            "type": "invalid_request_error",
            "message": "max_tokens: Field required",
        }
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=proxy.url, api_key="wrong", max_retries=0).messages.create(
                **good
            )
        bearer = {"Authorization": "Bearer sk-proxy-1"}
        assert httpx.post(url, json=good, headers=bearer).status_code == 200


def test_upstream_failure_is_overloaded_without_the_key_and_logged(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The trial: a 529 or 504 of this door had its access line only, where every other
    door's upstream failure is logged with its reason."""
    cloud.enqueue(Reply("", status=401, error={"message": f"bad key {CLOUD_KEY}"}))
    caplog.set_level(logging.WARNING, logger="specproxy.api")
    with make_proxy() as proxy:
        answer = httpx.post(
            f"{proxy.url}/v1/messages",
            json={"model": MODEL, "max_tokens": 16, "messages": ASK},
            headers={"X-Routing-Strategy": "cerebras_only"},
        )
    assert answer.status_code in (502, 529)
    assert answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] in ("api_error", "overloaded_error")
    assert CLOUD_KEY not in answer.text
    [line] = [r.getMessage() for r in caplog.records if r.name == "specproxy.api"]
    assert line.startswith(f"POST /v1/messages -> {answer.status_code}: cerebras")
    assert CLOUD_KEY not in caplog.text


def test_a_stream_broken_midway_ends_with_an_error_event(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.enqueue(Reply("one two three four five six seven", fail_after_chunks=3))
    with make_proxy() as proxy:
        body = {"model": MODEL, "max_tokens": 64, "messages": ASK, "stream": True}
        headers = {"X-Routing-Strategy": "local_only"}
        answer = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=headers)
    assert answer.status_code == 200
    kinds = [
        line.removeprefix("event: ")
        for line in answer.text.split("\n")
        if line.startswith("event: ")
    ]
    assert kinds[:2] == ["message_start", "ping"]
    assert kinds[-1] == "error" and "message_stop" not in kinds
    last = answer.text.strip().split("\n")[-1].removeprefix("data: ")
    error = httpx.Response(200, content=last).json()
    assert error["type"] == "error" and error["error"]["type"] in ("api_error", "overloaded_error")


@pytest.mark.parametrize("strategy", ["local_only", "cerebras_only"])
def test_what_is_forwarded_and_what_is_dropped(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, strategy: str
) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 40,
        "messages": ASK,
        "stop_sequences": ["END"],
        "temperature": 0.3,
        "top_k": 4,
        "metadata": {"user_id": "u-1"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "service_tier": "auto",
        "tools": [WEATHER],
        "tool_choice": {"type": "any"},
    }
    with make_proxy() as proxy:
        answer = httpx.post(
            f"{proxy.url}/v1/messages?beta=true",
            json=body,
            headers={
                "X-Routing-Strategy": strategy,
                "anthropic-beta": "x",
                "anthropic-version": "2023-06-01",
            },
        )
    assert answer.status_code == 200, answer.text
    [sent] = chat_bodies(local if strategy == "local_only" else cloud)
    assert sent["stop"] == ["END"] and sent["temperature"] == 0.3
    assert sent["tool_choice"] == "required"
    assert ("top_k" in sent) is (strategy == "local_only")  # the cloud does not take it
    assert not {"metadata", "thinking", "service_tier", "max_tokens_to_sample"} & set(sent)


# -- stop_sequence -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_matched_stop_sequence_is_reported(
    make_proxy: MakeProxy, local: FakeLlamaServer, stream: bool
) -> None:
    """An upstream whose answer ends with the client's stop sequence (one that keeps it in
    its text): ``stop_reason: stop_sequence``, the sequence named; one that ends by itself:
    ``end_turn``."""
    local.enqueue(Reply("Thought: I should look it up\nObservation:", finish_reason="stop"))
    local.enqueue(Reply("Thought: I know it", finish_reason="stop"))
    ask = {"model": MODEL, "max_tokens": 64, "messages": ASK, "stop_sequences": ["\nObservation:"]}
    with make_proxy() as proxy:
        client = client_for(proxy, "local_only")
        answers = []
        for _ in range(2):
            if stream:
                with client.messages.stream(**ask) as events:
                    answers.append(events.get_final_message())
            else:
                answers.append(client.messages.create(**ask))
    stopped, ended = answers
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "\nObservation:")
    assert (ended.stop_reason, ended.stop_sequence) == ("end_turn", None)
    if not stream:  # a whole answer's text never holds the sequence
        assert stopped.content[0].text == "Thought: I should look it up"  # type: ignore[union-attr]
    assert chat_bodies(local)[0]["stop"] == ["\nObservation:"]


@pytest.mark.parametrize(
    ("choice", "tools", "says"),
    [
        ({"type": "tool", "name": "nope"}, [WEATHER], "names the tool 'nope'"),
        ({"type": "any"}, [], "a tool_choice of type 'any' needs tools"),
        ({"type": "tool", "name": "get_weather"}, [], "needs tools"),
    ],
    ids=["not-offered", "any-no-tools", "named-no-tools"],
)
def test_a_tool_choice_no_tool_can_meet_is_anthropics_400(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    choice: dict[str, str],
    tools: list[Any],
    says: str,
) -> None:
    with make_proxy() as proxy, pytest.raises(anthropic.BadRequestError) as refused:
        client_for(proxy, "cerebras_only").messages.create(
            model=MODEL, max_tokens=32, messages=ASK, tools=tools, tool_choice=choice
        )
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error" and says in error["message"]
    assert chat_bodies(local) == chat_bodies(cloud) == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("as_blocks", [False, True], ids=["string", "blocks"])
def test_a_prefill_the_local_answer_repeats_is_not_said_again(
    make_proxy: MakeProxy, local: FakeLlamaServer, stream: bool, as_blocks: bool
) -> None:
    """Anthropic's reply holds what follows a final assistant turn; llama-server's answer
    repeats that turn first (the stand-in does too: ``echoes_prefill``)."""
    local.continues, local.echoes_prefill = True, True
    local.enqueue(Reply("The capital of France is Paris."))
    begun: Any = "The capital of France is"
    if as_blocks:
        begun = [{"type": "text", "text": "The capital of "}, {"type": "text", "text": "France is"}]
    asked = [*ASK, {"role": "assistant", "content": begun}]
    with make_proxy() as proxy:
        client = client_for(proxy, "local_only")
        if stream:
            with client.messages.stream(model=MODEL, max_tokens=32, messages=asked) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(model=MODEL, max_tokens=32, messages=asked)
    [sent] = chat_bodies(local)
    assert sent["messages"][-1] == {"role": "assistant", "content": "The capital of France is"}
    assert [b.text for b in message.content if b.type == "text"] == [" Paris."]


IMAGE = {"type": "image", "source": {"type": "url", "url": "http://127.0.0.1:9/cat.png"}}
WITH_IMAGE = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, IMAGE]}]


def test_what_only_the_cloud_can_answer_is_named_in_the_clients_own_words(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    """Once named by the chat it became: a system prompt shifted every index by one, and
    the image was an ``image_url``."""
    body = {"model": MODEL, "max_tokens": 16, "system": "Be brief.", "messages": WITH_IMAGE}
    with make_proxy(env={}, server={"max_messages": 2}) as proxy:
        url = f"{proxy.url}/v1/messages"
        alone = httpx.post(url, json=body, headers={"X-Routing-Strategy": "local_only"})
        no_cloud = httpx.post(url, json=body)
        three = [*ASK, {"role": "assistant", "content": "Hi."}, *ASK]
        too_many = httpx.post(url, json=body | {"messages": three})
    assert alone.status_code == 400
    assert alone.json()["error"]["message"].startswith(
        "messages.0.content.1: the local model does not read images; send it to the cloud"
    )
    assert no_cloud.status_code == 503
    assert no_cloud.json()["error"]["message"].startswith(
        "cerebras: messages.0.content.1: the local model does not read images, so only the "
        "cloud can answer it"
    )
    # the system prompt is no message of Anthropic's: three messages, not four
    assert too_many.json()["error"]["message"] == "messages: 3 messages; the limit is 2"
    assert chat_bodies(local) == []
