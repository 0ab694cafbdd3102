"""``POST /v1/embeddings`` against the stand-in llama-server, on both edges: the openai SDK,
base64, counting and pricing, and every error path (the real server: tests/real)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.doors.embeddings import floats_of
from tests.fakes import FakeLlamaServer
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, dead_url
from tests.support.tiers import process_fixture


def embed_model(url: str, **extra: Any) -> dict[str, Any]:
    """A ``models:`` entry serving embeddings from ``url``."""
    entry = {
        "provider": "llama_server",
        "base_url": url,
        "model": "embed-gguf",
        "embeddings": True,
        "timeout": {"connect": 1, "read": 5, "total": 10},
        "price": {"input_per_mtok": 2.0},
    }
    return entry | extra


@process_fixture
def embedding(make_proxy: MakeProxy, local: FakeLlamaServer) -> Iterator[Proxy]:
    """A proxy whose ``embed`` model is the stand-in llama-server, started with --embeddings."""
    local.embeddings = True
    with make_proxy(models={"embed": embed_model(local.url)}) as proxy:
        yield proxy


def bodies(local: FakeLlamaServer) -> list[dict[str, Any]]:
    return [r.json for r in local.requests if r.path == "/v1/embeddings"]


def test_one_input_as_floats(embedding: Proxy, local: FakeLlamaServer) -> None:
    response = embedding.openai.embeddings.with_raw_response.create(
        model="text-embedding-3-small", input="hello world", encoding_format="float"
    )
    answer = response.parse()
    assert len(answer.data) == 1 and len(answer.data[0].embedding) == local.embedding_size
    assert answer.usage.prompt_tokens > 0
    assert response.headers["x-model-used"] == "embed"
    assert answer.model == "embed-gguf"  # the configured model, as chat answers name it
    # the only embeddings model answers whatever the request names; floats are asked for
    assert bodies(local) == [
        {"input": "hello world", "model": "embed-gguf", "encoding_format": "float"}
    ]


def test_many_inputs_as_base64(embedding: Proxy, local: FakeLlamaServer) -> None:
    floats = embedding.openai.embeddings.create(
        model="embed", input=["a", "b c"], encoding_format="float"
    )
    raw = embedding.http.post(
        "/v1/embeddings", json={"input": ["a", "b c"], "encoding_format": "base64"}
    ).json()
    assert [d["index"] for d in raw["data"]] == [0, 1]
    decoded = [floats_of(d["embedding"]) for d in raw["data"]]
    expected = [d.embedding for d in floats.data]
    for got, want in zip(decoded, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-6)
    # the SDK's default is base64, which it decodes itself
    sdk = embedding.openai.embeddings.create(model="embed", input=["a", "b c"])
    for item, want in zip(sdk.data, expected, strict=True):
        assert item.embedding == pytest.approx(want, rel=1e-6)
    assert all(b["encoding_format"] == "float" for b in bodies(local))


def test_token_arrays_and_dimensions_are_passed_on(
    embedding: Proxy, local: FakeLlamaServer
) -> None:
    answer = embedding.openai.embeddings.create(
        model="embed", input=[[1, 2, 3], [4, 5]], dimensions=8, encoding_format="float"
    )
    assert len(answer.data) == 2
    assert bodies(local)[-1] == {
        "input": [[1, 2, 3], [4, 5]],
        "model": "embed-gguf",
        "encoding_format": "float",
        "dimensions": 8,
    }


def test_dimensions_the_model_cannot_give_are_a_400_not_vectors_of_another_size(
    embedding: Proxy, local: FakeLlamaServer
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        embedding.openai.embeddings.create(model="embed", input="hello", dimensions=4)
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == "dimensions"
    assert "vectors of 8 dimensions and cannot shorten them to 4" in error["message"]
    assert bodies(local)[-1]["dimensions"] == 4  # asked: a model that can would have


def test_the_models_list_says_which_model_embeds(embedding: Proxy) -> None:
    listed = {m.id: m.to_dict() for m in embedding.openai.models.list()}
    assert listed["embed"]["embeddings"] is True
    assert "embeddings" not in listed["local"] and "embeddings" not in listed["cerebras"]


def test_counted_and_priced_in_stats(embedding: Proxy) -> None:
    answer = embedding.openai.embeddings.create(model="embed", input=["a b", "c"])
    stats = embedding.stats()
    tokens = answer.usage.prompt_tokens
    assert stats["embeddings"] == {"requests": 1, "inputs": 2, "tokens": tokens, "errors": 0}
    spend = stats["cost"]["spend_usd"]
    assert spend["by_purpose"]["embeddings"] == pytest.approx(tokens * 2.0 / 1e6)
    assert stats["requests"]["total"] == 0  # not a chat request of any strategy


def test_no_embeddings_model_is_a_404_saying_how_to_configure_one(proxy: Proxy) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        proxy.openai.embeddings.create(model="text-embedding-3-small", input="x")
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "model_not_found"
    assert "embeddings: true" in error["message"]
    assert proxy.stats()["requests"]["refused"] == {"404": 1}


def test_several_embeddings_models_the_request_names_one(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.embeddings = True
    models = {"embed": embed_model(local.url), "other": embed_model(dead_url())}
    with make_proxy(models=models) as proxy:
        named = proxy.openai.embeddings.create(model="embed", input="x")
        unknown = proxy.http.post("/v1/embeddings", json={"model": "nope", "input": "x"})
    assert len(named.data) == 1
    assert unknown.status_code == 404 and "name one of: embed, other" in unknown.text


def test_a_server_without_embeddings_is_named(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.embeddings = False  # as llama-server started without --embeddings answers: 501
    with make_proxy(models={"embed": embed_model(local.url)}) as proxy:
        answer = proxy.http.post("/v1/embeddings", json={"input": "x"})
        stats = proxy.stats()
    assert answer.status_code == 502
    error = answer.json()["error"]
    assert "embed: HTTP 501" in error["message"] and "--embeddings" in error["message"]
    assert stats["embeddings"]["errors"] == 1


def test_a_dead_upstream_is_a_503_naming_it(make_proxy: MakeProxy) -> None:
    with make_proxy(models={"embed": embed_model(dead_url())}) as proxy:
        answer = proxy.http.post("/v1/embeddings", json={"input": "x"})
    assert answer.status_code == 503 and answer.json()["error"]["message"].startswith("embed:")


def test_the_upstreams_key_is_masked(make_proxy: MakeProxy, local: FakeLlamaServer) -> None:
    """The key goes to the upstream (provider openai), never to the client."""
    local.embeddings = False
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "EMBED_KEY": "sk-embed-secret-0123456789"}
    entry = embed_model(local.url, provider="openai", api_key="${EMBED_KEY}")
    with make_proxy(env=env, models={"embed": entry}) as proxy:
        answer = proxy.http.post("/v1/embeddings", json={"input": "x"})
    assert answer.status_code >= 400 and "sk-embed-secret" not in answer.text
    sent = [r for r in local.requests if r.path == "/v1/embeddings"][-1]
    assert sent.headers["authorization"] == "Bearer sk-embed-secret-0123456789"


def test_the_same_auth_as_chat(make_proxy: MakeProxy, local: FakeLlamaServer) -> None:
    local.embeddings = True
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "PROXY_KEYS": "sk-door-key-123456"}
    models = {"embed": embed_model(local.url)}
    with make_proxy(env=env, server={"api_keys": "${PROXY_KEYS}"}, models=models) as proxy:
        refused = proxy.http.post("/v1/embeddings", json={"input": "x"})
        headers = {"Authorization": "Bearer sk-door-key-123456"}
        allowed = proxy.http.post("/v1/embeddings", json={"input": "x"}, headers=headers)
    assert refused.status_code == 401 and allowed.status_code == 200
    assert len(bodies(local)) == 1


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
FIELDS = ["input", "model", "encoding_format", "dimensions", "user"]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=st.dictionaries(st.sampled_from(FIELDS), json_values) | json_values)
def test_malformed_requests_are_4xx_never_500(embedding: Proxy, body: Any) -> None:
    answer = embedding.http.post("/v1/embeddings", json=body)
    assert answer.status_code == 200 or 400 <= answer.status_code < 500, answer.text
    if answer.status_code != 200:
        assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
