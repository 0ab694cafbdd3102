"""Traces of every decision arrive at a real OTLP/HTTP receiver (``telemetry.otel``).

The proxy runs against the stand-in upstreams with its endpoint pointed at a loopback
receiver that decodes the official protobuf (``tests.support.otlp``); the proxy's
shutdown flushes the batch processor, so the spans are there once it has stopped.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from app.telemetry.tracing import FLUSH_S
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT, HEDGED, LONG
from tests.support.otlp import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.support.proxy import CLOUD_KEY, MakeProxy, chat_bodies, dead_url
from tests.support.tiers import process_fixture

ASK = [{"role": "user", "content": "Say hello"}]
TEAM_KEY = "sk-team-a-0123456789abcdef0123"
SERVER, CLIENT, INTERNAL = 2, 3, 1  # the protobuf's SpanKind values
STATUS_ERROR = 2


@pytest.fixture(params=("lean", "standard"))
def edge(request: pytest.FixtureRequest) -> str:
    """Each HTTP edge (``server.edge``): both read the client's traceparent."""
    edge: str = request.param
    return edge


@process_fixture
def receiver() -> Iterator[tuple[OtlpReceiver, str]]:
    with otlp_receiver() as running:
        yield running


def traced(receiver_url: str, **otel: Any) -> dict[str, Any]:
    """The config overrides: tracing to the receiver, one named client key."""
    return {
        "telemetry": {"otel": {"endpoint": receiver_url, **otel}},
        "server": {"keys": [{"name": "team-a-bot", "team": "a", "key": "${TEAM_KEY}"}]},
    }


ENV = {"CEREBRAS_API_KEY": CLOUD_KEY, "TEAM_KEY": TEAM_KEY}


def by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {span.name: span for span in spans}


def parent_of(header: str) -> tuple[str, str, str]:
    """A W3C traceparent's trace id, parent span id and flags."""
    version, trace_id, span_id, flags = header.split("-")
    assert version == "00"
    return trace_id, span_id, flags


def test_a_spilled_speculative_request_is_one_trace_under_the_clients(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    receiver: tuple[OtlpReceiver, str],
) -> None:
    otlp, url = receiver
    client_trace, client_span = os.urandom(16).hex(), os.urandom(8).hex()
    local.enqueue(Reply(HEDGED))  # an uncertainty marker: verified
    cloud.enqueue(Reply(CLOUD_OTHER))  # and it differs: the cloud's answer is served
    with make_proxy(env=ENV, api_key=TEAM_KEY, **traced(url)) as proxy:
        answer = proxy.http.post(
            "/v1/chat/completions",
            json={"model": "auto", "messages": ASK},
            headers={"traceparent": f"00-{client_trace}-{client_span}-01"},
        )
        assert answer.status_code == 200
        assert answer.json()["model_used"] == "cerebras"
    # stopped: the batch processor was flushed at shutdown

    spans = otlp.trace(client_trace)
    names = by_name(spans)
    assert {"gate", "draft", "judge", "verify"} <= names.keys()
    request = names["chat auto"]
    # The client's trace is continued: same trace id, its span the request span's parent.
    assert request.parent_span_id == client_span and request.kind == SERVER
    assert request.service == "specproxy"
    for step in ("gate", "draft", "judge", "verify"):
        child = names[step]
        assert child.parent_span_id == request.span_id
        assert request.start_ns <= child.start_ns <= child.end_ns <= request.end_ns
    # in the order the request went, and the upstream calls took time
    order = [names[s].start_ns for s in ("gate", "draft", "judge", "verify")]
    assert order == sorted(order)
    assert names["draft"].end_ns <= names["judge"].end_ns <= names["verify"].start_ns
    assert names["draft"].duration_s > 0 and names["verify"].duration_s > 0
    assert names["draft"].kind == CLIENT and names["verify"].kind == CLIENT
    assert names["gate"].kind == INTERNAL and names["judge"].kind == INTERNAL

    # GenAI conventions on the request span, then the proxy's own attributes
    attrs = request.attributes
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "auto"
    assert attrs["gen_ai.response.model"] == "cerebras"
    assert attrs["gen_ai.usage.output_tokens"] > 0 and attrs["gen_ai.usage.input_tokens"] > 0
    assert attrs["specproxy.outcome"] == "spilled_over"
    assert attrs["specproxy.strategy"] == "speculative_decoding"
    assert attrs["specproxy.key.name"] == "team-a-bot" and attrs["specproxy.key.team"] == "a"
    assert attrs["specproxy.agreement"] is False
    assert attrs["specproxy.cost_usd"] >= 0 and "specproxy.baseline_usd" in attrs
    assert attrs["specproxy.request_id"] == answer.headers["x-request-id"]

    assert names["gate"].attributes["specproxy.lane"] == "uncertain"
    draft = names["draft"].attributes
    assert draft["gen_ai.request.model"] == "local" and draft["gen_ai.request.max_tokens"] == 32
    assert draft["gen_ai.provider.name"] == "llama_server"
    assert draft["gen_ai.usage.output_tokens"] == draft["specproxy.draft.tokens"] > 0
    judge = names["judge"].attributes
    assert judge["specproxy.accepted"] is False
    assert "uncertainty_marker" in judge["specproxy.decision_reasons"]
    assert judge["specproxy.policy"] == "seed"
    verify = names["verify"].attributes
    assert verify["specproxy.step"] == "verify_whole"
    assert verify["gen_ai.request.model"] == "cerebras"
    assert verify["gen_ai.provider.name"] == "cerebras"
    assert verify["specproxy.agreement"] is False and verify["specproxy.similarity"] < 0.8
    assert verify["gen_ai.usage.output_tokens"] > 0

    # Both upstreams got the request's trace, the request span as their parent.
    for fake in (local, cloud):
        trace_id, parent, flags = parent_of(fake.requests[-1].headers["traceparent"])
        assert (trace_id, parent, flags) == (client_trace, request.span_id, "01")

    # No key material in any attribute: neither the client's key nor the cloud's.
    text = json.dumps([s.attributes for s in otlp.spans])
    assert TEAM_KEY not in text and CLOUD_KEY not in text
    assert all("application/x-protobuf" in c for c in otlp.content_types)


