"""D26: a stream that breaks after its text reached the client is continued, not ended.

The cloud's stream drops (or sends an error event, or stalls past ``timeout.read``) after
1, 10 or 100 content chunks; the next member of the verifier chain (a Cerebras-shaped
stand-in, told to go on: it has no prefill) or the local model (llama-server's assistant
prefill) continues the same answer from the text sent. The official SDKs get one stream
that ends normally, through each door. A finish_reason chunk ends an answer that never
sends ``[DONE]``; a tool call cut inside its arguments is not continued.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from app.upstreams.continuation import CONTINUE
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply, serve, tokenize
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, chat_bodies
from tests.support.tiers import process_fixture

pytestmark = pytest.mark.process

ASK = [{"role": "user", "content": "Why are there tides?"}]
SENTENCE = "The tide rises and falls twice a day, because the moon pulls on the oceans."
REFERENCE = " ".join([SENTENCE] * 10)  # 170 tokens: room to cut after 100
LONG_DRAFT = " ".join(["I think it may be the wind, perhaps, or something else."] * 4)
BACKUP_KEY = "sk-backup-7a8b9c0d"
CUTS = pytest.mark.parametrize("cut", [1, 10, 100])
CHAINED = {"X-Routing-Strategy": "cerebras_only"}
WEATHER_CALL = {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}


@process_fixture
def backup() -> Iterator[FakeCerebras]:
    """The chain's second verifier: OpenAI-shaped, no prefill (it is told to continue)."""
    fake = FakeCerebras(api_key=BACKUP_KEY, default=Reply(REFERENCE))
    fake.continues = True
    with serve(fake.app) as url:
        fake.url = url
        yield fake


def chained(make_proxy: MakeProxy, backup: FakeCerebras, **more: Any) -> Any:
    """A proxy whose verifier chain is ``[cerebras, backup]``."""
    backup_model = {
        "provider": "openai",
        "base_url": f"{backup.url}/v1",
        "model": "gpt-oss-120b",
        "api_key": "${BACKUP_KEY}",
        "max_retries": 0,
    }
    models = {"backup": backup_model, **more.pop("models", {})}
    return make_proxy(
        models=models,
        speculative_decoding={"verify_model": ["cerebras", "backup"]},
        env={"CEREBRAS_API_KEY": CLOUD_KEY, "BACKUP_KEY": BACKUP_KEY},
        **more,
    )


