"""Auth, bad input, /stats, /v1/models, /health, and secrets never shown."""

from __future__ import annotations

import logging
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import create_app
from app.config import settings_from_mapping
from app.telemetry.logs import configure_logging
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply, serve, tokenize
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, chat_bodies, proxy_config

ASK = [{"role": "user", "content": "hi"}]
PROXY_KEY = "sk-proxy-9f8e7d6c5b4a"


def test_api_keys_guard_everything_but_health(make_proxy: MakeProxy) -> None:
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "PROXY_KEYS": f"other-key,{PROXY_KEY}"}
    with make_proxy(env=env, api_key=PROXY_KEY, server={"api_keys": "${PROXY_KEYS}"}) as proxy:
        assert proxy.openai.chat.completions.create(model="local", messages=ASK).choices
        anonymous = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="missing or invalid API key"):
            anonymous.chat.completions.create(model="local", messages=ASK)
        for path in ("/stats", "/v1/models"):
            assert proxy.http.get(path, headers={"Authorization": ""}).status_code == 401
        assert proxy.http.get("/health", headers={"Authorization": ""}).json() == {"status": "ok"}
        assert proxy.stats()["requests"]["refused"] == {"401": 3}


@pytest.mark.parametrize(
    ("content", "param", "fragment"),
    [
        (b"{not json", None, "not valid JSON"),
        (b"[1, 2]", None, "must be a JSON object"),
        (b"{}", "messages", "messages: Field required"),
        (b'{"messages": []}', "messages", "at least 1 item"),
        (b'{"messages": "hi"}', "messages", "messages"),
        (b'{"messages": [{"role": "robot", "content": "x"}]}', "messages.0.role", "role"),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}',
            "max_tokens",
            "greater than or equal to 1",
        ),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
            "temperature",
            "valid number",
        ),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes please"}',
            "stream",
            "valid boolean",
        ),
    ],
)
def test_bad_input_is_a_400_in_openai_shape(
    proxy: Proxy, local: FakeLlamaServer, content: bytes, param: str | None, fragment: str
) -> None:
    response = proxy.http.post(
        "/v1/chat/completions", content=content, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert fragment in error["message"]
    assert chat_bodies(local) == []  # refused before reaching any upstream


def test_oversized_body_is_413(make_proxy: MakeProxy) -> None:
    with make_proxy(server={"max_body_bytes": 2048}) as proxy:
        big = [{"role": "user", "content": "x" * 4000}]
        response = proxy.http.post("/v1/chat/completions", json={"messages": big})
        assert response.status_code == 413
        assert "limit is 2048" in response.json()["error"]["message"]
        assert proxy.stats()["requests"]["refused"] == {"413": 1}


def test_unknown_strategy_header_and_n_are_refused(proxy: Proxy) -> None:
    with pytest.raises(openai.BadRequestError, match="X-Routing-Strategy 'fastest'"):
        proxy.openai.chat.completions.create(
            model="x", messages=ASK, extra_headers={"X-Routing-Strategy": "fastest"}
        )
    with pytest.raises(openai.BadRequestError, match="n > 1 is not supported"):
        proxy.openai.chat.completions.create(model="x", messages=ASK, n=2)


def test_unknown_route_and_method_use_the_envelope(proxy: Proxy) -> None:
    missing = proxy.http.post("/v1/nothing", json={})
    assert missing.status_code == 404
    assert missing.json()["error"] == {
        "message": "Invalid URL (POST /v1/nothing)",
        "type": "invalid_request_error",
        "param": None,
        "code": "unknown_url",
    }
    wrong = proxy.http.get("/v1/chat/completions")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    with pytest.raises(openai.NotFoundError, match="Invalid URL"):
        proxy.openai.batches.list()


def test_under_the_messages_path_they_are_in_anthropics_shape(proxy: Proxy) -> None:
    client = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.batches.list()
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "Invalid URL (GET /v1/messages/batches)"},
    }
    wrong = proxy.http.get("/v1/messages")
    assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "invalid_request_error"


def test_models_lists_the_configured_models(proxy: Proxy) -> None:
    models = {m.id: m for m in proxy.openai.models.list()}
    assert set(models) == {"speculative", "local", "cerebras", "auto"}
    assert models["cerebras"].to_dict()["upstream_model"] == "gpt-oss-120b"


def test_stats_counts_outcomes_tokens_and_latency(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    good = "Hello! I am a small local model and I am happy to help you today."
    hedged = "I think it is maybe three, but I am not sure of that at all."
    local.enqueue(Reply(good), Reply(hedged), Reply(hedged))
    cloud.enqueue(
        Reply("The answer is four; two plus two makes four in ordinary arithmetic."), Reply(hedged)
    )
    for _ in range(3):
        proxy.openai.chat.completions.create(model="auto", messages=ASK)
    stats = proxy.stats()
    requests = stats["requests"]
    assert requests["total"] == 3 and requests["by_strategy"] == {"speculative_decoding": 3}
    assert requests["by_outcome"] == {
        "accepted_without_verification": 1,
        "spilled_over": 1,
        "verified_draft_used": 1,
    }
    assert stats["spill_over_rate"] == pytest.approx(1 / 3, abs=1e-3)
    assert 0.0 < stats["mean_similarity"] < 1.0
    # llama-server counts each answer's end-of-generation token too
    assert stats["tokens"]["local"] == len(tokenize(good)) + 1 + 2 * (len(tokenize(hedged)) + 1)
    assert stats["tokens"]["cloud"] > 0
    assert stats["latency_ms"]["total"]["n"] == 3 and stats["latency_ms"]["verify"]["n"] == 2
    assert stats["latency_ms"]["draft"]["p50"] <= stats["latency_ms"]["draft"]["p95"]
    assert stats["features"]["upstreams"]["local"]["reachable"] is True
    assert stats["features"]["verification"] is True


def test_secrets_are_masked_in_stats_errors_and_logs(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG)
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "PROXY_KEYS": PROXY_KEY}
    local.enqueue(Reply("maybe"))
    cloud.enqueue(Reply(status=401, error={"message": f"bad key {CLOUD_KEY}", "type": "x"}))
    spec_log = tmp_path / "spec.jsonl"
    logging_config = {"spec_log_file": str(spec_log), "spec_log_content": True}
    with make_proxy(
        env=env, api_key=PROXY_KEY, server={"api_keys": "${PROXY_KEYS}"}, logging=logging_config
    ) as proxy:
        answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
        stats = proxy.http.get("/stats").text
        metrics = proxy.http.get("/metrics").text
    assert answer.status_code == 200
    seen = answer.text + stats + metrics + caplog.text + spec_log.read_text()
    assert spec_log.read_text()  # the log was written, with content
    assert CLOUD_KEY not in seen and PROXY_KEY not in seen
    assert '"api_key":"**********"' in stats


