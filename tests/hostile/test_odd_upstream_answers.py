"""D1: a well-formed upstream answer with odd fields is that upstream's failure, never a 500.

Each case is sent for real by a stand-in on loopback. The cloud's odd answer to a
verification degrades to the draft; the local model's odd answer goes to the cloud;
logprob values outside their domain are read or skipped, never raised on.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import GOOD_DRAFT, HEDGED, spec
from tests.support.proxy import MakeProxy, Proxy

ASK = [{"role": "user", "content": "Say hello"}]


def completion(choice: Any, **extra: Any) -> bytes:
    """A chat completion body around one (possibly odd) choice."""
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    return orjson.dumps(body | extra)


def choice(content: Any = "Hello there.", **extra: Any) -> dict[str, Any]:
    return {"index": 0, "message": {"role": "assistant", "content": content}, **extra}


ODD_CLOUD_ANSWERS = {
    "message null": completion({"index": 0, "message": None, "finish_reason": "stop"}),
    "content not text": completion(choice(42, finish_reason="stop")),
    "choice not an object": completion("nope"),
    "usage not a count": completion(
        choice(finish_reason="stop"), usage={"completion_tokens": "abc"}
    ),
    "logprobs not an object": completion(choice(finish_reason="stop", logprobs="x")),
    "finish_reason not text": completion(choice(finish_reason=7)),
}


@pytest.mark.parametrize("body", ODD_CLOUD_ANSWERS.values(), ids=ODD_CLOUD_ANSWERS.keys())
def test_an_odd_verification_answer_degrades_to_the_draft(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, body: bytes
) -> None:
    local.enqueue(Reply(HEDGED))  # doubted: it is verified
    cloud.enqueue(Reply(raw_body=body))
    answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == HEDGED
    assert spec(answer.json())["reasons"][-1] == "verifier_failed"
    assert proxy.stats()["upstream_errors"] == {"cerebras:protocol": 1}


@pytest.mark.parametrize("body", ODD_CLOUD_ANSWERS.values(), ids=ODD_CLOUD_ANSWERS.keys())
def test_an_odd_answer_in_direct_mode_is_a_502_naming_the_upstream(
    make_proxy: MakeProxy, cloud: FakeCerebras, body: bytes
) -> None:
    cloud.enqueue(Reply(raw_body=body))
    with make_proxy(routing={"strategy": "cerebras_only"}) as proxy:
        answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
        stats = proxy.stats()
    assert answer.status_code == 502
    assert answer.json()["error"]["message"].startswith("cerebras: ")
    assert stats["upstream_errors"] == {"cerebras:protocol": 1}


def entry(**fields: Any) -> dict[str, Any]:
    return {"token": "Hi", "bytes": [72, 105], **fields}


ODD_LOGPROBS = {
    "logprob missing": [entry()],
    "logprob null": [entry(logprob=None)],
    "logprob text": [entry(logprob="-0.1")],
    "logprob huge": [entry(logprob=800.0)],  # math.exp would overflow
    "top logprob text": [entry(logprob=-0.1, top_logprobs=[{"token": "Hi", "logprob": "x"}])],
    "post_sampling_probs shape": [entry(prob=0.9, top_probs=[{"token": "Hi", "prob": 0.9}])],
}


@pytest.mark.parametrize("entries", ODD_LOGPROBS.values(), ids=ODD_LOGPROBS.keys())
def test_odd_draft_logprobs_are_read_or_skipped_never_raised_on(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, entries: list[Any]
) -> None:
    draft = choice(GOOD_DRAFT, finish_reason="stop", logprobs={"content": entries})
    local.enqueue(Reply(raw_body=completion(draft)))
    answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
    assert answer.status_code == 200, answer.text
    assert proxy.stats()["upstream_errors"] == {}


def test_a_draft_whose_choice_is_not_an_object_goes_to_the_cloud(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(raw_body=completion("nope")))
    cloud.enqueue(Reply("Hello from the cloud."))
    answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
    assert answer.status_code == 200
    assert answer.json()["model_used"] == "cerebras"
    assert spec(answer.json())["reasons"] == ["local_unavailable"]
    assert proxy.stats()["upstream_errors"] == {"local:protocol": 1}
