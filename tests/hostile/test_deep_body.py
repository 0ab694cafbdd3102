"""D16: a request body nested deeper than the proxy can send on (orjson writes at most
254 levels; it reads up to 1024) is the client's 400 (``invalid_request_error``), in
every strategy, never a 500; 254 levels still pass."""

from __future__ import annotations

import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.support.proxy import MakeProxy, chat_bodies

STRATEGIES = ("speculative_decoding", "local_only", "cerebras_only")


def body(depth: int) -> bytes:
    """A chat request whose whole JSON is ``depth`` levels deep (in a tool's schema),
    written by hand: Python's json module would recurse past its limit."""
    lists = depth - 4  # the body, tools, [0] and function come first
    return (
        b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", '
        b'"function": {"name": "f", "parameters": ' + b"[" * lists + b"]" * lists + b"}}]}"
    )


@pytest.mark.parametrize("depth", [255, 600, 1023])
def test_a_body_too_deep_to_send_on_is_a_400(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, depth: int
) -> None:
    with make_proxy() as proxy:
        for strategy in STRATEGIES:
            headers = {"X-Routing-Strategy": strategy, "Content-Type": "application/json"}
            response = proxy.http.post("/v1/chat/completions", content=body(depth), headers=headers)
            assert response.status_code == 400, (strategy, response.text)
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error"
            assert "deep" in error["message"]
    assert chat_bodies(local) == [] and chat_bodies(cloud) == []


def test_a_body_as_deep_as_can_be_sent_on_is_served(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    with make_proxy() as proxy:
        response = proxy.http.post(
            "/v1/chat/completions",
            content=body(254),
            headers={"X-Routing-Strategy": "local_only", "Content-Type": "application/json"},
        )
    assert response.status_code == 200, response.text