def test_a_stream_without_a_traceparent_starts_its_own_trace(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    receiver: tuple[OtlpReceiver, str],
) -> None:
    otlp, url = receiver
    local.enqueue(Reply(GOOD_DRAFT))  # confident: served as it is, no cloud call
    with make_proxy(env=ENV, api_key=TEAM_KEY, **traced(url)) as proxy:
        body = {"model": "auto", "messages": ASK, "stream": True}
        with proxy.http.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            assert "[DONE]" in "".join(response.iter_text())
    trace_id, parent, flags = parent_of(local.requests[-1].headers["traceparent"])
    assert int(flags, 16) & 1 and cloud.requests == []  # sampled (0x02: a random trace id)
    names = by_name(otlp.trace(trace_id))
    request = names["chat auto"]
    assert request.parent_span_id == "" and request.span_id == parent
    assert request.attributes["specproxy.outcome"] == "accepted_without_verification"
    assert request.attributes["specproxy.stream"] is True
    assert request.attributes["gen_ai.response.model"] == "local"
    assert names["judge"].attributes["specproxy.accepted"] is True
    assert names["serve"].attributes["specproxy.step"] == "serve_draft"
    assert "verify" not in names


@pytest.mark.parametrize("stream", [False, True])
def test_a_pass_through_names_its_model_and_tokens_whole_or_streamed(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    receiver: tuple[OtlpReceiver, str],
    stream: bool,
) -> None:
    otlp, url = receiver
    local.enqueue(Reply(GOOD_DRAFT))
    cloud.enqueue(Reply(CLOUD_OTHER))
    with make_proxy(env=ENV, api_key=TEAM_KEY, **traced(url)) as proxy:
        for model in ("local", "cerebras"):
            body = {"model": model, "messages": ASK, "stream": stream}
            if stream:
                body["stream_options"] = {"include_usage": True}
            answer = proxy.http.post("/v1/chat/completions", json=body)
            assert answer.status_code == 200
    for upstream in (local, cloud):
        trace_id, _, _ = parent_of(upstream.requests[-1].headers["traceparent"])
        [request] = [s for s in otlp.trace(trace_id) if s.name.startswith("chat ")]
        attributes = request.attributes
        assert attributes["specproxy.outcome"] == "passed_through"
        assert attributes["gen_ai.response.model"] == attributes["gen_ai.request.model"]
        assert attributes["gen_ai.usage.output_tokens"] > 0
        assert attributes["gen_ai.usage.input_tokens"] > 0


def test_a_live_verification_ends_with_the_stream_it_relays(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    receiver: tuple[OtlpReceiver, str],
) -> None:
    otlp, url = receiver
    local.enqueue(Reply(LONG))  # cut at the draft budget: never served, so relayed live
    cloud.enqueue(Reply(CLOUD_OTHER))
    with make_proxy(env=ENV, api_key=TEAM_KEY, **traced(url)) as proxy:
        body = {"model": "auto", "messages": ASK, "stream": True}
        with proxy.http.stream("POST", "/v1/chat/completions", json=body) as response:
            assert "[DONE]" in "".join(response.iter_text())
    trace_id, _, _ = parent_of(cloud.requests[-1].headers["traceparent"])
    names = by_name(otlp.trace(trace_id))
    request, verify = names["chat auto"], names["verify"]
    assert verify.attributes["specproxy.step"] == "verify_live"
    assert verify.end_ns == request.end_ns  # the relayed stream ended the request
    assert verify.start_ns >= names["judge"].end_ns
    assert verify.attributes["gen_ai.usage.output_tokens"] > 0
    assert names["draft"].attributes["specproxy.draft.finish_reason"] == "length"
    assert request.attributes["specproxy.outcome"] == "spilled_over"


