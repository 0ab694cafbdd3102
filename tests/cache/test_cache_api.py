"""The cache of verified answers end to end: the real proxy, the stand-ins, the official
openai client. A verified answer is served again (JSON or a replayed stream), only to the
key that got it, near variants too but never a question with other facts; Cache-Control
is honoured; an unverified draft is never kept; an audited hit the cloud now answers
otherwise is replaced; /stats and /metrics count it all."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.fakes.script import tokenize
from tests.support.answers import (
    CLOUD_OTHER,
    CLOUD_SAME,
    GOOD_DRAFT,
    HEDGED,
    collect,
    collect_calls,
    spec,
)
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, chat_bodies, wait_for

pytestmark = pytest.mark.process


@pytest.fixture(params=("lean", "standard"))
def edge(request: pytest.FixtureRequest) -> str:
    """Each HTTP edge: the client's key and Cache-Control reach the cache through both."""
    edge: str = request.param
    return edge


PRICED = {"cerebras": {"price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}}


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def cached(make_proxy: MakeProxy) -> Iterator[Proxy]:
    with make_proxy(cache={"enabled": True, "audit_rate": 0}, models=PRICED) as proxy:
        yield proxy


def client(proxy: Proxy, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0, timeout=15)


def create(api: openai.OpenAI, text: str, model: str = "auto", **kw: Any) -> Any:
    """The parsed answer and its headers."""
    raw = api.chat.completions.with_raw_response.create(model=model, messages=ask(text), **kw)
    return raw.parse(), raw.headers


def entries(proxy: Proxy, n: int) -> None:
    """Wait until the cache holds ``n`` entries (each answer: its exact and near key)."""
    wait_for(lambda: proxy.stats()["cache"]["entries"] == 2 * n)


def test_a_spilled_answer_is_served_again_to_the_same_key(
    cached: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_OTHER))
    first, headers = create(cached.openai, "Say hello")
    assert headers["x-cache"] == "miss" and first.choices[0].message.content == CLOUD_OTHER
    entries(cached, 1)

    again, headers = create(cached.openai, "Say hello")
    assert headers["x-cache"] == "hit" and headers["x-model-used"] == "cerebras"
    assert again.choices[0].message.content == CLOUD_OTHER
    assert again.to_dict()["model_used"] == "cerebras"
    assert spec(again)["reasons"] == ["cache_hit"]
    assert again.id != first.id
    assert again.usage is not None and again.usage.completion_tokens > 0
    assert (len(chat_bodies(local)), len(chat_bodies(cloud))) == (1, 1)  # nothing asked again

    stats = cached.stats()
    cache = stats["cache"]
    assert (cache["hits"], cache["misses"], cache["bypass"], cache["hit_rate"]) == (1, 1, 0, 0.5)
    assert cache["saved_usd"] > 0 and cache["bytes"] > 0
    assert stats["requests"]["by_outcome"]["cached"] == 1
    assert stats["cost"]["spend_usd"]["total"] > 0  # the first answer's only
    metrics = cached.http.get("/metrics").text
    assert 'specproxy_cache_requests_total{result="hit"} 1.0' in metrics
    assert 'specproxy_cache_requests_total{result="miss"} 1.0' in metrics
    assert f"specproxy_cache_saved_usd_total {cache['saved_usd']}" in metrics
    assert f"specproxy_cache_bytes {float(cache['bytes'])}" in metrics


def test_another_key_never_gets_the_entry(
    cached: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    a, b = client(cached, "key-a"), client(cached, "key-b")
    cloud.enqueue(Reply("Answer for A."), Reply("Answer for B."))
    first, _ = create(a, "Which is it?", model="cerebras")
    assert first.choices[0].message.content == "Answer for A."
    entries(cached, 1)
    other, headers = create(b, "Which is it?", model="cerebras")
    assert headers["x-cache"] == "miss" and other.choices[0].message.content == "Answer for B."
    entries(cached, 2)
    again, headers = create(a, "Which is it?", model="cerebras")
    assert headers["x-cache"] == "hit" and again.choices[0].message.content == "Answer for A."
    assert len(chat_bodies(cloud)) == 2


def test_an_unverified_draft_is_not_kept(
    cached: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(GOOD_DRAFT), Reply(GOOD_DRAFT))
    for _ in range(2):
        answer, headers = create(cached.openai, "Say hello")
        assert headers["x-cache"] == "miss" and answer.to_dict()["model_used"] == "local"
    assert len(chat_bodies(local)) == 2 and cached.stats()["cache"]["entries"] == 0


def test_near_variants_hit_and_other_facts_miss(cached: Proxy, cloud: FakeCerebras) -> None:
    cloud.enqueue(Reply("84."), Reply("96."))
    create(cached.openai, "What is 12 times 7?", model="cerebras")
    entries(cached, 1)
    near, headers = create(cached.openai, "  what is 12 TIMES 7", model="cerebras")
    assert headers["x-cache"] == "hit" and near.choices[0].message.content == "84."
    other, headers = create(cached.openai, "What is 12 times 8?", model="cerebras")
    assert headers["x-cache"] == "miss" and other.choices[0].message.content == "96."


def test_cache_control(cached: Proxy, cloud: FakeCerebras) -> None:
    http = cached.http
    body = {"model": "cerebras", "messages": ask("Pick a colour")}
    cloud.enqueue(Reply("Blue."), Reply("Green."), Reply("Red."))

    no_store = http.post("/v1/chat/completions", json=body, headers={"Cache-Control": "no-store"})
    assert no_store.headers["x-cache"] == "bypass"
    no_cache = http.post("/v1/chat/completions", json=body, headers={"Cache-Control": "no-cache"})
    assert no_cache.headers["x-cache"] == "bypass"  # not read, but kept
    entries(cached, 1)
    hit = http.post("/v1/chat/completions", json=body)
    assert hit.headers["x-cache"] == "hit"
    assert hit.json()["choices"][0]["message"]["content"] == "Green."
    fresh = http.post("/v1/chat/completions", json=body, headers={"Cache-Control": "no-cache"})
    assert fresh.json()["choices"][0]["message"]["content"] == "Red."
    assert len(chat_bodies(cloud)) == 3
    assert cached.stats()["cache"]["bypass"] == 3


def test_a_stream_is_replayed_from_the_cache_through_the_openai_sdk(
    cached: Proxy, cloud: FakeCerebras
) -> None:
    text = "The Eiffel Tower is in Paris, France."
    cloud.enqueue(Reply(text))
    options = {"model": "cerebras", "messages": ask("Where is the Eiffel Tower?")}
    usage = {"stream_options": {"include_usage": True}}
    first = cached.openai.chat.completions.create(stream=True, **options, **usage)
    chunks = [c.to_dict() for c in first]
    streamed, _ = collect(chunks)
    assert streamed == text
    entries(cached, 1)

    raw = cached.openai.chat.completions.with_raw_response.create(stream=True, **options, **usage)
    assert raw.headers["x-cache"] == "hit"
    replay = [c.to_dict() for c in raw.parse()]
    again, final = collect(replay)
    assert again == text and final["choices"][0]["finish_reason"] == "stop"
    assert final["model_used"] == "cerebras"
    assert replay[0]["choices"][0]["delta"]["role"] == "assistant"
    assert replay[-1]["choices"] == [] and replay[-1]["usage"]["completion_tokens"] > 0

    whole = cached.openai.chat.completions.create(**options)  # the same answer, whole
    assert whole.choices[0].message.content == text
    assert len(chat_bodies(cloud)) == 1


def test_an_audited_hit_the_cloud_now_answers_otherwise_is_replaced(
    make_proxy: MakeProxy, cloud: FakeCerebras
) -> None:
    with make_proxy(cache={"enabled": True, "audit_rate": 1.0}) as proxy:
        cloud.enqueue(Reply("The tallest is Everest."), Reply("The tallest is Olympus Mons."))
        create(proxy.openai, "What is the tallest mountain?", model="cerebras")
        entries(proxy, 1)
        # a near hit: the audit replaces the entry where it was kept
        hit, headers = create(proxy.openai, "what is the TALLEST mountain", model="cerebras")
        assert headers["x-cache"] == "hit"
        assert hit.choices[0].message.content == "The tallest is Everest."
        wait_for(lambda: proxy.stats()["cache"]["audit_replaced"] == 1)
        # the audit's call counted with its tokens, not only its spend (the hit's are none)
        answers = ("The tallest is Everest.", "The tallest is Olympus Mons.")
        assert proxy.stats()["tokens"]["cloud"] == sum(len(tokenize(t)) for t in answers)
        renewed, _ = create(proxy.openai, "What is the tallest mountain?", model="cerebras")
        assert renewed.choices[0].message.content == "The tallest is Olympus Mons."
        assert cloud.requests[-1].json.get("stream") is None  # the audit asked whole
        assert cloud.requests[-1].headers["authorization"] == f"Bearer {CLOUD_KEY}"


def test_the_spec_log_line_says_what_the_cache_did(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    path = tmp_path / "spec.jsonl"
    over = {"cache": {"enabled": True, "audit_rate": 0}, "logging": {"spec_log_file": str(path)}}
    local.enqueue(Reply(HEDGED), Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_OTHER), Reply(CLOUD_OTHER))
    with make_proxy(**over) as proxy:
        create(proxy.openai, "Say hello")
        create(proxy.openai, "Say hello", extra_headers={"Cache-Control": "no-cache"})
        entries(proxy, 1)
        _, headers = create(proxy.openai, "Say hello")
        assert headers["x-cache"] == "hit"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    # a hit drafts nothing, so it has no line of its own
    assert [(e["cache"], e["outcome"]) for e in lines] == [
        ("miss", "spilled_over"),
        ("bypass", "spilled_over"),
    ]


def test_a_streamed_spill_and_a_verified_draft_are_kept(
    cached: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED), Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_OTHER), Reply(CLOUD_SAME))
    live = cached.openai.chat.completions.create(model="auto", messages=ask("A"), stream=True)
    text, final = collect(c.to_dict() for c in live)
    assert text == CLOUD_OTHER and final["speculative_decoding"]["spilled_over"]
    verified, _ = create(cached.openai, "B")
    assert verified.to_dict()["model_used"] == "local"  # the draft, agreed with
    entries(cached, 2)

    replay = cached.openai.chat.completions.with_raw_response.create(
        model="auto", messages=ask("A"), stream=True
    )
    assert replay.headers["x-cache"] == "hit"
    assert collect(c.to_dict() for c in replay.parse())[0] == CLOUD_OTHER
    draft, headers = create(cached.openai, "B")
    assert headers["x-cache"] == "hit" and draft.to_dict()["model_used"] == "local"
    assert draft.choices[0].message.content == HEDGED
    assert (len(chat_bodies(local)), len(chat_bodies(cloud))) == (2, 2)
    # a hit of a draft saves what the cloud charged for the request, not the draft's count
    assert cached.stats()["cache"]["saved_usd"] > 0


