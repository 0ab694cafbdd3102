"""Hundreds of simultaneous chat requests through the real proxy, half of them streamed.

Every request is answered, every count in ``/stats`` is exact, and afterwards nothing
is left behind: no request in flight, no stray asyncio task, no open socket beyond
the upstream pools' keep-alive connections (and none at all once the proxy stops).

The stand-ins answer by prompt (``tests/load/conftest.py``), so which request gets
which reply does not depend on the order in which hundreds of them arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import orjson
import pytest

from tests.fakes import Reply
from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.support.answers import CLOUD_OTHER, CLOUD_SAME, GOOD_DRAFT, HEDGED, LONG
from tests.support.proxy import MakeProxy, Proxy, chat_bodies

pytestmark = pytest.mark.usefixtures("open_files")

N_REQUESTS = 500
CLIENT_CONNECTIONS = 600
LOAD_TIMEOUT_S = 60.0  # the whole burst, on a slow CI machine; it takes a few seconds
SETTLE_S = 10.0  # for counters, tasks and sockets to come back down after the burst
# Calls beyond SLOTS per upstream wait for a slot *before* their timeouts start. Without
# that, a 500-request burst (~10 s on 2 cores) queues in the httpx pool (100 connections)
# *inside* proxy_config's 10 s `timeout.total`, and the last drafts time out and spill
# to the cloud. With it, each upstream pool opens at most SLOTS connections (+1 for the
# health probe of /stats, which takes no slot).
SLOTS = 50
BOUNDED = {"concurrency": {"max_in_flight": SLOTS, "queue_timeout_s": LOAD_TIMEOUT_S}}
# Healthy drafts answer at once, but under a 500-request burst on 2 busy cores the proxy's
# event loop can take seconds to read them (2 s misfired); the slow drafts never answer.
FIRST_BYTE_S = 5.0

T = TypeVar("T")


@dataclass(frozen=True)
class Scenario:
    """One kind of request: what the stand-ins answer to its prompt, what the client gets."""

    prompt: str
    draft: Reply
    verified: Reply | None  # None: the cloud is never asked
    outcome: str
    model_used: str
    text: str
    reasons: tuple[str, ...]
    local_calls: int = 1
    upstream_errors: tuple[str, ...] = ()


CLEAN = [
    Scenario(
        "load: a confident draft",
        Reply(GOOD_DRAFT),
        None,
        "accepted_without_verification",
        "local",
        GOOD_DRAFT,
        ("passed_checks",),
    ),
    Scenario(
        "load: a hedged draft the cloud agrees with",
        Reply(HEDGED),
        Reply(CLOUD_SAME),
        "verified_draft_used",
        "local",
        HEDGED,
        ("uncertainty_marker", "similar_to_verified"),
    ),
    Scenario(
        "load: a hedged draft the cloud corrects",
        Reply(HEDGED),
        Reply(CLOUD_OTHER),
        "spilled_over",
        "cerebras",
        CLOUD_OTHER,
        ("uncertainty_marker", "differs_from_verified"),
    ),
    Scenario(  # streamed: the cloud's stream is passed through live
        "load: a truncated draft",
        Reply(LONG),
        Reply(CLOUD_OTHER),
        "spilled_over",
        "cerebras",
        CLOUD_OTHER,
        ("incomplete", "draft_truncated"),
    ),
]

CLOUD_FAILS_HEDGED = Scenario(
    "faults: a hedged draft, the cloud fails",
    Reply(HEDGED),
    Reply(status=500),
    "degraded",
    "local",
    HEDGED,
    ("uncertainty_marker", "verifier_failed"),
    upstream_errors=("cerebras:500",),
)
CLOUD_FAILS_TRUNCATED = Scenario(
    "faults: a truncated draft, the cloud fails",
    Reply(LONG),
    Reply(status=500),
    "degraded",
    "local",
    LONG,
    ("incomplete", "verifier_failed", "local_continuation"),
    local_calls=2,
    upstream_errors=("cerebras:500",),
)
LOCAL_TOO_SLOW = Scenario(
    "faults: the local model does not answer in time",
    Reply(delay=LOAD_TIMEOUT_S),  # never waited for: the proxy hangs up at first_byte
    Reply(CLOUD_OTHER),
    "local_down_cloud_used",
    "cerebras",
    CLOUD_OTHER,
    ("local_unavailable",),
    upstream_errors=("local:timeout",),
)
ACCEPTED, CORRECTED = CLEAN[0], CLEAN[2]
# Per ten requests: 4 cloud answers and 4 cloud failures (half the cloud replies are 500),
# 1 draft that never comes (a tenth: each holds a local slot for FIRST_BYTE_S).
FAULTY = [
    ACCEPTED,
    CORRECTED,
    CLOUD_FAILS_HEDGED,
    CLOUD_FAILS_TRUNCATED,
    CORRECTED,
    ACCEPTED,
    CLOUD_FAILS_HEDGED,
    CLOUD_FAILS_TRUNCATED,
    CORRECTED,
    LOCAL_TOO_SLOW,
]


def plan(scenarios: list[Scenario]) -> list[tuple[Scenario, bool]]:
    """N_REQUESTS requests: every other one streamed, the scenarios in turn within each half."""
    return [(scenarios[(i // 2) % len(scenarios)], i % 2 == 1) for i in range(N_REQUESTS)]


def script(local: ScriptedLlamaServer, cloud: ScriptedCerebras, scenarios: list[Scenario]) -> None:
    for s in scenarios:
        local.script[s.prompt] = s.draft
        if s.verified is not None:
            cloud.script[s.prompt] = s.verified


# -- the client side -----------------------------------------------------------


@dataclass
class Answer:
    """What one client saw."""

    scenario: Scenario
    stream: bool
    status: int
    text: str = ""
    final: dict[str, Any] | None = None  # the body, or the chunk that carried finish_reason
    lines: tuple[str, ...] = ()


async def ask(client: httpx.AsyncClient, scenario: Scenario, stream: bool) -> Answer:
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": scenario.prompt}],
        "stream": stream,
    }
    if not stream:
        response = await client.post("/v1/chat/completions", json=body)
        if response.status_code != 200:
            return Answer(scenario, stream, response.status_code, response.text)
        data = response.json()
        return Answer(scenario, stream, 200, data["choices"][0]["message"]["content"], data)
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = tuple([line async for line in response.aiter_lines() if line])
    answer = Answer(scenario, stream, response.status_code, lines=lines)
    parts = []
    for line in lines:
        payload = line.removeprefix("data: ")
        if payload == "[DONE]":
            continue
        chunk = orjson.loads(payload)
        for choice in chunk.get("choices", []):
            parts.append(choice["delta"].get("content") or "")
            if choice.get("finish_reason"):
                answer.final = chunk
    answer.text = "".join(parts)
    return answer


def problems(answer: Answer) -> list[str]:
    """Everything wrong with one answer, empty when it is what its scenario promises."""
    s, kind = answer.scenario, "stream" if answer.stream else "json"
    where = f"{kind} {s.prompt!r}"
    if answer.status != 200:
        return [f"{where}: HTTP {answer.status}: {answer.text[:300]}"]
    found = []
    if answer.stream:
        if not answer.lines or answer.lines[-1] != "data: [DONE]":
            found.append(f"{where}: does not end with [DONE]: {answer.lines[-2:]}")
        if any(line.startswith('data: {"error"') for line in answer.lines):
            found.append(f"{where}: carries an error event: {answer.lines[-2:]}")
    final = answer.final or {}
    report = final.get("speculative_decoding") or {}
    if answer.text != s.text:
        found.append(f"{where}: text {answer.text[:80]!r}")
    if final.get("model_used") != s.model_used or tuple(report.get("reasons", ())) != s.reasons:
        found.append(f"{where}: {final.get('model_used')} {report.get('reasons')}")
    return found


@dataclass
class Burst:
    answers: list[Answer]
    wall_s: float
    peak_proxy_in_flight: int
    peak_local_in_flight: int
    peak_cloud_in_flight: int


async def burst(
    proxy: Proxy,
    requests: list[tuple[Scenario, bool]],
    local: ScriptedLlamaServer,
    cloud: ScriptedCerebras,
) -> Burst:
    """Fire every request at once from one client; sample in-flight counts meanwhile."""
    # No keep-alive: each connection carries one request, and httpcore does not rescan
    # hundreds of idle connections on every request (quadratic; seconds of CPU at 500).
    limits = httpx.Limits(max_connections=CLIENT_CONNECTIONS, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=proxy.url, limits=limits, timeout=30) as client:
        done = asyncio.Event()
        peaks = Counter[str]()

        async def pause() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 0.005)

        async def sample_proxy() -> None:  # as often as /stats answers under the load
            while not done.is_set():
                runtime = (await client.get("/stats")).json()["runtime"]
                peaks["proxy"] = max(peaks["proxy"], runtime["in_flight"])
                await pause()

        async def sample_stand_ins() -> None:  # same process: read them directly
            while not done.is_set():
                peaks["local"] = max(peaks["local"], local.in_flight)
                peaks["cloud"] = max(peaks["cloud"], cloud.in_flight)
                await pause()

        async def load() -> list[Answer]:
            try:
                return await asyncio.gather(*(ask(client, s, stream) for s, stream in requests))
            finally:
                done.set()

        started = time.perf_counter()
        async with asyncio.timeout(LOAD_TIMEOUT_S):
            answers, _, _ = await asyncio.gather(load(), sample_proxy(), sample_stand_ins())
        wall = time.perf_counter() - started
    return Burst(answers, wall, peaks["proxy"], peaks["local"], peaks["cloud"])


# -- the server side -------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def settle(read: Callable[[], T], ok: Callable[[T], bool], what: str) -> T:
    """Poll ``read()`` until ``ok`` holds of it; fail naming ``what`` and the last value."""
    deadline = time.monotonic() + SETTLE_S
    while not ok(value := read()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still {value!r} after {SETTLE_S} s")
        time.sleep(0.02)
    return value


def run(
    make_proxy: MakeProxy,
    local: ScriptedLlamaServer,
    cloud: ScriptedCerebras,
    scenarios: list[Scenario],
    label: str,
    caplog: pytest.LogCaptureFixture,
    **overrides: Any,
) -> None:
    """Script the stand-ins, fire the burst, check every answer, the counts and the leaks."""
    script(local, cloud, scenarios)
    requests = plan(scenarios)
    fds_before_proxy = open_fds()
    with make_proxy(**overrides) as proxy:
        idle = proxy.stats()["runtime"]
        fds_idle = open_fds()
        result = asyncio.run(burst(proxy, requests, local, cloud))

        runtime = settle(
            lambda: proxy.stats()["runtime"],
            lambda r: r["in_flight"] == 0 and r["asyncio_tasks"] <= idle["asyncio_tasks"],
            f"proxy runtime (idle: {idle})",
        )
        settle(lambda: (local.in_flight, cloud.in_flight), lambda n: n == (0, 0), "stand-ins")
        stats = proxy.stats()
        wrong = [p for answer in result.answers for p in problems(answer)]
        logged = Counter(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
        assert not wrong, (
            f"{len(wrong)} bad answers; upstream errors {stats['upstream_errors']}; e.g.:\n"
            + "\n".join(wrong[:10])
            + "\nproxy warnings:\n"
            + "\n".join(f"{n} x {m}" for m, n in logged.most_common(10))
        )
        # Left open: the upstream pools' keep-alive connections, a descriptor at each end.
        fds_bound = fds_idle + 2 * (2 * SLOTS + 1)
        fds_after = settle(open_fds, lambda n: n <= fds_bound, f"open fds (bound {fds_bound})")
    fds_stopped = settle(
        open_fds, lambda n: n <= fds_before_proxy, f"open fds once stopped ({fds_before_proxy})"
    )

    expected = Counter(s.outcome for s, _ in requests)
    errors = Counter(e for s, _ in requests for e in s.upstream_errors)
    n_streams = sum(stream for _, stream in requests)
    counts = stats["requests"]
    assert counts["total"] == N_REQUESTS and counts["streaming"] == n_streams
    assert counts["by_outcome"] == dict(expected)
    assert sum(counts["by_outcome"].values()) == N_REQUESTS
    assert counts["errors"] == 0 and counts["refused"] == {}
    assert stats["upstream_errors"] == dict(errors)
    assert len(chat_bodies(local)) == sum(s.local_calls for s, _ in requests)
    assert len(chat_bodies(cloud)) == sum(s.verified is not None for s, _ in requests)

    rate = N_REQUESTS / result.wall_s
    print(
        f"\n[{label}] {N_REQUESTS} requests ({n_streams} streamed) in {result.wall_s:.2f} s "
        f"({rate:.0f}/s); latency (ms) {stats['latency_ms']['total']}\n"
        f"[{label}] outcomes {dict(expected)}; upstream errors {dict(errors) or 'none'}\n"
        f"[{label}] peak in flight: proxy >= {result.peak_proxy_in_flight}, "
        f"local {result.peak_local_in_flight}, cloud {result.peak_cloud_in_flight}\n"
        f"[{label}] asyncio tasks idle {idle['asyncio_tasks']} -> after "
        f"{runtime['asyncio_tasks']}; open fds {fds_before_proxy} before the proxy, "
        f"{fds_idle} idle, {fds_after} after the burst (bound {fds_bound}), "
        f"{fds_stopped} once stopped"
    )


def test_500_simultaneous_requests_all_answered_and_nothing_leaks(
    make_proxy: MakeProxy,
    local: ScriptedLlamaServer,
    cloud: ScriptedCerebras,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run(
        make_proxy,
        local,
        cloud,
        CLEAN,
        "clean",
        caplog,
        models={"local": BOUNDED, "cerebras": BOUNDED},
    )


@pytest.mark.slow
def test_faults_under_load_degrade_and_are_counted(
    make_proxy: MakeProxy,
    local: ScriptedLlamaServer,
    cloud: ScriptedCerebras,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The breaker opens after N *consecutive* failures: with faults interleaved in whatever
    # order 500 requests arrive, whether it opens would be down to chance.
    never_open = {"failures": 1_000_000, "cooldown_s": 60}
    run(
        make_proxy,
        local,
        cloud,
        FAULTY,
        "faults",
        caplog,
        models={
            "local": {
                **BOUNDED,
                "timeout": {"first_byte": FIRST_BYTE_S},
                "circuit_breaker": never_open,
            },
            "cerebras": {**BOUNDED, "circuit_breaker": never_open},
        },
    )