def test_a_refused_request_is_a_span_with_its_status_and_no_key(
    make_proxy: MakeProxy, local: FakeLlamaServer, receiver: tuple[OtlpReceiver, str]
) -> None:
    otlp, url = receiver
    client_trace = os.urandom(16).hex()
    wrong = "sk-wrong-0123456789abcdef0123"
    headers = {"traceparent": f"00-{client_trace}-{os.urandom(8).hex()}-01"}
    with make_proxy(env=ENV, api_key=wrong, **traced(url)) as proxy:
        refused = proxy.http.post(
            "/v1/chat/completions", json={"model": "auto", "messages": ASK}, headers=headers
        )
        assert refused.status_code == 401
        bad = proxy.http.post(
            "/v1/chat/completions",
            json={"model": "auto", "messages": "not a list"},
            headers={**headers, "authorization": f"Bearer {TEAM_KEY}"},
        )
        assert bad.status_code == 400
    assert chat_bodies(local) == []
    unauthorized, invalid = otlp.trace(client_trace)
    assert unauthorized.attributes["http.response.status_code"] == 401
    assert unauthorized.attributes["specproxy.outcome"] == "refused"
    assert "specproxy.key.name" not in unauthorized.attributes
    assert invalid.attributes["http.response.status_code"] == 400
    assert invalid.attributes["specproxy.key.name"] == "team-a-bot"
    assert invalid.status_code != STATUS_ERROR  # the client's mistake, not the server's
    text = json.dumps([s.attributes for s in otlp.spans])
    assert wrong not in text and TEAM_KEY not in text


def test_a_request_the_sampler_drops_sends_nothing_but_its_traceparent(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    receiver: tuple[OtlpReceiver, str],
) -> None:
    otlp, url = receiver
    local.enqueue(Reply(GOOD_DRAFT))
    with make_proxy(env=ENV, api_key=TEAM_KEY, **traced(url, sample_rate=0.0)) as proxy:
        proxy.openai.chat.completions.create(model="auto", messages=ASK)
    _, _, flags = parent_of(local.requests[-1].headers["traceparent"])
    assert not int(flags, 16) & 1  # not sampled, and the upstream is told so
    assert otlp.spans == []


def test_a_collector_that_is_down_holds_the_stop_up_for_the_flush_bound_only(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.enqueue(Reply(GOOD_DRAFT))
    with make_proxy(env=ENV, api_key=TEAM_KEY, **traced(dead_url())) as proxy:
        answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
        assert answer.choices[0].message.content == GOOD_DRAFT  # served all the same
        stopping = time.monotonic()
    # the exporter retries for its 10 s timeout unless cut (FLUSH_S after the stop began)
    assert time.monotonic() - stopping < FLUSH_S + 3.0


def test_with_tracing_off_no_traceparent_goes_upstream(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.enqueue(Reply(GOOD_DRAFT))
    with make_proxy() as proxy:
        proxy.http.post(
            "/v1/chat/completions",
            json={"model": "auto", "messages": ASK},
            headers={"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"},
        )
    assert "traceparent" not in local.requests[-1].headers


def test_a_spent_budget_served_locally_says_why_in_its_span(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    receiver: tuple[OtlpReceiver, str],
) -> None:
    otlp, url = receiver
    client_trace = os.urandom(16).hex()
    headers = {"traceparent": f"00-{client_trace}-{os.urandom(8).hex()}-01"}
    saver = {
        "name": "saver",
        "key": "${TEAM_KEY}",
        "budget_usd_day": 0.000001,
        "on_budget": "local",
    }
    cloud.enqueue(Reply(CLOUD_OTHER))
    local.enqueue(Reply(GOOD_DRAFT))
    pricey = {"price": {"input_per_mtok": 1000.0, "output_per_mtok": 1000.0}}  # cents an answer
    config = traced(url) | {"server": {"keys": [saver]}, "models": {"cerebras": pricey}}
    with make_proxy(env=ENV, api_key=TEAM_KEY, **config) as proxy:
        spent = proxy.http.post(
            "/v1/chat/completions",
            json={"messages": ASK},
            headers={"X-Routing-Strategy": "cerebras_only"},
        )  # its first cloud answer spends the budget
        assert spent.status_code == 200 and "x-budget" not in spent.headers
        local_answer = proxy.http.post(
            "/v1/chat/completions",
            json={"messages": ASK},
            headers={**headers, "X-Routing-Strategy": "cerebras_only"},
        )
        assert local_answer.headers["x-budget"] == "exhausted"
    (request,) = [s for s in otlp.trace(client_trace) if s.kind == SERVER]
    assert request.attributes["specproxy.reasons"] == ["budget_local"]
    assert request.attributes["specproxy.strategy"] == "local_only"
