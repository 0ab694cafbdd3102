"""D6: a non-streaming upstream answer over ``max_response_bytes`` is that upstream's
failure (not read into memory): 502 naming it in direct mode, the fallback when speculating."""

from __future__ import annotations

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import HEDGED, spec
from tests.support.proxy import MakeProxy

ASK = [{"role": "user", "content": "Say hello"}]
HUGE = b'{"choices": [{"message": {"content": "' + b"x" * 200_000 + b'"}}]}'


def test_a_huge_answer_in_direct_mode_is_a_502_naming_the_upstream(
    make_proxy: MakeProxy, cloud: FakeCerebras
) -> None:
    cloud.enqueue(Reply(raw_body=HUGE))
    with make_proxy(
        routing={"strategy": "cerebras_only"},
        models={"cerebras": {"max_response_bytes": 65536}},
    ) as proxy:
        answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
        stats = proxy.stats()
    assert answer.status_code == 502
    assert answer.json()["error"]["message"] == "cerebras: answer over 65536 bytes"
    assert stats["upstream_errors"] == {"cerebras:protocol": 1}


def test_a_huge_verification_answer_degrades_to_the_draft(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED))
    cloud.enqueue(Reply(raw_body=HUGE))
    with make_proxy(models={"cerebras": {"max_response_bytes": 65536}}) as proxy:
        answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == HEDGED
    assert spec(answer.json())["reasons"][-1] == "verifier_failed"
