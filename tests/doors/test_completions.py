"""The legacy completions door's translation, pure: the request to chat and the answer back."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.doors import completions as door
from app.errors import InvalidRequest

texts = st.text(max_size=80)
finishes = st.sampled_from(["stop", "length", "content_filter", None])
usages = st.fixed_dictionaries(
    {"prompt_tokens": st.integers(0, 10_000), "completion_tokens": st.integers(0, 10_000)}
)
sampling = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["auto", "local", "cerebras"]),
        "max_tokens": st.integers(1, 4096),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "stop": st.one_of(texts, st.lists(texts, max_size=4)),
        "seed": st.integers(-(2**31), 2**31),
        "stream": st.booleans(),
        "logprobs": st.integers(0, 20),
    },
)


@given(prompt=st.one_of(texts, st.lists(texts, min_size=1, max_size=1)), fields=sampling)
def test_a_request_survives_the_trip_to_chat(prompt: str | list[str], fields: dict) -> None:
    request = door.parse({"prompt": prompt, **fields})
    body = door.chat_body(request)
    assert body["messages"] == [{"role": "user", "content": request.text}]
    assert request.text == (prompt if isinstance(prompt, str) else prompt[0])
    for field, value in fields.items():
        if field == "logprobs":
            assert (body["logprobs"], body["top_logprobs"]) == (True, value)
        else:
            assert body[field] == value
    assert "logprobs" in body or "logprobs" not in fields


def chat_answer(text: str, finish: str | None, usage: dict, logprobs: Any = None) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}}
    choice |= {"finish_reason": finish, "logprobs": logprobs}
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 7,
        "model": "smollm2",
        "choices": [choice],
        "usage": usage,
        "model_used": "local",
    }


@given(text=texts, finish=finishes, usage=usages, echo=st.booleans(), prompt=texts)
def test_an_answer_survives_the_trip_back(
    text: str, finish: str | None, usage: dict, echo: bool, prompt: str
) -> None:
    request = door.parse({"prompt": prompt, "echo": echo})
    answer = door.text_completion(chat_answer(text, finish, usage), request)
    assert answer["object"] == "text_completion" and answer["id"] == "cmpl-abc"
    (choice,) = answer["choices"]
    assert choice["text"] == (prompt + text if echo else text)
    assert (choice["finish_reason"], choice["index"], choice["logprobs"]) == (finish, 0, None)
    assert answer["usage"] == usage and answer["model"] == "smollm2"
    assert answer["created"] == 7 and answer["model_used"] == "local"  # the proxy's field kept


@given(pieces=st.lists(texts, min_size=1, max_size=8), finish=finishes, echo=st.booleans())
def test_a_stream_survives_the_trip_back(pieces: list[str], finish: str | None, echo: bool) -> None:
    request = door.parse({"prompt": "Once", "echo": echo, "stream": True})
    chunks = [{"role": "assistant", "content": None}] + [{"content": p} for p in pieces]
    out = []
    for i, delta in enumerate(chunks):
        last = i == len(chunks) - 1
        choice = {"index": 0, "delta": delta, "finish_reason": finish if last else None}
        chunk = {"id": "chatcmpl-x", "created": 1, "model": "m", "choices": [choice]}
        out.append(door.text_chunk(chunk, request, first=i == 0))
    assert all(c["object"] == "text_completion" and c["id"] == "cmpl-x" for c in out)
    text = "".join(c["choices"][0]["text"] for c in out)
    assert text == ("Once" if echo else "") + "".join(pieces)
    assert out[-1]["choices"][0]["finish_reason"] == finish


def test_the_usage_chunk_keeps_its_usage_and_no_choices() -> None:
    request = door.parse({"prompt": "x"})
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    chunk = door.text_chunk({"id": "chatcmpl-1", "choices": [], "usage": usage}, request, False)
    assert chunk["choices"] == [] and chunk["usage"] == usage


def test_logprobs_become_the_legacy_shape() -> None:
    content = [
        {"token": "Hel", "logprob": -0.1, "top_logprobs": [{"token": "Hel", "logprob": -0.1}]},
        {"token": "lo", "logprob": -0.2, "top_logprobs": [{"token": "lo", "logprob": -0.2}]},
    ]
    request = door.parse({"prompt": "Hi", "logprobs": 1})
    usage = {"prompt_tokens": 1, "completion_tokens": 2}
    chat = chat_answer("Hello", "stop", usage, {"content": content})
    answer = door.text_completion(chat, request)
    assert answer["choices"][0]["logprobs"] == {
        "tokens": ["Hel", "lo"],
        "token_logprobs": [-0.1, -0.2],
        "top_logprobs": [{"Hel": -0.1}, {"lo": -0.2}],
        "text_offset": [2, 5],  # counted from the prompt's end, as OpenAI counts them
    }


def test_the_reasons_say_the_answer_came_through_chat() -> None:
    chat = chat_answer("hi", "stop", {}) | {"speculative_decoding": {"reasons": ["passed_checks"]}}
    answer = door.text_completion(chat, door.parse({"prompt": "x"}))
    assert answer["speculative_decoding"]["reasons"] == ["passed_checks", "completion_as_chat"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": [[1, 2]]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": "a", "suffix": "b"}, "suffix"),
        ({"prompt": "a", "n": 2}, "n"),
        ({"prompt": "a", "best_of": 3}, "best_of"),
        ({"prompt": "a", "echo": True, "logprobs": 1}, "echo"),
        ({"prompt": "a", "logprobs": True}, "logprobs"),
        ({"prompt": "a", "max_tokens": "5"}, "max_tokens"),
        ({"prompt": "a", "stop": ["1", "2", "3", "4", "5"]}, "stop"),
        ({}, "prompt"),
        ({"prompt": None}, "prompt"),
        ({"prompt": "a", "messages": []}, "messages"),
    ],
)
def test_what_chat_cannot_say_is_the_clients_400(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        door.parse(body)
    assert caught.value.param == param and caught.value.status == 400
