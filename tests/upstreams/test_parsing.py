"""The parsing layer on its own: answers, stream chunks (bad ones included) and error
bodies, bytes in and values or errors out; the configured key never comes back."""

from __future__ import annotations

import orjson
import pytest
from pydantic import SecretStr

from app.chat_completion import CHUNK_DECODER, Chunk
from app.errors import UpstreamError, UpstreamProtocolError
from app.upstreams.parsing import (
    ChunkParser,
    completion_body,
    error_message,
    redact,
    rejection,
)

KEY = SecretStr("csk-secret-0123")
CONTENT = b'{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}'
FINISH = b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'


def sse(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


def read(payload: bytes) -> Chunk:
    """A chunk read as the parser reads it: its bytes and what it says."""
    return Chunk(payload, CHUNK_DECODER.decode(payload))


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"error": {"message": "bad", "code": 42}}, ("bad", "42")),  # nested (OpenAI)
        ({"message": "flat", "code": None}, ("flat", None)),  # flat (Cerebras)
        ({"error": "just text"}, ("just text", None)),
        ({"detail": "other"}, ("no error message", None)),
        (None, ("no error message", None)),
    ],
)
def test_error_message_shapes(payload: object, expected: tuple[str, str | None]) -> None:
    assert error_message(payload) == expected


def test_redact_masks_the_key_only_when_there_is_one() -> None:
    assert redact("Wrong API Key csk-secret-0123", KEY) == "Wrong API Key ***"
    assert redact("Wrong API Key csk-secret-0123", None) == "Wrong API Key csk-secret-0123"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"<html>oops", "up: answered with invalid JSON"),
        (b"[1, 2]", "up: answer is not a JSON object"),
        (b'{"choices": []}', "up: answer has no choices"),
        (b'{"choices": {"0": {}}}', "up: answer has no choices"),
    ],
)
def test_completion_body_refuses_unreadable_answers(content: bytes, message: str) -> None:
    with pytest.raises(UpstreamProtocolError) as caught:
        completion_body("up", content)
    assert caught.value.message == message


def test_completion_body_keeps_the_whole_object() -> None:
    body = {"choices": [{"message": {"content": "Hi"}}], "usage": {"completion_tokens": 1}}
    assert completion_body("up", orjson.dumps(body)) == body


def test_rejection_masks_the_key_and_passes_on_retry_after() -> None:
    body = orjson.dumps(
        {
            "message": "Wrong API Key csk-secret-0123",
            "code": "wrong_api_key",
            "param": "key csk-secret-0123",
        }
    )
    headers = {"retry-after": "2", "x-ratelimit-remaining-tokens-minute": "0"}
    error = rejection("up", 401, headers, body, KEY)
    assert error.message == "up: HTTP 401: Wrong API Key ***"
    assert (error.code, error.kind, error.status) == ("wrong_api_key", "401", 502)
    assert error.param == "key ***"
    assert error.headers == {"retry-after": "2"}


def test_rejection_with_an_unreadable_body() -> None:
    assert rejection("up", 503, {}, b"", None).message == "up: HTTP 503: no error message"


def test_stream_chunks_across_cut_blocks_until_done() -> None:
    parser = ChunkParser("up", None)
    whole = sse(CONTENT, FINISH, b"[DONE]", CONTENT)
    first, second = parser.feed(whole[:10]), parser.feed(whole[10:])
    assert first.chunks == [] and not first.done
    assert second.chunks == [read(CONTENT), read(FINISH)]
    assert [c.json() for c in second.chunks] == [orjson.loads(CONTENT), orjson.loads(FINISH)]
    assert second.done and second.error is None  # nothing after [DONE] is read


def test_end_of_body_ends_the_stream() -> None:
    parser = ChunkParser("up", None)
    assert not parser.feed(b"data: " + CONTENT).done
    last = parser.feed(b"")  # the last line had no newline: it still counts
    assert last.done and last.chunks == [read(CONTENT)]


def test_unread_passes_content_chunks_raw_and_parses_the_rest() -> None:
    batch = ChunkParser("up", None, unread=True).feed(sse(CONTENT, FINISH))
    assert batch.chunks == [Chunk(CONTENT), read(FINISH)]  # the first: its bytes only


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (b"{not json", "up: sent an invalid stream chunk"),
        (b"[1]", "up: sent a non-object chunk"),
    ],
)
def test_bad_chunk_ends_the_batch_after_the_good_ones(bad: bytes, message: str) -> None:
    batch = ChunkParser("up", None).feed(sse(CONTENT, bad, FINISH))
    assert batch.chunks == [read(CONTENT)]  # the good chunk before it still goes out
    assert isinstance(batch.error, UpstreamProtocolError) and batch.error.message == message
    assert not batch.done


def test_error_event_mid_stream_is_a_stream_error_with_the_key_masked() -> None:
    event = orjson.dumps({"error": {"message": "key csk-secret-0123 revoked", "code": 401}})
    batch = ChunkParser("up", KEY).feed(sse(event))
    assert type(batch.error) is UpstreamError and batch.error.kind == "stream"
    assert batch.error.message == "up: error mid-stream: key *** revoked"
    assert batch.error.code == "401"


def test_overlong_event_line_raises() -> None:
    parser = ChunkParser("up", None)
    with pytest.raises(UpstreamProtocolError, match=r"up: stream: an event line over \d+ bytes"):
        parser.feed(b"data: " + b"x" * (1 << 20))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (b'{"choices":[{"delta":"x"}]}', "up: chunk choices[0].delta is not an object"),
        (
            b'{"choices":[{"delta":{"content":5}}]}',
            "up: chunk choices[0].delta.content is not text",
        ),
        (b'{"choices":[{"finish_reason":1}]}', "up: chunk choices[0].finish_reason is not text"),
        (
            b'{"choices":[{"logprobs":{"content":[1]}}]}',
            "up: chunk choices[0].logprobs.content is not a list of objects",
        ),
        (
            b'{"choices":[],"usage":{"completion_tokens":-1}}',
            "up: usage.completion_tokens is not a count",
        ),
        (
            b'{"choices":[],"usage":{"completion_tokens":true}}',
            "up: usage.completion_tokens is not a count",
        ),
        (b'{"choices":"x"}', "up: chunk choices is not a list"),
    ],
)
def test_a_chunk_of_the_wrong_shape_is_named_as_the_shape_check_names_it(
    bad: bytes, message: str
) -> None:
    """msgspec reads the chunk; one it refuses is named by ``app.upstreams.shape``."""
    batch = ChunkParser("up", None).feed(sse(bad))
    assert isinstance(batch.error, UpstreamProtocolError) and batch.error.message == message


def test_a_count_past_63_bits_is_refused_as_msgspec_names_it() -> None:
    batch = ChunkParser("up", None).feed(
        sse(b'{"choices":[],"usage":{"prompt_tokens":%d}}' % 2**63)
    )
    assert isinstance(batch.error, UpstreamProtocolError)
    assert batch.error.message.startswith("up: chunk: ") and "prompt_tokens" in batch.error.message


def test_a_flat_error_event_is_a_stream_error() -> None:
    batch = ChunkParser("up", None).feed(sse(b'{"message":"overloaded","code":"busy"}'))
    assert type(batch.error) is UpstreamError
    assert (batch.error.message, batch.error.code) == ("up: error mid-stream: overloaded", "busy")
