"""Faults injected for real through the stand-ins: timeouts, circuit breaking, rate-limit
budget, bounded concurrency. What the client sees for each is asserted, and so is the count."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT, HEDGED, LONG
from tests.support.proxy import MakeProxy, chat_bodies, wait_for

ASK = [{"role": "user", "content": "Explain tides"}]


def test_local_timeout_goes_to_cloud(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(delay=3))
    cloud.enqueue(Reply(CLOUD_OTHER))
    with make_proxy(models={"local": {"timeout": {"total": 0.3}}}) as proxy:
        answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
        stats = proxy.stats()
    assert answer.to_dict()["model_used"] == "cerebras"
    assert answer.to_dict()["speculative_decoding"]["reasons"] == ["local_unavailable"]
    assert stats["upstream_errors"] == {"local:timeout": 1}


def test_cloud_timeout_degrades(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_OTHER, delay=3))
    with make_proxy(models={"cerebras": {"timeout": {"total": 0.3}}}) as proxy:
        answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
        stats = proxy.stats()
    report = answer.to_dict()["speculative_decoding"]
    assert report["degraded"] and report["reasons"][-1] == "verifier_failed"
    assert stats["upstream_errors"] == {"cerebras:timeout": 1}


def test_local_only_timeout_is_504_naming_local(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.enqueue(Reply(delay=3))
    with (
        make_proxy(models={"local": {"timeout": {"total": 0.3}}}) as proxy,
        pytest.raises(openai.APIStatusError) as caught,
    ):
        proxy.openai.chat.completions.create(model="local", messages=ASK)
    assert caught.value.status_code == 504
    assert "local: no answer within 0.3 s" in caught.value.message


def test_first_byte_and_read_clocks_time_streams_and_total_a_whole_answer(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    """A whole answer's headers come once it is all generated: only ``total`` may bound
    it (a shipped ``total: 60`` used to end slow answers at the default 30 s first byte)."""
    timeout = {"first_byte": 0.2, "read": 0.4, "total": 10}  # read past first_byte: no tie
    local.enqueue(Reply(GOOD_DRAFT, delay=0.6), Reply(GOOD_DRAFT, delay=0.6))
    with make_proxy(models={"local": {"timeout": timeout}}) as proxy:
        whole = proxy.openai.chat.completions.create(model="local", messages=ASK)
        with pytest.raises(openai.APIError, match=r"local: no response within 0\.2 s"):
            list(proxy.openai.chat.completions.create(model="local", messages=ASK, stream=True))
    assert whole.choices[0].message.content == GOOD_DRAFT


def test_stream_idle_gap_ends_the_stream_with_an_error(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.enqueue(Reply(LONG, chunk_delay=2))
    with make_proxy(models={"local": {"timeout": {"read": 0.3}}}) as proxy:
        with proxy.http.stream(
            "POST", "/v1/chat/completions", json={"model": "local", "messages": ASK, "stream": True}
        ) as r:
            lines = [line for line in r.iter_lines() if line]
        stats = proxy.stats()
    assert lines[-1] == "data: [DONE]" and "stream broke: timed out" in lines[-2]
    assert stats["upstream_errors"] == {"local:timeout": 1}


def test_circuit_opens_and_skips_the_failing_upstream(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(status=500), Reply(status=500))
    cloud.default = Reply(CLOUD_OTHER)
    breaker = {"failures": 2, "cooldown_s": 60}
    with make_proxy(models={"local": {"circuit_breaker": breaker}}) as proxy:
        for _ in range(3):
            answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
            assert answer.to_dict()["model_used"] == "cerebras"
        stats = proxy.stats()
    assert len(chat_bodies(local)) == 2  # the third request never reached it
    circuit = stats["features"]["upstreams"]["local"]["circuit"]
    assert circuit["state"] == "open" and circuit["opened_total"] == 1
    assert stats["upstream_errors"] == {"local:500": 2, "local:unavailable": 1}


def test_low_cloud_budget_serves_drafts_instead_of_collecting_429s(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cloud.rate_limits["x-ratelimit-remaining-tokens-minute"] = "900"
    local.default = Reply(HEDGED)
    cloud.default = Reply(CLOUD_OTHER)
    with make_proxy(models={"cerebras": {"rate_limit_reserve": {"tokens": 1000}}}) as proxy:
        first = proxy.openai.chat.completions.create(model="auto", messages=ASK)
        second = proxy.openai.chat.completions.create(model="auto", messages=ASK)
        budget = proxy.stats()["features"]["upstreams"]["cerebras"]["rate_limit"]
    assert first.to_dict()["model_used"] == "cerebras"  # nothing was known before the first call
    report = second.to_dict()["speculative_decoding"]
    assert report["reasons"][-1] == "cloud_budget_low" and report["degraded"]
    assert len(chat_bodies(cloud)) == 1
    assert budget["remaining_tokens_minute"] == 900
    assert "Not verifying: cerebras rate limit nearly spent: " in caplog.text


def test_in_flight_limit_queues_then_refuses_with_retry_after(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.enqueue(Reply(delay=2))
    concurrency = {"max_in_flight": 1, "queue_timeout_s": 0.2}
    with make_proxy(models={"local": {"concurrency": concurrency}}) as proxy:
        body = {"model": "local", "messages": ASK}
        first = threading.Thread(
            target=lambda: httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=10)
        )
        first.start()
        wait_for(lambda: local.in_flight == 1)
        refused = proxy.http.post("/v1/chat/completions", json=body)
        first.join()
        stats = proxy.stats()
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert "local: 1 requests in flight; no slot freed within 0.2 s" in refused.text
    assert stats["upstream_errors"] == {"local:busy": 1}
    assert len(chat_bodies(local)) == 1


def test_circuit_and_budget_are_in_metrics(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    local.enqueue(Reply(status=500))
    cloud.default = Reply(CLOUD_OTHER)
    with make_proxy(models={"local": {"circuit_breaker": {"failures": 1, "cooldown_s": 60}}}) as p:
        p.openai.chat.completions.create(model="auto", messages=ASK)
        text = p.http.get("/metrics").text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("specproxy_circuit_state", (("state", "open"), ("upstream", "local")))] == 1
    assert (
        samples[("specproxy_circuit_state", (("state", "closed"), ("upstream", "cerebras")))] == 1
    )
    assert samples[("specproxy_circuit_opened", (("upstream", "local"),))] == 1
    remaining = (
        "specproxy_ratelimit_remaining",
        (("unit", "tokens_minute"), ("upstream", "cerebras")),
    )
    assert samples[remaining] == float(cloud.rate_limits["x-ratelimit-remaining-tokens-minute"])
    assert samples[("specproxy_requests_in_flight", ())] == 0
