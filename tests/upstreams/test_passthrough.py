"""A whole answer passed on as it came: the view read of it refuses every answer the full
parse refuses, and the bytes passed on (the proxy's fields added) are the same JSON as
parsing, renaming and dumping it would give."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import UpstreamProtocolError
from app.upstreams.parsing import completion_body
from app.upstreams.passthrough import read_answer
from app.upstreams.shape import completion_problem
from app.wire import with_fields

MODEL = "local"
LLAMA = (
    b'{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant",'
    b'"content":"The \\"model\\":\\"x\\" key"},"logprobs":{"content":[{"id":1,"token":"The",'
    b'"logprob":-0.1,"top_logprobs":[]}]}}],"created":1,"model":"/models/smol.gguf",'
    b'"object":"chat.completion","usage":{"completion_tokens":4,"prompt_tokens":9,'
    b'"total_tokens":13},"timings":{"predicted_n":4,"draft_n":6,"draft_n_accepted":5}}'
)

# Small JSON values, and answers built from the shapes an upstream might send, good or not.
scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=3)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=4,
)
counts = st.sampled_from([-1, 0, 7]) | st.none() | st.booleans() | st.text(max_size=2)


def mostly(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The field as an upstream should send it, or now and then any JSON value."""
    return st.one_of(good, good, good, values)


usages = mostly(
    st.fixed_dictionaries(
        {},
        optional={"prompt_tokens": counts, "completion_tokens": counts, "total_tokens": counts},
    )
)
messages = mostly(
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.just("assistant"),
            "content": st.none() | st.text(max_size=4) | st.integers(-5, 5),
            "tool_calls": st.none() | st.lists(values, max_size=2) | values,
        },
    )
)
logprobs = mostly(
    st.fixed_dictionaries(
        {}, optional={"content": st.none() | st.lists(mostly(st.just({"id": 1})), max_size=2)}
    )
)
choices = mostly(
    st.fixed_dictionaries(
        {"message": messages},
        optional={
            "finish_reason": st.none() | st.text(max_size=3) | st.integers(-5, 5),
            "logprobs": st.none() | logprobs,
        },
    )
)
answers = st.fixed_dictionaries(
    {"choices": mostly(st.lists(choices, min_size=1, max_size=2))},
    optional={"model": st.text(max_size=4) | values, "usage": st.none() | usages},
)


@given(answers)
def test_the_view_refuses_whatever_the_full_parse_refuses(answer: dict[str, Any]) -> None:
    content = orjson.dumps(answer)
    try:
        passed, _ = read_answer("up", content, MODEL)
    except UpstreamProtocolError:
        return  # refused: the full parse may have accepted it (the view is stricter)
    assert completion_problem(answer) is None
    assert orjson.loads(passed) == completion_body("up", content, MODEL)


@given(answers, st.sampled_from([b"", b" ", b"\n  "]))
def test_a_passed_answer_is_the_json_a_parse_and_dump_gives(
    answer: dict[str, Any], spacing: bytes
) -> None:
    """Written with spaces (``"model": "x"``, as some servers do) or without."""
    content = orjson.dumps(answer, option=orjson.OPT_INDENT_2) if spacing else orjson.dumps(answer)
    try:
        passed, _ = read_answer("up", content + spacing, MODEL)
    except UpstreamProtocolError:
        return
    extra = {"model_used": "local"}
    assert orjson.loads(with_fields(passed, extra)) == {
        **completion_body("up", content, MODEL),
        **extra,
    }


def test_a_llama_server_answer_goes_on_as_it_came_but_for_the_model() -> None:
    passed, view = read_answer("up", LLAMA, MODEL)
    assert passed == LLAMA.replace(b'"model":"/models/smol.gguf"', b'"model":"local"')
    assert view.usage is not None and view.usage.completion_tokens == 4
    assert view.timings["draft_n"] == 6


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (LLAMA.replace(b'"model":"/models', b'"model": "/models'), "written with a space"),
        (LLAMA.replace(b'"created":1', b'"created":{"model":"y"}'), "a second model member"),
        (
            LLAMA.replace(b'"model":"/models', b'"model" : "/models').replace(
                b'"created":1', b'"created":{"model":"/models/smol.gguf"}'
            ),
            "a nested model member the one written compactly",
        ),
        (
            LLAMA.replace(b'"model":"/models', b'"mod\\u0065l":"/models').replace(
                b'"created":1', b'"created":{"model":"/models/smol.gguf"}'
            ),
            "the top-level key escaped",
        ),
        (LLAMA.replace(b'"created":1', b'"created":1,"model_used":"up"'), "our own field"),
        (LLAMA.replace(b'"created":1', b'"created":1,"model\\u005fused":"up"'), "ours, escaped"),
        (
            LLAMA.replace(b'"created":1', b'"created":1,"speculative_decoding":{}'),
            "our other field",
        ),
    ],
)
def test_an_answer_not_safe_to_edit_in_place_is_the_json_a_parse_and_dump_gives(
    content: bytes, why: str
) -> None:
    """Only the top-level model renamed, each of the proxy's fields once (and ours)."""
    passed, _ = read_answer("up", content, MODEL)
    extra = {"model_used": "local", "speculative_decoding": {"accepted": True}}
    sent = with_fields(passed, extra)
    assert orjson.loads(sent) == {**orjson.loads(content), "model": MODEL, **extra}, why
    assert sent.count(b'"model_used"') == 1 and sent.count(b'"speculative_decoding"') == 1, why


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (LLAMA.replace(b'"object"', b'"obj\xffct"'), "up: answered with invalid JSON"),
        (LLAMA.replace(b"The ", b"Th\xe9 "), "up: answered with invalid JSON"),
        (b'{"choices":' + b"[" * 5000 + b"]" * 5000 + b"}", "up: answered with invalid JSON"),
        (
            LLAMA.replace(
                b'"completion_tokens":4', b'"completion_tokens":100000000000000000000000000'
            ),
            "up: usage.completion_tokens is not a count",
        ),
    ],
)
def test_what_msgspec_skips_is_still_refused_where_the_full_parse_refuses_it(
    content: bytes, message: str
) -> None:
    """Bytes that are not UTF-8 (in a member the view skips or reads), nesting too deep
    to parse, a count past 64 bits: the upstream's protocol error, as before."""
    with pytest.raises(UpstreamProtocolError) as caught:
        read_answer("up", content, MODEL)
    assert caught.value.message == message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"<html>oops", "up: answered with invalid JSON"),
        (b'{"choices": []}', "up: answer has no choices"),
        (b'{"choices":[{"message":null}]}', "up: choices[0].message is not an object"),
        (
            b'{"choices":[{"message":{}}],"usage":{"prompt_tokens":true}}',
            "up: usage.prompt_tokens is not a count",
        ),
    ],
)
def test_a_broken_answer_is_named_as_the_full_parse_names_it(content: bytes, message: str) -> None:
    with pytest.raises(UpstreamProtocolError) as caught:
        read_answer("up", content, MODEL)
    assert caught.value.message == message


def test_where_the_view_is_stricter_msgspec_names_the_problem() -> None:
    content = b'{"choices":[{"message":{}},{"text":"no message"}]}'
    assert completion_problem(orjson.loads(content)) is None  # the first choice is all it reads
    with pytest.raises(UpstreamProtocolError) as caught:
        read_answer("up", content, MODEL)
    assert "choices[1]" in caught.value.message and "message" in caught.value.message