def streamed(proxy: Proxy, **kwargs: Any) -> tuple[str, list[Any]]:
    """The text the openai SDK put together from one stream, and its chunks."""
    stream = proxy.openai.chat.completions.create(
        model="auto", messages=ASK, stream=True, extra_headers=CHAINED, **kwargs
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def finish_of(chunks: list[Any]) -> Any:
    """The chunk that carries the finish_reason."""
    return next(c for c in chunks if c.choices and c.choices[0].finish_reason)


@CUTS
def test_a_chain_continues_a_cloud_stream_dropped_after_n_chunks(
    make_proxy: MakeProxy,
    cloud: FakeCerebras,
    local: FakeLlamaServer,
    backup: FakeCerebras,
    cut: int,
) -> None:
    cloud.enqueue(Reply(REFERENCE, fail_after_chunks=cut))
    with chained(make_proxy, backup) as proxy:
        text, chunks = streamed(proxy)
        stats = proxy.stats()
    assert text == REFERENCE  # one stream, the continuation only, nothing repeated
    finish = finish_of(chunks)
    assert finish.choices[0].finish_reason == "stop"
    assert finish.model_extra["continued_by"] == "backup"
    assert finish.model_extra["model_used"] == "cerebras"
    sent = "".join(tokenize(REFERENCE)[:cut])
    [asked] = chat_bodies(backup)
    assert asked["messages"][-2:] == [
        {"role": "assistant", "content": sent},
        {"role": "user", "content": CONTINUE},  # no prefill: told to go on
    ]
    assert chat_bodies(local) == []  # the chain's next member answered first
    assert stats["continuations"] == {"total": 1, "by_upstream": {"backup": 1}}
    assert stats["requests"]["by_outcome"] == {"passed_through": 1}
    assert stats["upstream_errors"] == {"cerebras:stream": 1}
    assert stats["tokens"]["cloud"] == len(tokenize(REFERENCE))  # both parts counted


@pytest.mark.parametrize("kind", ["error_event", "stall"])
def test_an_error_event_or_a_stall_past_read_is_continued_too(
    make_proxy: MakeProxy, cloud: FakeCerebras, backup: FakeCerebras, kind: str
) -> None:
    release = threading.Event()
    if kind == "error_event":
        cloud.stream_failure = lambda reply: [reply.error]  # type: ignore[method-assign]
        error = {"message": "model overloaded", "type": "server_error"}
        cloud.enqueue(Reply(REFERENCE, fail_after_chunks=10, error=error))
    else:  # head + 10 content chunks, then silence past timeout.read
        cloud.enqueue(Reply(REFERENCE, hold=release, hold_after=11))
    models = {"cerebras": {"timeout": {"read": 0.5}}}
    try:
        with chained(make_proxy, backup, models=models) as proxy:
            text, chunks = streamed(proxy)
            stats = proxy.stats()
    finally:
        release.set()
    assert text == REFERENCE
    assert finish_of(chunks).model_extra["continued_by"] == "backup"
    kinds = {"error_event": "cerebras:stream", "stall": "cerebras:timeout"}
    assert stats["upstream_errors"] == {kinds[kind]: 1}


@CUTS
def test_the_local_model_continues_the_speculative_live_relay_by_prefill(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    tmp_path: Path,
    cut: int,
) -> None:
    local.continues = True
    local.enqueue(Reply(LONG_DRAFT), Reply(REFERENCE))  # a cut draft: the cloud's live stream
    cloud.enqueue(Reply(REFERENCE, fail_after_chunks=cut))
    spec_log = tmp_path / "spec.jsonl"
    with make_proxy(logging={"spec_log_file": str(spec_log)}) as proxy:
        stream = proxy.openai.chat.completions.create(model="auto", messages=ASK, stream=True)
        chunks = list(stream)
        stats = proxy.stats()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REFERENCE
    finish = finish_of(chunks)
    assert finish.choices[0].finish_reason == "stop"
    report = finish.model_extra["speculative_decoding"]
    assert report["reasons"][-1] == "continued_by:local" and report["spilled_over"] is True
    n = len(tokenize(REFERENCE))  # llama-server counts its end-of-generation token too: + 1
    assert report["verified_tokens"] == n + 1  # both parts
    prefill = chat_bodies(local)[-1]["messages"][-1]
    assert prefill == {"role": "assistant", "content": "".join(tokenize(REFERENCE)[:cut])}
    [line] = [json.loads(line) for line in spec_log.read_text().splitlines()]
    assert (line["outcome"], line["continued_by"]) == ("spilled_over", "local")
    assert "continued_by:local" in line["reasons"]
    assert stats["continuations"]["by_upstream"] == {"local": 1}
    assert stats["tokens"] == {"local": 32 + n - cut + 1, "cloud": cut}  # the draft, both parts


def test_a_tool_call_cut_inside_its_arguments_is_not_continued(
    make_proxy: MakeProxy, cloud: FakeCerebras, local: FakeLlamaServer, backup: FakeCerebras
) -> None:
    cloud.enqueue(Reply("", tool_calls=[WEATHER_CALL], fail_after_chunks=3))
    with chained(make_proxy, backup) as proxy:
        with proxy.http.stream(
            "POST",
            "/v1/chat/completions",
            json={"messages": ASK, "stream": True},
            headers=CHAINED,
        ) as response:
            lines = [line for line in response.iter_lines() if line]
        stats = proxy.stats()
    assert lines[-1] == "data: [DONE]" and '"error"' in lines[-2]
    assert '"tool_calls"' in "".join(lines[:-2])  # the call had begun
    assert chat_bodies(backup) == [] and chat_bodies(local) == []  # nobody asked to go on
    assert stats["requests"]["by_outcome"] == {"error": 1}
    assert "continuations" not in stats or stats["continuations"]["total"] == 0


@pytest.mark.parametrize("include_usage", [False, True])
def test_a_finish_reason_ends_the_answer_without_done(
    make_proxy: MakeProxy, cloud: FakeCerebras, include_usage: bool
) -> None:
    """The stand-in sends its finish chunk (usage on it, as Cerebras does), then neither
    ``[DONE]`` nor an end: the answer is whole at once, not an error after ``read``."""
    cloud.enqueue(Reply(SENTENCE, stream_done=False, linger=True))
    read = 8.0
    models = {"cerebras": {"timeout": {"read": read}}}
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
    with make_proxy(models=models) as proxy:
        started = time.perf_counter()
        text, chunks = streamed(proxy, **options)
        took = time.perf_counter() - started
        stats = proxy.stats()
    assert text == SENTENCE
    assert finish_of(chunks).model_extra["model_used"] == "cerebras"
    assert took < read  # before: the answer waited for timeout.read, then an error event
    assert stats["requests"]["by_outcome"] == {"passed_through": 1}
    assert stats["upstream_errors"] == {}
    if include_usage:
        assert chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens == len(tokenize(SENTENCE))


def test_the_responses_door_streams_a_continued_answer(
    make_proxy: MakeProxy, cloud: FakeCerebras, backup: FakeCerebras
) -> None:
    cloud.enqueue(Reply(REFERENCE, fail_after_chunks=10))
    with chained(make_proxy, backup) as proxy:
        client = openai.OpenAI(
            base_url=f"{proxy.url}/v1", api_key="unused", max_retries=0, default_headers=CHAINED
        )
        with client.responses.stream(model="auto", input=ASK[0]["content"]) as events:
            kinds = [event.type for event in events]
            final = events.get_final_response()
        stats = proxy.stats()
    assert final.output_text == REFERENCE
    assert kinds[-1] == "response.completed" and "error" not in kinds
    assert stats["continuations"]["by_upstream"] == {"backup": 1}


def test_the_messages_door_streams_a_continued_answer(
    make_proxy: MakeProxy, cloud: FakeCerebras, backup: FakeCerebras
) -> None:
    cloud.enqueue(Reply(REFERENCE, fail_after_chunks=10))
    with chained(make_proxy, backup) as proxy:
        client = anthropic.Anthropic(
            base_url=proxy.url, api_key="unused", max_retries=0, default_headers=CHAINED
        )
        with client.messages.stream(model="auto", max_tokens=512, messages=ASK) as events:
            kinds = [event.type for event in events]
            final = events.get_final_message()
        stats = proxy.stats()
    assert "".join(b.text for b in final.content if b.type == "text") == REFERENCE
    assert final.stop_reason == "end_turn" and kinds[-1] == "message_stop"
    assert "error" not in kinds
    assert stats["continuations"]["by_upstream"] == {"backup": 1}
    assert final.usage.output_tokens == len(tokenize(REFERENCE))  # both parts


def test_a_continuation_that_breaks_too_is_continued_by_the_next(
    make_proxy: MakeProxy, cloud: FakeCerebras, local: FakeLlamaServer, backup: FakeCerebras
) -> None:
    """Each part is continued from everything sent so far: the chain's next member breaks
    as well, and the local model ends the answer by prefill."""
    local.continues = True
    local.enqueue(Reply(REFERENCE))
    cloud.enqueue(Reply(REFERENCE, fail_after_chunks=10))
    backup.enqueue(Reply(REFERENCE, fail_after_chunks=20))  # 20 more, then it drops
    with chained(make_proxy, backup) as proxy:
        text, chunks = streamed(proxy)
        stats = proxy.stats()
    assert text == REFERENCE
    assert finish_of(chunks).model_extra["continued_by"] == "local"
    prefill = chat_bodies(local)[-1]["messages"][-1]
    assert prefill == {"role": "assistant", "content": "".join(tokenize(REFERENCE)[:30])}
    assert stats["upstream_errors"] == {"cerebras:stream": 1, "backup:stream": 1}
    n = len(tokenize(REFERENCE))  # each part's tokens, and llama-server's end token
    assert stats["tokens"] == {"cloud": 30, "local": n - 30 + 1}


@CUTS
def test_a_local_pools_other_server_continues_a_local_stream(
    make_proxy: MakeProxy, local: FakeLlamaServer, cut: int
) -> None:
    """``local_only`` stays local: the server that broke is one of a pool, and another of
    its servers (the same model) goes on by prefill. Once the stream ended in an error."""
    first = FakeLlamaServer()
    first.enqueue(Reply(REFERENCE, fail_after_chunks=cut))
    local.continues, local.default = True, Reply(REFERENCE)
    with serve(first.app) as first_url:
        # ties take turns from the first member: the first call is first_url's
        pool = {"local": {"base_url": None, "base_urls": [first_url, local.url]}}
        with make_proxy(models=pool) as proxy:
            stream = proxy.openai.chat.completions.create(model="local", messages=ASK, stream=True)
            chunks = list(stream)
            stats = proxy.stats()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REFERENCE
    assert finish_of(chunks).model_extra["continued_by"] == "local"
    assert len({(c.id, c.model) for c in chunks}) == 1  # one answer
    prefill = chat_bodies(local)[-1]["messages"][-1]
    assert prefill == {"role": "assistant", "content": "".join(tokenize(REFERENCE)[:cut])}
    assert stats["continuations"]["by_upstream"] == {"local": 1}
    assert stats["upstream_errors"] == {"local:stream": 1}
    assert stats["requests"]["errors"] == 0


def test_a_continued_stream_is_one_answer_with_the_whole_usage(
    make_proxy: MakeProxy, cloud: FakeCerebras, local: FakeLlamaServer
) -> None:
    """Once the chunks after the break were the local model's own (its id, its model) and
    the usage its part's alone, its prompt holding the prefill."""
    local.continues = True
    local.enqueue(Reply(REFERENCE))
    cloud.enqueue(Reply(REFERENCE), Reply(REFERENCE, fail_after_chunks=10))
    with make_proxy() as proxy:
        whole = list(
            proxy.openai.chat.completions.create(
                model="auto",
                messages=ASK,
                stream=True,
                stream_options={"include_usage": True},
                extra_headers=CHAINED,
            )
        )
        text, chunks = streamed(proxy, stream_options={"include_usage": True})
    assert text == REFERENCE and finish_of(chunks).model_extra["continued_by"] == "local"
    assert {(c.id, c.model, c.created) for c in chunks} == {
        (chunks[0].id, "gpt-oss-120b", chunks[0].created)
    }
    n = len(tokenize(REFERENCE))
    usage, unbroken = chunks[-1].usage, whole[-1].usage
    assert usage is not None and unbroken is not None
    assert usage.completion_tokens == n + 1  # both parts (and llama-server's end token)
    prefilled = chat_bodies(local)[-1]["messages"][-1]["content"]
    assert prefilled == "".join(tokenize(REFERENCE)[:10])
    # the client's prompt, as the same request answered whole counts it (the prefill taken out)
    assert usage.prompt_tokens == unbroken.prompt_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is None  # the continuation's call's own: left out


def test_a_llama_server_verifiers_stream_is_read_so_it_can_be_continued(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    """A verifier served by llama-server streams its usage, and its stream once passed
    unread: broken, it was continued from nothing (the answer said twice, two ids)."""
    remote = FakeLlamaServer()
    remote.enqueue(Reply(REFERENCE, fail_after_chunks=10))
    local.continues, local.default = True, Reply(REFERENCE)
    with serve(remote.app) as remote_url:
        big = {"provider": "llama_server", "base_url": remote_url, "model": "big"}
        with make_proxy(
            models={"big": big}, speculative_decoding={"verify_model": ["big"]}
        ) as proxy:
            text, chunks = streamed(proxy)
    assert text == REFERENCE
    assert len({(c.id, c.model) for c in chunks}) == 1
    prefill = chat_bodies(local)[-1]["messages"][-1]
    assert prefill == {"role": "assistant", "content": "".join(tokenize(REFERENCE)[:10])}
