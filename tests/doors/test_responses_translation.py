"""The Responses door's translation, property-tested: a request and an answer survive the
round trip (text, tool calls with their ids and arguments, stop reasons, usage), and a
streamed answer's events build the same response as the whole answer."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.doors.responses import reply
from app.doors.responses.events import ResponseEvents
from app.doors.responses.request import ResponsesRequest, chat_body
from app.errors import InvalidRequest
from app.sse import DataLines, completion_to_chunks

texts = st.text(min_size=1, max_size=40)
names = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)
ids = st.from_regex(r"call_[A-Za-z0-9]{1,10}", fullmatch=True)
arguments = st.dictionaries(
    names, st.integers(-(2**53), 2**53) | st.text(max_size=10), max_size=3
).map(lambda args: orjson.dumps(args).decode())
calls = st.lists(st.tuples(ids, names, arguments), min_size=1, max_size=3, unique_by=lambda c: c[0])


@st.composite
def turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A conversation as Responses items: user messages, function calls, their outputs."""
    items: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        items.append({"role": "user", "content": draw(texts)})
        if draw(st.booleans()):
            made = draw(calls)
            items += [
                {"type": "function_call", "call_id": c, "name": n, "arguments": a}
                for c, n, a in made
            ]
            items += [
                {"type": "function_call_output", "call_id": c, "output": draw(texts)}
                for c, _, _ in made
            ]
    return items


@given(turns(), st.none() | texts)
def test_a_request_survives_the_translation(
    items: list[dict[str, Any]], system: str | None
) -> None:
    asked = ResponsesRequest.model_validate({"input": items, "instructions": system})
    messages = chat_body(asked, [])["messages"]
    if system:
        assert messages.pop(0) == {"role": "system", "content": system}
    back: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "user":
            back.append({"role": "user", "content": message["content"]})
        elif message["role"] == "assistant":
            back += [
                {"type": "function_call", "call_id": c["id"], **c["function"]}
                for c in message["tool_calls"]
            ]
        else:
            output = {"call_id": message["tool_call_id"], "output": message["content"]}
            back.append({"type": "function_call_output", **output})
    assert back == items


@st.composite
def completions(draw: st.DrawFn) -> dict[str, Any]:
    """A chat completion: text or tool calls or both, a finish, usage."""
    made = draw(st.none() | calls)
    text = draw(st.text(max_size=60)) if made else draw(texts)
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if made:
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": n, "arguments": a}}
            for c, n, a in made
        ]
    finish = "tool_calls" if made else draw(st.sampled_from(["stop", "length"]))
    prompt, completion = draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6))
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


def comparable(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in output]


def streamed(completion: dict[str, Any], asked: ResponsesRequest) -> tuple[dict[str, Any], list]:
    """The response the events of ``completion``'s stream build, and the events."""
    events = ResponseEvents(reply.skeleton(asked, "resp_1", 1.0))
    chunks = completion_to_chunks(
        completion, with_logprobs=False, include_usage=True, extra={"model_used": "m"}
    )
    wire = events.start()
    wire += b"".join(events.take_bytes(orjson.dumps(chunk)) for chunk in chunks)
    wire += events.end()
    lines = DataLines()
    told = [orjson.loads(payload) for payload in lines.feed(wire)]
    assert events.final is not None
    return events.final, told


@given(completions())
def test_an_answer_survives_the_translation(completion: dict[str, Any]) -> None:
    asked = ResponsesRequest.model_validate({"input": "hi"})
    response = reply.from_chat(completion, asked, "resp_1")
    choice = completion["choices"][0]
    assert reply.assistant_message(response["output"]) == {
        **choice["message"],
        "content": choice["message"]["content"]
        or (None if choice["message"].get("tool_calls") else ""),
    }
    cut = choice["finish_reason"] == "length"
    assert response["status"] == ("incomplete" if cut else "completed")
    # the item it was cut in is too (the trial: it said completed); times in Unix seconds
    assert response["output"][-1]["status"] == ("incomplete" if cut else "completed")
    assert isinstance(response["created_at"], int) and isinstance(response["completed_at"], int)
    usage = completion["usage"]
    assert response["usage"]["input_tokens"] == usage["prompt_tokens"]
    assert response["usage"]["output_tokens"] == usage["completion_tokens"]
    assert response["usage"]["total_tokens"] == usage["total_tokens"]
    whole_stream, told = streamed(completion, asked)
    assert comparable(whole_stream["output"]) == comparable(response["output"])
    assert whole_stream["status"] == response["status"]
    assert whole_stream["usage"] == response["usage"]
    assert whole_stream["metadata"] == {}  # the client's alone
    assert whole_stream["specproxy"] == {"model_used": "m"}
    assert [event["sequence_number"] for event in told] == list(range(len(told)))
    kinds = [event["type"] for event in told]
    assert kinds[-1] == ("response.incomplete" if cut else "response.completed")
    fragments = "".join(
        e["delta"] for e in told if e["type"] == "response.function_call_arguments.delta"
    )
    assert fragments == "".join(
        c["function"]["arguments"] for c in choice["message"].get("tool_calls", [])
    )


