"""Event-stream framing: payloads come out the same however the network cuts the bytes."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.sse import DataLines, passes_unread

STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"a": 1}\n\n'
    b"event: message\r\n"
    b'data: {"b": "x\\ny"}\r\n\r\n'
    b"data: [DONE]"  # unterminated: the body just ends
)
PAYLOADS = [b'{"a": 1}', b'{"b": "x\\ny"}', b"[DONE]"]


def feed_all(blocks: list[bytes]) -> list[bytes]:
    lines = DataLines()
    out = [p for block in blocks for p in lines.feed(block)]
    return out + lines.feed(b"\n")  # the end of the body completes the last line


@given(st.sets(st.integers(min_value=1, max_value=len(STREAM) - 1)))
def test_any_cut_gives_the_same_payloads(cuts: set[int]) -> None:
    edges = [0, *sorted(cuts), len(STREAM)]
    blocks = [STREAM[a:b] for a, b in itertools.pairwise(edges)]
    assert feed_all(blocks) == PAYLOADS


def test_an_endless_line_is_refused() -> None:
    lines = DataLines(limit=1024)
    lines.feed(b"data: " + b"x" * 1000)
    with pytest.raises(ValueError, match="over 1024 bytes"):
        lines.feed(b"x" * 100)


@pytest.mark.parametrize(
    ("payload", "unread"),
    [
        (b'{"choices":[{"finish_reason":null,"delta":{"content":"x"}}]}', True),
        (b'{"choices":[{"finish_reason":"stop","delta":{}}]}', False),
        (b'{"choices":[],"usage":{"completion_tokens":3}}', False),
        (b'{"choices":[{"finish_reason":null}],"usage":null}', False),  # parsed, to be safe
        (b'{"error":{"message":"boom"},"finish_reason":null}', False),
        (b'{"choices":[{"finish_reason": null,"delta":{}}]}', False),  # other spelling: parsed
        # Generated text cannot fake the key: its quotes are escaped.
        (
            b'{"choices":[{"finish_reason":"stop","delta":{"content":"\\"finish_reason\\":null"}}]}',
            False,
        ),
    ],
)
def test_only_chunks_that_finish_nothing_pass_unread(payload: bytes, unread: bool) -> None:
    assert passes_unread(payload) is unread
