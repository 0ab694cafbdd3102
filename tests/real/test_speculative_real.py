"""The proxy in front of a real llama-server: drafts, logprobs, streams, spills, degradation.

The verifier is the FakeCerebras stand-in (scripted, so the cloud side is known), or the same
real llama-server posing as the verifier where agreement between two real answers is the point.
Everything is greedy (temperature 0, fixed seed), so the real answers are reproducible.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.routing.signals import draft_signals
from tests.fakes import FakeCerebras, Reply, tokenize
from tests.real.support import (
    ACCEPT_ALL,
    FRANCE,
    GREEDY,
    RealLlama,
    real_proxy,
    spec,
    stream_chat,
)
from tests.support.proxy import chat_bodies

pytestmark = pytest.mark.real

CLOUD_ANSWER = "Paris is the capital and the largest city of France."
SHORT_CLOUD_ANSWER = "Paris, of course."


def test_real_draft_is_accepted_and_served_with_its_timings(
    llama: RealLlama, cloud: FakeCerebras
) -> None:
    with real_proxy(llama.url, cloud.url, speculative_decoding=ACCEPT_ALL) as proxy:
        response = proxy.openai.chat.completions.with_raw_response.create(
            model="auto", messages=FRANCE, **GREEDY
        )
    body = response.parse().to_dict()
    direct = llama.chat({"messages": FRANCE, **GREEDY})

    content = body["choices"][0]["message"]["content"]
    assert content and content == direct["choices"][0]["message"]["content"]
    assert body["model_used"] == "local" and response.headers["x-model-used"] == "local"
    report = spec(body)
    assert report["accepted"] is True and report["reasons"] == ["passed_checks"]
    n_tokens = body["usage"]["completion_tokens"]
    assert report["draft_tokens"] == n_tokens > 0
    assert body["choices"][0]["finish_reason"] == "stop"
    # llama-server's own accounting passes through the proxy untouched.
    timings = body["timings"]
    assert timings["predicted_n"] == n_tokens
    assert timings["prompt_n"] + timings["cache_n"] == body["usage"]["prompt_tokens"]
    assert body["choices"][0].get("logprobs") is None  # asked for the proxy, not the client
    assert cloud.requests == []


def test_real_logprobs_and_entropy(llama: RealLlama, cloud: FakeCerebras) -> None:
    with real_proxy(llama.url, cloud.url) as proxy:
        answer = proxy.openai.chat.completions.create(
            model="local", messages=FRANCE, logprobs=True, top_logprobs=5, max_tokens=16, **GREEDY
        )
    body = answer.to_dict()
    assert body["model_used"] == "local"
    content = body["choices"][0]["message"]["content"]
    entries = body["choices"][0]["logprobs"]["content"]
    assert len(entries) == body["usage"]["completion_tokens"] > 0
    assert "".join(e["token"] for e in entries) == content
    # An answer that ends by itself has its end-of-generation token counted and scored too:
    # an empty token, so the text still adds up (the stand-in leaves it out).
    assert body["choices"][0]["finish_reason"] == "stop"
    assert (entries[-1]["token"], entries[-1]["bytes"]) == ("", [])
    for entry in entries:
        assert isinstance(entry["id"], int)  # llama-server's extra field survives the client
        assert entry["logprob"] <= 0
        top = entry["top_logprobs"]
        assert len(top) == 5
        logprobs = [t["logprob"] for t in top]
        assert logprobs == sorted(logprobs, reverse=True)
        # Greedy decoding picks the most likely candidate.
        assert (top[0]["id"], top[0]["logprob"]) == (entry["id"], entry["logprob"])

    signals = draft_signals(body, 16)
    assert signals.text == content and signals.n_tokens == len(entries)
    # The end-of-generation entry has no text: never part of the answer, so not a signal.
    assert len(signals.tokens) == len(entries) - 1
    assert all(0 < t.p <= 1 for t in signals.tokens)
    assert all(t.entropy >= 0 for t in signals.tokens)
    assert any(t.entropy > 0 for t in signals.tokens)
    assert [t.token_id for t in signals.tokens] == [e["id"] for e in entries[:-1]]
    # A real model is not sure of every token: the probabilities are not all one.
    assert signals.min_prob is not None and signals.min_prob < 1
    text_entries = entries[:-1]
    assert signals.mean_prob == pytest.approx(
        sum(math.exp(e["logprob"]) for e in text_entries) / len(text_entries)
    )


@pytest.mark.parametrize(
    ("model", "overrides"),
    [("local", {}), ("auto", {"speculative_decoding": ACCEPT_ALL})],
    ids=["local_only", "speculative-accepted"],
)
def test_real_stream_equals_the_non_stream_answer(
    llama: RealLlama, cloud: FakeCerebras, model: str, overrides: dict[str, Any]
) -> None:
    ask = {"model": model, "messages": FRANCE, "max_tokens": 48, **GREEDY}
    with real_proxy(llama.url, cloud.url, **overrides) as proxy:
        whole = proxy.http.post("/v1/chat/completions", json=ask).json()
        streamed = stream_chat(proxy, {**ask, "stream_options": {"include_usage": True}})

    assert streamed.lines[-1] == "data: [DONE]"
    assert streamed.text and streamed.text == whole["choices"][0]["message"]["content"]
    assert streamed.final["model_used"] == "local"
    assert streamed.final["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    [usage_chunk] = streamed.usage_chunks
    assert usage_chunk["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]
    assert streamed.events.index(usage_chunk) == len(streamed.events) - 1
    if model == "auto":
        assert spec(streamed.final)["accepted"] is True
        assert streamed.headers["x-draft-accepted"] == "true"
    else:
        assert "timings" in usage_chunk  # llama-server's last chunk, passed through
    assert cloud.requests == []


def test_real_truncated_draft_spills_to_the_cloud(llama: RealLlama, cloud: FakeCerebras) -> None:
    cloud.enqueue(Reply(CLOUD_ANSWER))
    budget = {**ACCEPT_ALL, "max_draft_tokens": 4}
    with real_proxy(llama.url, cloud.url, speculative_decoding=budget) as proxy:
        answer = proxy.openai.chat.completions.create(
            model="auto", messages=FRANCE, max_tokens=48, **GREEDY
        )
        stats = proxy.stats()
    body = answer.to_dict()

    assert body["choices"][0]["message"]["content"] == CLOUD_ANSWER
    assert body["model_used"] == "cerebras"
    report = spec(body)
    assert report["spilled_over"] is True and report["accepted"] is False
    assert "incomplete" in report["reasons"]
    assert report["draft_tokens"] == 4  # the real draft hit the proxy's budget
    assert report["verified_tokens"] == len(tokenize(CLOUD_ANSWER))
    # The verifier got the client's own request: no logprobs, no draft budget, model swapped
    # and max_tokens renamed as Cerebras wants it.
    assert chat_bodies(cloud) == [
        {
            "model": "gpt-oss-120b",
            "messages": FRANCE,
            "max_completion_tokens": 48,
            **GREEDY,
        }
    ]
    assert stats["requests"]["by_outcome"] == {"spilled_over": 1}


def test_real_truncated_draft_streams_the_cloud_answer_live(
    llama: RealLlama, cloud: FakeCerebras
) -> None:
    # Slow enough that a proxy buffering the cloud's answer could not pass the first chunk
    # on while the stand-in is still sending.
    cloud.enqueue(Reply(SHORT_CLOUD_ANSWER, chunk_delay=0.15))
    in_flight_at_first_content: list[int] = []
    budget = {**ACCEPT_ALL, "max_draft_tokens": 4}
    with real_proxy(llama.url, cloud.url, speculative_decoding=budget) as proxy:
        streamed = stream_chat(
            proxy,
            {"model": "auto", "messages": FRANCE, **GREEDY},
            on_first_content=lambda: in_flight_at_first_content.append(cloud.in_flight),
        )

    assert in_flight_at_first_content == [1]  # the cloud was still streaming: passed live
    assert streamed.lines[-1] == "data: [DONE]"
    assert streamed.text == SHORT_CLOUD_ANSWER
    assert streamed.headers["x-model-used"] == "cerebras"
    assert streamed.final["model_used"] == "cerebras"
    report = spec(streamed.final)
    assert report["spilled_over"] is True and report["draft_tokens"] == 4
    assert report["reasons"][0] == "incomplete" and report["reasons"][-1] == "draft_truncated"
    assert "time_info" in streamed.final  # Cerebras' final chunk passes through
    assert chat_bodies(cloud) == [
        {"model": "gpt-oss-120b", "messages": FRANCE, **GREEDY, "stream": True}
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_real_cloud_failure_degrades_to_the_local_models_whole_answer(
    llama: RealLlama, cloud: FakeCerebras, stream: bool
) -> None:
    cloud.enqueue(Reply(status=500))
    ask = {"model": "auto", "messages": FRANCE, "max_tokens": 40, **GREEDY}
    direct = llama.chat({key: value for key, value in ask.items() if key != "model"})
    budget = {**ACCEPT_ALL, "max_draft_tokens": 4}
    with real_proxy(llama.url, cloud.url, speculative_decoding=budget) as proxy:
        if stream:
            streamed = stream_chat(proxy, ask)
            assert streamed.lines[-1] == "data: [DONE]"
            text, final = streamed.text, streamed.final
        else:
            final = proxy.http.post("/v1/chat/completions", json=ask).json()
            text = final["choices"][0]["message"]["content"]
        stats = proxy.stats()

    n_direct = direct["usage"]["completion_tokens"]
    assert n_direct > 4  # the answer is longer than the draft, so it had to be continued
    assert text == direct["choices"][0]["message"]["content"]  # whole, not the 4-token draft
    assert final["model_used"] == "local"
    report = spec(final)
    assert report["degraded"] is True and report["spilled_over"] is False
    # A stream with a truncated draft meant to pass the cloud's stream through live, so it
    # also names why it went that way.
    assert report["reasons"] == ["incomplete", "verifier_failed", "local_continuation"]
    assert report["draft_tokens"] == n_direct  # the real server's own count, streamed or not
    assert len(cloud.requests) == 1  # max_retries 0
    assert stats["requests"]["by_outcome"] == {"degraded": 1}


def test_real_degraded_stream_reports_the_tokens_the_json_answer_reports(
    llama: RealLlama, cloud: FakeCerebras
) -> None:
    cloud.enqueue(Reply(status=500), Reply(status=500))
    ask = {"model": "auto", "messages": FRANCE, "max_tokens": 40, **GREEDY}
    budget = {**ACCEPT_ALL, "max_draft_tokens": 4}
    with real_proxy(llama.url, cloud.url, speculative_decoding=budget) as proxy:
        whole = proxy.http.post("/v1/chat/completions", json=ask).json()
        streamed = stream_chat(proxy, {**ask, "stream_options": {"include_usage": True}})

    [usage_chunk] = streamed.usage_chunks
    assert usage_chunk["usage"] == whole["usage"]  # the same local answer, counted the same
    assert spec(whole)["draft_tokens"] == whole["usage"]["completion_tokens"]
    assert spec(streamed.final)["draft_tokens"] == spec(whole)["draft_tokens"]


def test_real_verifier_agreeing_with_a_doubted_draft_keeps_the_draft(llama: RealLlama) -> None:
    # The same real server answers as the verifier: greedy, so it must agree with the draft.
    doubt_paris = {**ACCEPT_ALL, "uncertainty_markers": ["Paris"]}
    with real_proxy(llama.url, llama.url, speculative_decoding=doubt_paris) as proxy:
        body = proxy.http.post(
            "/v1/chat/completions", json={"model": "auto", "messages": FRANCE, **GREEDY}
        ).json()

    assert "Paris" in body["choices"][0]["message"]["content"]
    report = spec(body)
    assert body["model_used"] == "local"
    assert report["reasons"] == ["uncertainty_marker", "similar_to_verified"]
    assert report["similarity"] == 1.0
    assert report["verified_tokens"] == report["draft_tokens"] > 0


def test_real_verifier_completes_a_truncated_draft(llama: RealLlama) -> None:
    budget = {**ACCEPT_ALL, "max_draft_tokens": 4}
    with real_proxy(llama.url, llama.url, speculative_decoding=budget) as proxy:
        body = proxy.http.post(
            "/v1/chat/completions", json={"model": "auto", "messages": FRANCE, **GREEDY}
        ).json()
    draft = llama.chat({"messages": FRANCE, "max_tokens": 4, **GREEDY})

    verified = body["choices"][0]["message"]["content"]
    assert body["model_used"] == "cerebras"  # the verifier's role, played by the real server
    assert verified.startswith(draft["choices"][0]["message"]["content"])
    report = spec(body)
    assert report["reasons"] == ["incomplete", "draft_truncated"]
    assert report["similarity"] == 1.0  # the draft is a prefix of the verified answer
    assert report["verified_tokens"] > report["draft_tokens"] == 4


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.mark.parametrize("stream", [False, True])
def test_real_tool_requests_are_drafted_without_a_local_400(
    llama: RealLlama, cloud: FakeCerebras, stream: bool
) -> None:
    """The shipped flow (early abort on, hedging auto) with tools: the real server refuses
    logprobs with tools on a stream, so the draft must be asked whole. (No first-token
    budget: a draft it cut would not be counted, and whether it cuts depends on the
    machine's speed.)"""
    cloud.default = Reply(
        "", tool_calls=[{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    )
    flow = {
        "early_abort": True,
        "abort_min_score": 0.5,
        "abort_check_tokens": 8,
        "hedge": "auto",
        "policy": "combined",
    }
    asks = [
        ("What is the weather in Paris?", "auto"),
        ("Weather in Lyon, please.", "required"),
        ("Say hello", "none"),
    ]
    with real_proxy(llama.url, cloud.url, speculative_decoding=flow) as proxy:
        for question, choice in asks:
            body = {
                "model": "auto",
                "messages": [{"role": "user", "content": question}],
                "tools": [WEATHER_TOOL],
                "tool_choice": choice,
                "max_tokens": 48,
                "stream": stream,
                **GREEDY,
            }
            response = proxy.http.post("/v1/chat/completions", json=body)
            assert response.status_code == 200, response.text
        stats = proxy.stats()
    assert stats["upstream_errors"] == {}  # no local:400 for the proxy's own request shape
    assert stats["requests"]["total"] == len(asks)
    assert "error" not in stats["requests"]["by_outcome"]
    assert stats["tokens"]["local"] > 0  # drafted by the real model


@pytest.mark.parametrize("stream", [False, True])
def test_real_post_sampling_probs_is_read_not_a_500(
    llama: RealLlama, cloud: FakeCerebras, stream: bool
) -> None:
    """A client's ``post_sampling_probs`` makes the real server answer ``prob``/``top_probs``
    instead of ``logprob``: the draft is still judged (hostile case D1)."""
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": "Say hello"}],
        "max_tokens": 20,
        "post_sampling_probs": True,
        "stream": stream,
        **GREEDY,
    }
    flow = {
        "early_abort": True,
        "abort_min_score": 0.5,
        "abort_check_tokens": 8,
        "policy": "combined",
    }
    with real_proxy(llama.url, cloud.url, speculative_decoding=flow) as proxy:
        response = proxy.http.post("/v1/chat/completions", json=body)
        stats = proxy.stats()
    assert response.status_code == 200, response.text
    assert stats["upstream_errors"] == {}
    assert "error" not in stats["requests"]["by_outcome"]


def test_real_server_without_a_projector_never_sees_an_image(
    llama: RealLlama, cloud: FakeCerebras
) -> None:
    """The real server answers an image with a 500 (no mmproj loaded): its /props says it
    reads text only, so an image goes to the cloud, or is the client's 400 on local_only."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}]
    body = {"messages": messages, "max_tokens": 16, **GREEDY}
    with real_proxy(llama.url, cloud.url) as proxy:
        served = proxy.http.post("/v1/chat/completions", json=body)
        refused = proxy.http.post(
            "/v1/chat/completions", json=body, headers={"X-Routing-Strategy": "local_only"}
        )
        stats = proxy.stats()
    assert served.status_code == 200 and served.headers["x-model-used"] == "cerebras"
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "messages.0.content.1"
    assert stats["upstream_errors"] == {}
    assert chat_bodies(cloud)[0]["messages"] == messages


def test_real_template_without_tools_is_never_asked_for_a_demanded_call(
    llama: RealLlama, cloud: FakeCerebras
) -> None:
    """SmolLM2's chat template has no tools (/props chat_template_caps): its draft of a
    call that tool_choice demands was text every time, thrown away after ~1 s."""
    cloud.default = Reply(
        "", tool_calls=[{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    )
    body = {
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": "required",
        **GREEDY,
    }
    with real_proxy(llama.url, cloud.url) as proxy:
        answer = proxy.http.post("/v1/chat/completions", json=body)
        stats = proxy.stats()
    assert answer.status_code == 200
    assert (
        answer.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    )
    assert stats["requests"]["by_strategy"] == {"cerebras_only": 1}
    assert stats["tokens"]["local"] == 0  # never drafted
