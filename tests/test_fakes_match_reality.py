"""The FakeLlamaServer stand-in answers in the shape the real llama-server was recorded in.

``tests/fixtures/llama_server/`` holds real answers (``scripts/record_fixtures.py``); each test
sends the recorded request to the fake and compares the *shape*: the keys of every object,
the JSON type of every value, the shape of list elements, the order of stream events. Values
(text, ids, timings) differ by nature; the few that must agree are compared as values.

Allowed differences, on purpose:
- ``model``: the real server names the model file's full path; the fake echoes the request's
  ``model`` or a bare file name. Both are strings, so the shapes agree.
- ``system_fingerprint`` (``b0-unknown`` vs ``b11434-fake``), ``id``, ``created``, the text,
  logprobs, ``timings`` figures and ``cached_tokens``: values of the same types.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.fakes import FakeLlamaServer, Reply, serve

FIXTURES = Path(__file__).with_name("fixtures") / "llama_server"
INDEX = {entry["file"]: entry for entry in json.loads((FIXTURES / "index.json").read_text())}
RECORDED_N_CTX = 256  # the recording ran llama-server with -c 256


def shape(value: Any) -> Any:
    """Keys and JSON types, recursively; a list becomes its distinct element shapes."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        shapes: list[Any] = []
        for item in value:
            if (s := shape(item)) not in shapes:
                shapes.append(s)
        return shapes
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    assert isinstance(value, str), f"not a JSON value: {value!r}"
    return "str"


def sse_payloads(raw: str) -> list[Any]:
    """The `data:` payloads of an SSE body in order, JSON-decoded except `[DONE]`."""
    payloads = [e.removeprefix("data: ") for e in raw.split("\n\n") if e.startswith("data: ")]
    return [p if p == "[DONE]" else json.loads(p) for p in payloads]


def media_type(content_type: str) -> str:
    return content_type.split(";")[0].strip()


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeLlamaServer, httpx.Client]]:
    server = FakeLlamaServer(n_ctx=RECORDED_N_CTX)
    with serve(server.app) as url, httpx.Client(base_url=url) as client:
        yield server, client


def replay(
    fake: tuple[FakeLlamaServer, httpx.Client], name: str, reply: Reply | None = None
) -> tuple[httpx.Response, bytes]:
    """Send a recording's request to the fake; returns the fake's response and the real body."""
    server, client = fake
    entry = INDEX[name]
    if reply is not None:
        server.enqueue(reply)
    response = client.request(entry["method"], entry["path"], json=entry["request"])
    assert response.status_code == entry["status"], response.text
    assert media_type(response.headers["content-type"]) == media_type(entry["content_type"])
    return response, (FIXTURES / name).read_bytes()


# A scripted answer as long as the recorded one, so finish_reason agrees as well.
AS_LONG = Reply("Paris is the capital of France, and it is a city of light and art.")
TWO_AND_TWO = Reply("2 + 2 = 4")


@pytest.mark.parametrize(
    ("name", "reply"), [("chat_logprobs.json", AS_LONG), ("chat_stop.json", TWO_AND_TWO)]
)
def test_completion_has_the_recorded_shape(
    fake: tuple[FakeLlamaServer, httpx.Client], name: str, reply: Reply
) -> None:
    response, recorded = replay(fake, name, reply)
    real, ours = orjson.loads(recorded), response.json()

    assert shape(ours) == shape(real)
    for data in (real, ours):
        choice = data["choices"][0]
        assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
        assert data["usage"]["completion_tokens"] == data["timings"]["predicted_n"]
        if "logprobs" in choice:
            entries = choice["logprobs"]["content"]
            assert len(entries) == data["usage"]["completion_tokens"]
            assert "".join(e["token"] for e in entries) == choice["message"]["content"]
    assert ours["choices"][0]["finish_reason"] == real["choices"][0]["finish_reason"]
    # logprobs only when asked: both have it, or neither has the key at all
    assert ("logprobs" in ours["choices"][0]) == ("logprobs" in real["choices"][0])


def stream_parts(events: list[Any]) -> dict[str, Any]:
    """Split a chunk sequence into role, content, finish and usage chunks, checking the order."""
    assert events[-1] == "[DONE]", "a complete stream ends with [DONE]"
    chunks: list[dict[str, Any]] = events[:-1]
    role, *rest = chunks
    usage = rest.pop() if rest and rest[-1]["choices"] == [] else None
    *content, finish = rest
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all(c["choices"][0]["delta"].get("content") for c in content)
    assert finish["choices"][0]["finish_reason"] in ("stop", "length")
    assert finish["choices"][0]["delta"] == {}
    assert len({c["id"] for c in chunks}) == 1  # one completion id across the stream
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert "timings" in chunks[-1] and all("timings" not in c for c in chunks[:-1])
    if usage is not None:
        assert usage["usage"]["completion_tokens"] == chunks[-1]["timings"]["predicted_n"]
    return {
        "role": role,
        "content": content,
        "finish": finish,
        "usage": usage,
        "timings": chunks[-1]["timings"]["predicted_n"],
    }


