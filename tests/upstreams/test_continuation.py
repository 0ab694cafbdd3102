"""The pure parts of continuing a broken stream (``app.upstreams.continuation``): the
continuation's request, and who may continue whose stream."""

from __future__ import annotations

from typing import Any

import pytest

from app.upstreams.continuation import CONTINUE, continuation, continue_body
from app.upstreams.group import UpstreamGroup
from app.upstreams.interface import OpenStream
from app.upstreams.relay import StreamRelay
from tests.support.fake_upstream import FakeUpstream

ASK: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Why are there tides?"}],
    "max_tokens": 100,
    "response_format": {"type": "json_object"},
    "logprobs": True,
    "temperature": 0,
}


def test_a_prefilled_continuation_ends_with_the_text_sent_as_the_assistants() -> None:
    body = continue_body(ASK, "The moon", 2, prefill=True)
    assert body["messages"] == [*ASK["messages"], {"role": "assistant", "content": "The moon"}]
    assert body["max_tokens"] == 98  # the client's limit, less what was spent
    assert body["temperature"] == 0
    assert "response_format" not in body and "logprobs" not in body  # would bind the rest alone
    assert ASK["messages"] == [{"role": "user", "content": "Why are there tides?"}]  # untouched


def test_without_prefill_the_continuer_is_told_to_go_on() -> None:
    body = continue_body(ASK, "The moon", 2, prefill=False)
    assert body["messages"][-2:] == [
        {"role": "assistant", "content": "The moon"},
        {"role": "user", "content": CONTINUE},
    ]


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_the_limit_never_falls_below_one(key: str) -> None:
    assert continue_body({"messages": [], key: 5}, "x", 9, prefill=True)[key] == 1


def test_nothing_sent_asks_afresh() -> None:
    assert continue_body(ASK, "", 0, prefill=True)["messages"] == ASK["messages"]


def relay_of(upstream: FakeUpstream) -> StreamRelay:
    async def none() -> Any:
        yield []

    return StreamRelay(OpenStream(upstream, [], none()), keep_usage=False)


def test_a_chains_member_is_continued_by_the_members_after_it_then_the_local_model() -> None:
    first, second, third = (FakeUpstream(n, speaks="cerebras") for n in ("a", "b", "c"))
    local = FakeUpstream("local")
    chain = UpstreamGroup("a", [first, second, third], balance=False)
    assert continuation(chain, local, relay_of(first)).left == [second, third, local]
    assert continuation(chain, local, relay_of(third)).left == [local]
    assert continuation(chain, local, relay_of(local)).left == []  # local_only stays local
