"""local_only and cerebras_only, choosing a strategy per request, and pass-through."""

from __future__ import annotations

import openai
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.fakes.cerebras import cerebras_error
from tests.support.proxy import MakeProxy, Proxy, chat_bodies

ASK = [{"role": "user", "content": "Write a haiku about the sea"}]
POEM = "Waves fold into foam, salt wind carries gull voices, the tide keeps its time."


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ({"model": "local"}, "local"),
        ({"model": "cerebras"}, "cerebras"),
        ({"model": "anything", "extra_headers": {"X-Routing-Strategy": "local_only"}}, "local"),
        ({"model": "local", "extra_headers": {"X-Routing-Strategy": "cerebras_only"}}, "cerebras"),
    ],
)
def test_request_chooses_the_strategy(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, how: dict, expected: str
) -> None:
    local.enqueue(Reply(POEM))
    cloud.enqueue(Reply(POEM))
    response = proxy.openai.chat.completions.with_raw_response.create(messages=ASK, **how)
    answer = response.parse()
    assert answer.choices[0].message.content == POEM
    assert answer.to_dict()["model_used"] == expected
    assert "speculative_decoding" not in answer.to_dict()
    assert response.headers["x-model-used"] == expected
    assert len(chat_bodies(local if expected == "local" else cloud)) == 1
    assert len(chat_bodies(cloud if expected == "local" else local)) == 0


@pytest.mark.parametrize(("model", "own_field"), [("local", "timings"), ("cerebras", "time_info")])
def test_a_whole_answer_reaches_the_client_as_the_upstream_sent_it(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, model: str, own_field: str
) -> None:
    """Its own fields kept, the configured model named, the proxy's field added last."""
    (local if model == "local" else cloud).enqueue(Reply(POEM))
    response = proxy.openai.chat.completions.with_raw_response.create(model=model, messages=ASK)
    sent = response.http_response.json()
    assert own_field in sent and sent["usage"]["completion_tokens"] > 0
    assert sent["model"] == ("smollm2" if model == "local" else "gpt-oss-120b")
    assert list(sent)[-1] == "model_used" and sent["model_used"] == model
    assert response.parse().choices[0].message.content == POEM


def test_configured_default_strategy(make_proxy: MakeProxy, cloud: FakeCerebras) -> None:
    with make_proxy(routing={"strategy": "cerebras_only"}) as proxy:
        answer = proxy.openai.chat.completions.create(model="gpt-4o", messages=ASK)
    assert answer.to_dict()["model_used"] == "cerebras"


def test_disabled_speculation_serves_the_draft_model(
    make_proxy: MakeProxy, cloud: FakeCerebras
) -> None:
    with make_proxy(speculative_decoding={"enabled": False}) as proxy:
        response = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
    assert response.headers["x-routing-strategy"] == "local_only"
    assert cloud.requests == []


@pytest.mark.parametrize("model", ["local", "cerebras"])
def test_direct_streaming(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, model: str
) -> None:
    (local if model == "local" else cloud).enqueue(Reply(POEM))
    chunks = list(
        proxy.openai.chat.completions.create(
            model=model, messages=ASK, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == POEM
    finishing = [c.to_dict() for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishing[0]["model_used"] == model
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    # as OpenAI sends it, whichever upstream answered: usage on a last chunk of its own,
    # with no choices (Cerebras puts it on its finishing chunk)
    assert chunks[-1].choices == [] and [c for c in chunks if c.usage] == [chunks[-1]]


def test_unknown_fields_pass_through_and_nothing_is_invented(
    proxy: Proxy, cloud: FakeCerebras
) -> None:
    proxy.openai.chat.completions.create(
        model="cerebras",
        messages=ASK,
        seed=7,
        max_tokens=40,
        extra_body={"reasoning_effort": "low", "custom_flag": {"a": [1, 2]}},
    )
    sent = cloud.last_json
    assert sent["reasoning_effort"] == "low" and sent["custom_flag"] == {"a": [1, 2]}
    assert sent["seed"] == 7
    assert sent["max_completion_tokens"] == 40 and "max_tokens" not in sent  # renamed for Cerebras
    assert "temperature" not in sent and "top_p" not in sent and "logprobs" not in sent


def test_cloud_rate_limit_reaches_the_client_with_retry_after(
    proxy: Proxy, cloud: FakeCerebras
) -> None:
    cloud.enqueue(Reply(status=429, headers={"retry-after": "3"}))
    with pytest.raises(openai.RateLimitError) as caught:
        proxy.openai.chat.completions.create(model="cerebras", messages=ASK)
    assert caught.value.response.headers["retry-after"] == "3"
    assert "cerebras: HTTP 429: Requests per minute limit exceeded" in caught.value.message


def test_cloud_rejecting_the_proxy_key_is_a_gateway_error(make_proxy: MakeProxy) -> None:
    with (
        make_proxy(env={"CEREBRAS_API_KEY": "csk-wrong"}) as proxy,
        pytest.raises(openai.APIStatusError) as caught,
    ):
        proxy.openai.chat.completions.create(model="cerebras", messages=ASK)
    assert caught.value.status_code == 502  # the proxy's credential, not the client's fault
    assert "cerebras: HTTP 401: Wrong API Key" in caught.value.message


def test_upstream_client_error_is_the_clients_error(proxy: Proxy, local: FakeLlamaServer) -> None:
    local.enqueue(Reply(status=400))
    with pytest.raises(openai.BadRequestError, match="local: HTTP 400"):
        proxy.openai.chat.completions.create(model="local", messages=ASK)
    assert proxy.stats()["requests"]["by_outcome"] == {"client_error": 1}


def test_a_cloud_refusal_names_the_field_it_refused(proxy: Proxy, cloud: FakeCerebras) -> None:
    """Cerebras' flat error body: its message, code and param reach the client."""
    refusal = cerebras_error(
        400, "max_completion_tokens is too large", param="max_completion_tokens", code="bad_value"
    )
    cloud.enqueue(Reply(status=400, error=refusal))
    with pytest.raises(
        openai.BadRequestError, match="max_completion_tokens is too large"
    ) as caught:
        proxy.openai.chat.completions.create(model="cerebras", messages=ASK, max_tokens=10**6)
    assert caught.value.param == "max_completion_tokens"
    assert caught.value.code == "bad_value"


def test_local_error_chunk_mid_stream(proxy: Proxy, local: FakeLlamaServer) -> None:
    local.enqueue(Reply(POEM, fail_after_chunks=2))
    with proxy.http.stream(
        "POST", "/v1/chat/completions", json={"model": "local", "messages": ASK, "stream": True}
    ) as response:
        lines = [line for line in response.iter_lines() if line]
    assert response.status_code == 200
    assert lines[-1] == "data: [DONE]"
    assert lines[-2].startswith('data: {"error":') and "local: error mid-stream" in lines[-2]
    stats = proxy.stats()
    assert stats["requests"]["by_outcome"] == {"error": 1}
    assert stats["upstream_errors"] == {"local:stream": 1}


def test_malformed_upstream_json_names_the_upstream(proxy: Proxy, local: FakeLlamaServer) -> None:
    local.enqueue(Reply(raw_body=b"<html>oops"))
    with pytest.raises(openai.APIStatusError) as caught:
        proxy.openai.chat.completions.create(model="local", messages=ASK)
    assert caught.value.status_code == 502
    assert caught.value.body["message"] == "local: answered with invalid JSON"  # type: ignore[index]
