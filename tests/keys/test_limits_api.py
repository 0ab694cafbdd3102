"""A key's budgets and limits through the real proxy (one process, ``state.backend:
memory``) against the stand-ins: a strategy the key may not use is a 403, rpm and
max_concurrent are 429 with retry-after, a spent budget refuses (429 budget_exceeded,
until the UTC day ends) or serves from the local model alone (X-Budget: exhausted, no
cloud call) for the official openai SDK, streamed and not, and every door counts against
the same limits. The fleet's (two replicas, Redis): tests/state/test_redis_limits.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import openai
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, wait_for

pytestmark = pytest.mark.process

SECRETS = {
    "SK_NARROW": "sk-narrow-0123456789",
    "SK_PACED": "sk-paced-0123456789",
    "SK_SINGLE": "sk-single-0123456789",
    "SK_SPENDER": "sk-spender-0123456789",
    "SK_SAVER": "sk-saver-0123456789",
    "SK_DOORS": "sk-doors-0123456789",
}
ENV = {"CEREBRAS_API_KEY": CLOUD_KEY, **SECRETS}
ASK = [{"role": "user", "content": "Say hello"}]
LOCAL = {"X-Routing-Strategy": "local_only"}
CLOUD = {"X-Routing-Strategy": "cerebras_only"}
# $1000 per million tokens: one small cloud answer costs a few cents, over any budget below
PRICEY = {"input_per_mtok": 1000.0, "output_per_mtok": 1000.0}


def key(name: str, secret: str, **policy: Any) -> dict[str, Any]:
    return {"name": name, "key": "${" + secret + "}", **policy}


KEYS = [
    key("narrow", "SK_NARROW", strategies=["local_only"]),
    key("paced", "SK_PACED", rpm=2),
    key("single", "SK_SINGLE", max_concurrent=1),
    key("spender", "SK_SPENDER", budget_usd_day=0.001),
    key("saver", "SK_SAVER", budget_usd_day=0.001, on_budget="local"),
    key("doors", "SK_DOORS", rpm=5),
]


@pytest.fixture(params=["lean", "standard"])
def edge(request: pytest.FixtureRequest) -> str:
    edge: str = request.param
    return edge


@pytest.fixture
def keyed(make_proxy: MakeProxy, local: FakeLlamaServer) -> Iterator[Proxy]:
    local.embeddings = True
    embed = {
        "provider": "llama_server",
        "base_url": local.url,
        "model": "embed-gguf",
        "embeddings": True,
    }
    models = {"cerebras": {"price": PRICEY}, "embed": embed}
    with make_proxy(env=ENV, server={"keys": KEYS}, models=models) as proxy:
        yield proxy


def post(proxy: Proxy, secret: str, headers: dict[str, str] | None = None) -> httpx.Response:
    auth = {"Authorization": f"Bearer {SECRETS[secret]}", **(headers or {})}
    return proxy.http.post("/v1/chat/completions", json={"messages": ASK}, headers=auth)


def sdk(proxy: Proxy, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=SECRETS[secret], max_retries=0)


def stats(proxy: Proxy) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {SECRETS['SK_NARROW']}"}
    return proxy.http.get("/stats", headers=auth).json()  # type: ignore[no-any-return]


def cloud_calls(cloud: FakeCerebras) -> int:
    return sum(r.path.endswith("/chat/completions") for r in cloud.requests)


def a_fresh_minute() -> None:
    """Wait for a minute with at least 10 s left: a test's requests share one rpm window."""
    left = 60 - time.time() % 60
    if left < 10:
        time.sleep(left + 0.05)


def seconds_to_midnight() -> float:
    now = datetime.now(UTC)
    return (
        now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1) - now
    ).total_seconds()


def test_a_strategy_the_key_may_not_use_is_a_403(keyed: Proxy) -> None:
    refused = post(keyed, "SK_NARROW", CLOUD)
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["type"] == "permission_error" and error["code"] == "strategy_not_allowed"
    assert "cerebras_only" in error["message"] and "local_only" in error["message"]
    with pytest.raises(openai.PermissionDeniedError):
        sdk(keyed, "SK_NARROW").chat.completions.create(model="cerebras", messages=ASK)  # type: ignore[arg-type]
    assert post(keyed, "SK_NARROW", LOCAL).status_code == 200
    status = stats(keyed)
    assert status["requests"]["refused"].get("403") == 2
    assert status["limits"]["refused"] == {"strategy_not_allowed": 2}


