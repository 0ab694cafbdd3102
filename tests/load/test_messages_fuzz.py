"""Fuzz of the Messages door (``POST /v1/messages``, ``/v1/messages/count_tokens``): no
generated input makes the proxy fail, and every refusal is Anthropic's error shape.

Two generators: schemathesis over the door's own OpenAPI schema (valid and invalid
bodies, as ``test_fuzz`` drives the chat door), and a Hypothesis mutation of a valid
request, each time one member replaced by any JSON value (types Anthropic's schema
never produces: nested lists for text, objects for roles...). The stand-ins answer
every well-formed request successfully, so a 5xx can only be the proxy's own fault.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.fakes import Reply
from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.support.answers import CLOUD_OTHER, LONG
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy

pytestmark = pytest.mark.process
MESSAGES, COUNT = "/v1/messages", "/v1/messages/count_tokens"
ERROR_TYPES = {
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "overloaded_error",
}
VALID: dict[str, Any] = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 32,
    "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "...", "signature": "s"},
                {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "P"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ],
    "tools": [{"name": "w", "description": "weather", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"},
    "stop_sequences": ["\n\n"],
    "temperature": 0.5,
    "top_k": 5,
    "metadata": {"user_id": "u"},
}


def anthropic_error(status: int, content: bytes) -> None:
    """A refusal: a 4xx (or a named upstream failure, never 500) in Anthropic's shape."""
    assert status != 500 and status < 600, f"status {status}"
    assert content[:1] == b"{", f"status {status}: {content[:300]!r}"
    body = orjson.loads(content)
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] in ERROR_TYPES and body["error"]["message"], body
    assert CLOUD_KEY not in content.decode()


def check(response: httpx.Response | schemathesis.Response) -> None:
    status, content = response.status_code, response.content
    assert status < 500 or status in (502, 504, 529), f"status {status}: {content[:300]!r}"
    if status >= 400:
        anthropic_error(status, content)
    elif content.startswith(b"event: "):  # a stream: Messages' events to the end
        assert content.rstrip().split(b"\n")[-2] == b"event: message_stop", content[-300:]
    else:
        body = orjson.loads(content)
        assert body.get("type") == "message" or "input_tokens" in body, body


@pytest.fixture
def running(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras
) -> Iterator[Proxy]:
    local.default = Reply(LONG)
    cloud.default = Reply(CLOUD_OTHER)
    with make_proxy() as proxy:
        yield proxy


@pytest.mark.parametrize("path", [MESSAGES, COUNT])
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_schema_fuzz_gets_anthropic_errors_never_a_500(
    running: Proxy, path: str, mode: GenerationMode
) -> None:
    config = schemathesis.Config.from_dict(
        {"base-url": running.url, "request-retries": 0, "max-stream-events": 1000}
    )
    document = running.http.get("/openapi.json").json()
    operation = schemathesis.openapi.from_dict(document, config=config)[path]["POST"]
    statuses: list[int] = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    def call(case: schemathesis.Case) -> None:
        response = case.call()
        statuses.append(response.status_code)
        check(response)

    call()
    if mode is GenerationMode.NEGATIVE:
        assert any(400 <= s < 500 for s in statuses)
    else:
        assert 200 in statuses  # valid bodies were served, not all refused


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def paths(node: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every member's path in a JSON document."""
    out = [here] if here else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += paths(value, (*here, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += paths(value, (*here, i))
    return out


def replaced(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {**node, head: replaced(node[head], rest, value)}
    return [replaced(v, rest, value) if i == head else v for i, v in enumerate(node)]


@pytest.mark.parametrize("path", [MESSAGES, COUNT])
def test_any_member_replaced_by_any_json_is_never_a_500(running: Proxy, path: str) -> None:
    members = paths(VALID)

    @given(where=st.sampled_from(members), value=JSON_VALUES, stream=st.booleans())
    @settings(max_examples=80, deadline=None, derandomize=True, database=None)
    def call(where: tuple[Any, ...], value: Any, stream: bool) -> None:
        body = replaced({**VALID, "stream": stream}, where, value)
        check(running.http.post(path, json=body))

    call()
