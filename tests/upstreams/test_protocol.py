"""One protocol for every upstream: a single server (against the llama-server stand-in on
loopback), a group of them, and the tests' queue-backed fake give the same answers to
the same script; nothing outside ``app/upstreams`` asks which one it holds."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import app
from app.config import ModelConfig
from app.errors import UpstreamError, UpstreamRejected, UpstreamUnavailable
from app.upstreams import CloudState, Upstream, UpstreamGroup, build_upstream, create_client
from tests.fakes import FakeLlamaServer, Reply
from tests.support.chunks import text_of
from tests.support.fake_upstream import FakeUpstream

T = TypeVar("T")
KINDS = ["server", "group", "fake"]
ASK = {"messages": [{"role": "user", "content": "Say hello"}]}
DEAD = "http://127.0.0.1:9"  # discard port: nothing listens


def run_on(
    kind: str,
    local: FakeLlamaServer,
    scenario: Callable[[Upstream], Awaitable[T]],
    *replies: Reply,
) -> T:
    """``scenario`` against an upstream of ``kind`` that answers ``replies`` in order."""

    async def main() -> T:
        if kind == "fake":
            return await scenario(FakeUpstream("local", model="smollm2").enqueue(*replies))
        local.enqueue(*replies)
        config = ModelConfig(provider="llama_server", model="smollm2", base_url=local.url)
        async with create_client(config) as client:
            upstream = build_upstream("local", config, client)
            if kind == "group":  # a chain whose first member is down: the second answers
                dead = build_upstream("down", config.model_copy(update={"base_url": DEAD}), client)
                upstream = UpstreamGroup("local", [dead, upstream], balance=False)
            return await scenario(upstream)

    return asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_an_upstream(kind: str, local: FakeLlamaServer) -> None:
    async def check(upstream: Upstream) -> tuple[bool, CloudState, str | None, str]:
        return (
            isinstance(upstream, Upstream),
            upstream.availability(0),
            upstream.unavailable_reason,
            upstream.members[-1].name,
        )

    assert run_on(kind, local, check) == (True, CloudState(), None, "local")


@pytest.mark.parametrize("kind", KINDS)
def test_a_whole_answer_reads_alike(kind: str, local: FakeLlamaServer) -> None:
    async def complete(upstream: Upstream) -> tuple[Any, ...]:
        done = await upstream.complete({**ASK, "max_tokens": 3})
        model = done.body["model"]
        return done.text, done.finish_reason, done.completion_tokens, done.upstream, model

    answer = run_on(kind, local, complete, Reply("Hello there, my friend."))
    assert answer == ("Hello there,", "length", 3, "local", "smollm2")


@pytest.mark.parametrize("kind", KINDS)
def test_a_passed_on_answer_reads_alike(kind: str, local: FakeLlamaServer) -> None:
    async def pass_on(upstream: Upstream) -> tuple[Any, ...]:
        passed = await upstream.pass_on(ASK)
        return passed.completion_tokens, passed.upstream, b'"model":"smollm2"' in passed.content

    # llama-server counts the end-of-generation token it does not send
    assert run_on(kind, local, pass_on, Reply("Hello there.")) == (4, "local", True)


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_reads_alike(kind: str, local: FakeLlamaServer) -> None:
    async def stream(upstream: Upstream) -> tuple[Any, ...]:
        opened = await upstream.open_stream(ASK)
        batches = [batch async for batch in opened.batches()]
        usage = batches[-1][-1].json().get("usage") or {}
        return text_of(batches), usage.get("completion_tokens"), opened.upstream.name

    assert run_on(kind, local, stream, Reply("Hello there.")) == ("Hello there.", 4, "local")


@pytest.mark.parametrize("kind", KINDS)
def test_an_unread_stream_passes_content_chunks_as_bytes(kind: str, local: FakeLlamaServer) -> None:
    async def stream(upstream: Upstream) -> list[str]:
        opened = await upstream.open_stream(ASK, unread=True)
        return ["read" if c.typed else "bytes" async for batch in opened.batches() for c in batch]

    # the role and 3 tokens pass unread (their bytes only); the finishing chunk and the
    # usage are read
    kinds = run_on(kind, local, stream, Reply("Hi there."))
    assert kinds == ["bytes"] * 4 + ["read"] * 2


@pytest.mark.parametrize("kind", KINDS)
def test_an_http_error_reads_alike(kind: str, local: FakeLlamaServer) -> None:
    async def refused(upstream: Upstream) -> UpstreamError:
        with pytest.raises(UpstreamRejected) as caught:
            await upstream.complete(ASK)
        return caught.value

    error = run_on(kind, local, refused, Reply(status=429))
    assert (error.upstream_status, error.status, error.upstream) == (429, 429, "local")
    fell_over = [type(f) for f in error.fell_over]
    assert fell_over == ([UpstreamUnavailable] if kind == "group" else [])


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_cut_by_an_error_event_reads_alike(kind: str, local: FakeLlamaServer) -> None:
    async def cut(upstream: Upstream) -> tuple[str, str]:
        opened = await upstream.open_stream(ASK)
        seen: list[list[Any]] = []
        with pytest.raises(UpstreamError) as caught:
            async for batch in opened.batches():
                seen.append(batch)
        return text_of(seen), caught.value.message

    text, message = run_on(kind, local, cut, Reply("One two three four.", fail_after_chunks=2))
    assert text == "One two"
    assert message == "local: error mid-stream: Generation failed (scripted)"


def test_a_group_of_fakes_falls_over_while_no_chunk_has_come() -> None:
    first, second = FakeUpstream("a"), FakeUpstream("b")
    first.enqueue(first.error("timeout"))
    second.enqueue("From b.")
    group = UpstreamGroup("chain", [first, second], balance=False)

    async def stream() -> tuple[str, str, list[str]]:
        opened = await group.open_stream(ASK)
        batches = [batch async for batch in opened.batches()]
        return text_of(batches), opened.upstream.name, [f.kind for f in opened.fell_over]

    assert asyncio.run(stream()) == ("From b.", "b", ["timeout"])
    assert len(first.history) == len(second.history) == 1


def test_a_group_answers_the_first_member_that_may_be_called() -> None:
    first, second = FakeUpstream("a"), FakeUpstream("b")
    group = UpstreamGroup("chain", [first, second], balance=False)
    first.open_circuit()
    assert group.availability(10) == CloudState()  # b may be called
    second.remove_key()
    assert group.availability(10) == first.availability(10)  # none: the first one's reason
    assert group.availability(10).blocked == "verifier_unavailable"
    assert [m.name for m in group.order()] == ["a", "b"]  # none callable: configured order
    first.restore()
    second.restore()
    second.low_budget()
    assert [m.name for m in group.order()] == ["a", "b"]
    first.low_budget()
    assert group.availability(0).blocked == "cloud_budget_low"


def test_a_group_tries_a_member_with_its_circuit_open_last() -> None:
    first, second = FakeUpstream("a"), FakeUpstream("b")
    first.open_circuit()
    group = UpstreamGroup("pool", [first, second], balance=True)
    assert [m.name for m in group.order()] == ["b", "a"]


# -- no caller asks which upstream it holds --------------------------------------

UPSTREAM_CLASSES = {"Upstream", "ChatUpstream", "UpstreamGroup", "LlamaServer", "Cerebras"}


def isinstance_on_upstreams(root: Path) -> list[str]:
    """``isinstance``/``issubclass`` calls naming an upstream class in ``root``'s modules
    outside ``app/upstreams``, as ``path:line``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "upstreams" in path.relative_to(root).parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2
            ):
                continue
            names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            names |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
            if names & UPSTREAM_CLASSES:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_no_isinstance_on_upstreams_outside_the_upstreams_package() -> None:
    assert isinstance_on_upstreams(Path(app.__file__).parent) == []


def test_the_scan_finds_one(tmp_path: Path) -> None:
    (tmp_path / "pipeline.py").write_text("if isinstance(up, (UpstreamGroup, int)):\n    pass\n")
    (tmp_path / "upstreams").mkdir()
    (tmp_path / "upstreams" / "group.py").write_text("isinstance(m, ChatUpstream)\n")
    assert isinstance_on_upstreams(tmp_path) == [f"{tmp_path.name}/pipeline.py:1"]
