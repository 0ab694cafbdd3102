"""Schemathesis against the running proxy: no generated input makes it fail.

Every operation of the proxy's own OpenAPI document (read from ``/openapi.json``)
is called over loopback with inputs generated from its schema, valid ones and
invalid ones. The stand-ins behind the proxy answer every request successfully,
so a 5xx, a broken stream or an error outside OpenAI's envelope can only be the
proxy's own fault.

Three checks run: no 5xx, errors in the envelope, streams complete. Schemathesis'
conformance checks are left out: the document describes no error responses, no
``text/event-stream`` and no ``text/plain`` (``/metrics``), and allows ``n`` up to
128 where the speculative strategy refuses ``n > 1`` with a 400, so they would fail
on documented behaviour.

Each operation is driven with ``APIOperation.as_strategy`` under ``@given``, not
``@schema.parametrize()``: the schema exists only once the proxy runs, and
``schemathesis.pytest.from_fixture`` (4.32) fails under pytest 9 (it reads
``request.node._nodeid``, which pytest 9 no longer has).

Reproducible: Hypothesis is derandomized (seeded from the test's source, so editing
the test changes the examples) and keeps no example database, and schemathesis'
configuration is built here, not discovered from the working directory.
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
from tests.support.answers import CLOUD_OTHER, LONG
from tests.support.proxy import MakeProxy, Proxy

CHAT = ("POST", "/v1/chat/completions")
OPERATIONS = [
    CHAT,
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model_id}"),
    ("GET", "/health"),
    ("GET", "/stats"),
    ("GET", "/metrics"),
]
# the other dialects' doors, fuzzed by their own modules (tests/load/test_*_fuzz.py)
DOORS = [
    ("POST", "/v1/responses"),
    ("GET", "/v1/responses/{response_id}"),
    ("DELETE", "/v1/responses/{response_id}"),
]
# (operation, mode, X-Routing-Strategy, examples). The header is not in the document, so
# the direct strategies get runs of their own. The GET operations take no input: one
# example is all there is to generate.
RUNS = [
    (CHAT, GenerationMode.POSITIVE, None, 150),
    (CHAT, GenerationMode.NEGATIVE, None, 50),
    (CHAT, GenerationMode.POSITIVE, "local_only", 30),
    (CHAT, GenerationMode.POSITIVE, "cerebras_only", 30),
    *[(operation, GenerationMode.POSITIVE, None, 5) for operation in OPERATIONS[1:]],
]
ENVELOPE_FIELDS = {"message", "type", "param", "code"}
# the other doors, fuzzed in their own tests (Messages: test_messages_fuzz.py, in its shape)
OTHER_DOORS = {
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/embeddings"),
}
# the admin API's routes, fuzzed by tests/keys/test_admin_fuzz.py
ADMIN = {
    ("GET", "/admin/keys"),
    ("POST", "/admin/keys"),
    ("GET", "/admin/keys/{key_id}"),
    ("DELETE", "/admin/keys/{key_id}"),
    ("POST", "/admin/keys/{key_id}/rotate"),
}


def local_refs(node: Any) -> Iterator[str]:
    """Every ``$ref`` in a JSON document that points into the document itself."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            yield ref
        for value in node.values():
            yield from local_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from local_refs(value)


def resolves(document: dict[str, Any], ref: str) -> bool:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


# -- checks (schemathesis' signature: context, response, case) -------------------


def openai_error_envelope(ctx: Any, response: schemathesis.Response, case: Any) -> None:
    """An error answer is OpenAI's envelope: ``{"error": {message, type, param, code}}``."""
    if response.status_code < 400:
        return
    body = orjson.loads(response.content)
    error = body.get("error") if isinstance(body, dict) else None
    assert isinstance(error, dict) and set(body) == {"error"}, f"not an error envelope: {body}"
    assert set(error) == ENVELOPE_FIELDS, f"envelope fields {sorted(error)}"
    assert isinstance(error["message"], str) and error["message"], "empty error message"
    assert isinstance(error["type"], str), f"error type {error['type']!r}"


