"""The queue-backed fake upstream the pipeline's unit tests use: it answers what was
enqueued, in order, as the real upstream would hand it back, and records what it got."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from app.errors import (
    UpstreamBusy,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamTransportError,
    UpstreamUnavailable,
)
from app.upstreams import CloudState
from tests.fakes import Reply
from tests.support.chunks import text_of
from tests.support.fake_upstream import BrokenStream, FakeUpstream

T = TypeVar("T")
ASK = {"messages": [{"role": "user", "content": "Say hello to me"}]}


def run(awaitable: Awaitable[T]) -> T:
    async def main() -> T:
        return await awaitable

    return asyncio.run(main())


async def streamed(fake: FakeUpstream, **options: Any) -> list[list[Any]]:
    opened = await fake.open_stream(ASK, **options)
    return [batch async for batch in opened.batches()]


def test_answers_come_in_the_order_enqueued_and_history_keeps_the_bodies() -> None:
    fake = FakeUpstream("local", model="smollm2").enqueue("First.", Reply("Second one."))

    async def both() -> tuple[str, str]:
        first = await fake.complete({**ASK, "stream": False})
        second = await streamed(fake)
        return first.text, text_of(second)

    assert run(both()) == ("First.", "Second one.")
    whole, stream = fake.history
    assert whole == {**ASK, "model": "smollm2"}  # as sent: no stream key, the configured model
    assert stream["stream"] is True and stream["stream_options"] == {"include_usage": True}
    assert fake.queued == 0


def test_nothing_enqueued_is_a_test_mistake_unless_there_is_a_default() -> None:
    with pytest.raises(AssertionError, match="nothing enqueued"):
        run(FakeUpstream().complete(ASK))
    fake = FakeUpstream(default="Always this.")
    assert run(fake.complete(ASK)).text == run(fake.complete(ASK)).text == "Always this."


def test_a_whole_answer_is_read_by_the_real_parsing() -> None:
    fake = FakeUpstream("local", model="smollm2")
    fake.enqueue(Reply("One two three four.", token_probs=[0.9, 0.5, 0.2, 0.9, 0.9]))
    body = {**ASK, "max_tokens": 3, "logprobs": True, "top_logprobs": 2}
    done = run(fake.complete(body))
    assert (done.text, done.finish_reason, done.completion_tokens) == ("One two three", "length", 3)
    assert done.prompt_tokens == 4 and done.upstream == "local"
    assert done.body["model"] == "smollm2"  # the stand-in names its GGUF file; renamed
    assert [round(e["logprob"], 3) for e in done.choice["logprobs"]["content"]] == [
        -0.105,
        -0.693,
        -1.609,
    ]


def test_a_passed_on_answer_is_read_but_not_parsed() -> None:
    fake = FakeUpstream("local", model="smollm2").enqueue("Hi.")
    passed = run(fake.pass_on(ASK))
    assert passed.completion_tokens == 3 and passed.upstream == "local"  # 2 + end of generation
    assert b'"model":"smollm2"' in passed.content and passed.timings is not None


def test_tool_calls_are_answered_to_a_request_with_tools() -> None:
    call = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    fake = FakeUpstream().enqueue(Reply("", tool_calls=[call]))
    done = run(fake.complete({**ASK, "tools": [{"type": "function"}]}))
    assert done.finish_reason == "tool_calls"
    assert done.choice["message"]["tool_calls"][0]["function"] == call


def test_a_stream_comes_in_batches_of_events_per_read() -> None:
    one = run(streamed(FakeUpstream().enqueue("A b c.")))
    three = run(streamed(FakeUpstream(batch=3).enqueue("A b c.")))
    assert [len(b) for b in one] == [1, 1, 1, 1, 1, 1, 1]  # role, 4 tokens, finish, usage
    assert [len(b) for b in three] == [3, 3, 1]
    assert text_of(one) == text_of(three) == "A b c."


def test_cerebras_sends_its_usage_on_the_finishing_chunk() -> None:
    fake = FakeUpstream("cerebras", speaks="cerebras").enqueue("Hi there.")
    assert not fake.streams_usage
    batches = run(streamed(fake))
    last = batches[-1][-1].typed
    assert last.finish_reason == "stop" and last.usage.completion_tokens == 3
    assert "stream_options" not in fake.history[0]


def test_an_unread_stream_passes_content_chunks_as_their_bytes() -> None:
    batches = run(streamed(FakeUpstream(model="m").enqueue("Hi."), unread=True))
    kinds = ["read" if c.typed else "raw" for b in batches for c in b]
    assert kinds == ["raw", "raw", "raw", "read", "read"]
    assert b'"model":"m"' in batches[1][0].raw  # renamed as the real parser does


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("timeout", UpstreamTimeout),
        ("unavailable", UpstreamUnavailable),
        ("busy", UpstreamBusy),
        ("transport", UpstreamTransportError),
        ("protocol", UpstreamProtocolError),
        ("stream", UpstreamError),
        ("429", UpstreamRejected),
        ("400", UpstreamRejected),
    ],
)
def test_an_enqueued_error_of_each_kind_is_the_calls_failure(
    kind: str, error: type[UpstreamError]
) -> None:
    fake = FakeUpstream("cloud")
    fake.enqueue(fake.error(kind), fake.error(kind))
    with pytest.raises(error) as whole:
        run(fake.complete(ASK))
    with pytest.raises(error) as stream:
        run(fake.open_stream(ASK))
    assert whole.value.kind == stream.value.kind == kind
    assert whole.value.upstream == "cloud" and fake.last_error == stream.value.message
    assert len(fake.history) == 2  # both went out


def test_an_http_error_reply_is_read_by_the_real_rejection() -> None:
    fake = FakeUpstream("cloud", speaks="cerebras")
    fake.enqueue(Reply(status=429, headers={"retry-after": "7"}))
    with pytest.raises(UpstreamRejected) as caught:
        run(fake.complete(ASK))
    assert caught.value.status == 429 and caught.value.headers == {"retry-after": "7"}
    assert "Requests per minute limit exceeded" in caught.value.message


def test_a_stream_breaks_after_n_chunks() -> None:
    fake = FakeUpstream("local").enqueue(BrokenStream("One two three four.", after=2))
    seen: list[list[Any]] = []

    async def read() -> None:
        opened = await fake.open_stream(ASK)
        async for batch in opened.batches():
            seen.append(batch)

    with pytest.raises(UpstreamError) as caught:
        run(read())
    assert text_of(seen) == "One two" and caught.value.kind == "stream"
    assert fake.in_flight == 0 and fake.last_error == caught.value.message


def test_a_stream_cut_by_the_upstreams_error_event() -> None:
    fake = FakeUpstream("local").enqueue(Reply("One two three.", fail_after_chunks=1))
    with pytest.raises(UpstreamError, match="error mid-stream: Generation failed"):
        run(streamed(fake))


def test_a_stream_broken_after_no_content_has_sent_its_role_chunk() -> None:
    fake = FakeUpstream("local").enqueue(BrokenStream("Never.", after=0, error=None))

    async def read() -> tuple[dict[str, Any], str]:
        opened = await fake.open_stream(ASK)  # opened: the role chunk came
        with pytest.raises(UpstreamError) as caught:
            await anext(opened.rest)
        return opened.first[0].json()["choices"][0]["delta"], caught.value.kind

    assert run(read()) == ({"role": "assistant", "content": None}, "stream")


def test_availability_is_settable_and_a_refusal_makes_no_call() -> None:
    fake = FakeUpstream("cloud").enqueue("Kept for later.")
    assert fake.availability(100) == CloudState()
    fake.open_circuit(12)
    assert fake.availability(0).blocked == "verifier_unavailable"
    assert fake.availability(0).detail == "circuit open; next probe in 12.0 s"
    with pytest.raises(UpstreamUnavailable, match="circuit open"):
        run(fake.complete(ASK))
    fake.remove_key()
    assert fake.unavailable_reason is not None and not fake.availability(0).has_key
    with pytest.raises(UpstreamUnavailable, match="no API key"):
        run(fake.open_stream(ASK))
    assert fake.history == [] and fake.queued == 1  # refused without a call
    fake.restore()
    fake.low_budget(below=50)
    assert fake.availability(49) == CloudState()
    assert fake.availability(50).blocked == "cloud_budget_low"
    assert run(fake.complete(ASK)).text == "Kept for later."  # a low budget still calls


def test_wait_for_holds_the_answer_until_the_test_lets_it_go() -> None:
    release = asyncio.Event()
    fake = FakeUpstream(wait_for=release).enqueue("Held.")

    async def held() -> tuple[bool, int, str]:
        task = asyncio.ensure_future(fake.complete(ASK))
        for _ in range(5):
            await asyncio.sleep(0)
        waiting, in_flight = not task.done(), fake.in_flight
        release.set()
        return waiting, in_flight, (await task).text

    assert run(held()) == (True, 1, "Held.")
    assert fake.in_flight == 0


def test_hold_after_holds_a_stream_midway() -> None:
    release = asyncio.Event()
    fake = FakeUpstream(wait_for=release, hold_after=2).enqueue("One two three.")

    async def midway() -> tuple[str, str]:
        opened = await fake.open_stream(ASK)  # the first batch is there
        second = await anext(opened.rest)
        third = asyncio.ensure_future(anext(opened.rest))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not third.done()
        release.set()
        rest = [await third] + [batch async for batch in opened.rest]
        return text_of([opened.first, second]), text_of(rest)

    assert run(midway()) == ("One", " two three.")


def test_status_and_health_answer_like_a_single_upstream() -> None:
    fake = FakeUpstream()
    assert fake.status()["circuit"]["state"] == "closed"
    fake.open_circuit()
    assert fake.status()["circuit"]["state"] == "open"
    fake.health = False
    assert run(fake.healthy()) is False
    assert not fake.has_props and run(fake.props()) is None
    described = FakeUpstream(props={"modalities": {"vision": True}})
    assert described.has_props and run(described.props()) == {"modalities": {"vision": True}}
    assert fake.members == (fake,) and fake.base_url == "http://local.fake"
