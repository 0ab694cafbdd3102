"""``POST /v1/embeddings`` through the proxy to a real llama-server it launches itself with
``embeddings: true`` (so ``--embeddings --pooling mean``), asked with the official openai SDK."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from app.config import settings_from_mapping
from app.doors.embeddings import floats_of
from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.real.support import LOCAL_TIMEOUT, SERVER_ARGS, our_child
from tests.support.proxy import CLOUD_KEY, proxy_config, run_proxy

pytestmark = pytest.mark.real
N_EMBD = 576  # SmolLM2-135M's hidden size


def test_openai_sdk_embeddings_from_a_real_llama_server(
    real_assets: tuple[Path, Path], local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    _, model = real_assets  # fails the test, not skips it, when binary or model is missing
    embed = {
        "provider": "llama_server",
        "model": "smollm2-embed",
        "embeddings": True,
        "launch": {"port": 0, "args": SERVER_ARGS, "startup_timeout": 60},
        "timeout": LOCAL_TIMEOUT,
    }
    tree = proxy_config(local.url, cloud.url, models={"embed": embed})
    settings = settings_from_mapping(tree, env={"CEREBRAS_API_KEY": CLOUD_KEY})
    with run_proxy(settings, startup_timeout=90) as proxy:
        server = proxy.stats()["local_servers"]["embed"]
        assert server["model"] == str(model) and our_child(server["pid"])
        argv = Path(f"/proc/{server['pid']}/cmdline").read_bytes().split(b"\0")
        assert b"--embeddings" in argv and argv[argv.index(b"--pooling") + 1] == b"mean"

        one = proxy.openai.embeddings.create(
            model="text-embedding-3-small", input="hello world", encoding_format="float"
        )
        many = proxy.openai.embeddings.create(
            model="embed", input=["hello world", "the sea"], encoding_format="float"
        )
        # the SDK's default: it asks for base64 and decodes it itself
        coded = proxy.openai.embeddings.create(model="embed", input=["hello world", "the sea"])
        encoded = proxy.openai.embeddings.create(  # asked for: the string is the client's
            model="embed", input="hello world", encoding_format="base64"
        )
        raw = proxy.http.post(
            "/v1/embeddings", json={"input": "hello world", "encoding_format": "base64"}
        ).json()
        direct = httpx.post(
            f"{server['base_url']}/v1/embeddings", json={"input": "hello world"}, timeout=30
        ).json()
        stats = proxy.stats()
        # longer than its physical batch: llama-server says so with a 500, the client's 400
        too_long = proxy.http.post("/v1/embeddings", json={"input": "the sea " * 3000})
        refused = proxy.stats()["embeddings"]["errors"]

    (vector,) = [d.embedding for d in one.data]
    assert len(vector) == N_EMBD and vector == direct["data"][0]["embedding"]
    assert one.usage.prompt_tokens == direct["usage"]["prompt_tokens"] > 0
    assert [d.index for d in many.data] == [0, 1]
    assert many.data[0].embedding == vector and many.data[1].embedding != vector
    for floats, decoded in zip(many.data, coded.data, strict=True):
        assert decoded.embedding == pytest.approx(floats.embedding, rel=1e-6, abs=1e-9)
    text = encoded.data[0].embedding
    assert isinstance(text, str) and len(text) == 4 * ((4 * N_EMBD + 2) // 3)
    assert floats_of(text) == pytest.approx(vector, rel=1e-6, abs=1e-9)  # little-endian float32
    assert raw["data"][0]["embedding"] == text
    assert stats["embeddings"]["requests"] == 5 and stats["embeddings"]["inputs"] == 7
    assert stats["embeddings"]["errors"] == 0
    assert too_long.status_code == 400 and refused == 1
    error = too_long.json()["error"]
    assert (
        error["type"] == "invalid_request_error" and "is too large to process" in error["message"]
    )
