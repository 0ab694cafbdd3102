"""The first-token budget of streamed requests, through the running proxy and the stand-ins.

With ``stream_first_token_s`` a streamed request hedges with the cloud's stream: a draft
accepted within the budget is served, else the cloud's stream goes out as it arrives.
Liveness is shown without timing: the cloud's stream is held midway until the client
has seen its first deltas; a proxy that waited for the whole answer would leave the
client waiting for the hold's 30 s limit, past the client's own timeout.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.test_tool_calls import ASK as WEATHER_ASK
from tests.api.test_tool_calls import PARIS, WEATHER_TOOL, call_reply
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import CLOUD_OTHER, CLOUD_SAME, GOOD_DRAFT, HEDGED, collect_calls, spec
from tests.support.proxy import MakeProxy, Proxy, chat_bodies, wait_for
from tests.support.scorers import write_scorer

ASK = [{"role": "user", "content": "Explain tides"}]
SLOW = 30.0  # a draft this slow never comes within the client's timeout
PATIENT = {"timeout": {"first_byte": 60, "read": 60, "total": 60}}  # outlasts SLOW
BUDGET = {"hedge": "always", "stream_first_token_s": 0.05}
AMPLE = {"hedge": "always", "stream_first_token_s": 10.0}
FIRST_TOKEN = "specproxy_time_to_first_token_seconds"


def stream_until_released(
    proxy: Proxy, release: threading.Event, **kwargs: Any
) -> tuple[list[dict[str, Any]], int]:
    """Stream a request with the openai SDK; ``release`` is set at the first chunk carrying
    content or a tool call. The chunks, and how many had come before the release."""
    chunks: list[dict[str, Any]] = []
    before = 0
    for chunk in proxy.openai.chat.completions.create(model="auto", stream=True, **kwargs):
        chunks.append(data := chunk.to_dict())
        delta = data["choices"][0]["delta"] if data["choices"] else {}
        if not release.is_set() and (delta.get("content") or delta.get("tool_calls")):
            release.set()  # the cloud's stream is held: this came before the rest was sent
            before = len(chunks)
    return chunks, before


def test_past_the_budget_the_cloud_stream_goes_out_live_tool_call_deltas_included(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    release = threading.Event()
    local.enqueue(Reply(GOOD_DRAFT, delay=SLOW))
    # role, the call's head (its name), one argument piece; then held until released
    cloud.enqueue(replace(call_reply(PARIS), hold=release, hold_after=3))
    spec_log = tmp_path / "spec.jsonl"
    with make_proxy(
        speculative_decoding=BUDGET,
        models={"local": PATIENT},
        logging={"spec_log_file": str(spec_log)},
    ) as proxy:
        chunks, before = stream_until_released(
            proxy, release, messages=WEATHER_ASK, tools=[WEATHER_TOOL]
        )
        wait_for(lambda: local.in_flight == 0)  # the draft was stopped, not left running
        stats = proxy.stats()

    assert 0 < before < len(chunks)  # more than one write: the rest came after the release
    assert chunks[before - 1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == (
        "get_weather"
    )
    _, calls, finish, final = collect_calls(chunks)
    assert [(c["name"], c["arguments"]) for c in calls] == [(PARIS["name"], PARIS["arguments"])]
    assert finish == "tool_calls"
    assert final["model_used"] == "cerebras"
    assert spec(final)["reasons"] == ["hedged", "first_token_budget"]
    assert spec(final)["spilled_over"] is True
    assert chat_bodies(cloud)[0]["stream"] is True  # the hedge is the cloud's stream
    assert stats["requests"]["by_outcome"] == {"spilled_over": 1}
    assert stats["routing_events"] == {"hedged": 1, "first_token_budget": 1}
    # a draft with tools comes whole: how far it got is unknown, so it has no log line
    assert not spec_log.exists() or spec_log.read_text() == ""


def test_a_draft_the_budget_stops_is_still_counted_and_logged(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    """The local model's work is counted though its answer went unused: the tokens it had
    streamed when the budget ran out (a second is ample for three tokens on loopback).
    The draft so far has its spec-log line, cut at a budget and never judged."""
    held = threading.Event()
    local.enqueue(Reply(GOOD_DRAFT, hold=held, hold_after=4))  # role + 3 tokens, then held
    cloud.enqueue(Reply(CLOUD_OTHER))
    budget = {**BUDGET, "stream_first_token_s": 1.0, "early_abort": True}
    spec_log = tmp_path / "spec.jsonl"
    with make_proxy(speculative_decoding=budget, logging={"spec_log_file": str(spec_log)}) as proxy:
        chunks = list(proxy.openai.chat.completions.create(model="auto", stream=True, messages=ASK))
        held.set()
        stats = proxy.stats()
    assert chunks[-1].to_dict()["model_used"] == "cerebras"
    assert chat_bodies(local)[0]["stream"] is True  # streamed, so it could be counted so far
    assert stats["tokens"]["local"] == 3
    [line] = [json.loads(line) for line in spec_log.read_text().splitlines()]
    assert (line["draft"]["n"], len(line["draft"]["tokens"])) == (3, 3)
    assert line["draft"]["stop_reason"] == "n_max"  # seed 000's: a budget stopped it
    assert line["reasons"] == ["hedged", "first_token_budget"]
    assert (line["outcome"], line["verify"], line["agreement"]) == ("spilled_over", None, None)
    assert (line["decision"], line["timing"]["t_draft_us"]) == (None, None)  # never judged
    assert spec(chunks[-1].to_dict())["draft_tokens"] == 3  # the client is told as much
    assert line["features"] is not None  # calibrate can count it among the drafts sent on


def test_a_stopped_draft_whose_cloud_stream_breaks_keeps_its_reasons(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    """The relayed stream breaks after its first text has gone out (it is held until the
    client has it, then breaks): the request is an error, and its line and routing events
    still say the first-token budget sent it to the cloud."""
    held, release = threading.Event(), threading.Event()
    local.enqueue(Reply(GOOD_DRAFT, hold=held, hold_after=4), Reply(status=500))  # no continuation
    cloud.enqueue(Reply(CLOUD_OTHER, hold=release, hold_after=2, fail_after_chunks=2))
    budget = {**BUDGET, "stream_first_token_s": 1.0, "early_abort": True}
    spec_log = tmp_path / "spec.jsonl"
    with make_proxy(speculative_decoding=budget, logging={"spec_log_file": str(spec_log)}) as proxy:
        with pytest.raises(openai.APIError):
            stream_until_released(proxy, release, messages=ASK)
        held.set()
        stats = proxy.stats()
    [line] = [json.loads(line) for line in spec_log.read_text().splitlines()]
    assert (line["outcome"], line["reasons"]) == ("error", ["hedged", "first_token_budget"])
    assert stats["routing_events"] == {"hedged": 1, "first_token_budget": 1}


def test_a_doubted_draft_past_the_budget_gets_the_cloud_stream_live_then_compared(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    release = threading.Event()
    local.enqueue(Reply(HEDGED))  # doubted at once: uncertainty markers
    cloud.enqueue(Reply(CLOUD_OTHER, hold=release, hold_after=3))
    with make_proxy(speculative_decoding=BUDGET) as proxy:
        chunks, before = stream_until_released(proxy, release, messages=ASK)
    assert 0 < before < len(chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == CLOUD_OTHER
    final = chunks[-1] if chunks[-1]["choices"] else chunks[-2]
    report = spec(final)
    assert report["reasons"][-1] == "hedged" and report["spilled_over"] is True
    assert report["similarity"] is not None  # compared once it had all come
    assert final["model_used"] == "cerebras"


def test_a_draft_accepted_within_the_budget_is_served_and_the_cloud_stream_stopped(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    release = threading.Event()
    local.enqueue(Reply(GOOD_DRAFT, hold=release))  # drafted once the cloud has been asked
    cloud.enqueue(Reply(CLOUD_OTHER, delay=SLOW))
    priced = {**PATIENT, "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
    with make_proxy(speculative_decoding=AMPLE, models={"cerebras": priced}) as proxy:

        def go() -> None:
            wait_for(lambda: len(cloud.requests) == 1)
            release.set()

        threading.Thread(target=go, daemon=True).start()
        chunks = list(proxy.openai.chat.completions.create(model="auto", stream=True, messages=ASK))
        wait_for(lambda: cloud.in_flight == 0)  # hung up on
        stats = proxy.stats()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == GOOD_DRAFT
    final = chunks[-1].to_dict()
    assert final["model_used"] == "local" and spec(final)["accepted"] is True
    assert stats["requests"]["by_outcome"] == {"accepted_without_verification": 1}
    # the stopped stream is spend as far as it is known: at least the prompt
    assert stats["cost"]["spend_usd"]["by_purpose"]["hedge_cancelled"] > 0


def test_a_doubted_draft_is_merged_when_the_cloud_stream_ends_within_the_budget(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_SAME))
    with make_proxy(speculative_decoding=AMPLE) as proxy:
        chunks = [
            c.to_dict()
            for c in proxy.openai.chat.completions.create(model="auto", stream=True, messages=ASK)
        ]
        stats = proxy.stats()
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == HEDGED  # the draft agreed with the whole verified answer: served
    assert stats["requests"]["by_outcome"] == {"verified_draft_used": 1}


def trusting(tmp_path: Path, p_wrong_bias: float, **knobs: Any) -> dict[str, Any]:
    """A 0.5 s budget, trust under P(wrong) 0.5 to ``stream_trust_s`` 60, early abort
    checking every 3 tokens, and a scorer whose P(wrong) is sigmoid(``p_wrong_bias``)."""
    return {
        **BUDGET,
        "stream_first_token_s": 0.5,
        "stream_trust_score": 0.5,
        "stream_trust_s": 60,
        "early_abort": True,
        "abort_check_tokens": 3,
        "policy": "combined",
        "scorer_file": str(write_scorer(tmp_path, bias=p_wrong_bias)),
        **knobs,
    }


@pytest.mark.parametrize(
    ("p_wrong_bias", "check_tokens", "served_by"),
    [(-5.0, 3, "local"), (5.0, 3, "cerebras"), (-5.0, 4, "cerebras")],
    ids=["trusted", "doubted", "too-few-tokens"],
)
def test_a_draft_the_scorer_trusts_at_the_budget_may_go_on(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    tmp_path: Path,
    p_wrong_bias: float,
    check_tokens: int,
    served_by: str,
) -> None:
    """The draft streams three tokens, then is held until the cloud's stream has ended;
    that stream starts a second after it was opened, past the 0.5 s budget, so the draft
    ends past the budget: served only because the scorer trusted it then (P(wrong) 0.007,
    under ``stream_trust_score``); a doubted one (0.993), or one with fewer tokens than
    ``abort_check_tokens`` to be judged by, is stopped for the cloud's (and let go only
    once the client has the cloud's text: a draft let go as the cloud's stream ends could
    otherwise end before the proxy had read that stream's first chunk)."""
    release, relayed = threading.Event(), threading.Event()
    local.enqueue(Reply(GOOD_DRAFT, hold=release, hold_after=4))  # role + 3 tokens, held
    cloud.enqueue(Reply(CLOUD_OTHER, delay=1.0))
    budget = trusting(tmp_path, p_wrong_bias, abort_check_tokens=check_tokens)

    def release_when_the_cloud_is_done() -> None:
        trusted = served_by == "local"  # the proxy waits for this draft: nothing is relayed
        wait_for(lambda: cloud.done_with(1) and (trusted or relayed.is_set()), timeout=20)
        release.set()

    spec_log = tmp_path / "spec.jsonl"
    with make_proxy(
        speculative_decoding=budget,
        models={"local": PATIENT},
        logging={"spec_log_file": str(spec_log)},
    ) as proxy:
        threading.Thread(target=release_when_the_cloud_is_done, daemon=True).start()
        chunks = []
        for chunk in proxy.openai.chat.completions.create(model="auto", stream=True, messages=ASK):
            chunks.append(chunk.to_dict())
            if chunk.choices and chunk.choices[0].delta.content:
                relayed.set()
        events = proxy.stats()["routing_events"]
    [logged] = [json.loads(line) for line in spec_log.read_text().splitlines()]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == (GOOD_DRAFT if served_by == "local" else CLOUD_OTHER)
    assert chunks[-1]["model_used"] == served_by
    assert ("first_token_trusted" in events) == (served_by == "local")
    # the trust is logged, so that its threshold can be re-tuned from the logs; a draft
    # stopped at the budget has its line too
    assert logged["trusted"] is (served_by == "local")
    assert ("first_token_budget" in logged["reasons"]) is (served_by != "local")