@pytest.mark.parametrize(
    ("name", "reply"),
    [("chat_logprobs_stream.sse", AS_LONG), ("chat_stop_stream.sse", TWO_AND_TWO)],
)
def test_stream_has_the_recorded_chunk_sequence(
    fake: tuple[FakeLlamaServer, httpx.Client], name: str, reply: Reply
) -> None:
    response, recorded = replay(fake, name, reply)
    real = stream_parts(sse_payloads(recorded.decode()))
    ours = stream_parts(sse_payloads(response.text))

    assert shape(ours["role"]) == shape(real["role"])
    # Every content chunk of one stream has one shape, and it is the recorded one.
    assert shape(ours["content"]) == shape(real["content"])
    assert shape(ours["finish"]) == shape(real["finish"])
    assert (
        ours["finish"]["choices"][0]["finish_reason"]
        == real["finish"]["choices"][0]["finish_reason"]
    )
    # One content chunk per token; both also count the end-of-generation token, never streamed.
    stopped = real["finish"]["choices"][0]["finish_reason"] == "stop"
    assert real["timings"] == len(real["content"]) + stopped
    assert ours["timings"] == len(ours["content"]) + stopped
    include_usage = (INDEX[name]["request"].get("stream_options") or {}).get("include_usage")
    assert (real["usage"] is not None) == bool(include_usage)
    assert shape(ours["usage"]) == shape(real["usage"])  # "null" for both without include_usage


@pytest.mark.parametrize("name", ["error_exceed_context.json", "error_exceed_context_stream.json"])
def test_exceed_context_error_has_the_recorded_body(
    fake: tuple[FakeLlamaServer, httpx.Client], name: str
) -> None:
    # A prompt over the context is refused before streaming starts: a plain JSON 400 either way.
    response, recorded = replay(fake, name)
    real, ours = orjson.loads(recorded)["error"], response.json()["error"]

    assert shape(ours) == shape(real)
    assert (ours["code"], ours["type"], ours["n_ctx"]) == (400, "exceed_context_size_error", 256)
    assert (real["code"], real["type"], real["n_ctx"]) == (400, "exceed_context_size_error", 256)

    def numbers_out(message: str) -> str:
        return re.sub(r"\d+", "N", message)

    # The fake counts prompt tokens its own way; the wording must still be the server's.
    assert numbers_out(ours["message"]) == numbers_out(real["message"])
    assert str(ours["n_prompt_tokens"]) in ours["message"]


def test_health_answers_as_recorded(fake: tuple[FakeLlamaServer, httpx.Client]) -> None:
    response, recorded = replay(fake, "health.json")
    assert response.json() == orjson.loads(recorded)


def test_loading_health_answers_as_recorded(fake: tuple[FakeLlamaServer, httpx.Client]) -> None:
    server, _ = fake
    server.loading = True
    try:
        response, recorded = replay(fake, "health_loading.json")
    finally:
        server.loading = False
    assert response.json() == orjson.loads(recorded)  # fixed words: equal as values too


def test_fake_counts_the_end_of_generation_token_like_llama_server(
    fake: tuple[FakeLlamaServer, httpx.Client],
) -> None:
    # Seen on the real server (tests/real check it through the proxy): an answer that ends by
    # itself ("stop") counts its end-of-generation token in usage.completion_tokens and
    # timings.predicted_n, lists it last in logprobs.content as {"id": 2, "token": "",
    # "bytes": []} (with a real probability, which the draft heuristics then read), and never
    # streams it as a content chunk. chat_stop*.{json,sse} show the count: "2 + 2 = 4" is 7
    # tokens, 7 content chunks, completion_tokens 8.
    server, client = fake
    server.enqueue(Reply("2 + 2 = 4"))
    body = {"messages": [{"role": "user", "content": "2+2?"}], "logprobs": True, "top_logprobs": 2}
    data = client.post("/v1/chat/completions", json=body).json()
    entries = data["choices"][0]["logprobs"]["content"]
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"]["completion_tokens"] == len(entries) == 6  # 5 fake tokens + the end
    assert (entries[-1]["token"], entries[-1]["bytes"]) == ("", [])