def test_an_error_chunk_fails_the_response() -> None:
    asked = ResponsesRequest.model_validate({"input": "hi"})
    events = ResponseEvents(reply.skeleton(asked, "resp_1", 1.0))
    events.start()
    events.take({"choices": [{"index": 0, "delta": {"content": "Hel"}}]})
    failed = events.take({"error": {"message": "upstream broke", "type": "server_error"}})
    assert failed.startswith(b"event: response.failed\n")
    assert events.final is not None and events.final["error"]["message"] == "upstream broke"
    assert events.end() == b""  # nothing after the failure


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"tools": [{"type": "web_search_preview"}]}, "'web_search_preview'"),
        ({"tools": [{"type": "function"}]}, "needs its name"),
        (
            {"tool_choice": {"type": "file_search"}, "tools": [{"type": "function", "name": "f"}]},
            "'file_search'",
        ),
        ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "'input_audio'"),
        # the trial: called "not supported", though input_text is; its text was missing
        (
            {"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "'input_text' part needs its text",
        ),
        ({"input": [{"type": "bogus"}, {"role": "user", "content": "hi"}]}, "'bogus' item"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "'web_search_call' item"),
        ({"input": []}, "needs some input"),
        ({"input": None}, "needs some input"),
        ({"input": None, "instructions": "Be brief."}, "needs some input"),
    ],
)
def test_what_the_proxy_cannot_do_is_a_clear_refusal(body: dict[str, Any], fragment: str) -> None:
    asked = ResponsesRequest.model_validate({"input": "hi"} | body)
    with pytest.raises(InvalidRequest, match=fragment):
        chat_body(asked, [])


def test_with_history_a_turn_may_bring_no_input() -> None:
    asked = ResponsesRequest.model_validate({"instructions": "Be brief."})
    earlier = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."}]
    assert chat_body(asked, earlier)["messages"] == [
        {"role": "system", "content": "Be brief."},
        *earlier,
    ]


def test_a_json_schema_format_is_chats_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}
    asked = ResponsesRequest.model_validate({"input": "hi", "text": {"format": fmt}})
    assert chat_body(asked, [])["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "thing", "schema": schema, "strict": True},
    }


@given(completions(), st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
def test_the_chat_streams_bytes_cut_anywhere_make_the_same_events(
    completion: dict[str, Any], points: list[int]
) -> None:
    """The door's pass over the chat reply (``_translated``) reads its bytes however they
    are cut into blocks: the same events as one whole event per block."""
    from app.api.responses import _translated  # the route module's pure generator

    asked = ResponsesRequest.model_validate({"input": "hi"})
    chunks = completion_to_chunks(
        completion, with_logprobs=False, include_usage=True, extra={"model_used": "m"}
    )
    body = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"

    async def read(blocks: list[bytes]) -> list[dict[str, Any]]:
        async def chat() -> AsyncGenerator[bytes]:
            for block in blocks:
                yield block

        events = ResponseEvents(reply.skeleton(asked, "resp_1", 1.0))
        wire = b"".join([e async for e in _translated(chat(), events, None, "", [])])
        told = [orjson.loads(p) for p in DataLines().feed(wire)]
        for event in told:  # item ids and the time completed are fresh each time
            event.pop("item_id", None)
            (event.get("response") or {}).pop("completed_at", None)
            for holder in (event, event.get("response") or {}):
                for item in holder.get("output") or [holder.get("item") or {}]:
                    item.pop("id", None)
        return told

    one_each = asyncio.run(read([e + b"\n\n" for e in body.split(b"\n\n")[:-1]]))
    cuts = sorted({0, len(body), *(p % len(body) for p in points)})
    cut_up = asyncio.run(read([body[a:b] for a, b in itertools.pairwise(cuts)]))
    assert cut_up == one_each and one_each[-1]["type"].startswith("response.")


def test_a_function_call_output_answers_a_call_made_before_it() -> None:
    """As OpenAI refuses it: an output of no call made (here or in the stored turns)."""
    output = {"type": "function_call_output", "call_id": "call_1", "output": "14 C"}
    orphan = ResponsesRequest.model_validate({"input": [{"role": "user", "content": "hi"}, output]})
    with pytest.raises(InvalidRequest) as refused:
        chat_body(orphan, [])
    assert refused.value.param == "input.1.call_id" and "'call_1'" in str(refused.value)
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    stored = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call]}]
    answered = ResponsesRequest.model_validate({"input": [output]})
    assert chat_body(answered, stored)["messages"][-1]["tool_call_id"] == "call_1"
