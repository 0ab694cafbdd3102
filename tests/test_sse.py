"""Event-stream framing: payloads come out the same however the network cuts the bytes."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.sse import (
    CompletionAssembler,
    DataLines,
    ToolCallDeltas,
    carries_text,
    completion_to_chunks,
    passes_unread,
)
from tests.support.chunks import read

STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"a": 1}\n\n'
    b"event: message\r\n"
    b'data: {"b": "x\\ny"}\r\n\r\n'
    b"data: [DONE]"  # unterminated: the body just ends
)

PAYLOADS = [b'{"a": 1}', b'{"b": "x\\ny"}', b"[DONE]"]


def feed_all(blocks: list[bytes]) -> list[bytes]:
    lines = DataLines()
    out = [p for block in blocks for p in lines.feed(block)]
    return out + lines.feed(b"\n")  # the end of the body completes the last line


@given(st.sets(st.integers(min_value=1, max_value=len(STREAM) - 1)))
def test_any_cut_gives_the_same_payloads(cuts: set[int]) -> None:
    edges = [0, *sorted(cuts), len(STREAM)]
    blocks = [STREAM[a:b] for a, b in itertools.pairwise(edges)]
    assert feed_all(blocks) == PAYLOADS


def test_an_endless_line_is_refused() -> None:
    lines = DataLines(limit=1024)
    lines.feed(b"data: " + b"x" * 1000)
    with pytest.raises(ValueError, match="over 1024 bytes"):
        lines.feed(b"x" * 100)


@pytest.mark.parametrize(
    ("payload", "unread"),
    [
        (b'{"choices":[{"finish_reason":null,"delta":{"content":"x"}}]}', True),
        (b'{"choices":[{"finish_reason":"stop","delta":{}}]}', False),
        (b'{"choices":[],"usage":{"completion_tokens":3}}', False),
        (b'{"choices":[{"finish_reason":null}],"usage":null}', False),  # parsed, to be safe
        (b'{"error":{"message":"boom"},"finish_reason":null}', False),
        (b'{"choices":[{"finish_reason": null,"delta":{}}]}', False),  # other spelling: parsed
        (b'{"choices":[{"finish_reason":null,"delta":{"tool_calls":[]}}]}', False),  # counted
        # Generated text cannot fake the key: its quotes are escaped.
        (
            b'{"choices":[{"finish_reason":"stop","delta":{"content":"\\"finish_reason\\":null"}}]}',
            False,
        ),
    ],
)
def test_only_chunks_that_finish_nothing_pass_unread(payload: bytes, unread: bool) -> None:
    assert passes_unread(payload) is unread


LLAMA_STREAM = Path(__file__).parent / "fixtures" / "llama_server" / "chat_stop_stream.sse"


def test_a_recorded_llama_server_stream_brings_text_from_its_second_chunk() -> None:
    payloads = [p for p in feed_all([LLAMA_STREAM.read_bytes()]) if p != b"[DONE]"]
    assert [carries_text(p) for p in payloads[:3]] == [False, True, True]  # role first


@given(st.one_of(st.none(), st.text(max_size=5)), st.booleans())
def test_text_is_seen_in_an_unread_chunk_exactly_when_its_delta_has_some(
    content: str | None, with_role: bool
) -> None:
    delta: dict[str, object] = {"role": "assistant"} if with_role else {}
    if content is not None or not with_role:
        delta["content"] = content
    chunk = {"choices": [{"finish_reason": None, "index": 0, "delta": delta}]}
    assert carries_text(orjson.dumps(chunk)) is bool(content)


# --- CompletionAssembler: the inverse of completion_to_chunks ---------------------------------

token_texts = st.text(max_size=6)
logprob_entries = st.builds(
    lambda token, lp, alt: {
        "id": 7,
        "token": token,
        "bytes": list(token.encode()),
        "logprob": lp,
        "top_logprobs": [{"id": 7, "token": token, "logprob": lp}, *alt],
    },
    token_texts,
    st.floats(-30.0, 0.0),
    st.lists(
        st.fixed_dictionaries(
            {"id": st.integers(0, 99), "token": token_texts, "logprob": st.floats(-30.0, 0.0)}
        ),
        max_size=2,
    ),
)
usages = st.none() | st.fixed_dictionaries(
    {"prompt_tokens": st.integers(0, 999), "completion_tokens": st.integers(0, 999)}
).map(lambda u: {**u, "total_tokens": u["prompt_tokens"] + u["completion_tokens"]})


@st.composite
def completions(draw) -> dict:
    entries = draw(st.none() | st.lists(logprob_entries, max_size=8))
    spelled = entries is not None and draw(st.booleans())
    content = "".join(e["token"] for e in entries) if spelled else draw(st.text(max_size=60))
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": draw(st.sampled_from(["stop", "length", "p_min", None])),
    }
    if entries is not None:
        choice["logprobs"] = {"content": entries}
    body = {
        "id": draw(st.sampled_from(["chatcmpl-1", "chatcmpl-xyz"])),
        "object": "chat.completion",
        "created": draw(st.integers(0, 2**31)),
        "model": draw(st.sampled_from(["local", "gpt-oss-120b", ""])),
        "choices": [choice],
    }
    if (usage := draw(usages)) is not None:
        body["usage"] = usage
    return body


@given(completions())
def test_assembling_the_chunks_of_a_completion_gives_it_back(body: dict) -> None:
    chunks = completion_to_chunks(body, with_logprobs=True, include_usage=True, extra={})
    assembler = CompletionAssembler()
    brought = []
    for chunk in chunks:
        entries = assembler.add(read(chunk))
        expected = ((chunk["choices"] or [{}])[0].get("logprobs") or {}).get("content") or []
        assert entries == expected
        brought += entries
    out = assembler.completion()
    choice, original = out["choices"][0], body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": original["message"]["content"]}
    # The entries come back when they spell the answer (else the chunks are cut by words).
    entries = (original.get("logprobs") or {}).get("content") or []
    spelled = "".join(e["token"] for e in entries) == original["message"]["content"]
    assert choice["logprobs"]["content"] == (entries if spelled else [])
    assert brought == choice["logprobs"]["content"]
    assert choice["finish_reason"] == (original["finish_reason"] or "stop")
    assert out.get("usage") == body.get("usage")
    assert {k: out[k] for k in ("id", "created", "model")} == {
        k: body[k] for k in ("id", "created", "model")
    }
    assert out["object"] == "chat.completion"


tool_call_lists = st.lists(
    st.builds(
        lambda i, name, args: {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": args},
        },
        st.integers(0, 999),
        st.sampled_from(["get_weather", "get_time"]),
        st.sampled_from(["{}", '{"city": "Paris"}', '{"a": [1, 2], "b": {"c": " x "}}', '{"a": ']),
    ),
    min_size=1,
    max_size=3,
)


@given(tool_call_lists, st.sampled_from(["", "Let me check."]))
def test_tool_calls_replayed_as_chunks_come_back_whole(calls: list, content: str) -> None:
    body = {
        "id": "chatcmpl-1",
        "created": 1,
        "model": "local",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content or None, "tool_calls": calls},
                "finish_reason": "tool_calls",
            }
        ],
    }
    chunks = completion_to_chunks(body, with_logprobs=False, include_usage=False, extra={})
    deltas = [c["choices"][0]["delta"] for c in chunks]
    # OpenAI's shape: per call a head with index, id, type and name, then argument fragments
    heads = [d["tool_calls"][0] for d in deltas if "tool_calls" in d and "id" in d["tool_calls"][0]]
    assert [(h["index"], h["id"], h["function"]["name"]) for h in heads] == [
        (i, c["id"], c["function"]["name"]) for i, c in enumerate(calls)
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assembler = CompletionAssembler()
    for c in chunks:
        assembler.add(read(c))
    message = assembler.completion()["choices"][0]["message"]
    assert message["tool_calls"] == calls
    assert message["content"] == (content or None)


def test_tool_call_deltas_skip_malformed_items_and_keep_the_name_once() -> None:
    deltas = ToolCallDeltas()
    deltas.add([{"index": 0, "id": "c", "function": {"name": "f", "arguments": '{"a"'}}])
    deltas.add(["junk", {"index": 0, "function": {"name": "f", "arguments": ": 1}"}}])
    deltas.add("not a list")
    assert deltas.calls() == [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]


def chunk(content: str | None = None, finish: str | None = None, entries=None, **head) -> dict:
    delta = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    if entries is not None:
        choice["logprobs"] = {"content": entries}
    base = {"id": "a", "created": 1, "model": "m", "object": "chat.completion.chunk"}
    return {**base, **head, "choices": [choice]}


def test_a_given_finish_reason_overrides_the_stream() -> None:
    assembler = CompletionAssembler()
    assembler.add(read(chunk("Hel")))
    assembler.add(read(chunk("lo", finish="stop")))
    assert assembler.completion()["choices"][0]["finish_reason"] == "stop"
    assert assembler.completion(finish_reason="p_min")["choices"][0]["finish_reason"] == "p_min"


def test_an_unfinished_stream_has_no_finish_reason() -> None:
    assembler = CompletionAssembler()
    assembler.add(read(chunk("Hel")))
    body = assembler.completion()
    assert body["choices"][0]["finish_reason"] is None
    assert body["choices"][0]["message"]["content"] == "Hel"


def test_llama_server_timings_on_the_usage_chunk_are_kept() -> None:
    usage = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    timings = {"prompt_n": 4, "predicted_n": 2, "predicted_per_second": 88.5}
    entry = {"id": 9, "token": "Hi", "bytes": [72, 105], "logprob": -0.1, "top_logprobs": []}
    stream = [
        chunk(""),
        chunk("Hi", entries=[entry]),
        chunk(None, finish="stop"),
        {"id": "a", "created": 1, "model": "m", "choices": [], "usage": usage, "timings": timings},
    ]
    assembler = CompletionAssembler()
    assert [assembler.add(read(c)) for c in stream] == [[], [entry], [], []]
    body = assembler.completion()
    assert body["timings"] == timings
    assert body["usage"] == usage
    assert body["choices"][0]["message"]["content"] == "Hi"
    assert body["choices"][0]["logprobs"]["content"] == [entry]
    assert body["choices"][0]["finish_reason"] == "stop"


def test_id_model_and_created_come_from_the_first_chunk() -> None:
    assembler = CompletionAssembler()
    assembler.add(read(chunk("a", id="first", model="local", created=100)))
    assembler.add(read(chunk("b", id="second", model="other", created=200)))
    body = assembler.completion()
    assert (body["id"], body["model"], body["created"]) == ("first", "local", 100)
    assert body["choices"][0]["message"]["content"] == "ab"
