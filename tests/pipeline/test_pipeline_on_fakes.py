"""The whole pipeline over two queue-backed fake upstreams: no socket, no server, no
clock. These show the fake standing in for both upstreams; the speculative flows'
unit tests build on the same setup."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from app.assembly import pipeline_of
from app.config import Settings
from app.pipeline import Pipeline
from app.protocol import ChatCompletionRequest
from app.telemetry import Telemetry
from app.telemetry.stats import Stats
from app.vocabulary import Strategy
from app.wire import JSONReply, StreamReply
from tests.fakes import Reply
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT, HEDGED, collect
from tests.support.fake_upstream import FakeUpstream
from tests.support.proxy import CLOUD_KEY, proxy_config

ASK = {"messages": [{"role": "user", "content": "Say hello"}]}


def pipeline_over(local: FakeUpstream, cloud: FakeUpstream, **overrides: Any) -> Pipeline:
    config = proxy_config("http://local.fake", "http://cloud.fake", **overrides)
    config["models"]["cerebras"]["api_key"] = CLOUD_KEY
    settings = Settings.model_validate(config)
    return pipeline_of(settings, {"local": local, "cerebras": cloud}, Telemetry(Stats()))


def answer(pipeline: Pipeline, body: dict[str, Any], strategy: Strategy) -> dict[str, Any]:
    async def chat() -> dict[str, Any]:
        reply = await pipeline.chat(body, ChatCompletionRequest.model_validate(body), strategy)
        assert isinstance(reply, JSONReply)
        return orjson.loads(reply.content)  # type: ignore[no-any-return]

    return asyncio.run(chat())


def test_a_confident_draft_is_served_without_asking_the_cloud() -> None:
    local, cloud = FakeUpstream("local").enqueue(GOOD_DRAFT), FakeUpstream("cerebras")
    body = answer(pipeline_over(local, cloud), ASK, Strategy.SPECULATIVE)
    assert body["choices"][0]["message"]["content"] == GOOD_DRAFT
    assert body["model_used"] == "local" and body["speculative_decoding"]["accepted"]
    assert local.history[0]["max_tokens"] == 32 and cloud.history == []


def test_a_doubted_draft_is_verified_and_the_clouds_answer_served() -> None:
    local = FakeUpstream("local").enqueue(Reply(HEDGED, token_probs=[0.2] * 17))
    cloud = FakeUpstream("cerebras", speaks="cerebras").enqueue(CLOUD_OTHER)
    body = answer(pipeline_over(local, cloud), ASK, Strategy.SPECULATIVE)
    assert body["choices"][0]["message"]["content"] == CLOUD_OTHER
    assert body["model_used"] == "cerebras" and body["speculative_decoding"]["spilled_over"]
    assert cloud.history[0]["messages"] == ASK["messages"]


def test_a_doubted_draft_is_served_degraded_while_the_clouds_circuit_is_open() -> None:
    local = FakeUpstream("local").enqueue(Reply(HEDGED, token_probs=[0.2] * 17))
    cloud = FakeUpstream("cerebras", speaks="cerebras")
    cloud.open_circuit()
    body = answer(pipeline_over(local, cloud), ASK, Strategy.SPECULATIVE)
    report = body["speculative_decoding"]
    assert body["model_used"] == "local" and report["degraded"]
    assert report["reasons"][-1] == "verifier_unavailable" and cloud.history == []


def test_a_local_only_stream_is_relayed_as_it_came() -> None:
    local = FakeUpstream("local", batch=2).enqueue(GOOD_DRAFT)
    pipeline = pipeline_over(local, FakeUpstream("cerebras"))
    body = {**ASK, "stream": True}

    async def chat() -> bytes:
        reply = await pipeline.chat(
            body, ChatCompletionRequest.model_validate(body), Strategy.LOCAL_ONLY
        )
        assert isinstance(reply, StreamReply)
        return b"".join([chunk async for chunk in reply.chunks])

    events = asyncio.run(chat()).split(b"\n\n")
    text, fields = collect(orjson.loads(e[len(b"data: ") :]) for e in events if e[6:7] == b"{")
    assert text == GOOD_DRAFT and fields["model_used"] == "local"
    assert events[-2] == b"data: [DONE]"