def test_log_filter_masks_secrets_in_any_record(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    before = list(root.handlers), root.level
    configure_logging("INFO", [CLOUD_KEY])
    try:
        logging.getLogger("anything").warning("header was Bearer %s", CLOUD_KEY)
        logged = capsys.readouterr().err
    finally:
        root.handlers[:], root.level = before
    assert "header was Bearer ***" in logged and CLOUD_KEY not in logged


def test_log_filter_masks_any_bearer_token(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    before = list(root.handlers), root.level
    configure_logging("INFO", [])  # a key the proxy was never told about
    try:
        logging.getLogger("anything").warning("echoed: authorization: bearer sk-unknown.42_x")
        logged = capsys.readouterr().err
    finally:
        root.handlers[:], root.level = before
    assert "echoed: authorization: bearer ***" in logged and "sk-unknown" not in logged


def test_message_count_limit_and_token_cap(make_proxy: MakeProxy, cloud: FakeCerebras) -> None:
    with make_proxy(server={"max_messages": 3, "max_tokens_cap": 100}) as proxy:
        many = [{"role": "user", "content": "hi"}] * 4
        refused = proxy.http.post("/v1/chat/completions", json={"messages": many})
        proxy.openai.chat.completions.create(model="cerebras", messages=ASK, max_tokens=5000)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "messages"
    assert cloud.last_json["max_completion_tokens"] == 100  # clamped, never above the cap


@pytest.mark.parametrize("origins", [[], ["https://dash.example"]])
def test_cors_is_off_unless_configured(make_proxy: MakeProxy, origins: list[str]) -> None:
    preflight = {"Origin": "https://dash.example", "Access-Control-Request-Method": "POST"}
    with make_proxy(server={"cors_origins": origins}) as proxy:
        response = proxy.http.options("/v1/chat/completions", headers=preflight)
    allowed = response.headers.get("access-control-allow-origin")
    assert allowed == ("https://dash.example" if origins else None)


class Stamp:
    """An ASGI middleware that marks every response it sees."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-stamp", b"1")]
            await send(message)

        await self.app(scope, receive, stamped)


def test_no_middleware_skips_the_chat_fast_lane(
    local: FakeLlamaServer, cloud: FakeCerebras, edge: str
) -> None:
    """A middleware added to the app runs for the chat endpoint too, not only the others."""
    env = {"CEREBRAS_API_KEY": CLOUD_KEY}
    tree = proxy_config(local.url, cloud.url, server={"edge": edge})
    app = create_app(settings_from_mapping(tree, env=env))
    app.add_middleware(Stamp)
    body = {"model": "cerebras", "messages": ASK}
    with serve(app) as url, httpx.Client(base_url=url) as http:
        chat = http.post("/v1/chat/completions", json=body)
        health = http.get("/health")
    assert chat.headers.get("x-stamp") == "1" and health.headers.get("x-stamp") == "1"


def test_cors_covers_the_chat_fast_lane(make_proxy: MakeProxy) -> None:
    """The chat endpoint bypasses Starlette's middleware, but not CORS."""
    origin = {"Origin": "https://dash.example"}
    body = {"model": "cerebras", "messages": ASK}
    with make_proxy(server={"cors_origins": ["https://dash.example"]}) as proxy:
        allowed = proxy.http.post("/v1/chat/completions", json=body, headers=origin)
        other = proxy.http.post(
            "/v1/chat/completions", json=body, headers={"Origin": "https://evil.example"}
        )
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://dash.example"
    assert "X-Model-Used" in allowed.headers["access-control-expose-headers"]
    assert "access-control-allow-origin" not in other.headers


def test_refused_requests_are_counted_alike_in_stats_and_metrics(make_proxy: MakeProxy) -> None:
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "PROXY_KEYS": PROXY_KEY}
    with make_proxy(env=env, api_key=PROXY_KEY, server={"api_keys": "${PROXY_KEYS}"}) as proxy:
        chat = "/v1/chat/completions"
        assert proxy.http.post(chat, json={}, headers={"Authorization": ""}).status_code == 401
        assert proxy.http.post(chat, content=b"{not json").status_code == 400
        assert proxy.http.post(chat, json={"messages": "no"}).status_code == 400
        refused = proxy.stats()["requests"]["refused"]
        metrics = proxy.http.get("/metrics").text
    assert refused == {"401": 1, "400": 2}
    assert 'specproxy_requests_refused_total{status="401"} 1.0' in metrics
    assert 'specproxy_requests_refused_total{status="400"} 2.0' in metrics
