"""A pool of local servers (``models.NAME.base_urls``) and a chain of verifiers
(``speculative_decoding.verify_model: [a, b]``), against real stand-ins on loopback.

A pool's member that is down leaves the others to serve, and calls go to the least
busy member; a chain's first verifier failing (500, 429, a timeout) hands the request
to the next, and the answer, the reasons, the errors and the spend name who answered.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.test_adaptive_depth import CODE, QUICK, n_max_sent
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply, serve
from tests.fakes.llama_server import Speculation
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT, HEDGED
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, chat_bodies, dead_url, wait_for

ASK = [{"role": "user", "content": "Say hello"}]
BACKUP_KEY = "sk-backup-0d1e2f3a"
BACKUP_PRICE = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}


@pytest.fixture
def second_local() -> Iterator[FakeLlamaServer]:
    fake = FakeLlamaServer()
    with serve(fake.app) as url:
        fake.url = url
        yield fake


@pytest.fixture
def backup() -> Iterator[FakeCerebras]:
    """Any OpenAI-compatible endpoint, second in the chain (its own key)."""
    fake = FakeCerebras(api_key=BACKUP_KEY)
    fake.models = [*fake.models, "backup-model"]
    with serve(fake.app) as url:
        fake.url = url
        yield fake


def ask(proxy: Proxy, strategy: str = "speculative_decoding", **extra: Any) -> httpx.Response:
    body = {"model": "auto", "messages": ASK, **extra}
    response = proxy.http.post(
        "/v1/chat/completions", json=body, headers={"X-Routing-Strategy": strategy}
    )
    assert response.status_code == 200, response.text
    return response


def streamed_fields(response: httpx.Response) -> dict[str, Any]:
    """The proxy's fields from the chunk that carries them, in a streamed answer."""
    for line in response.text.splitlines():
        if line.startswith("data: {") and '"model_used"' in line:
            return json.loads(line[len("data: ") :])  # type: ignore[no-any-return]
    raise AssertionError(f"no chunk carried model_used: {response.text[-300:]}")


# -- a pool of local servers ---------------------------------------------------


