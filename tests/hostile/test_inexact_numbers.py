"""D29: a number the proxy cannot hold exactly in an upstream's answer (past a double, an
integer past 64 bits) is that upstream's failure on every path.

Before, the pass-through path sent such an answer on as its bytes while the speculative
path refused ``1e400`` (orjson) and rounded a 30-digit integer to a float: the same answer
was served whole, refused, or changed, by path. Each case is sent for real by a stand-in.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.upstreams.numbers import inexact_number
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import GOOD_DRAFT, HEDGED, spec
from tests.support.proxy import MakeProxy, Proxy

ASK = [{"role": "user", "content": "Say hello"}]
INEXACT = {"past a double": "1e400", "negative past a double": "-1E+400", "30 digits": "1" * 30}


def answer(created: str, content: str = "Hello there.") -> bytes:
    """A chat completion whose ``created`` (a member the proxy does not read) is ``created``."""
    message = {"role": "assistant", "content": content}
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": "CREATED",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    return orjson.dumps(body).replace(b'"CREATED"', created.encode())


@pytest.mark.parametrize("number", INEXACT.values(), ids=INEXACT.keys())
@pytest.mark.parametrize("strategy", ["cerebras_only", "local_only"])
def test_passed_on_it_is_a_502_naming_the_upstream(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, strategy: str, number: str
) -> None:
    upstream = cloud if strategy == "cerebras_only" else local
    upstream.enqueue(Reply(raw_body=answer(number)))
    with make_proxy(routing={"strategy": strategy}) as proxy:
        refused = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
        stats = proxy.stats()
    assert refused.status_code == 502
    name = "cerebras" if strategy == "cerebras_only" else "local"
    assert refused.json()["error"]["message"].startswith(f"{name}: answered with a")
    assert stats["upstream_errors"] == {f"{name}:protocol": 1}


@pytest.mark.parametrize("number", INEXACT.values(), ids=INEXACT.keys())
def test_as_a_verification_it_degrades_to_the_draft(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, number: str
) -> None:
    local.enqueue(Reply(HEDGED))  # doubted: verified
    cloud.enqueue(Reply(raw_body=answer(number)))
    served = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
    assert served.status_code == 200
    assert served.json()["choices"][0]["message"]["content"] == HEDGED
    assert spec(served.json())["reasons"][-1] == "verifier_failed"


@pytest.mark.parametrize("number", INEXACT.values(), ids=INEXACT.keys())
def test_as_a_draft_the_cloud_answers(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, number: str
) -> None:
    local.enqueue(Reply(raw_body=answer(number, GOOD_DRAFT)))
    cloud.enqueue(Reply("The cloud's answer."))
    served = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
    assert served.status_code == 200
    assert served.json()["choices"][0]["message"]["content"] == "The cloud's answer."


def test_a_long_number_in_text_or_at_the_edge_of_64_bits_passes() -> None:
    for body in (
        answer("1", "card 1234567890123456789012345, 1e400 in words"),
        answer("18446744073709551615"),  # the largest unsigned 64-bit integer
        answer("-9223372036854775808"),
        answer("1.7976931348623157e308"),  # the largest double
    ):
        assert inexact_number(body) is None


@given(st.integers())
def test_an_integer_is_refused_exactly_when_it_is_past_64_bits(value: int) -> None:
    past = not -(2**63) <= value < 2**64
    assert (inexact_number(b'{"n":%d}' % value) is not None) == past
