"""The one stream reader on recorded llama-server streams: the counts it keeps, and the
answer structs read from the same bytes."""

from __future__ import annotations

from pathlib import Path

import orjson

from app.chat_completion import CHUNK_DECODER, COMPLETION_DECODER, ChatCompletionChunk, Delta
from app.sse import StreamReader
from app.upstreams.parsing import ChunkParser
from app.upstreams.passthrough import read_answer
from tests.support.chunks import read

FIXTURES = Path(__file__).parent.parent / "fixtures" / "llama_server"


def sse_of(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


def _read(name: str, *, unread: bool) -> StreamReader:
    reader = StreamReader()
    sse = (FIXTURES / f"{name}_stream.sse").read_bytes()
    for chunk in ChunkParser("local", None, unread=unread).feed(sse).chunks:
        reader.take(chunk)  # an unread one (raw bytes only) is counted without being read
    return reader


def test_parsed_and_unread_streams_count_alike_but_the_role_chunk() -> None:
    for name in ("chat_stop", "chat_logprobs"):
        parsed, unread = _read(name, unread=False), _read(name, unread=True)
        # an unread chunk is not looked into: the role chunk counts (an estimate only,
        # used when a stream breaks before its usage)
        assert unread.content_chunks == parsed.content_chunks + 1 > 1
        assert parsed.first_token_at is not None and unread.first_token_at is not None
        whole = orjson.loads((FIXTURES / f"{name}.json").read_bytes())
        assert "".join(parsed.text).startswith(whole["choices"][0]["message"]["content"][:1])


def test_a_tool_call_delta_is_counted_and_joined() -> None:
    reader = StreamReader()
    head = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
    delta, finish = reader.take(read({"choices": [{"delta": {"tool_calls": [head]}}]}))
    assert delta.tool_calls == [head] and finish is None
    _, finish = reader.take(
        read(
            {
                "choices": [{"delta": {}, "finish_reason": "tool_calls"}],
                "usage": {"completion_tokens": 7},
            }
        )
    )
    assert finish == "tool_calls"
    assert (reader.tool_call_deltas, reader.content_chunks, reader.completion_tokens) == (1, 0, 7)
    assert reader.tool_calls.calls()[0]["function"]["name"] == "f"


def test_draft_counters_add_up_over_chunks() -> None:
    reader = StreamReader()
    for n in (3, 4):
        reader.take(read({"timings": {"draft_n": n, "draft_n_accepted": n - 1}}))
    assert reader.speculation == {"draft_n": 7, "draft_n_accepted": 5}


def test_structs_read_the_recorded_answers_and_chunks() -> None:
    for name in ("chat_stop", "chat_logprobs"):
        content = (FIXTURES / f"{name}.json").read_bytes()
        typed = COMPLETION_DECODER.decode(content)
        assert (
            typed.choices[0].message.content
            == orjson.loads(content)["choices"][0]["message"]["content"]
        )
        assert read_answer("local", content, None)[1].usage == typed.usage
        sse = (FIXTURES / f"{name}_stream.sse").read_bytes()
        lines = [ln[6:] for ln in sse.split(b"\n") if ln.startswith(b"data: {")]
        chunks = [CHUNK_DECODER.decode(line) for line in lines]
        assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
        assert any(c.finish_reason for c in chunks)


def test_a_delta_carries_a_token_when_it_has_content_or_a_tool_call() -> None:
    """The one rule the relay, the draft and the hedge count by: a role-only delta, an empty
    content, a null or empty ``tool_calls`` bring nothing."""
    reader = StreamReader()
    empty = [{"role": "assistant", "content": None}, {"content": ""}, {"tool_calls": None}]
    for delta in [*empty, {"tool_calls": []}, {"content": "Hi"}, {"tool_calls": [{"index": 0}]}]:
        reader.take(read({"choices": [{"delta": delta}]}))
    assert (reader.token_chunks, reader.content_chunks, reader.tool_call_deltas) == (2, 1, 1)
    assert not Delta(tool_calls=[]).carries and Delta(content="x").carries


def test_a_read_chunk_keeps_its_bytes_and_names_the_configured_model() -> None:
    payload = (
        b'{"model":"/models/x.gguf","choices":[{"delta":{"content":"Hi"},"finish_reason":"stop"}]}'
    )
    (chunk,) = ChunkParser("local", None, model="local-model").feed(sse_of(payload)).chunks
    assert chunk.raw == payload and chunk.typed is not None
    assert chunk.typed.delta == Delta(content="Hi") and chunk.typed.finish_reason == "stop"
    assert chunk.json()["model"] == "local-model"  # written again, as the relay writes it
