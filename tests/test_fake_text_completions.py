"""The stand-ins' legacy ``/v1/completions`` against what the real upstreams send: the
llama-server stand-in against the recorded answers (``tests/fixtures/llama_server``), the
Cerebras one against its documented types (its SDK's ``Completion``: OpenAI's shape plus
``time_info``); and the proxy's upstream calls reading both as they read chat."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from openai.types import Completion

from app.chat_completion import Chunk
from app.config import ModelConfig
from app.sse import StreamReader
from app.upstreams import build_upstream, create_client
from app.upstreams.text_completion import ANSWER_DECODER, CHUNK_DECODER, completions_url, is_text
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply, serve, tokenize
from tests.support.tiers import process_fixture
from tests.test_fakes_match_reality import FIXTURES, INDEX, shape, sse_payloads

KEY = "csk-text-completions-0123"
LONG = Reply("one two three four five six seven eight nine ten")


@process_fixture
def llama() -> Iterator[tuple[FakeLlamaServer, httpx.Client]]:
    server = FakeLlamaServer()
    with serve(server.app) as url, httpx.Client(base_url=url) as client:
        server.url = url
        yield server, client


@process_fixture
def cerebras() -> Iterator[tuple[FakeCerebras, httpx.Client]]:
    server = FakeCerebras(api_key=KEY)
    headers = {"Authorization": f"Bearer {KEY}"}
    with serve(server.app) as url, httpx.Client(base_url=url, headers=headers) as client:
        server.url = url
        yield server, client


def recorded(name: str) -> tuple[dict[str, Any], bytes]:
    return INDEX[name]["request"], (FIXTURES / name).read_bytes()


def test_the_dialect_and_its_path() -> None:
    assert is_text({"prompt": "a"}) and not is_text({"prompt": "a", "messages": []})
    assert not is_text({"messages": []}) and not is_text(None)
    assert completions_url("http://h:1") == "http://h:1/v1/completions"
    assert completions_url("https://api.cerebras.ai/v1") == "https://api.cerebras.ai/v1/completions"


def test_the_views_read_the_recorded_answers_as_chat() -> None:
    _, whole = recorded("text_completion.json")
    view = ANSWER_DECODER.decode(whole)
    real = orjson.loads(whole)
    assert view.choices[0].message.content == real["choices"][0]["text"]
    assert view.usage is not None and view.usage.completion_tokens == 4
    _, stream = recorded("text_completion_stream.sse")
    reader = StreamReader()
    finish = None
    for payload in sse_payloads(stream.decode()):
        if payload == "[DONE]":
            continue
        typed = CHUNK_DECODER.decode(orjson.dumps(payload))
        finish = reader.take(Chunk(orjson.dumps(payload), typed))[1] or finish
    texts = [p["choices"][0]["text"] for p in sse_payloads(stream.decode())[:-1]]
    assert "".join(reader.text) == "".join(texts) and finish == "length"
    assert reader.completion_tokens == 3 and reader.first_token_at is not None


@pytest.mark.process
def test_the_llama_server_stand_in_answers_as_recorded(
    llama: tuple[FakeLlamaServer, httpx.Client],
) -> None:
    server, client = llama
    request, whole = recorded("text_completion.json")
    server.enqueue(LONG)
    ours, real = client.post("/v1/completions", json=request).json(), orjson.loads(whole)
    assert shape(ours) == shape(real)
    assert ours["object"] == "text_completion" and ours["choices"][0]["finish_reason"] == "length"
    request, stream = recorded("text_completion_stream.sse")
    server.enqueue(LONG)
    mine = sse_payloads(client.post("/v1/completions", json=request).text)
    theirs = sse_payloads(stream.decode())
    assert mine[-1] == theirs[-1] == "[DONE]"
    assert len(mine) == len(theirs)  # no role chunk; one per token, then the finish
    assert shape(mine[:-2]) == shape(theirs[:-2])  # the text chunks
    assert shape(mine[-2]) == shape(theirs[-2])  # the finish: usage, timings, unasked
    assert server.requests[-1].path == "/v1/completions"


@pytest.mark.process
@pytest.mark.parametrize("logprobs", [None, 2])
def test_the_cerebras_stand_in_answers_as_documented(
    cerebras: tuple[FakeCerebras, httpx.Client], logprobs: int | None
) -> None:
    server, client = cerebras
    body: dict[str, Any] = {"model": "gpt-oss-120b", "prompt": "Count:", "max_tokens": 4}
    if logprobs is not None:
        body["logprobs"] = logprobs
    server.enqueue(LONG)
    answer = client.post("/v1/completions", json=body).json()
    Completion.model_validate(answer)
    assert set(answer) >= {"id", "choices", "created", "model", "object", "usage", "time_info"}
    choice = answer["choices"][0]
    assert answer["object"] == "text_completion" and choice["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == len(tokenize(choice["text"])) == 4
    if logprobs is not None:
        legacy = choice["logprobs"]
        assert "".join(legacy["tokens"]) == choice["text"]
        assert all(len(top) == 2 for top in legacy["top_logprobs"])
        assert len(legacy["text_offset"]) == len(legacy["token_logprobs"]) == 4
    server.enqueue(LONG)
    chunks = sse_payloads(client.post("/v1/completions", json=body | {"stream": True}).text)
    payloads = [c for c in chunks if c != "[DONE]"]
    assert {c["object"] for c in payloads} == {"text_completion"}
    assert all("usage" not in c and "time_info" not in c for c in payloads[:-1])
    assert {"usage", "time_info"} <= set(payloads[-1])
    assert "".join(c["choices"][0]["text"] for c in payloads) == choice["text"]
    unknown = client.post("/v1/completions", json=body | {"model": "nope"})
    assert unknown.status_code == 404 and unknown.json()["code"] == "model_not_found"


async def _through_the_upstream(
    provider: str, url: str, stream: bool
) -> tuple[str, int | None, str | None]:
    """A legacy completion through the proxy's own upstream call: its text, its usage's
    completion tokens and its finish, as the pipeline's readers see them."""
    key = KEY if provider == "cerebras" else None
    model = "gpt-oss-120b" if provider == "cerebras" else "smol"
    config = ModelConfig(provider=provider, model=model, base_url=url, api_key=key)
    body = {"prompt": "Count:", "max_tokens": 4}
    async with create_client(config) as client:
        upstream = build_upstream("up", config, client)
        if not stream:
            answer = await upstream.pass_on(body)
            choice = answer.view.choices[0]
            assert orjson.loads(answer.content)["object"] == "text_completion"
            return choice.message.content or "", answer.completion_tokens, choice.finish_reason
        opened = await upstream.open_stream(body, unread=upstream.streams_usage)
        reader, finish = StreamReader(), None
        async for batch in opened.batches():
            for chunk in batch:
                finish = reader.take(chunk)[1] or finish
        return "".join(reader.text), reader.completion_tokens, finish


@pytest.mark.process
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_upstream_calls_take_a_text_completion(
    llama: tuple[FakeLlamaServer, httpx.Client],
    cerebras: tuple[FakeCerebras, httpx.Client],
    stream: bool,
) -> None:
    for fake, provider in ((llama[0], "llama_server"), (cerebras[0], "cerebras")):
        fake.enqueue(LONG)
        text, n, finish = asyncio.run(_through_the_upstream(provider, fake.url, stream))
        assert (text, n, finish) == ("one two three four", 4, "length")
        sent = fake.requests[-1]
        assert sent.path == "/v1/completions" and sent.json["prompt"] == "Count:"
        assert sent.json["max_tokens"] == 4 and "max_completion_tokens" not in sent.json
