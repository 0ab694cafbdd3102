"""Event-stream framing: payloads come out the same however the network cuts the bytes."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.sse import DataLines

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