def test_hostile_bodies_are_answered_not_broken(cached: Proxy, cloud: FakeCerebras) -> None:
    deep: Any = 1
    for _ in range(100):  # 200 levels (past orjson's 255 levels the forwarding itself fails: a 500)
        deep = {"x": [deep, None, 1.0]}
    odd = {"model": "cerebras", "messages": ask("Hi \u0000 \u202e"), "x_extra": deep}
    assert cached.http.post("/v1/chat/completions", json=odd).headers["x-cache"] == "miss"
    entries(cached, 1)
    assert cached.http.post("/v1/chat/completions", json=odd).headers["x-cache"] == "hit"
    huge = {"model": "cerebras", "messages": ask("word " * 100_000)}
    first = cached.http.post("/v1/chat/completions", json=huge)
    assert first.status_code == 200 and first.headers["x-cache"] == "miss"
    entries(cached, 2)
    again = cached.http.post("/v1/chat/completions", json=huge)
    assert again.headers["x-cache"] == "hit"


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_a_tool_call_is_replayed_and_a_broken_one_never_kept(
    cached: Proxy, cloud: FakeCerebras
) -> None:
    paris = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    cloud.enqueue(Reply("", tool_calls=[paris]), Reply("", tool_calls=[paris | {"arguments": "{"}]))
    options: dict[str, Any] = {"model": "cerebras", "tools": [WEATHER]}
    first, _ = create(cached.openai, "Weather in Paris?", **options)
    entries(cached, 1)
    stream = cached.openai.chat.completions.with_raw_response.create(
        messages=ask("Weather in Paris?"), stream=True, **options
    )
    assert stream.headers["x-cache"] == "hit"
    text, calls, finish, _ = collect_calls(c.to_dict() for c in stream.parse())
    assert text == ""
    assert finish == "tool_calls" and [(c["name"], c["arguments"]) for c in calls] == [
        ("get_weather", first.choices[0].message.tool_calls[0].function.arguments)
    ]

    broken, _ = create(cached.openai, "Weather in Lyon?", **options)
    assert broken.choices[0].message.tool_calls[0].function.arguments == "{"
    create(cached.openai, "Weather in Rome?", **options)  # kept, after Lyon's would have been
    entries(cached, 2)
    _, headers = create(cached.openai, "Weather in Lyon?", **options)
    assert headers["x-cache"] == "miss"  # the broken call was not kept


def test_the_strategy_is_part_of_the_key(
    cached: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_SAME), Reply("The cloud's own answer."))
    draft, _ = create(cached.openai, "Say hello")  # a verified draft, kept
    assert draft.to_dict()["model_used"] == "local"
    entries(cached, 1)
    only_cloud = {"X-Routing-Strategy": "cerebras_only"}
    cloud_answer, headers = create(cached.openai, "Say hello", extra_headers=only_cloud)
    assert headers["x-cache"] == "miss"  # it asked for the cloud: not the draft
    assert cloud_answer.choices[0].message.content == "The cloud's own answer."