def test_a_trusted_draft_still_running_at_stream_trust_s_is_stopped_for_the_cloud(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    """The draft never comes (held past the client's timeout): only ``stream_trust_s``
    ends the wait, and the cloud's stream is served."""
    held = threading.Event()
    local.enqueue(Reply(GOOD_DRAFT, hold=held, hold_after=4))
    cloud.enqueue(Reply(CLOUD_OTHER))
    budget = trusting(tmp_path, -5.0, stream_trust_s=1.0)
    with make_proxy(speculative_decoding=budget, models={"local": PATIENT}) as proxy:
        chunks = [
            c.to_dict()
            for c in proxy.openai.chat.completions.create(model="auto", stream=True, messages=ASK)
        ]
        wait_for(lambda: local.in_flight == 0)  # the draft was stopped, not left running
        events = proxy.stats()["routing_events"]
    held.set()
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == CLOUD_OTHER
    assert chunks[-1]["model_used"] == "cerebras"
    assert events["first_token_trusted"] == 1


def test_with_hedge_off_the_cloud_stream_opens_at_the_deadline(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(GOOD_DRAFT, delay=SLOW))
    cloud.enqueue(Reply(CLOUD_OTHER))
    budget = {"hedge": "off", "stream_first_token_s": 0.05}
    with make_proxy(speculative_decoding=budget, models={"local": PATIENT}) as proxy:
        chunks = [
            c.to_dict()
            for c in proxy.openai.chat.completions.create(model="auto", stream=True, messages=ASK)
        ]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == CLOUD_OTHER
    assert [b["stream"] for b in chat_bodies(cloud)] == [True]


def test_the_budget_leaves_requests_that_are_not_streamed_alone(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(GOOD_DRAFT, delay=0.3))  # past the budget: it would spill if streamed
    budget = {"hedge": "off", "stream_first_token_s": 0.05}
    with make_proxy(speculative_decoding=budget) as proxy:
        answer = proxy.openai.chat.completions.create(model="auto", messages=ASK)
    assert answer.choices[0].message.content == GOOD_DRAFT
    assert answer.to_dict()["model_used"] == "local"
    assert chat_bodies(cloud) == []


def histogram(proxy: Proxy, name: str) -> tuple[float, float]:
    """A histogram's (count, sum) from ``/metrics``."""
    text = proxy.http.get("/metrics").text
    [family] = [f for f in text_string_to_metric_families(text) if f.name == name]
    values = {s.name: s.value for s in family.samples}
    return values[f"{name}_count"], values[f"{name}_sum"]


def test_a_streams_time_to_first_token_is_taken_as_its_first_text_goes_out(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    """The cloud's live stream is held after its first text until the client has seen it
    and made a round trip to /stats, so the stream's end comes at least that round trip
    after its first text. A replayed draft's first text is its one write; a request that
    is not streamed has none."""
    release = threading.Event()
    local.enqueue(Reply(GOOD_DRAFT, delay=SLOW))
    cloud.enqueue(Reply(CLOUD_OTHER, hold=release, hold_after=2))  # role + one token, held
    with make_proxy(speculative_decoding=BUDGET, models={"local": PATIENT}) as proxy:
        held_for = None
        for chunk in proxy.openai.chat.completions.create(model="auto", stream=True, messages=ASK):
            if held_for is None and chunk.choices and chunk.choices[0].delta.content:
                seen = time.perf_counter()
                proxy.stats()  # a round trip while the rest is held
                held_for = time.perf_counter() - seen
                release.set()
        first = histogram(proxy, FIRST_TOKEN)
        total = histogram(proxy, "specproxy_request_latency_seconds")
        wait_for(lambda: local.in_flight == 0)

        local.enqueue(Reply(GOOD_DRAFT))  # served whole, streamed and not
        local.enqueue(Reply(GOOD_DRAFT))
        cloud.enqueue(Reply(CLOUD_OTHER, delay=SLOW))
        proxy.openai.chat.completions.create(model="auto", messages=ASK)
        list(proxy.openai.chat.completions.create(model="auto", stream=True, messages=ASK))
        local.enqueue(Reply(GOOD_DRAFT))  # relayed as llama-server's chunks come, unread
        local_only = {"X-Routing-Strategy": "local_only"}
        stream = proxy.openai.chat.completions.create(
            model="auto", stream=True, messages=ASK, extra_headers=local_only
        )
        list(stream)
        count, _ = histogram(proxy, FIRST_TOKEN)
        latency = proxy.stats()["latency_ms"]
    assert held_for is not None and first[0] == total[0] == 1
    assert first[1] > 0 and total[1] - first[1] >= held_for  # taken as the text went out
    assert count == 3 and latency["first_token"]["n"] == 3 and latency["total"]["n"] == 4
