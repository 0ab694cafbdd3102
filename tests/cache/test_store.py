"""The memory store's bounds (bytes, least recently used out first; age) and which answers
the cache keeps (``entry.storable``, ``entry.keepable``)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from app.cache.backends import MemoryBackend
from app.cache.entry import Entry, decode, encode, keepable, served_body, storable
from app.record import RequestRecord, Usage
from app.vocabulary import Outcome, Purpose, Strategy


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_byte_bound_drops_the_least_recently_used() -> None:
    async def scenario() -> tuple[list[bytes | None], tuple[int, int]]:
        store = MemoryBackend(max_bytes=30, max_age_s=60)
        await store.put("a", b"x" * 10)
        await store.put("b", b"y" * 10)
        await store.put("c", b"z" * 10)
        await store.get("a")  # a is used again: b is now the coldest
        await store.put("d", b"w" * 10)
        found = [await store.get(k) for k in ("a", "b", "c", "d")]
        return found, store.usage()

    found, usage = run(scenario())
    assert found == [b"x" * 10, None, b"z" * 10, b"w" * 10]
    assert usage == (3, 30)


def test_an_entry_over_the_bound_is_not_kept_and_a_rewrite_is_counted_once() -> None:
    async def scenario() -> tuple[bytes | None, tuple[int, int]]:
        store = MemoryBackend(max_bytes=30, max_age_s=60)
        await store.put("big", b"x" * 31)
        await store.put("a", b"1" * 10)
        await store.put("a", b"2" * 12)
        return await store.get("big"), store.usage()

    assert run(scenario()) == (None, (1, 12))


def test_an_entry_past_its_age_is_gone() -> None:
    clock = Clock()

    async def scenario() -> list[Any]:
        store = MemoryBackend(max_bytes=100, max_age_s=10, clock=clock)
        await store.put("a", b"v")
        clock.now = 10.0
        fresh = await store.get("a")
        clock.now = 10.5
        return [fresh, await store.get("a"), store.usage()]

    assert run(scenario()) == [b"v", None, (0, 0)]


def body(finish: str = "stop", **message: Any) -> dict[str, Any]:
    msg = {"role": "assistant", "content": "Paris."} | message
    return {"id": "x", "choices": [{"index": 0, "message": msg, "finish_reason": finish}]}


def record(outcome: Outcome, strategy: Strategy = Strategy.SPECULATIVE, **kw: Any) -> RequestRecord:
    rec = RequestRecord(strategy=strategy, draft_model="local", verify_model="cerebras", **kw)
    rec.outcome = outcome
    return rec


CLOUD = Usage("cerebras", Purpose.SPILL, 20, 5)


@pytest.mark.parametrize(
    ("outcome", "strategy", "usage", "agreement", "kept"),
    [
        (Outcome.SPILLED_OVER, Strategy.SPECULATIVE, CLOUD, False, True),
        (Outcome.VERIFIED_DRAFT_USED, Strategy.SPECULATIVE, CLOUD, True, True),
        (Outcome.VERIFIED_DRAFT_USED, Strategy.SPECULATIVE, CLOUD, False, False),
        (Outcome.LOCAL_DOWN_CLOUD_USED, Strategy.SPECULATIVE, CLOUD, None, True),
        (Outcome.PASSED_THROUGH, Strategy.CEREBRAS_ONLY, CLOUD, None, True),
        (Outcome.PASSED_THROUGH, Strategy.LOCAL_ONLY, CLOUD, None, False),
        (Outcome.ACCEPTED, Strategy.SPECULATIVE, None, None, False),  # nobody checked it
        (Outcome.DEGRADED, Strategy.SPECULATIVE, None, None, False),
        (Outcome.ERROR, Strategy.SPECULATIVE, CLOUD, None, False),
        (Outcome.CLIENT_DISCONNECTED, Strategy.SPECULATIVE, CLOUD, None, False),
        (Outcome.SPILLED_OVER, Strategy.SPECULATIVE, None, None, False),  # no cloud counts
    ],
)
def test_only_verified_answers_are_kept(
    outcome: Outcome,
    strategy: Strategy,
    usage: Usage | None,
    agreement: bool | None,
    kept: bool,
) -> None:
    rec = record(outcome, strategy, agreement=agreement)
    if usage is not None:
        rec.usage.append(usage)
    assert storable(rec) is kept


def test_a_cut_or_broken_answer_is_not_kept() -> None:
    assert keepable(body())
    assert not keepable(body("length"))
    good_call = {"function": {"name": "f", "arguments": '{"a": 1}'}}
    bad_call = {"function": {"name": "f", "arguments": '{"a": '}}
    assert keepable(body("tool_calls", content=None, tool_calls=[good_call]))
    assert not keepable(body("tool_calls", content=None, tool_calls=[bad_call]))
    assert not keepable({"choices": [body()["choices"][0]] * 2})  # n > 1
    assert served_body(b"not json") is None


def test_the_proxys_fields_are_taken_off_and_an_entry_round_trips() -> None:
    sent = orjson.dumps(body() | {"model_used": "cerebras", "speculative_decoding": {}})
    kept = served_body(sent)
    assert kept == body()
    entry = Entry(kept, "cerebras", "q", "cerebras", 20, 5)
    assert decode(encode(entry)) == entry
    assert decode(b'{"other": "version"}') is None
