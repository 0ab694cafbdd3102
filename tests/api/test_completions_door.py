"""``POST /v1/completions`` end to end in every strategy: the openai SDK, LlamaIndex's
OpenAILike (its default ``is_chat_model=False`` calls this door), and malformed requests."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply, tokenize
from tests.support.answers import GOOD_DRAFT, LONG
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, chat_bodies, wait_for

PROMPT = "Once upon a time"
# model -> (the strategy it picks, the upstream that answers); a GOOD_DRAFT is served as drafted
STRATEGIES = {
    "auto": ("speculative_decoding", "local"),
    "local": ("local_only", "local"),
    "cerebras": ("cerebras_only", "cerebras"),
}


def completion_bodies(fake: FakeLlamaServer | FakeCerebras) -> list[dict[str, Any]]:
    """The JSON bodies of the legacy completions a stand-in got, in order."""
    return [r.json for r in fake.requests if r.path.endswith("/v1/completions")]


def asked(fake: FakeLlamaServer | FakeCerebras) -> int:
    """The completions a stand-in got, chat or legacy."""
    return len(chat_bodies(fake)) + len(completion_bodies(fake))


def answering(model: str, local: FakeLlamaServer, cloud: FakeCerebras) -> FakeLlamaServer:
    """The stand-in that answers ``model``'s strategy, with GOOD_DRAFT queued."""
    upstream = cloud if STRATEGIES[model][1] == "cerebras" else local
    upstream.enqueue(Reply(GOOD_DRAFT))
    return upstream  # type: ignore[return-value]


@pytest.mark.parametrize("model", list(STRATEGIES))
def test_openai_sdk_completions(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, model: str
) -> None:
    upstream = answering(model, local, cloud)
    response = proxy.openai.completions.with_raw_response.create(
        model=model, prompt=PROMPT, max_tokens=40
    )
    answer = response.parse()
    assert answer.object == "text_completion"
    assert answer.choices[0].text == GOOD_DRAFT
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.completion_tokens > 0
    strategy, used = STRATEGIES[model]
    assert response.headers["x-routing-strategy"] == strategy
    assert response.headers["x-model-used"] == used
    assert answer.to_dict()["model_used"] == used
    if model == "auto":  # drafted and judged as chat, and says so
        assert response.headers["x-door"] == "completion_as_chat"
        assert answer.id.startswith("cmpl-")
        sent = chat_bodies(upstream)[0]
        assert sent["messages"] == [{"role": "user", "content": PROMPT}]
        assert "completion_as_chat" in answer.to_dict()["speculative_decoding"]["reasons"]
    else:  # the upstream's own /v1/completions, its answer as it came
        assert response.headers["x-door"] == "completion"
        assert chat_bodies(upstream) == []
        sent = completion_bodies(upstream)[0]
        assert sent["prompt"] == PROMPT and sent["max_tokens"] == 40
        assert "speculative_decoding" not in answer.to_dict()
    requests = proxy.stats()["requests"]
    assert requests["by_strategy"] == {strategy: 1}


