"""The Messages door's pure translation, property-tested: a request and an answer survive
the round trip (text, tool calls with their ids and arguments, stop reasons, usage), and
a stream of chat chunks cut anywhere becomes events that the ``anthropic`` SDK's own
types accept and that add up to the same Message as the whole answer."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator
from typing import Any

import orjson
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from hypothesis import assume, example, given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from app.doors.messages import MessageEvents, MessagesRequest, chat_call_id, to_chat, to_message
from app.doors.messages.answer import STOP_REASONS, matched_stop
from app.doors.messages.errors import anthropic_error
from app.doors.messages.stream import message_events
from app.errors import (
    AuthenticationFailed,
    InvalidRequest,
    PayloadTooLarge,
    ProxyError,
    UpstreamBusy,
    UpstreamNotConfigured,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.sse import event as data_event

EVENT = TypeAdapter(RawMessageStreamEvent)
names = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)
ids = st.from_regex(r"[A-Za-z0-9_-]{1,24}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
inputs = st.dictionaries(names, json_values, max_size=4)
calls = st.lists(st.tuples(ids, names, inputs), max_size=3, unique_by=lambda c: c[0])


def completion(text: str, tool_calls: list[tuple[str, str, dict[str, Any]]], finish: str) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": i,
                "type": "function",
                "function": {"name": n, "arguments": orjson.dumps(a).decode()},
            }
            for i, n, a in tool_calls
        ]
    return {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 11, "total_tokens": 18},
    }


@given(text=st.text(max_size=40), tool_calls=calls, finish=st.sampled_from(sorted(STOP_REASONS)))
def test_an_answer_and_the_turn_it_becomes_survive_the_round_trip(
    text: str, tool_calls: list[tuple[str, str, dict[str, Any]]], finish: str
) -> None:
    body = completion(text, tool_calls, finish)
    message = Message.model_validate(to_message(body, "m", {"model_used": "local"}))
    assert message.usage.input_tokens == 7 and message.usage.output_tokens == 11
    uses = [b for b in message.content if b.type == "tool_use"]
    assert [(chat_call_id(u.id), u.name, u.input) for u in uses] == tool_calls
    expected = STOP_REASONS[finish]
    assert message.stop_reason == (
        "tool_use" if tool_calls and expected == "end_turn" else expected
    )
    # the Message sent back as the assistant's turn is the chat message it came from
    turn = {"role": "assistant", "content": [b.model_dump() for b in message.content]}
    request = MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "q"}, turn]}
    )
    [_, back] = to_chat(request, top_k=False)["messages"]
    sent = body["choices"][0]["message"]
    assert (back["content"] or None) == sent["content"]
    assert [
        (c["id"], c["function"]["name"], orjson.loads(c["function"]["arguments"]))
        for c in back.get("tool_calls", [])
    ] == tool_calls


def cut(text: str, points: list[int]) -> list[str]:
    """``text`` cut at ``points`` (positions taken modulo its length)."""
    at = sorted({p % (len(text) + 1) for p in points} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(at) if b > a]


def chunks(
    text: str, tool_calls: list[Any], finish: str, points: list[int]
) -> list[dict[str, Any]]:
    """The answer as chat chunks, text and every call's arguments cut at ``points``."""
    out: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    out += [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in cut(text, points)]
    for index, (call_id, name, args) in enumerate(tool_calls):
        head = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        out.append({"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
        for piece in cut(orjson.dumps(args).decode(), points):
            fragment = {"index": index, "function": {"arguments": piece}}
            out.append({"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]})
    out.append(
        {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "model_used": "local"}
    )
    out.append({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 11}})
    return out


def events_of(stream: bytes) -> list[dict[str, Any]]:
    """The events' data, each checked against the SDK's own type and its ``event:`` line."""
    out = []
    for block in stream.decode().split("\n\n")[:-1]:
        kind_line, data_line = block.split("\n")
        data = orjson.loads(data_line.removeprefix("data: "))
        assert kind_line == f"event: {data['type']}"
        if data["type"] not in ("ping", "error"):
            EVENT.validate_python(data)
        out.append(data)
    return out


def gathered(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The Message the events add up to, as a client puts it together."""
    message: dict[str, Any] = events[0]["message"]
    partial: dict[int, str] = {}
    open_blocks: set[int] = set()
    for event in events[1:]:
        match event["type"]:
            case "content_block_start":
                assert event["index"] == len(message["content"]) and not open_blocks
                message["content"].append(event["content_block"])
                open_blocks.add(event["index"])
            case "content_block_delta":
                assert event["index"] in open_blocks  # never a fragment for a closed block
                block, delta = message["content"][event["index"]], event["delta"]
                if delta["type"] == "text_delta":
                    block["text"] += delta["text"]
                else:
                    partial[event["index"]] = (
                        partial.get(event["index"], "") + delta["partial_json"]
                    )
            case "content_block_stop":
                open_blocks.remove(event["index"])
            case "message_delta":
                message |= event["delta"]
                message["usage"] = event["usage"]
                message["specproxy"] = event["specproxy"]
    assert events[-1]["type"] == "message_stop" and not open_blocks
    for index, text in partial.items():
        message["content"][index]["input"] = orjson.loads(text)
    return message


@given(
    text=st.text(max_size=40),
    tool_calls=calls,
    finish=st.sampled_from(sorted(STOP_REASONS)),
    points=st.lists(st.integers(min_value=0, max_value=200), max_size=12),
)
def test_a_stream_cut_anywhere_adds_up_to_the_whole_answer(
    text: str, tool_calls: list[Any], finish: str, points: list[int]
) -> None:
    translator = MessageEvents("m")
    stream = translator.start() + b"".join(
        translator.chunk(c) for c in chunks(text, tool_calls, finish, points)
    )
    stream += translator.end()
    message = gathered(events_of(stream))
    whole = to_message(completion(text, tool_calls, finish), "m", {"model_used": "local"})
    assert message | {"id": whole["id"]} == whole


@given(
    prefill=st.text(min_size=1, max_size=12),
    rest=st.text(max_size=12),
    echoed=st.booleans(),
    tool_calls=calls,
    points=st.lists(st.integers(min_value=0, max_value=30), max_size=8),
)
# the prefill's beginning alone, then a call: the text still comes first
@example(prefill="Let me", rest="Let", echoed=False, tool_calls=[("c1", "f", {})], points=[])
def test_a_repeated_prefill_is_dropped_however_the_stream_is_cut(
    prefill: str, rest: str, echoed: bool, tool_calls: list[Any], points: list[int]
) -> None:
    """Anthropic's reply to a prefill holds only what follows it: an answer that begins by
    repeating it (llama-server's) loses it, whole and streamed, and any other is kept
    (even one that repeats only the prefill's beginning, before its tool calls)."""
    assume(echoed or not rest.startswith(prefill))
    text = prefill + rest if echoed else rest
    finish = "tool_calls" if tool_calls else "stop"
    translator = MessageEvents("m", prefill=prefill)
    stream = translator.start() + b"".join(
        translator.chunk(c) for c in chunks(text, tool_calls, finish, points)
    )
    message = gathered(events_of(stream + translator.end()))
    answer = completion(text, tool_calls, finish)
    whole = to_message(answer, "m", {"model_used": "local"}, (), prefill)
    assert message | {"id": whole["id"]} == whole
    said = "".join(b["text"] for b in whole["content"] if b["type"] == "text")
    assert said == (rest if echoed else text)


@given(
    tool_calls=calls,
    points=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
)
def test_the_chat_streams_bytes_cut_anywhere_make_the_same_events(
    tool_calls: list[Any], points: list[int]
) -> None:
    """``message_events`` reads the chat reply's bytes however they are cut into blocks."""
    answer = chunks("Hello there, Paris.", tool_calls, "stop", [3, 9])
    body = b"".join(data_event(c) for c in answer)
    body += b"data: [DONE]\n\n"

    async def read(blocks: list[bytes]) -> bytes:
        async def chat() -> AsyncGenerator[bytes]:
            for block in blocks:
                yield block

        return b"".join([e async for e in message_events(chat(), MessageEvents("m"))])

    cut_up = asyncio.run(
        read(
            [
                body[a:b]
                for a, b in itertools.pairwise(
                    sorted({0, len(body), *(p % len(body) for p in points)})
                )
            ]
        )
    )
    one_each = asyncio.run(read([e + b"\n\n" for e in body.split(b"\n\n")[:-1]]))
    strip = [orjson.loads(e.split(b"data: ", 1)[1]) for e in cut_up.split(b"\n\n")[:-1]]
    assert len(events_of(cut_up)) == len(events_of(one_each)) == len(strip)
    assert gathered(events_of(cut_up)) | {"id": "x"} == gathered(events_of(one_each)) | {"id": "x"}


def test_an_error_chunk_is_an_error_event_that_ends_the_stream() -> None:
    translator = MessageEvents("m")
    out = translator.chunk({"error": {"message": "Generation failed", "type": "server_error"}})
    error = {"type": "error", "error": {"type": "api_error", "message": "Generation failed"}}
    assert out == b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"
    assert translator.end() == b""


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (InvalidRequest("x"), 400, "invalid_request_error"),
        (AuthenticationFailed("x"), 401, "authentication_error"),
        (PayloadTooLarge("x"), 413, "request_too_large"),
        (UpstreamUnavailable("cerebras", "down"), 529, "overloaded_error"),
        (UpstreamBusy("cerebras", "busy"), 529, "overloaded_error"),
        (UpstreamNotConfigured("cerebras", "no API key"), 503, "api_error"),  # will not pass
        (UpstreamTimeout("cerebras", "slow"), 504, "api_error"),
        (ProxyError("boom"), 502, "api_error"),  # never a 500
    ],
)
def test_errors_take_anthropics_status_and_type(error: ProxyError, status: int, kind: str) -> None:
    mapped = anthropic_error(error)
    assert (mapped.status, mapped.type) == (status, kind)


def test_what_the_proxy_does_not_act_on_is_accepted_and_dropped() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "metadata": {"user_id": "u"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "context_management": {"edits": []},
        "service_tier": "auto",
        "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "redacted_thinking", "data": "x"},
                    {"type": "text", "text": "yo"},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                    }
                ],
            },
        ],
        "top_k": 3,
    }
    chat = to_chat(MessagesRequest.model_validate(body), top_k=False)
    assert chat == {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
                ],
            },
        ],
    }
    assert to_chat(MessagesRequest.model_validate(body), top_k=True)["top_k"] == 3


