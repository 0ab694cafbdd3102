"""How a door reads the chat reply's stream (``app.doors.chat_stream``): the payloads are
``DataLines``' however the bytes are cut, and only a chunk that brings text alone is read
for its text."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.doors.chat_stream import ChatPayloads, plain_text
from app.sse import DataLines


def text_chunk(text: str | None, **more: Any) -> dict[str, Any]:
    delta = {} if text is None else {"content": text}
    choice = {"index": 0, "delta": delta, "finish_reason": None}
    return {"id": "c", "object": "chat.completion.chunk", "choices": [choice], **more}


# server-sent events as the relay writes them, and the other lines a stream may hold
events = st.one_of(
    st.text(max_size=12).map(lambda t: b"data: " + orjson.dumps(text_chunk(t)) + b"\n\n"),
    st.just(b"data: [DONE]\n\n"),
    st.just(b"data:  [DONE] \n\n"),  # spaces DataLines strips
    st.just(b": a comment\n\n"),
    st.just(b"event: x\ndata: {}\n\n"),
    st.just(b"data: {}\r\n\r\n"),
)


@given(st.lists(events, max_size=8), st.lists(st.integers(0, 2000), max_size=6))
def test_the_payloads_are_datalines_however_the_bytes_are_cut(
    stream: list[bytes], points: list[int]
) -> None:
    body = b"".join(stream)
    cuts = sorted({0, len(body), *(p % (len(body) or 1) for p in points)})
    blocks = [body[a:b] for a, b in itertools.pairwise(cuts)]
    for split in (blocks, stream, [body]):
        ours, theirs = ChatPayloads(), DataLines()
        assert [p for b in split for p in ours.feed(b)] == [
            p for b in split for p in theirs.feed(b)
        ]


@pytest.mark.parametrize(
    ("chunk", "text"),
    [
        (text_chunk("Paris"), "Paris"),
        (text_chunk(""), ""),  # a role chunk brings nothing
        (text_chunk(None), ""),
        (text_chunk('a\n"b"\\ é'), 'a\n"b"\\ é'),
        ({**text_chunk("x"), "timings": {"draft_n": 3}}, "x"),  # not the door's
    ],
)
def test_a_chunk_that_brings_text_alone_is_read_for_it(chunk: dict[str, Any], text: str) -> None:
    assert plain_text(orjson.dumps(chunk)) == text


def finished(chunk: dict[str, Any]) -> dict[str, Any]:
    chunk["choices"][0]["finish_reason"] = "stop"
    return chunk


def delta_with(key: str, value: Any) -> dict[str, Any]:
    chunk = text_chunk("x")
    chunk["choices"][0]["delta"][key] = value
    return chunk


@pytest.mark.parametrize(
    "payload",
    [
        orjson.dumps(finished(text_chunk("x"))),
        orjson.dumps(text_chunk("x", usage={"completion_tokens": 1})),
        orjson.dumps(text_chunk("x", usage=None)),
        orjson.dumps(text_chunk("x", model_used="local")),
        orjson.dumps(text_chunk("x", speculative_decoding={})),
        orjson.dumps({"error": {"message": "broke"}}),
        orjson.dumps(delta_with("tool_calls", [{"index": 0}])),
        orjson.dumps(delta_with("reasoning_content", "hm")),
        orjson.dumps({"choices": []}),
        orjson.dumps({"choices": [text_chunk("a")["choices"][0]] * 2}),
        orjson.dumps({"choices": [{"index": 0}]}),
        orjson.dumps(delta_with("content", 5)),
        b'{"choices": [',
        b"[DONE]",
    ],
)
def test_any_other_chunk_is_left_to_the_door(payload: bytes) -> None:
    assert plain_text(payload) is None
