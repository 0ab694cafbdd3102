"""D10: ill-typed fields are the client's 400 naming the field, never coerced and forwarded."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import FakeLlamaServer
from tests.support.proxy import Proxy, chat_bodies

ASK = [{"role": "user", "content": "Say hello"}]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", "10"),
        ("max_tokens", True),
        ("max_tokens", 10.0),
        ("max_completion_tokens", "10"),
        ("stream", "true"),
        ("stream", 1),
        ("logprobs", "yes"),
        ("top_logprobs", 2.5),
        ("n", "1"),
        ("temperature", "0.2"),
    ],
)
def test_an_ill_typed_field_is_refused_naming_it(
    proxy: Proxy, local: FakeLlamaServer, field: str, value: Any
) -> None:
    answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK, field: value})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == field
    assert chat_bodies(local) == []  # nothing was forwarded


def test_well_typed_numbers_still_pass(proxy: Proxy, local: FakeLlamaServer) -> None:
    body = {"messages": ASK, "max_tokens": 10, "temperature": 0, "top_p": 1}
    assert proxy.http.post("/v1/chat/completions", json=body).status_code == 200


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tools", "x"),
        ("tools", [{"type": "function"}]),  # no function
        ("tools", [{"type": "function", "function": {"description": "no name"}}]),
        ("tools", [{"function": {"name": "f"}}]),  # no type
        ("tool_choice", 5),
        ("tool_choice", "always"),
        ("response_format", "json"),
        ("response_format", {"type": "xml"}),
    ],
)
def test_malformed_tools_and_formats_are_the_clients_400_and_never_trip_a_circuit(
    proxy: Proxy, local: FakeLlamaServer, field: str, value: Any
) -> None:
    """llama-server answers a malformed ``tools`` with a 500: forwarded, a handful of such
    requests from one client would open its circuit for everyone."""
    body = {"messages": ASK, field: value}
    headers = {"X-Routing-Strategy": "local_only"}
    for _ in range(6):  # more than the circuit's failure count
        answer = proxy.http.post("/v1/chat/completions", json=body, headers=headers)
        assert answer.status_code == 400
        assert answer.json()["error"]["param"].split(".")[0] == field
    assert chat_bodies(local) == []
    assert proxy.stats()["features"]["upstreams"]["local"]["circuit"]["state"] == "closed"


def test_tools_of_other_kinds_and_named_choices_pass_through(
    proxy: Proxy, local: FakeLlamaServer
) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body = {
        "messages": ASK,
        "tools": [tool, {"type": "custom", "custom": {"name": "grammar"}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {}}},
    }
    answer = proxy.http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200
    assert chat_bodies(local)[0]["tools"] == body["tools"]  # forwarded as the client sent it