def test_rpm_refuses_with_retry_after(keyed: Proxy) -> None:
    a_fresh_minute()
    assert [post(keyed, "SK_PACED", LOCAL).status_code for _ in range(2)] == [200, 200]
    refused = post(keyed, "SK_PACED", LOCAL)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert "2 requests per minute" in refused.json()["error"]["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    with pytest.raises(openai.RateLimitError):
        sdk(keyed, "SK_PACED").chat.completions.create(model="local", messages=ASK)  # type: ignore[arg-type]
    assert post(keyed, "SK_NARROW", LOCAL).status_code == 200  # another key: its own limits


def test_max_concurrent_holds_one_request_in_flight(keyed: Proxy, local: FakeLlamaServer) -> None:
    release = threading.Event()
    local.enqueue(Reply("held", hold=release))
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(post, keyed, "SK_SINGLE", LOCAL)
        wait_for(lambda: sum(r.path.endswith("/chat/completions") for r in local.requests) == 1)
        refused = post(keyed, "SK_SINGLE", LOCAL)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert "1 requests in flight" in refused.json()["error"]["message"]
        release.set()
        assert first.result(timeout=15).status_code == 200
    assert post(keyed, "SK_SINGLE", LOCAL).status_code == 200  # its slot is free again


def test_a_spent_budget_refuses_until_the_day_ends(keyed: Proxy, cloud: FakeCerebras) -> None:
    assert post(keyed, "SK_SPENDER", CLOUD).status_code == 200  # a few cents: spent
    calls = cloud_calls(cloud)
    refused = post(keyed, "SK_SPENDER", LOCAL)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "budget_exceeded" and error["type"] == "rate_limit_error"
    assert "day" in error["message"] and "$0.001" in error["message"]
    assert abs(int(refused.headers["retry-after"]) - seconds_to_midnight()) < 5
    assert cloud_calls(cloud) == calls
    assert post(keyed, "SK_SAVER", CLOUD).status_code == 200  # another key's budget


def test_a_spent_budget_served_locally_for_the_openai_sdk(
    keyed: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    client = sdk(keyed, "SK_SAVER")
    before = client.chat.completions.with_raw_response.create(model="cerebras", messages=ASK)  # type: ignore[arg-type]
    assert before.headers.get("x-budget") is None and before.headers["x-model-used"] == "cerebras"
    calls = cloud_calls(cloud)
    for model in ("cerebras", "specproxy", "local"):  # whatever it asks for
        whole = client.chat.completions.with_raw_response.create(model=model, messages=ASK)  # type: ignore[arg-type]
        assert whole.headers["x-budget"] == "exhausted"
        assert whole.headers["x-budget-reason"] == "budget_local"
        assert whole.headers["x-model-used"] == "local"
        assert whole.headers["x-routing-strategy"] == "local_only"
        assert whole.parse().choices[0].message.content
        with client.chat.completions.with_streaming_response.create(
            model=model,
            messages=ASK,  # type: ignore[arg-type]
            stream=True,
        ) as streamed:
            assert streamed.headers["x-budget"] == "exhausted"
            text = "".join(
                chunk.choices[0].delta.content or "" for chunk in streamed.parse() if chunk.choices
            )
        assert text
    assert cloud_calls(cloud) == calls  # no cloud call for this key once its budget is spent
    status = stats(keyed)
    assert status["requests"]["by_strategy"]["local_only"] == 6
    assert status["limits"]["served_locally"] == 6
    assert status["limits"]["store"] == {"backend": "memory"}


def test_every_door_counts_against_the_same_limits(keyed: Proxy) -> None:
    a_fresh_minute()
    auth = {"Authorization": f"Bearer {SECRETS['SK_DOORS']}", **LOCAL}
    http = keyed.http
    answers = [
        http.post("/v1/chat/completions", json={"messages": ASK}, headers=auth),
        http.post("/v1/completions", json={"prompt": "Say hello"}, headers=auth),
        http.post("/v1/responses", json={"input": "Say hello"}, headers=auth),
        http.post(
            "/v1/messages",
            json={"model": "local", "max_tokens": 32, "messages": ASK},
            headers={"x-api-key": SECRETS["SK_DOORS"], **LOCAL},
        ),
        http.post("/v1/embeddings", json={"input": "hello", "model": "embed"}, headers=auth),
    ]
    assert [a.status_code for a in answers] == [200] * 5, [a.text for a in answers]
    for path, body in (
        ("/v1/chat/completions", {"messages": ASK}),
        ("/v1/completions", {"prompt": "Say hello"}),
        ("/v1/responses", {"input": "Say hello"}),
        ("/v1/embeddings", {"input": "hello", "model": "embed"}),
    ):
        refused = http.post(path, json=body, headers=auth)
        assert refused.status_code == 429, path
        assert refused.json()["error"]["code"] == "rate_limit_exceeded", path
        assert "retry-after" in refused.headers
    refused = http.post(
        "/v1/messages",
        json={"model": "local", "max_tokens": 32, "messages": ASK},
        headers={"x-api-key": SECRETS["SK_DOORS"], **LOCAL},
    )
    assert refused.status_code == 429 and "retry-after" in refused.headers
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "rate_limit_error"
