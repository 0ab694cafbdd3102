"""Issue 30's typed wire: one reader counts a stream for the relay, the draft and the
hedge alike, over typed chunks that keep their bytes; few untyped JSON objects are left."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import orjson

from app.chat_completion import Chunk
from app.errors import UpstreamProtocolError
from app.pipeline.hedge import Hedge
from app.upstreams.interface import OpenStream
from app.upstreams.parsing import ChunkParser
from app.upstreams.relay import StreamRelay
from tests.support.chunks import read
from tests.support.fake_upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
HEAD = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
# a role chunk, an empty content, a null and an empty tool_calls: none brings a token
DELTAS: list[dict[str, Any]] = [
    {"role": "assistant", "content": None},
    {"content": ""},
    {"tool_calls": None},
    {"tool_calls": []},
    {"content": "Hi"},
    {"tool_calls": [HEAD]},
    {"content": " there", "tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
]


def stream_of(*, usage: bool) -> list[Chunk]:
    chunks = [read({"choices": [{"index": 0, "delta": d, "finish_reason": None}]}) for d in DELTAS]
    finish: dict[str, Any] = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    chunks.append(read(finish))
    if usage:
        chunks.append(read({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}}))
    return chunks


async def _rest(batches: list[list[Chunk]]) -> AsyncGenerator[list[Chunk]]:
    for batch in batches:
        yield batch


def relayed(
    chunks: list[Chunk], *, keep_usage: bool = False, upstream: FakeUpstream | None = None
) -> tuple[StreamRelay, bytes]:
    async def main() -> tuple[StreamRelay, bytes]:
        source = upstream or FakeUpstream("local")
        stream = OpenStream(source, chunks[:1], _rest([chunks[1:]]))
        relay = StreamRelay(stream, keep_usage=keep_usage)
        out = b"".join([part async for part in relay.chunks()])
        return relay, out + (relay.ending({"model_used": "local"}) if not relay.error else b"")

    return asyncio.run(main())


def test_the_relay_counts_a_delta_with_content_or_a_tool_call() -> None:
    relay, out = relayed(stream_of(usage=False))
    assert relay.error is None and relay.estimated
    assert relay.n_tokens == 3  # one per chunk that brought content or a tool call
    assert relay.text == "Hi there" and relay.tool_calls.calls()[0]["function"] == {
        "name": "f",
        "arguments": "{}",
    }
    events = [orjson.loads(line[6:]) for line in out.split(b"\n\n") if line[6:7] == b"{"]
    assert [e["choices"][0]["delta"] for e in events] == [*DELTAS, {}]  # each went on
    assert events[-1]["model_used"] == "local" and out.endswith(b"data: [DONE]\n\n")


def test_the_relay_takes_the_usage_over_its_count() -> None:
    relay, _ = relayed(stream_of(usage=True))
    assert (relay.n_tokens, relay.prompt_tokens, relay.estimated) == (9, 5, False)


USAGE = {"prompt_tokens": 5, "completion_tokens": 9}


def written(out: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in out.split(b"\n\n") if line[6:7] == b"{"]


def test_usage_asked_for_ends_the_stream_on_a_chunk_of_its_own_as_openai_sends_it() -> None:
    """Cerebras puts it on its finishing chunk; llama-server sends it after, and a stream
    that did both says it once."""
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": USAGE}
    cerebras = FakeUpstream("cerebras", speaks="cerebras")
    head = read({"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]})
    _, out = relayed([head, read(finish)], keep_usage=True, upstream=cerebras)
    both = [head, read(finish), read({"choices": [], "usage": USAGE})]
    _, twice = relayed(both, keep_usage=True)
    for events in (written(out), written(twice)):
        assert [e["usage"] for e in events if "usage" in e] == [USAGE]
        assert events[-1]["choices"] == [] and events[-1]["usage"] == USAGE
        assert events[-2]["choices"][0]["finish_reason"] == "stop"
        assert events[-2]["model_used"] == "local"


def test_the_hedge_counts_what_its_stream_sent_by_the_same_rule() -> None:
    cloud = FakeUpstream("cerebras", speaks="cerebras")
    cloud.enqueue("One two three.")

    async def main() -> tuple[int, str]:
        hedge = Hedge.stream(cloud, {"messages": [{"role": "user", "content": "Count"}]})
        answer = await hedge.answer()
        return hedge.tokens_sent, answer.text

    sent, text = asyncio.run(main())
    # "One", " two", " three", ".": the role chunk and the finishing one brought none
    assert text == "One two three." and sent == 4


def test_few_untyped_json_objects_are_left_in_the_request_path() -> None:
    """Issue 30: ``dict[str, Any]`` at most 10 times in app/pipeline and app/upstreams."""
    sources = [
        *(ROOT / "app" / "pipeline").glob("*.py"),
        *(ROOT / "app" / "upstreams").glob("*.py"),
    ]
    found = sum(len(re.findall(r"dict\[str, Any\]", p.read_text())) for p in sources)
    assert found <= 10


def test_a_chunk_that_is_not_utf8_is_refused_as_before() -> None:
    bad = b'{"choices":[],"note":"\xff"}'
    batch = ChunkParser("up", None).feed(b"data: " + bad + b"\n\n")
    assert batch.chunks == [] and isinstance(batch.error, UpstreamProtocolError)
    assert batch.error.message == "up: sent an invalid stream chunk"


def test_a_read_chunk_orjson_refuses_still_ends_a_relay_as_invalid() -> None:
    """msgspec skips a member it does not read (a number past a double); written again,
    the relay refuses it as the parser did before it read chunks typed."""
    finish = b'{"choices":[{"delta":{},"finish_reason":"stop"}],"x":1e400}'
    (odd,) = ChunkParser("up", None).feed(b"data: " + finish + b"\n\n").chunks
    relay, _ = relayed([stream_of(usage=False)[0], odd])
    assert relay.error is not None and relay.error.message == "local: sent an invalid stream chunk"
