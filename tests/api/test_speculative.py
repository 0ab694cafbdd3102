"""The speculative strategy end to end, through the official openai client.

Each path of seed 004 plus the fault directions: accepted draft, verified and
similar (draft served), verified and different (verified served), degraded
(cloud failing), local down -> cloud, both down -> clear error; streaming too.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import openai
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import CLOUD_OTHER, CLOUD_SAME, GOOD_DRAFT, HEDGED, LONG, collect, spec
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, chat_bodies, dead_url

ASK = [{"role": "user", "content": "Say hello"}]


def stream_text(proxy: Proxy, **kwargs: Any) -> tuple[str, dict[str, Any]]:
    """Stream through the openai client; see ``collect``."""
    stream = proxy.openai.chat.completions.create(model="auto", messages=ASK, stream=True, **kwargs)
    return collect(chunk.to_dict() for chunk in stream)


def stream_text_from_lines(lines: list[str]) -> tuple[str, dict[str, Any]]:
    """``collect`` over raw SSE lines, the closing ``[DONE]`` left out."""
    return collect(json.loads(line.removeprefix("data: ")) for line in lines[:-1])


def test_confident_draft_is_served_without_verification(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    local.enqueue(Reply(GOOD_DRAFT))
    answer = proxy.openai.chat.completions.create(model="auto", messages=ASK, max_tokens=50)

    assert answer.choices[0].message.content == GOOD_DRAFT
    assert answer.to_dict()["model_used"] == "local"
    assert spec(answer) == {
        "draft_tokens": 18,  # llama-server counts the end-of-generation token
        "verified_tokens": 0,
        "accepted": True,
        "spilled_over": False,
        "similarity": None,
        "agreement": None,
        "reasons": ["passed_checks"],
        "degraded": False,
        "lane": "uncertain",  # no gate (learning off): today's flow
    }
    assert answer.choices[0].logprobs is None  # drafted with logprobs for the proxy, not the client
    assert cloud.requests == []
    sent = local.last_json
    assert (sent["max_tokens"], sent["logprobs"], sent["top_logprobs"]) == (32, True, 5)
    assert sent["model"] == "smollm2" and "stream" not in sent
    for line in (
        "=== SPECULATIVE DECODING START ===",
        "Step 1: Generating draft from local model (max 32 tokens)",
        "Draft generated: 18 tokens, 65 chars",
        "Draft accepted without verification",
    ):
        assert line in caplog.text


def test_draft_budget_is_the_smaller_of_config_and_client(
    proxy: Proxy, local: FakeLlamaServer
) -> None:
    proxy.openai.chat.completions.create(model="auto", messages=ASK, max_completion_tokens=7)
    assert local.last_json["max_tokens"] == 7
    assert "max_completion_tokens" not in local.last_json


def test_hedged_draft_similar_to_verified_is_served(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_SAME))
    answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)

    assert answer.choices[0].message.content == HEDGED
    report = spec(answer)
    assert answer.to_dict()["model_used"] == "local"
    assert (report["accepted"], report["spilled_over"], report["degraded"]) == (False, False, False)
    assert report["similarity"] >= 0.8
    assert report["reasons"] == ["uncertainty_marker", "similar_to_verified"]
    assert report["verified_tokens"] == cloud_tokens(CLOUD_SAME)
    # The verifier got the client's own request: nothing invented, model swapped.
    assert cloud.last_json == {"model": "gpt-oss-120b", "messages": ASK}
    assert cloud.requests[-1].headers["authorization"] == f"Bearer {CLOUD_KEY}"
    assert "Responses similar (" in caplog.text and "), using draft" in caplog.text


def cloud_tokens(text: str) -> int:
    from tests.fakes import tokenize

    return len(tokenize(text))


def test_hedged_draft_different_from_verified_spills_over(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_OTHER))
    response = proxy.openai.chat.completions.with_raw_response.create(model="auto", messages=ASK)
    answer = response.parse()

    assert answer.choices[0].message.content == CLOUD_OTHER
    report = spec(answer)
    assert answer.to_dict()["model_used"] == "cerebras"
    assert (report["accepted"], report["spilled_over"]) == (False, True)
    assert report["similarity"] < 0.8
    assert report["reasons"] == ["uncertainty_marker", "differs_from_verified"]
    assert answer.to_dict()["time_info"]["total_time"] > 0  # the cloud body passes through
    assert response.headers["x-spilled-over"] == "true"
    assert response.headers["x-model-used"] == "cerebras"
    assert "Responses differ (" in caplog.text and "Spilled over: True" in caplog.text


def test_low_confidence_draft_is_verified(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(GOOD_DRAFT, token_probs=[0.3] * 17))
    cloud.enqueue(Reply(CLOUD_OTHER))
    answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
    assert spec(answer)["reasons"] == ["low_confidence", "differs_from_verified"]
    assert len(cloud.requests) == 1


def test_truncated_draft_is_never_served_when_verified_exists(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(LONG))
    cloud.enqueue(Reply(LONG))  # identical text: still the cloud's complete answer wins
    answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
    report = spec(answer)
    assert answer.choices[0].message.content == LONG
    assert answer.to_dict()["model_used"] == "cerebras"
    assert report["reasons"] == ["incomplete", "draft_truncated"]
    assert report["similarity"] == 1.0  # the draft agreed with the verified prefix


@pytest.mark.parametrize(
    "failure",
    [Reply(status=500), Reply(status=429), Reply(status=401), Reply(raw_body=b"{not json")],
    ids=["500", "429", "401", "malformed"],
)
def test_cloud_failure_degrades_to_local_continuation(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, failure: Reply
) -> None:
    local.enqueue(Reply(LONG), Reply(LONG))
    cloud.enqueue(failure)
    with make_proxy() as proxy:
        answer = proxy.openai.chat.completions.create(model="auto", messages=ASK, max_tokens=200)
        stats = proxy.stats()

    assert answer.choices[0].message.content == LONG  # the whole local answer, not the draft
    report = spec(answer)
    assert answer.to_dict()["model_used"] == "local"
    assert report["degraded"] is True and report["spilled_over"] is False
    assert report["reasons"] == ["incomplete", "verifier_failed", "local_continuation"]
    continuation = chat_bodies(local)[-1]
    assert continuation["max_tokens"] == 200 and "logprobs" not in continuation
    assert stats["requests"]["by_outcome"] == {"degraded": 1}
    assert sum(stats["upstream_errors"].values()) == 1


def test_cloud_retries_a_transient_failure(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(status=503, headers={"retry-after-ms": "10"}), Reply(CLOUD_OTHER))
    with make_proxy(models={"cerebras": {"max_retries": 1}}) as proxy:
        answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
    assert answer.to_dict()["model_used"] == "cerebras"
    assert len(cloud.requests) == 2


def test_complete_draft_is_served_as_is_when_cloud_fails(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(status=500))
    answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
    assert answer.choices[0].message.content == HEDGED
    assert spec(answer)["reasons"] == ["uncertainty_marker", "verifier_failed"]
    assert len(chat_bodies(local)) == 1  # no continuation needed


def test_missing_cloud_key_serves_drafts_marked_degraded(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    local.enqueue(Reply(HEDGED))
    with make_proxy(env={}) as proxy:
        answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
        features = proxy.stats()["features"]
    assert spec(answer)["reasons"] == ["uncertainty_marker", "verifier_unavailable"]
    assert spec(answer)["degraded"] is True
    assert cloud.requests == []
    assert features["verification"] is False
    assert "no API key" in features["upstreams"]["cerebras"]["unavailable_reason"]
    assert "Verification is off: cerebras: no API key configured" in caplog.text


def test_local_down_goes_straight_to_cloud(make_proxy: MakeProxy, cloud: FakeCerebras) -> None:
    cloud.enqueue(Reply(CLOUD_OTHER))
    with make_proxy(local_url=dead_url()) as proxy:
        answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
        stats = proxy.stats()
    assert answer.choices[0].message.content == CLOUD_OTHER
    assert answer.to_dict()["model_used"] == "cerebras"
    assert spec(answer)["reasons"] == ["local_unavailable"]
    assert stats["requests"]["by_outcome"] == {"local_down_cloud_used": 1}


@pytest.mark.parametrize("stream", [False, True])
def test_both_down_is_a_clear_error(make_proxy: MakeProxy, stream: bool) -> None:
    with make_proxy(local_url=dead_url(), cloud_url=dead_url()) as proxy:
        with pytest.raises(openai.APIStatusError) as caught:
            proxy.openai.chat.completions.create(model="auto", messages=ASK, stream=stream)
        stats = proxy.stats()
    error = caught.value
    assert error.status_code == 503
    message = error.body["message"]  # type: ignore[index]
    assert message.startswith("local: cannot connect") and "cerebras: cannot connect" in message
    assert stats["requests"]["by_outcome"] == {"error": 1}


# -- streaming ---------------------------------------------------------------


def test_stream_accepted_draft(proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras) -> None:
    local.enqueue(Reply(GOOD_DRAFT))
    text, final = stream_text(proxy, stream_options={"include_usage": True})
    assert text == GOOD_DRAFT
    assert final["model_used"] == "local" and spec(final)["accepted"] is True
    assert cloud.requests == []


def test_stream_verified_similar_serves_draft(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_SAME))
    text, final = stream_text(proxy)
    assert text == HEDGED
    assert spec(final)["reasons"] == ["uncertainty_marker", "similar_to_verified"]


def test_stream_verified_different_serves_verified(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_OTHER))
    text, final = stream_text(proxy)
    assert text == CLOUD_OTHER
    assert final["model_used"] == "cerebras" and spec(final)["spilled_over"] is True


@pytest.mark.parametrize("done", [True, False], ids=["with-DONE", "without-DONE"])
def test_stream_truncated_draft_passes_the_cloud_stream_through(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, done: bool
) -> None:
    local.enqueue(Reply(LONG))
    cloud.enqueue(Reply(CLOUD_OTHER, stream_done=done))
    with proxy.http.stream(
        "POST", "/v1/chat/completions", json={"messages": ASK, "stream": True}
    ) as response:
        headers = response.headers
        lines = [line for line in response.iter_lines() if line]
    assert headers["x-spilled-over"] == "true" and headers["x-model-used"] == "cerebras"
    assert lines[-1] == "data: [DONE]"  # always closed properly for the client
    assert cloud.last_json["stream"] is True  # live pass-through, not buffered
    text, final = stream_text_from_lines(lines)
    assert text == CLOUD_OTHER
    assert spec(final)["reasons"] == ["incomplete", "draft_truncated"]
    assert final["time_info"]["total_time"] > 0  # Cerebras' final chunk passes through


def test_stream_degraded_continues_locally(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(LONG), Reply(LONG))
    cloud.enqueue(Reply(status=500))
    text, final = stream_text(proxy)
    assert text == LONG
    assert final["model_used"] == "local" and spec(final)["degraded"] is True
    assert chat_bodies(local)[-1]["stream"] is True


def test_stream_local_down_uses_cloud(make_proxy: MakeProxy, cloud: FakeCerebras) -> None:
    cloud.enqueue(Reply(CLOUD_OTHER))
    with make_proxy(local_url=dead_url()) as proxy:
        text, final = stream_text(proxy)
    assert text == CLOUD_OTHER
    assert spec(final)["reasons"] == ["local_unavailable"]


def test_stream_broken_mid_way_ends_with_error_event_and_done(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(LONG), Reply(status=500))  # the draft; the continuation fails too
    cloud.enqueue(Reply(CLOUD_OTHER, fail_after_chunks=3))
    with proxy.http.stream(
        "POST", "/v1/chat/completions", json={"messages": ASK, "stream": True}
    ) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert '"error"' in lines[-2]
    assert proxy.stats()["requests"]["by_outcome"] == {"error": 1}