@pytest.mark.parametrize("model", list(STRATEGIES))
def test_openai_sdk_completions_streamed(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, model: str
) -> None:
    answering(model, local, cloud)
    chunks = list(
        proxy.openai.completions.create(
            model=model,
            prompt=PROMPT,
            max_tokens=40,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == GOOD_DRAFT
    finished = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finished[-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert proxy.stats()["requests"]["streaming"] == 1
    upstream = cloud if STRATEGIES[model][1] == "cerebras" else local
    assert len(completion_bodies(upstream)) == (model != "auto")


@pytest.mark.parametrize("model", list(STRATEGIES))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_echo_and_logprobs(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, model: str, stream: bool
) -> None:
    """``echo`` is the proxy's (llama-server ignores it); logprobs come in the legacy
    shape from either upstream (llama-server writes chat's entries, put right here)."""

    def ask(**fields: Any) -> tuple[str, Any]:
        answering(model, local, cloud)
        if not stream:
            choice = proxy.openai.completions.create(model=model, prompt=PROMPT, **fields)
            return choice.choices[0].text, choice.choices[0].logprobs
        chunks = list(
            proxy.openai.completions.create(model=model, prompt=PROMPT, stream=True, **fields)
        )
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        scored = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs]
        tokens = [t for lp in scored for t in lp.tokens or []]
        tops = [t for lp in scored for t in lp.top_logprobs or []]
        return text, (tokens, tops) if scored else None

    assert ask(echo=True)[0] == PROMPT + GOOD_DRAFT
    text, logprobs = ask(logprobs=2)
    assert text == GOOD_DRAFT
    if not stream:
        assert logprobs is not None and logprobs.token_logprobs
        logprobs = (logprobs.tokens, logprobs.top_logprobs)
    tokens, tops = logprobs
    assert "".join(tokens) == GOOD_DRAFT
    assert tops and all(0 < len(top) <= 2 for top in tops)
    upstream = cloud if STRATEGIES[model][1] == "cerebras" else local
    if model == "auto":  # drafted as chat (the draft asks for the proxy's own top_logprobs)
        assert completion_bodies(upstream) == [] and chat_bodies(upstream)[-1]["logprobs"]
    else:
        echoed, scored = completion_bodies(upstream)
        assert "echo" not in echoed and scored["logprobs"] == 2


@pytest.mark.parametrize("model", list(STRATEGIES))
def test_llamaindex_openailike(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, model: str
) -> None:
    openai_like = pytest.importorskip(
        "llama_index.llms.openai_like", reason="pip install -e '.[llamaindex]'"
    )
    llm = openai_like.OpenAILike(
        model=model, api_base=f"{proxy.url}/v1", api_key="unused", max_retries=0, timeout=15
    )
    assert llm.is_chat_model is False  # so it speaks /v1/completions
    upstream = answering(model, local, cloud)
    assert llm.complete(PROMPT).text == GOOD_DRAFT
    upstream.enqueue(Reply(GOOD_DRAFT))
    streamed = list(llm.stream_complete(PROMPT))
    assert streamed[-1].text == GOOD_DRAFT
    assert "".join(r.delta or "" for r in streamed) == GOOD_DRAFT
    assert asked(upstream) == 2


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": "a", "suffix": "}"}, "suffix"),
        ({"prompt": "a", "n": 2}, "n"),
        ({"prompt": "a", "echo": True, "logprobs": 1}, "echo"),
        ({"prompt": "a", "temperature": "hot"}, "temperature"),
        # llama-server's own /v1/completions answers a body with messages as chat
        ({"prompt": "a", "messages": [{"role": "user", "content": "hi"}]}, "messages"),
    ],
)
def test_what_chat_cannot_say_is_a_400_in_openais_shape(
    proxy: Proxy, local: FakeLlamaServer, body: dict[str, Any], param: str
) -> None:
    answer = proxy.http.post("/v1/completions", json=body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert asked(local) == 0
    assert proxy.stats()["requests"]["refused"] == {"400": 1}


def test_the_same_auth_as_chat(make_proxy: MakeProxy, local: FakeLlamaServer) -> None:
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "PROXY_KEYS": "sk-door-key-123456"}
    with make_proxy(env=env, server={"api_keys": "${PROXY_KEYS}"}) as proxy:
        refused = proxy.http.post("/v1/completions", json={"prompt": "a"})
        local.enqueue(Reply(GOOD_DRAFT))
        headers = {"Authorization": "Bearer sk-door-key-123456"}
        body = {"prompt": "a", "model": "local"}
        allowed = proxy.http.post("/v1/completions", json=body, headers=headers)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert "sk-door-key" not in refused.text
    assert allowed.status_code == 200 and allowed.json()["choices"][0]["text"] == GOOD_DRAFT
    assert len(completion_bodies(local)) == 1


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
FIELDS = ["prompt", "max_tokens", "temperature", "top_p", "stop", "n", "echo", "logprobs"]
FIELDS += ["suffix", "stream", "best_of", "seed", "model", "stream_options", "logit_bias"]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=st.dictionaries(st.sampled_from(FIELDS), json_values) | json_values)
def test_malformed_requests_are_4xx_never_500(proxy: Proxy, body: Any) -> None:
    """Whatever the body, the answer is a 200 (the stand-ins answer a valid one) or a 4xx in
    OpenAI's shape."""
    answer = proxy.http.post(
        "/v1/completions", json=body, headers={"X-Routing-Strategy": "local_only"}
    )
    assert answer.status_code == 200 or 400 <= answer.status_code < 500, answer.text
    if answer.status_code != 200:
        assert set(answer.json()["error"]) == {"message", "type", "param", "code"}


def test_an_upstream_failure_is_chats_error(proxy: Proxy, local: FakeLlamaServer) -> None:
    local.enqueue(Reply(status=500))
    answer = proxy.http.post("/v1/completions", json={"prompt": PROMPT, "model": "local"})
    assert answer.status_code == 502
    error = answer.json()["error"]
    assert error["message"].startswith("local: ") and error["type"] == "upstream_error"


def test_a_stream_broken_midway_ends_with_its_error_event(
    proxy: Proxy, local: FakeLlamaServer
) -> None:
    local.enqueue(Reply(LONG, fail_after_chunks=3))
    body = {"prompt": PROMPT, "model": "local", "stream": True}
    with proxy.http.stream("POST", "/v1/completions", json=body) as response:
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    payloads = [json.loads(e.removeprefix("data: ")) for e in events if e != "data: [DONE]"]
    assert [p["object"] for p in payloads[:-1]] == ["text_completion"] * (len(payloads) - 1)
    assert "".join(p["choices"][0]["text"] for p in payloads[:-1] if p["choices"])
    assert payloads[-1]["error"]["message"].startswith("local: ")  # as the chat door ends it
    with pytest.raises(openai.APIError):
        local.enqueue(Reply(LONG, fail_after_chunks=3))
        list(proxy.openai.completions.create(model="local", prompt=PROMPT, stream=True))