USE_A = {"type": "tool_use", "id": "toolu_a", "name": "w", "input": {}}
USE_B = {"type": "tool_use", "id": "toolu_b", "name": "w", "input": {}}


def test_tool_results_become_tool_messages_before_the_rest_of_the_turn() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "tools": [{"name": "w", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any"},
        "stop_sequences": ["END"],
        "messages": [
            {"role": "assistant", "content": [USE_A, USE_B]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "and?"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_a",
                        "content": [{"type": "text", "text": "21"}],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_b",
                        "content": "no",
                        "is_error": True,
                    },
                ],
            },
        ],
    }
    chat = to_chat(MessagesRequest.model_validate(body), top_k=False)
    assert chat["messages"][1:] == [
        {"role": "tool", "tool_call_id": "a", "content": "21"},
        {"role": "tool", "tool_call_id": "b", "content": "Error: no"},
        {"role": "user", "content": "and?"},
    ]
    assert chat["tool_choice"] == "required" and chat["stop"] == ["END"]
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}
    ]


def test_a_tool_result_answers_a_tool_use_of_the_turn_before_it() -> None:
    """As Anthropic refuses it, in its words: a result of no call, or of one made earlier;
    consecutive messages of one role are one turn, as Anthropic combines them."""
    result = {"type": "tool_result", "tool_use_id": "toolu_a", "content": "21"}
    result_b = {"type": "tool_result", "tool_use_id": "toolu_b", "content": "no"}
    for combined in (
        [{"role": "assistant", "content": [USE_A, USE_B]}]
        + [{"role": "user", "content": [r]} for r in (result, result_b)],
        [
            {"role": "assistant", "content": [USE_A]},
            {"role": "assistant", "content": [{"type": "text", "text": "and"}, USE_B]},
            {"role": "user", "content": [{"type": "text", "text": "here"}, result, result_b]},
        ],
    ):
        asked = MessagesRequest.model_validate(
            {"model": "m", "max_tokens": 5, "messages": combined}
        )
        answered = [m for m in to_chat(asked, top_k=False)["messages"] if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in answered] == ["a", "b"]
    earlier = [
        {"role": "assistant", "content": [USE_A]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": "More?"},
        {"role": "user", "content": [{"type": "text", "text": "yes"}, result]},
    ]
    for messages, where in (
        ([{"role": "user", "content": [result]}], "0.content.0"),
        (earlier, "3.content.1"),
    ):
        asked = MessagesRequest.model_validate(
            {"model": "m", "max_tokens": 5, "messages": messages}
        )
        with pytest.raises(InvalidRequest) as refused:
            to_chat(asked, top_k=False)
        assert refused.value.param == f"messages.{where}"
        assert "unexpected `tool_use_id` found in `tool_result` blocks: toolu_a" in str(
            refused.value
        )


@pytest.mark.parametrize(
    "change",
    [
        {"max_tokens": None},
        {"max_tokens": "5"},
        {"messages": []},
        {"messages": [{"role": "system", "content": "x"}]},
        {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        {"tool_choice": {"type": "tool"}},
        {"temperature": 1.5},
    ],
)
def test_a_malformed_request_is_refused(change: dict[str, Any]) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "q"}]} | change
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(ValidationError):
        MessagesRequest.model_validate(body)


