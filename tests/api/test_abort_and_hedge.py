"""Early abort and hedging through the running proxy, against the stand-in upstreams.

Early abort streams the draft and stops it at the first token under the floor; hedging
starts the cloud call alongside the draft. Races are never left to chance: the loser is
hopelessly slow (tens of seconds), the client gives up long before that, and the
upstream timeouts are raised above it, so only a cancelled loser lets a test pass fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import ConfigError
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply, tokenize
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT, HEDGED, collect, spec
from tests.support.proxy import MakeProxy, Proxy, chat_bodies, dead_url, wait_for
from tests.support.scorers import write_scorer

ASK = [{"role": "user", "content": "Explain tides"}]
ABORTED = "The tides rise and fall each day."  # 8 tokens
ABORT_PROBS = [0.9, 0.9, 0.001, 0.9, 0.9, 0.9, 0.9, 0.9]  # the 3rd is under the floor
CONTINUED = "The tides rise and fall twice each day, pulled by the moon and the sun."
EARLY_ABORT = {"early_abort": True, "abort_min_token_prob": 0.01}
SLOW = 30.0  # seconds: a loser this slow never wins a race within CLIENT_TIMEOUT
CLIENT_TIMEOUT = 10.0
PATIENT = {"timeout": {"first_byte": 60, "read": 60, "total": 60}}  # outlasts SLOW


def post(proxy: Proxy, body: dict[str, Any]) -> httpx.Response:
    """A chat request through the proxy that must end well within ``CLIENT_TIMEOUT``."""
    response = proxy.http.post("/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT)
    response.raise_for_status()
    return response


def ask(proxy: Proxy, stream: bool) -> tuple[str, dict[str, Any]]:
    """ASK streamed or not: the answer's text and its final body (or finishing chunk)."""
    if stream:
        return stream_post(proxy, {"messages": ASK})
    final = post(proxy, {"messages": ASK}).json()
    return final["choices"][0]["message"]["content"], final