def test_a_client_leaving_mid_stream_closes_the_upstream_stream(
    proxy: Proxy, local: FakeLlamaServer
) -> None:
    local.enqueue(Reply(LONG, chunk_delay=0.1))
    body = {"model": "local", "prompt": PROMPT, "stream": True}
    with httpx.stream("POST", f"{proxy.url}/v1/completions", json=body, timeout=5) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        assert local.in_flight == 1
    wait_for(lambda: local.in_flight == 0, timeout=3)
    wait_for(lambda: proxy.stats()["runtime"]["in_flight"] == 0, timeout=3)
    assert proxy.stats()["requests"]["by_outcome"] == {"client_disconnected": 1}


PRICES = {
    "local": {"input_per_mtok": 0.1, "output_per_mtok": 0.2},
    "cerebras": {"input_per_mtok": 0.6, "output_per_mtok": 1.2},
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_passed_through_completions_are_counted_priced_and_logged_as_chat(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Any, stream: bool
) -> None:
    """local_only and cerebras_only: the upstream's own usage counted in /stats (tokens,
    spend by model and purpose ``pass_through``), the request in its strategy; the
    speculative one drafts as chat and goes to the spec log, as chat's do."""
    spec_log = tmp_path / "spec.jsonl"
    models = {name: {"price": price} for name, price in PRICES.items()}
    local.enqueue(Reply(GOOD_DRAFT), Reply(GOOD_DRAFT))
    cloud.enqueue(Reply(LONG))
    extra = {"stream_options": {"include_usage": True}} if stream else {}
    with make_proxy(models=models, logging={"spec_log_file": str(spec_log)}) as proxy:
        usages = []
        for model in ("local", "cerebras", "auto"):
            made = proxy.openai.completions.create(
                model=model, prompt=PROMPT, max_tokens=60, stream=stream, **extra
            )
            last = list(made)[-1] if stream else made  # type: ignore[arg-type]
            usages.append(last.usage)
        stats = proxy.stats()
    local_usage, cloud_usage, _ = usages
    assert stats["requests"]["by_strategy"] == {
        "local_only": 1,
        "cerebras_only": 1,
        "speculative_decoding": 1,
    }
    assert stats["requests"]["by_outcome"]["passed_through"] == 2
    assert stats["tokens"]["cloud"] == cloud_usage.completion_tokens == len(tokenize(LONG))
    assert stats["tokens"]["local"] >= local_usage.completion_tokens > 0

    def usd(model: str, prompt: int, completion: int) -> float:
        price = PRICES[model]
        return (prompt * price["input_per_mtok"] + completion * price["output_per_mtok"]) / 1e6

    passed = usd("local", local_usage.prompt_tokens, local_usage.completion_tokens)
    passed += usd("cerebras", cloud_usage.prompt_tokens, cloud_usage.completion_tokens)
    assert local_usage.prompt_tokens == len(tokenize(PROMPT))  # the raw prompt, no template
    spend = stats["cost"]["spend_usd"]
    assert spend["by_purpose"]["pass_through"] == pytest.approx(passed, abs=1e-12)
    assert spend["by_model"]["cerebras"] == pytest.approx(
        usd("cerebras", cloud_usage.prompt_tokens, cloud_usage.completion_tokens), abs=1e-12
    )
    entries = [json.loads(line) for line in spec_log.read_text().splitlines()]
    assert [e["outcome"] for e in entries] == ["accepted_without_verification"]


def test_passed_through_completions_are_not_cached(
    make_proxy: MakeProxy, cloud: FakeCerebras
) -> None:
    """The cache keeps chat answers: a raw text completion is asked of the upstream again."""
    cloud.enqueue(Reply(GOOD_DRAFT), Reply(LONG))
    body = {"model": "cerebras", "prompt": PROMPT, "max_tokens": 60}
    with make_proxy(cache={"enabled": True}) as proxy:
        answers = [proxy.http.post("/v1/completions", json=body) for _ in range(2)]
    assert [a.json()["choices"][0]["text"] for a in answers] == [GOOD_DRAFT, LONG]
    assert {a.headers.get("x-cache") for a in answers} == {"bypass"}
    assert len(completion_bodies(cloud)) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_upstream_key_in_a_raw_completions_error_is_masked(
    proxy: Proxy, cloud: FakeCerebras, stream: bool
) -> None:
    """Cerebras' own /v1/completions refusing, its message quoting the key: the client
    gets chat's error, the key masked."""
    cloud.enqueue(Reply(status=401, error={"message": f"Wrong API Key {CLOUD_KEY}"}))
    body = {"model": "cerebras", "prompt": PROMPT, "stream": stream}
    answer = proxy.http.post("/v1/completions", json=body)
    assert 400 <= answer.status_code < 600 and answer.status_code != 500
    assert CLOUD_KEY not in answer.text and CLOUD_KEY[-6:] not in answer.text
    assert answer.json()["error"]["message"].startswith("cerebras: ")
    assert completion_bodies(cloud)[-1]["prompt"] == PROMPT