def test_a_pool_serves_while_one_of_its_servers_is_down(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.default = Reply(GOOD_DRAFT)
    pool = {
        "local": {
            "base_url": None,
            "base_urls": [dead_url(), local.url],
            "circuit_breaker": {"failures": 10},  # the dead member stays in the turns
        }
    }
    with make_proxy(models=pool) as proxy:
        for strategy in ("local_only", "speculative_decoding", "local_only"):
            answer = ask(proxy, strategy).json()
            assert answer["model_used"] == "local"
            assert answer["choices"][0]["message"]["content"] == GOOD_DRAFT
        stream = ask(proxy, "local_only", stream=True)
        assert streamed_fields(stream)["model_used"] == "local"
        stats = proxy.stats()
    assert len(chat_bodies(local)) == 4  # every call reached the live server
    members = stats["features"]["upstreams"]["local"]["members"]
    assert [m["base_url"] for m in members][1] == local.url
    dead, alive = members
    assert dead["last_error"] is not None and alive["last_error"] is None
    assert stats["features"]["upstreams"]["local"]["circuit"]["state"] == "closed"
    assert stats["requests"]["by_outcome"] == {
        "passed_through": 3,
        "accepted_without_verification": 1,
    }
    # the dead member failed each call that was its turn (a draft too), though the other
    # member answered it; ties take turns, so it was asked first every other call
    assert stats["upstream_errors"] == {"local:unavailable": 2}


def test_a_pool_sends_a_call_to_the_member_with_fewer_calls_in_flight(
    make_proxy: MakeProxy, local: FakeLlamaServer, second_local: FakeLlamaServer
) -> None:
    local.enqueue(Reply(GOOD_DRAFT, delay=2.0))  # the first call holds the first member
    second_local.default = Reply(GOOD_DRAFT)
    pool = {"local": {"base_url": None, "base_urls": [local.url, second_local.url]}}
    with make_proxy(models=pool) as proxy:
        first = threading.Thread(target=ask, args=(proxy, "local_only"))
        first.start()
        wait_for(lambda: len(chat_bodies(local)) == 1)  # under way at the first member
        ask(proxy, "local_only")  # the first member is busy: the second takes it
        first.join(timeout=10)
    assert len(chat_bodies(local)) == 1
    assert len(chat_bodies(second_local)) == 1


def test_a_pool_steers_adaptive_depth_after_probing_its_first_server(
    make_proxy: MakeProxy, local: FakeLlamaServer, second_local: FakeLlamaServer
) -> None:
    local.speculation = Speculation(n_max=24, agree=2)
    pool = {"local": {"base_url": None, "base_urls": [local.url, second_local.url]}}
    with make_proxy(models=pool, adaptive_depth={"server_n_max": QUICK}) as proxy:
        for _ in range(2):
            proxy.http.post("/v1/chat/completions", json={"messages": CODE}).raise_for_status()
        depth = proxy.stats()["adaptive_depth"]["server_n_max"]
    assert depth["active"] is True
    assert n_max_sent(local)[0] == 16  # code starts at 8 + 8, under the server's 24


def test_a_pool_refuses_base_url_or_launch_beside_base_urls(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    from app.config import ConfigError

    with pytest.raises(ConfigError, match="base_urls is a pool"):  # noqa: SIM117
        with make_proxy(models={"local": {"base_urls": [local.url, local.url]}}):
            pass


# -- a chain of verifiers ------------------------------------------------------


def chain(backup: FakeCerebras, **cerebras: Any) -> dict[str, Any]:
    return {
        "env": {"CEREBRAS_API_KEY": CLOUD_KEY, "BACKUP_KEY": BACKUP_KEY},
        "models": {
            "cerebras": cerebras,
            "backup": {
                "provider": "openai",
                "base_url": f"{backup.url}/v1",
                "model": "backup-model",
                "api_key": "${BACKUP_KEY}",
                "price": BACKUP_PRICE,
            },
        },
        "speculative_decoding": {"verify_model": ["cerebras", "backup"]},
    }


FIRST_FAILS = {
    "500": (Reply(status=500), {}, "cerebras:500"),
    "429": (Reply(status=429), {}, "cerebras:429"),
    "timeout": (Reply(CLOUD_OTHER, delay=3.0), {"timeout": {"total": 0.5}}, "cerebras:timeout"),
}


@pytest.mark.parametrize("failure", list(FIRST_FAILS))
def test_the_next_verifier_answers_when_the_first_fails(
    failure: str,
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    backup: FakeCerebras,
) -> None:
    reply, cerebras, error = FIRST_FAILS[failure]
    local.enqueue(Reply(HEDGED))  # doubted: it must be verified
    cloud.enqueue(reply)
    backup.enqueue(Reply(CLOUD_OTHER))
    with make_proxy(**chain(backup, **cerebras)) as proxy:
        response = ask(proxy)
        stats = proxy.stats()
    answer = response.json()
    assert answer["choices"][0]["message"]["content"] == CLOUD_OTHER
    assert answer["model_used"] == "backup"
    assert response.headers["x-model-used"] == "backup"
    spec = answer["speculative_decoding"]
    assert spec["spilled_over"] and "fell_over_to:backup" in spec["reasons"]
    assert stats["upstream_errors"] == {error: 1}
    assert chat_bodies(backup)[0]["model"] == "backup-model"
    spend = stats["cost"]["spend_usd"]["by_model"]
    usage = answer["usage"]
    by_hand = (usage["prompt_tokens"] * 1.0 + usage["completion_tokens"] * 2.0) / 1e6
    assert spend["backup"] == pytest.approx(by_hand)
    assert "cerebras" not in spend  # a failed call costs nothing


def test_a_chain_passes_the_first_verifier_over_while_its_circuit_is_open(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, backup: FakeCerebras
) -> None:
    local.default = Reply(HEDGED)
    cloud.default = Reply(status=503)
    backup.default = Reply(CLOUD_OTHER)
    breaker = {"circuit_breaker": {"failures": 1, "cooldown_s": 60}}
    with make_proxy(**chain(backup, **breaker)) as proxy:
        answers = [ask(proxy).json() for _ in range(3)]
        stats = proxy.stats()
    assert [a["model_used"] for a in answers] == ["backup"] * 3
    assert len(chat_bodies(cloud)) == 1  # opened by the first failure, then passed over
    assert stats["features"]["upstreams"]["cerebras"]["circuit"]["state"] == "open"
    assert stats["features"]["verification"] is True


def test_a_chain_passes_over_a_verifier_whose_rate_budget_is_under_the_reserve(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, backup: FakeCerebras
) -> None:
    local.default = Reply(HEDGED)
    cloud.enqueue(Reply(CLOUD_OTHER, headers={"x-ratelimit-remaining-requests-day": "3"}))
    backup.default = Reply(CLOUD_OTHER)
    with make_proxy(**chain(backup)) as proxy:  # the reserve: 10 requests a day
        first, second = ask(proxy).json(), ask(proxy).json()
        stats = proxy.stats()
    assert [first["model_used"], second["model_used"]] == ["cerebras", "backup"]
    assert len(chat_bodies(cloud)) == 1 and len(chat_bodies(backup)) == 1
    assert stats["upstream_errors"] == {}  # passed over, not tried and failed


def test_a_chain_streams_from_the_verifier_that_answered(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, backup: FakeCerebras
) -> None:
    cloud.default = Reply(status=500)
    backup.default = Reply(CLOUD_OTHER)
    with make_proxy(**chain(backup)) as proxy:
        # the official SDK, streaming: the text and the proxy's fields from the backup
        sdk = proxy.openai.chat.completions.create(
            model="auto",
            messages=ASK,
            stream=True,
            extra_headers={"X-Routing-Strategy": "cerebras_only"},
        )
        sdk_chunks = list(sdk)
        response = ask(proxy, "cerebras_only", stream=True)
        stats = proxy.stats()
    sdk_text = "".join(c.choices[0].delta.content or "" for c in sdk_chunks if c.choices)
    assert sdk_text == CLOUD_OTHER
    assert [c.model_extra["model_used"] for c in sdk_chunks if "model_used" in c.model_extra] == [
        "backup"
    ]
    chunks = [
        json.loads(line[len("data: ") :])
        for line in response.text.splitlines()
        if line.startswith("data: {")
    ]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == CLOUD_OTHER
    assert streamed_fields(response)["model_used"] == "backup"
    assert response.headers["x-model-used"] == "backup"
    assert stats["upstream_errors"] == {"cerebras:500": 2}


def test_a_request_the_first_verifier_finds_invalid_is_not_sent_on(
    make_proxy: MakeProxy, cloud: FakeCerebras, backup: FakeCerebras
) -> None:
    cloud.enqueue(Reply(status=422))
    with make_proxy(**chain(backup)) as proxy:
        body = {"model": "auto", "messages": ASK}
        response = proxy.http.post(
            "/v1/chat/completions", json=body, headers={"X-Routing-Strategy": "cerebras_only"}
        )
    assert response.status_code == 422
    assert chat_bodies(backup) == []