def stream_post(proxy: Proxy, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A streamed chat request: the text and the chunk carrying finish_reason."""
    with proxy.http.stream(
        "POST", "/v1/chat/completions", json={**body, "stream": True}, timeout=CLIENT_TIMEOUT
    ) as response:
        response.raise_for_status()
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return collect(json.loads(line.removeprefix("data: ")) for line in lines[:-1])


def spec_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- early abort ---------------------------------------------------------------


def test_early_abort_spills_to_the_cloud_at_the_first_doubtful_token(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    log_path = tmp_path / "spec.jsonl"
    local.enqueue(Reply(ABORTED, token_probs=ABORT_PROBS))
    cloud.enqueue(Reply(CLOUD_OTHER))
    with make_proxy(
        speculative_decoding=EARLY_ABORT, logging={"spec_log_file": str(log_path)}
    ) as proxy:
        response = post(proxy, {"messages": ASK})
        stats = proxy.stats()
    body = response.json()
    report = spec(body)

    assert body["choices"][0]["message"]["content"] == CLOUD_OTHER
    assert body["model_used"] == "cerebras"
    assert report["reasons"][0] == "early_abort" and report["spilled_over"] is True
    assert report["draft_tokens"] == 3  # up to and including the doubtful token
    assert response.headers["X-Draft-Tokens"] == "3"
    assert response.headers["X-Spilled-Over"] == "true"
    (draft,) = chat_bodies(local)
    assert draft["stream"] is True and draft["logprobs"] is True and draft["top_logprobs"] >= 1
    assert len(chat_bodies(cloud)) == 1 and chat_bodies(cloud)[0]["messages"] == ASK
    assert stats["requests"]["by_outcome"] == {"spilled_over": 1}
    assert stats["routing_events"] == {"early_abort": 1}

    (entry,) = spec_log(log_path)
    assert entry["draft"]["stop_reason"] == "p_min"
    assert entry["decision"] == "verify" and entry["reasons"][0] == "early_abort"
    assert len(entry["draft"]["tokens"]) == 3
    assert entry["draft"]["tokens"][-1]["p"] == pytest.approx(0.001)


def test_early_abort_closes_the_draft_stream(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    """Stopping means hanging up: a draft that would stream for 30 s more ends at once."""
    text = " ".join(["word"] * 30)
    local.enqueue(Reply(text, token_probs=[0.001] + [0.9] * 29, chunk_delay=1.0))
    cloud.enqueue(Reply(CLOUD_OTHER))
    with make_proxy(speculative_decoding=EARLY_ABORT, models={"local": PATIENT}) as proxy:
        body = post(proxy, {"messages": ASK}).json()
        wait_for(lambda: local.in_flight == 0)  # llama-server saw the disconnect
    assert body["choices"][0]["message"]["content"] == CLOUD_OTHER
    assert spec(body)["draft_tokens"] == 1


def test_early_abort_streaming_client_gets_the_cloud_answer_live(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(ABORTED, token_probs=ABORT_PROBS))
    cloud.enqueue(Reply(CLOUD_OTHER))
    with make_proxy(speculative_decoding=EARLY_ABORT) as proxy:
        text, final = stream_post(proxy, {"messages": ASK})
    assert text == CLOUD_OTHER
    assert final["model_used"] == "cerebras"
    assert spec(final)["reasons"][0] == "early_abort" and spec(final)["draft_tokens"] == 3


@pytest.mark.parametrize("early_abort", [False, True])
def test_confident_draft_is_unaffected_by_early_abort(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, early_abort: bool
) -> None:
    """Every token above the floor: the same answer and decision as without early abort."""
    config = {**EARLY_ABORT, "early_abort": early_abort}
    local.default = Reply(GOOD_DRAFT)
    with make_proxy(speculative_decoding=config) as proxy:
        body = post(proxy, {"messages": ASK}).json()
        text, final = stream_post(proxy, {"messages": ASK})

    assert body["choices"][0]["message"]["content"] == GOOD_DRAFT
    assert body["model_used"] == "local"
    assert spec(body) == {
        "draft_tokens": len(tokenize(GOOD_DRAFT)) + 1,  # llama-server counts its end token
        "verified_tokens": 0,
        "accepted": True,
        "spilled_over": False,
        "similarity": None,
        "agreement": None,
        "reasons": ["passed_checks"],
        "degraded": False,
        "lane": "uncertain",  # no gate (learning off): today's flow
    }
    assert body["choices"][0]["logprobs"] is None
    assert body["choices"][0]["finish_reason"] == "stop"
    assert text == GOOD_DRAFT and spec(final) == spec(body)
    assert cloud.requests == []
    drafts = chat_bodies(local)
    assert len(drafts) == 2 and all(d.get("stream", False) is early_abort for d in drafts)


def test_without_a_cloud_key_the_draft_is_never_aborted(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    """Stopping a draft only helps when the cloud can take over: with no key it runs whole."""
    local.enqueue(Reply(ABORTED, token_probs=ABORT_PROBS))
    with make_proxy(env={}, speculative_decoding=EARLY_ABORT) as proxy:
        final = post(proxy, {"messages": ASK}).json()
    assert final["choices"][0]["message"]["content"] == ABORTED
    report = spec(final)
    assert report["degraded"] is True and "early_abort" not in report["reasons"]
    (draft,) = chat_bodies(local)
    assert draft.get("stream", False) is False
    assert chat_bodies(cloud) == []


@pytest.mark.parametrize("stream", [False, True])
def test_aborted_draft_continues_locally_when_the_cloud_fails(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, stream: bool
) -> None:
    """The partial draft is never the answer: the local model answers the whole request."""
    local.enqueue(Reply(ABORTED, token_probs=ABORT_PROBS), Reply(CONTINUED))
    cloud.enqueue(Reply(status=500))
    with make_proxy(speculative_decoding=EARLY_ABORT) as proxy:
        text, final = ask(proxy, stream)
        stats = proxy.stats()

    assert text == CONTINUED
    assert final["model_used"] == "local"
    report = spec(final)
    assert report["degraded"] is True and report["spilled_over"] is False
    assert report["reasons"] == ["early_abort", "verifier_failed", "local_continuation"]
    draft, continuation = chat_bodies(local)
    assert draft["stream"] is True and draft["logprobs"] is True
    assert "logprobs" not in continuation and continuation.get("stream", False) is stream
    assert len(chat_bodies(cloud)) == 1
    assert stats["requests"]["by_outcome"] == {"degraded": 1}


@pytest.mark.parametrize("stream", [False, True])
def test_an_aborted_draft_served_as_the_last_resort_finishes_as_length(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, stream: bool
) -> None:
    """The cloud and the local continuation both fail: the partial draft is all there is,
    served degraded, with an OpenAI finish_reason (never the proxy's own ``p_min``)."""
    local.enqueue(Reply(ABORTED, token_probs=ABORT_PROBS), Reply(status=500))
    cloud.enqueue(Reply(status=500))
    with make_proxy(speculative_decoding=EARLY_ABORT) as proxy:
        text, final = ask(proxy, stream)
    assert spec(final)["degraded"] is True and final["model_used"] == "local"
    assert text and ABORTED.startswith(text)
    assert final["choices"][0]["finish_reason"] == "length"


# -- hedging -------------------------------------------------------------------


def test_hedge_cloud_first_cancels_the_draft(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(GOOD_DRAFT, delay=SLOW))
    cloud.enqueue(Reply(CLOUD_OTHER))
    with make_proxy(speculative_decoding={"hedge": "always"}, models={"local": PATIENT}) as proxy:
        response = post(proxy, {"messages": ASK})
        wait_for(lambda: local.in_flight == 0)  # the draft request was dropped
        stats = proxy.stats()
        metrics = proxy.http.get("/metrics").text
    body = response.json()

    assert body["choices"][0]["message"]["content"] == CLOUD_OTHER
    assert body["model_used"] == "cerebras"
    report = spec(body)
    assert report["reasons"] == ["hedged", "cloud_first"]
    assert report["spilled_over"] is True and report["accepted"] is False
    assert report["draft_tokens"] == 0
    assert response.headers["X-Model-Used"] == "cerebras"
    assert len(chat_bodies(cloud)) == 1 and len(chat_bodies(local)) == 1
    assert stats["requests"]["by_outcome"] == {"spilled_over": 1}
    assert stats["routing_events"] == {"hedged": 1, "cloud_first": 1}
    assert 'specproxy_routing_events_total{event="cloud_first"} 1.0' in metrics


def test_hedge_cloud_first_streaming_client(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(GOOD_DRAFT, delay=SLOW))
    cloud.enqueue(Reply(CLOUD_OTHER))
    with make_proxy(speculative_decoding={"hedge": "always"}, models={"local": PATIENT}) as proxy:
        text, final = stream_post(proxy, {"messages": ASK})
    assert text == CLOUD_OTHER
    assert spec(final)["reasons"] == ["hedged", "cloud_first"]
    assert chat_bodies(cloud)[0].get("stream", False) is False  # the hedge is not streamed


def test_hedge_accepted_draft_cancels_the_cloud_call(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    # The draft takes a moment, so the hedged request surely reaches the cloud before it
    # is cancelled; the cloud would then take 30 s more.
    local.enqueue(Reply(GOOD_DRAFT, delay=0.5))
    cloud.enqueue(Reply(CLOUD_OTHER, delay=SLOW))
    priced = {**PATIENT, "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
    with make_proxy(speculative_decoding={"hedge": "always"}, models={"cerebras": priced}) as proxy:
        response = post(proxy, {"messages": ASK})
        wait_for(lambda: cloud.done_with(1))  # hung up on
        stats = proxy.stats()
    body = response.json()
    # The stopped call is spend as far as it is known: the prompt (the local count), no answer.
    prompt = body["usage"]["prompt_tokens"]
    assert stats["cost"]["spend_usd"]["by_purpose"] == {
        "draft": 0.0,
        "hedge_cancelled": pytest.approx(prompt * 1.0 / 1e6),
    }

    assert body["choices"][0]["message"]["content"] == GOOD_DRAFT
    assert body["model_used"] == "local"
    assert spec(body)["reasons"] == ["passed_checks"] and spec(body)["accepted"] is True
    assert response.headers["X-Spilled-Over"] == "false"
    assert stats["requests"]["by_outcome"] == {"accepted_without_verification": 1}


@pytest.mark.parametrize("stream", [False, True])
def test_hedge_is_the_verification_when_the_draft_spills(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, stream: bool
) -> None:
    """The draft comes first (the cloud is held back a while) and doubts: no second call."""
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_OTHER, delay=1.5))
    with make_proxy(speculative_decoding={"hedge": "always"}) as proxy:
        text, final = ask(proxy, stream)
        stats = proxy.stats()

    assert text == CLOUD_OTHER
    assert final["model_used"] == "cerebras"
    report = spec(final)
    assert report["reasons"][0] == "uncertainty_marker"  # the draft was judged: it came first
    assert "hedged" in report["reasons"] and "cloud_first" not in report["reasons"]
    assert report["draft_tokens"] == len(tokenize(HEDGED)) + 1
    assert report["spilled_over"] is True and report["similarity"] is not None
    assert len(chat_bodies(cloud)) == 1  # the hedge was reused, not repeated
    assert chat_bodies(cloud)[0].get("stream", False) is False
    assert stats["requests"]["by_outcome"] == {"spilled_over": 1}
    assert set(stats["cost"]["spend_usd"]["by_purpose"]) == {"draft", "hedge"}


def test_hedge_verification_that_agrees_serves_the_draft(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(HEDGED.replace(".", "!"), delay=1.5))
    with make_proxy(speculative_decoding={"hedge": "always"}) as proxy:
        body = post(proxy, {"messages": ASK}).json()
    assert body["choices"][0]["message"]["content"] == HEDGED
    assert body["model_used"] == "local"
    assert "hedged" in spec(body)["reasons"] and spec(body)["spilled_over"] is False
    assert len(chat_bodies(cloud)) == 1


@pytest.mark.parametrize("local_fault", ["dead", "500"])
def test_hedge_serves_the_cloud_when_local_is_down(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, local_fault: str
) -> None:
    local.default = Reply(status=500)
    cloud.enqueue(Reply(CLOUD_OTHER, delay=0.5))  # so the local failure is known first
    local_url = dead_url() if local_fault == "dead" else None
    with make_proxy(local_url=local_url, speculative_decoding={"hedge": "always"}) as proxy:
        body = post(proxy, {"messages": ASK}).json()
        stats = proxy.stats()

    assert body["choices"][0]["message"]["content"] == CLOUD_OTHER
    assert body["model_used"] == "cerebras"
    assert spec(body)["reasons"] == ["local_unavailable", "hedged"]
    assert spec(body)["spilled_over"] is True
    assert len(chat_bodies(cloud)) == 1
    assert stats["requests"]["total"] == 1
    assert stats["requests"]["by_outcome"] == {"local_down_cloud_used": 1}


def test_hedge_and_early_abort_together(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    """An aborted draft spills, and the hedge already running is its verification."""
    local.enqueue(Reply(ABORTED, token_probs=ABORT_PROBS))
    cloud.enqueue(Reply(CLOUD_OTHER, delay=1.5))
    with make_proxy(speculative_decoding={**EARLY_ABORT, "hedge": "always"}) as proxy:
        body = post(proxy, {"messages": ASK}).json()
    assert body["choices"][0]["message"]["content"] == CLOUD_OTHER
    assert spec(body)["reasons"][:2] == ["early_abort", "hedged"]
    assert spec(body)["draft_tokens"] == 3
    assert len(chat_bodies(cloud)) == 1


# -- hedge: auto ---------------------------------------------------------------


def test_hedge_auto_follows_the_scorers_spill_prior(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    config = {"hedge": "auto", "policy": "combined", "scorer_file": str(write_scorer(tmp_path))}
    math_ask = [{"role": "user", "content": "What is 12 + 7?"}]
    prose_ask = [{"role": "user", "content": "Tell me a story about a cat"}]
    # Math is hedged: the cloud answers while the (hopelessly slow) draft is still pending.
    local.enqueue(Reply(GOOD_DRAFT, delay=SLOW), Reply(GOOD_DRAFT))
    cloud.enqueue(Reply("19"), Reply(CLOUD_OTHER))
    with make_proxy(speculative_decoding=config, models={"local": PATIENT}) as proxy:
        math_answer = post(proxy, {"messages": math_ask}).json()
        assert len(chat_bodies(cloud)) == 1
        prose_answer = post(proxy, {"messages": prose_ask}).json()

    assert math_answer["choices"][0]["message"]["content"] == "19"
    assert spec(math_answer)["reasons"] == ["hedged", "cloud_first"]
    # Prose is not hedged: the draft is judged (and spills) before the cloud is called.
    assert prose_answer["choices"][0]["message"]["content"] == CLOUD_OTHER
    assert "hedged" not in spec(prose_answer)["reasons"]
    assert spec(prose_answer)["draft_tokens"] == len(tokenize(GOOD_DRAFT)) + 1
    assert len(chat_bodies(cloud)) == 2


def test_hedge_auto_without_a_scorer_is_a_config_error(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    with (
        pytest.raises(ConfigError, match="hedge: auto"),
        make_proxy(speculative_decoding={"hedge": "auto"}),
    ):
        pass


def test_a_hedge_that_failed_first_leaves_verification_to_a_fresh_call(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    """The hedge fails while the draft runs; the doubtful draft is verified as without one."""
    local.enqueue(Reply(HEDGED, delay=0.5))  # the hedge's 500 is back well before this
    cloud.enqueue(Reply(status=500), Reply(CLOUD_OTHER))
    with make_proxy(speculative_decoding={"hedge": "always"}) as proxy:
        final = post(proxy, {"messages": ASK}).json()
        stats = proxy.stats()
    assert final["choices"][0]["message"]["content"] == CLOUD_OTHER
    report = spec(final)
    assert report["spilled_over"] is True and "hedged" not in report["reasons"]
    assert len(chat_bodies(cloud)) == 2  # the failed hedge, then the verification
    assert stats["requests"]["by_outcome"] == {"spilled_over": 1}


def test_with_the_circuit_open_the_draft_is_never_aborted(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    """An open circuit means no cloud to go to: a stopped draft would be generated twice."""
    breaker = {"cerebras": {"circuit_breaker": {"failures": 1, "cooldown_s": 600}}}
    local.enqueue(Reply(HEDGED), Reply(ABORTED, token_probs=ABORT_PROBS))
    cloud.enqueue(Reply(status=500))
    with make_proxy(
        models=breaker, speculative_decoding={**EARLY_ABORT, "policy": "seed"}
    ) as proxy:
        # a first doubtful draft's verification fails and opens the circuit
        opened = post(proxy, {"messages": ASK}).json()
        final = post(proxy, {"messages": ASK}).json()
    assert spec(opened)["degraded"] is True
    assert final["choices"][0]["message"]["content"] == ABORTED  # whole, not continued
    assert "early_abort" not in spec(final)["reasons"]
    # and no verification is asked of an open circuit: served degraded, no call made
    assert spec(final)["reasons"][-1] == "verifier_unavailable" and spec(final)["degraded"]
    assert len(chat_bodies(cloud)) == 1
    second = chat_bodies(local)[-1]
    assert second.get("stream", False) is False


def test_a_cold_learner_lets_the_draft_run_whole_so_it_becomes_a_label(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    # the same doubtful token that stops a draft above; while the learner has fewer than
    # min_labels labels, the draft runs whole and its verification (or audit) is a label
    local.enqueue(Reply(ABORTED, token_probs=ABORT_PROBS))
    cloud.enqueue(Reply(ABORTED))
    # (the draft first, as when no slot is free to finish it beside the cloud's answer)
    learning = {
        "enabled": True,
        "state_dir": str(tmp_path / "state"),
        "cold_audit_rate": 1.0,
        "cloud_until_held": False,
    }
    with make_proxy(
        speculative_decoding={**EARLY_ABORT, "policy": "combined", "agreement": "facts"},
        learning=learning,
    ) as proxy:
        body = post(proxy, {"messages": ASK}).json()
        wait_for(lambda: proxy.stats()["learning"]["labels"]["total"] == 1)
        status = proxy.stats()["learning"]
    report = spec(body)
    assert "early_abort" not in report["reasons"]
    assert report["draft_tokens"] > 3  # past the doubtful 3rd token, to the end
    assert status["cold"] is True
    assert status["labels"]["total"] == status["labels"]["agreed"] == 1
