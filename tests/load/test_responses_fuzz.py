"""Schemathesis against the Responses door: no generated input makes the proxy fail.

As tests/load/test_fuzz.py does for the chat door (read there why each operation is driven
by ``as_strategy`` under ``@given``, derandomized): ``POST /v1/responses`` from its
documented schema, valid inputs and invalid ones, in each strategy, and ``GET``/``DELETE``
of a stored response by generated ids. Checks: no 5xx; an error is OpenAI's envelope; a
stream ends with ``response.completed`` or ``response.incomplete`` and fails nowhere (the
stand-ins answer every request in full, so a failure can only be the proxy's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.fakes import Reply
from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.load.test_fuzz import load_schema, openai_error_envelope
from tests.support.answers import CLOUD_OTHER, LONG
from tests.support.proxy import MakeProxy, Proxy

CREATE = ("POST", "/v1/responses")
RUNS = [
    (CREATE, GenerationMode.POSITIVE, None, 100),
    (CREATE, GenerationMode.NEGATIVE, None, 50),
    (CREATE, GenerationMode.POSITIVE, "local_only", 25),
    (CREATE, GenerationMode.POSITIVE, "cerebras_only", 25),
    (("GET", "/v1/responses/{response_id}"), GenerationMode.POSITIVE, None, 10),
    (("DELETE", "/v1/responses/{response_id}"), GenerationMode.POSITIVE, None, 10),
]
ENDS = ("event: response.completed\n", "event: response.incomplete\n")


def whole_event_stream(ctx: Any, response: schemathesis.Response, case: Any) -> None:
    """A stream ends with the response completed (or cut at its token limit), never failed."""
    content_type = response.headers.get("content-type", [""])[0]
    if not content_type.startswith("text/event-stream"):
        return
    assert not response.stream_cut_short, "stream longer than max-stream-events"
    events = [e for e in response.content.decode().split("\n\n") if e]
    assert events and events[-1].startswith(ENDS), f"stream ends with {events[-1:]}"
    failed = [e for e in events if e.startswith("event: response.failed")]
    assert not failed, f"failed: {failed[0]}"
    numbers = [orjson.loads(e.split("data: ", 1)[1])["sequence_number"] for e in events]
    assert numbers == list(range(len(events))), "sequence numbers out of order"


CHECKS = [not_a_server_error, openai_error_envelope, whole_event_stream]


@pytest.fixture(params=["lean", "standard"])
def edge(request: pytest.FixtureRequest) -> str:
    edge: str = request.param
    return edge


@pytest.fixture
def running(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras
) -> Iterator[Proxy]:
    """The proxy, with stand-ins that answer every well-formed request successfully."""
    local.default = Reply(LONG)
    cloud.default = Reply(CLOUD_OTHER)
    with make_proxy() as proxy:
        yield proxy


@pytest.mark.slow
@pytest.mark.parametrize(
    ("operation", "mode", "strategy", "examples"),
    RUNS,
    ids=[f"{m} {p} {mode.value} {strategy or 'default'}" for (m, p), mode, strategy, _ in RUNS],
)
def test_no_generated_input_makes_the_door_fail(
    running: Proxy,
    operation: tuple[str, str],
    mode: GenerationMode,
    strategy: str | None,
    examples: int,
) -> None:
    method, path = operation
    api_operation = load_schema(running)[path][method]
    headers = {"X-Routing-Strategy": strategy} if strategy else None
    statuses: Counter[int] = Counter()

    @given(case=api_operation.as_strategy(generation_mode=mode, headers=headers))
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    def call(case: schemathesis.Case) -> None:
        response = case.call()
        statuses[response.status_code] += 1
        case.validate_response(response, checks=CHECKS)

    call()
    print(f"\n[fuzz] {method} {path} ({mode.value}, {strategy}): statuses {dict(statuses)}")
    assert statuses.total() >= 1
    if method == "POST" and mode is GenerationMode.POSITIVE:
        assert statuses[200] > 0, "no generated request was answered"