# -- stop_sequence: reported where the matched sequence can be told --------------------------

STOPS = ["\nObservation:", "END"]


@pytest.mark.parametrize(
    ("choice", "text", "matched"),
    [
        ({"finish_reason": "stop", "stop_reason": "END"}, "done", "END"),  # vLLM names it
        ({"finish_reason": "stop", "matched_stop": "END"}, "done", "END"),  # SGLang
        ({"finish_reason": "stop", "stopping_word": "END"}, "done", "END"),  # llama native
        ({"finish_reason": "stop"}, "look it up\nObservation:", "\nObservation:"),  # kept
        ({"finish_reason": "stop"}, "done", None),  # cut and not named: end_turn
        ({"finish_reason": "stop", "stop_reason": 128009}, "done", None),  # a token id
        ({"finish_reason": "stop", "stop_reason": "other"}, "done", None),  # not the client's
        ({"finish_reason": "length"}, "ends with END", None),
    ],
)
def test_the_matched_stop_sequence_is_told_where_it_can_be(
    choice: dict[str, Any], text: str, matched: str | None
) -> None:
    assert matched_stop(choice, text, STOPS) == matched
    assert matched_stop(choice, text, []) is None  # the client sent none


def test_a_whole_answer_reports_its_stop_sequence_without_it_in_the_text() -> None:
    answer = completion("Thought: look it up\nObservation:", [], "stop")
    message = to_message(answer, "m", None, STOPS)
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "\nObservation:")
    assert message["content"] == [{"type": "text", "text": "Thought: look it up"}]
    Message.model_validate(message)
    plain = to_message(completion("Thought: done", [], "stop"), "m", None, STOPS)
    assert (plain["stop_reason"], plain["stop_sequence"]) == ("end_turn", None)


def test_a_stream_reports_its_stop_sequence_at_its_end() -> None:
    translator = MessageEvents("m", STOPS)
    pieces = ["Thought: look", " it up\nObser", "vation:"]
    first = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    stream = translator.start() + translator.chunk(first)
    for piece in pieces:
        stream += translator.chunk({"choices": [{"index": 0, "delta": {"content": piece}}]})
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "model_used": "l"}
    stream += translator.chunk(finish) + translator.end()
    message = gathered(events_of(stream))
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "\nObservation:")
    named = MessageEvents("m", STOPS)
    named.start()
    named.chunk({"choices": [{"index": 0, "delta": {"content": "done"}}]})
    named.chunk(
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "END"}]}
    )
    assert b'"stop_reason":"stop_sequence","stop_sequence":"END"' in named.end()