def complete_stream(ctx: Any, response: schemathesis.Response, case: Any) -> None:
    """A stream the stand-ins fed in full ends with ``[DONE]`` and carries no error event."""
    content_type = response.headers.get("content-type", [""])[0]
    if not content_type.startswith("text/event-stream"):
        return
    assert not response.stream_cut_short, "stream longer than max-stream-events"
    events = [e for e in response.content.decode().split("\n\n") if e]
    assert events and events[-1] == "data: [DONE]", f"stream ends with {events[-1:]}"
    broken = [e for e in events if e.startswith('data: {"error"')]
    assert not broken, f"error event in the stream: {broken[0]}"


CHECKS = [not_a_server_error, openai_error_envelope, complete_stream]


# -- fixtures --------------------------------------------------------------------


@pytest.fixture(params=["lean", "standard"])
def edge(request: pytest.FixtureRequest) -> str:
    """Each HTTP edge: the chat route is documented and served by FastAPI on both."""
    edge: str = request.param
    return edge


@pytest.fixture
def running(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras
) -> Iterator[Proxy]:
    """The proxy, with stand-ins that answer every well-formed request successfully.

    A long draft is cut at the draft budget, so the speculative requests take the
    longer roads: verification, live pass-through of the cloud's stream, degrading.
    """
    local.default = Reply(LONG)
    cloud.default = Reply(CLOUD_OTHER)
    with make_proxy() as proxy:
        yield proxy


@pytest.fixture(scope="module")
def tally() -> Iterator[Counter[str]]:
    """Requests sent per operation and mode; the total is printed at the end."""
    counts: Counter[str] = Counter()
    yield counts
    print(f"\n[fuzz] {counts.total()} generated requests in all: {dict(counts)}")


def load_schema(proxy: Proxy) -> schemathesis.BaseSchema:
    config = schemathesis.Config.from_dict(
        {
            "base-url": proxy.url,
            "request-timeout": 15,
            "request-retries": 0,  # a dropped connection is a failure, not something to retry
            "max-stream-events": 1000,  # read whole streams: the check wants their end
        }
    )
    document = proxy.http.get("/openapi.json").json()
    return schemathesis.openapi.from_dict(document, config=config)


# -- tests -----------------------------------------------------------------------


def test_the_document_lists_every_operation_fuzzed(running: Proxy) -> None:
    schema = load_schema(running)
    listed = {tuple(op.ok().label.split(" ", 1)) for op in schema.get_all_operations()}
    assert listed == set(OPERATIONS) | set(DOORS) | OTHER_DOORS | ADMIN


def test_every_schema_reference_resolves(running: Proxy) -> None:
    document = running.http.get("/openapi.json").json()
    dangling = sorted({ref for ref in local_refs(document) if not resolves(document, ref)})
    assert not dangling, f"unresolvable references: {dangling}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("operation", "mode", "strategy", "examples"),
    RUNS,
    ids=[f"{m} {p} {mode.value} {strategy or 'default'}" for (m, p), mode, strategy, _ in RUNS],
)
def test_no_generated_input_makes_the_proxy_fail(
    running: Proxy,
    tally: Counter[str],
    operation: tuple[str, str],
    mode: GenerationMode,
    strategy: str | None,
    examples: int,
) -> None:
    method, path = operation
    api_operation = load_schema(running)[path][method]
    headers = {"X-Routing-Strategy": strategy} if strategy else None
    statuses: Counter[int] = Counter()
    refusals: Counter[str] = Counter()

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
        if response.status_code >= 400:
            refusals[orjson.loads(response.content)["error"]["message"][:70]] += 1

    call()
    label = f"{method} {path} ({mode.value}, {strategy or 'default strategy'})"
    tally[label] = statuses.total()
    print(f"\n[fuzz] {label}: {statuses.total()} requests, statuses {dict(statuses)}")
    for message, n in refusals.most_common(3):
        print(f"[fuzz]     {n} x {message}")
    assert statuses.total() >= 1
