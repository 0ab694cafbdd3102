"""The stand-in upstreams speak their protocols as PROTOCOLS.md describes them."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply, serve, tokenize
from tests.support.answers import collect_calls

CHAT = "/v1/chat/completions"
HI: list[Any] = [{"role": "user", "content": "Say hello, please."}]
KEY = {"Authorization": "Bearer test-cerebras-key"}


def sse(text: str) -> list[Any]:
    """The `data:` payloads of an SSE body, JSON-decoded except `[DONE]`."""
    payloads = [e.removeprefix("data: ") for e in text.split("\n\n") if e.startswith("data: ")]
    return [p if p == "[DONE]" else orjson.loads(p) for p in payloads]


@pytest.fixture
def llama() -> Iterator[tuple[FakeLlamaServer, httpx.Client]]:
    fake = FakeLlamaServer()
    with serve(fake.app) as url, httpx.Client(base_url=url) as client:
        yield fake, client


@pytest.fixture
def cerebras() -> Iterator[tuple[FakeCerebras, httpx.Client]]:
    fake = FakeCerebras()
    with serve(fake.app) as url, httpx.Client(base_url=url, headers=KEY) as client:
        yield fake, client


@given(st.text())
def test_tokenize_round_trips_all_but_trailing_whitespace(text: str) -> None:
    assert "".join(tokenize(text)) == text.rstrip()


def test_tokenize_keeps_leading_whitespace() -> None:
    assert tokenize("Hi, you  there!\n") == ["Hi", ",", " you", "  there", "!"]


def test_reply_rejects_probs_that_do_not_match_the_tokens() -> None:
    with pytest.raises(ValueError, match="2 tokens"):
        Reply("Hi!", token_probs=[0.5])


def test_llama_completion_shape_with_logprobs(llama: tuple[FakeLlamaServer, httpx.Client]) -> None:
    fake, client = llama
    fake.enqueue(Reply("Hi there", token_probs=[0.5, 0.25]))
    body = {"messages": HI, "logprobs": True, "top_logprobs": 3}
    data = client.post(CHAT, json=body).json()

    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
    choice = data["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "Hi there"}
    assert choice["finish_reason"] == "stop"
    entries = choice["logprobs"]["content"]
    # llama-server lists the end-of-generation token last: no text, id 2, never streamed
    assert [e["token"] for e in entries] == ["Hi", " there", ""]
    assert (entries[-1]["id"], entries[-1]["bytes"]) == (2, [])
    assert [math.exp(e["logprob"]) for e in entries[:2]] == pytest.approx([0.5, 0.25])
    second = entries[1]
    assert second["bytes"] == list(b" there") and isinstance(second["id"], int)
    tops = second["top_logprobs"]
    assert len(tops) == 3 and tops[0] == {k: second[k] for k in ("id", "token", "bytes", "logprob")}
    assert [t["logprob"] for t in tops] == sorted((t["logprob"] for t in tops), reverse=True)
    assert sum(math.exp(t["logprob"]) for t in tops) <= 1.0
    assert data["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 3,  # the end-of-generation token counts
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert data["timings"]["predicted_n"] == 3 and data["timings"]["prompt_n"] == 5
    assert set(data["timings"]) >= {"cache_n", "prompt_ms", "predicted_per_second"}


def test_llama_omits_logprobs_unless_asked(llama: tuple[FakeLlamaServer, httpx.Client]) -> None:
    _, client = llama
    assert "logprobs" not in client.post(CHAT, json={"messages": HI}).json()["choices"][0]
    asked = {"messages": HI, "logprobs": True}
    entry = client.post(CHAT, json=asked).json()["choices"][0]["logprobs"]["content"][0]
    assert len(entry["top_logprobs"]) == 20  # llama-server's default when top_logprobs is unset


@pytest.mark.parametrize("limit_key", ["max_tokens", "max_completion_tokens", "n_predict"])
def test_llama_token_limit_truncates_with_length(
    llama: tuple[FakeLlamaServer, httpx.Client], limit_key: str
) -> None:
    _, client = llama
    data = client.post(CHAT, json={"messages": HI, limit_key: 3}).json()
    assert data["choices"][0]["message"]["content"] == "Hello! I"
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 3


def test_llama_stream_shape(llama: tuple[FakeLlamaServer, httpx.Client]) -> None:
    fake, client = llama
    fake.enqueue(Reply("Hi there"))
    body = {"messages": HI, "stream": True, "logprobs": True, "top_logprobs": 1}
    response = client.post(CHAT, json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    *chunks, done = sse(response.text)

    assert done == "[DONE]"
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    content = chunks[1:-1]
    assert [c["choices"][0]["delta"]["content"] for c in content] == ["Hi", " there"]
    entry = content[0]["choices"][0]["logprobs"]["content"][0]
    assert entry["token"] == "Hi" and isinstance(entry["id"], int)
    assert "logprobs" not in chunks[0]["choices"][0]
    last = chunks[-1]
    assert last["choices"][0] == {"finish_reason": "stop", "index": 0, "delta": {}}
    assert last["timings"]["predicted_n"] == 3 and "usage" not in last  # end token counted


def test_llama_stream_usage_comes_in_its_own_last_chunk(
    llama: tuple[FakeLlamaServer, httpx.Client],
) -> None:
    _, client = llama
    body = {"messages": HI, "stream": True, "stream_options": {"include_usage": True}}
    *chunks, done = sse(client.post(CHAT, json=body).text)
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and "timings" not in chunks[-2]
    n_tokens = len(tokenize(Reply().text)) + 1  # + the end-of-generation token
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == n_tokens
    assert "timings" in chunks[-1] and done == "[DONE]"


def test_llama_stream_error_event_ends_without_done(
    llama: tuple[FakeLlamaServer, httpx.Client],
) -> None:
    fake, client = llama
    fake.enqueue(Reply(fail_after_chunks=2))
    events = sse(client.post(CHAT, json={"messages": HI, "stream": True}).text)
    assert [e["choices"][0]["delta"].get("content") for e in events[:3]] == [None, "Hello", "!"]
    assert events[3]["error"]["type"] == "server_error" and events[3]["error"]["code"] == 500
    assert len(events) == 4


def test_llama_errors_are_nested(llama: tuple[FakeLlamaServer, httpx.Client]) -> None:
    fake, client = llama
    fake.enqueue(Reply(status=501), Reply(raw_body=b"{not json", headers={"x-extra": "1"}))
    response = client.post(CHAT, json={"messages": HI})
    assert response.status_code == 501
    error = response.json()["error"]
    assert (error["code"], error["type"]) == (501, "not_supported_error") and error["message"]
    raw = client.post(CHAT, json={"messages": HI})
    assert raw.content == b"{not json" and raw.headers["x-extra"] == "1"
    unpaired = client.post(CHAT, json={"messages": HI, "top_logprobs": 2})
    assert unpaired.json()["error"]["type"] == "invalid_request_error"
    fake.n_ctx = 5
    error = client.post(CHAT, json={"messages": HI}).json()["error"]
    assert error["type"] == "exceed_context_size_error"
    assert (error["code"], error["n_prompt_tokens"], error["n_ctx"]) == (400, 5, 5)


def test_llama_loading_answers_503(llama: tuple[FakeLlamaServer, httpx.Client]) -> None:
    fake, client = llama
    assert client.get("/health").json() == {"status": "ok"}
    fake.loading = True
    loading = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
    for response in (client.get("/health"), client.post(CHAT, json={"messages": HI})):
        assert (response.status_code, response.json()) == (503, loading)
    assert client.get("/v1/models").status_code == 503
    fake.loading = False
    assert client.get("/v1/models").json()["data"][0]["id"] == fake.model


def test_queue_order_default_and_history(llama: tuple[FakeLlamaServer, httpx.Client]) -> None:
    fake, client = llama
    fake.default = Reply("fallback")
    fake.enqueue(Reply("one"), Reply("two"))
    texts = [
        client.post(CHAT, json={"messages": HI, "n": i}).json()["choices"][0]["message"]["content"]
        for i in range(3)
    ]
    assert texts == ["one", "two", "fallback"]
    assert [(r.method, r.path) for r in fake.requests] == [("POST", CHAT)] * 3
    assert fake.requests[0].headers["content-type"] == "application/json"
    assert fake.last_json == {"messages": HI, "n": 2}


def test_delay_counts_in_flight_until_the_client_gives_up(
    llama: tuple[FakeLlamaServer, httpx.Client],
) -> None:
    fake, client = llama
    fake.enqueue(Reply(delay=5))
    seen: list[int] = []

    def look_midway() -> None:
        time.sleep(0.15)
        seen.append(fake.in_flight)

    poll = threading.Thread(target=look_midway)
    poll.start()
    with pytest.raises(httpx.ReadTimeout):
        client.post(CHAT, json={"messages": HI}, timeout=0.3)
    poll.join()
    assert seen == [1]
    deadline = time.monotonic() + 2
    while fake.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.in_flight == 0


def test_cerebras_completion_shape(cerebras: tuple[FakeCerebras, httpx.Client]) -> None:
    fake, client = cerebras
    fake.enqueue(Reply("Hi there", token_probs=[0.5, 0.9]))
    body = {"model": "gpt-oss-120b", "messages": HI, "logprobs": True, "top_logprobs": 2}
    response = client.post(CHAT, json=body)
    data = response.json()

    assert data["choices"][0]["message"]["content"] == "Hi there"
    entry = data["choices"][0]["logprobs"]["content"][0]
    assert "id" not in entry and all("id" not in t for t in entry["top_logprobs"])
    assert math.exp(entry["logprob"]) == pytest.approx(0.5)
    assert data["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    timing = {"queue_time", "prompt_time", "completion_time", "total_time", "created"}
    assert set(data["time_info"]) == timing
    assert response.headers["x-ratelimit-remaining-tokens-minute"] == "59000"
    assert client.get("/v1/models").json()["data"] == [
        {"id": "gpt-oss-120b", "object": "model", "created": 1735689600, "owned_by": "Cerebras"}
    ]


def test_cerebras_auth_model_and_flat_errors(cerebras: tuple[FakeCerebras, httpx.Client]) -> None:
    fake, client = cerebras
    unauthorised = client.post(CHAT, json={"model": "gpt-oss-120b"}, headers={"Authorization": ""})
    assert unauthorised.status_code == 401
    assert unauthorised.json() == {
        "message": "Wrong API Key",
        "type": "invalid_request_error",
        "param": "api_key",
        "code": "wrong_api_key",
    }
    assert "x-ratelimit-limit-requests-day" in unauthorised.headers
    missing = client.post(CHAT, json={"model": "llama3.1-8b", "messages": HI})
    assert missing.status_code == 404 and missing.json()["code"] == "model_not_found"
    assert missing.json()["message"].startswith("Model llama3.1-8b does not exist")

    fake.rate_limits["x-ratelimit-reset-tokens-minute"] = "42.0"
    fake.enqueue(Reply(status=429, headers={"x-ratelimit-remaining-tokens-minute": "0"}))
    limited = client.post(CHAT, json={"model": "gpt-oss-120b", "messages": HI})
    assert limited.status_code == 429 and "error" not in limited.json()
    assert limited.json()["code"] == "request_quota_exceeded"
    assert limited.headers["x-ratelimit-remaining-tokens-minute"] == "0"
    assert limited.headers["x-ratelimit-reset-tokens-minute"] == "42.0"
    assert sum(h.startswith("x-ratelimit-") for h in limited.headers) == 6


def test_cerebras_stream_final_chunk_and_optional_done(
    cerebras: tuple[FakeCerebras, httpx.Client],
) -> None:
    fake, client = cerebras
    fake.enqueue(Reply("Hi there", stream_done=False), Reply(fail_after_chunks=1))
    body = {"model": "gpt-oss-120b", "messages": HI, "stream": True, "max_completion_tokens": 1}
    chunks = sse(client.post(CHAT, json=body).text)
    assert "[DONE]" not in chunks
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas == [{"role": "assistant"}, {"content": "Hi"}, {}]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 1 and "time_info" in chunks[-1]
    assert all("usage" not in c and "time_info" not in c for c in chunks[:-1])

    broken = sse(client.post(CHAT, json=body | {"max_completion_tokens": None}).text)
    assert [c["choices"][0]["delta"] for c in broken] == [
        {"role": "assistant"},
        {"content": "Hello"},
    ]


def test_openai_sdk_reads_both_fakes() -> None:
    llama, cloud = FakeLlamaServer(), FakeCerebras(api_key=None)
    cloud.enqueue(Reply(status=429))
    with serve(llama.app) as local_url, serve(cloud.app) as cloud_url:
        local = openai.OpenAI(base_url=f"{local_url}/v1", api_key="none", max_retries=0)
        stream = local.chat.completions.create(model="m", messages=HI, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == Reply().text
        remote = openai.OpenAI(base_url=f"{cloud_url}/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.RateLimitError, match="Requests per minute"):
            remote.chat.completions.create(model="gpt-oss-120b", messages=HI)


# -- tool calls -----------------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
CALLS = [
    {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"name": "get_weather", "arguments": '{"city": "Nice"}', "id": "call_given"},
]


@pytest.mark.parametrize("upstream", ["llama", "cerebras"])
@pytest.mark.parametrize("stream", [False, True])
def test_both_fakes_answer_tool_calls_as_openai_does(
    upstream: str, stream: bool, request: pytest.FixtureRequest
) -> None:
    fake, client = request.getfixturevalue(upstream)
    fake.enqueue(Reply("", tool_calls=CALLS))
    body = {"model": "gpt-oss-120b", "messages": HI, "tools": TOOLS, "stream": stream}
    response = client.post(CHAT, json=body)
    assert response.status_code == 200
    if stream:
        events = sse(response.text)
        _, calls, finish, _ = collect_calls(e for e in events if e != "[DONE]")
    else:
        choice = response.json()["choices"][0]
        message, finish = choice["message"], choice["finish_reason"]
        assert message["content"] is None
        calls = [
            {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in message["tool_calls"]
        ]
        assert {c["type"] for c in message["tool_calls"]} == {"function"}
        # usage counts the calls' tokens
        assert response.json()["usage"]["completion_tokens"] > 0
    assert finish == "tool_calls"
    assert [(c["name"], c["arguments"]) for c in calls] == [
        (c["name"], c["arguments"]) for c in CALLS
    ]
    assert calls[0]["id"].startswith("call_") and calls[1]["id"] == "call_given"


def test_llama_refuses_logprobs_with_tools_on_a_stream(
    llama: tuple[FakeLlamaServer, httpx.Client],
) -> None:
    _, client = llama
    body = {"messages": HI, "tools": TOOLS, "stream": True, "logprobs": True}
    response = client.post(CHAT, json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "logprobs is not supported with tools + stream"
    assert client.post(CHAT, json={**body, "stream": False}).status_code == 200


def test_llama_without_tool_support_answers_text_like_smollm2(
    llama: tuple[FakeLlamaServer, httpx.Client],
) -> None:
    fake, client = llama
    fake.supports_tools = False
    fake.enqueue(Reply("It is sunny.", tool_calls=CALLS))
    choice = client.post(CHAT, json={"messages": HI, "tools": TOOLS}).json()["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "It is sunny."}
    assert choice["finish_reason"] == "stop"


def test_llama_names_its_model_file_whatever_the_request_named(
    llama: tuple[FakeLlamaServer, httpx.Client],
) -> None:
    fake, client = llama
    answer = client.post(CHAT, json={"model": "smollm2", "messages": HI}).json()
    assert answer["model"] == fake.model
