"""D15: a client's JSON-schema ``pattern`` cannot stall the proxy. A tool schema (or a
``response_format``) with ``"pattern": "^(a+)+$"`` and a draft of 30 ``a``s and a
``!``: Python's backtracking ``re`` would block the event loop for a minute; RE2 judges
it at once, the draft is refused (it does not fit), and /health answers meanwhile."""

from __future__ import annotations

import threading
import time

import httpx

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import spec
from tests.support.proxy import MakeProxy

EVIL = {"type": "object", "properties": {"v": {"type": "string", "pattern": "^(a+)+$"}}}
DRAFT = '{"v": "' + "a" * 30 + '!"}'
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": EVIL}}]
ASK = [{"role": "user", "content": "Call f"}]


def health_while(url: str, done: threading.Event) -> list[float]:
    """How long each /health took while the chat request was in flight (at least one)."""
    took = []
    with httpx.Client(base_url=url, timeout=1.0) as client:
        while not done.is_set() or not took:
            start = time.monotonic()
            assert client.get("/health").status_code == 200  # raises past 1 s
            took.append(time.monotonic() - start)
    return took


def run(proxy_url: str, body: dict) -> tuple[list[float], httpx.Response]:
    done, answer = threading.Event(), []

    def ask() -> None:
        try:
            answer.append(httpx.post(f"{proxy_url}/v1/chat/completions", json=body, timeout=15))
        finally:
            done.set()

    thread = threading.Thread(target=ask)
    thread.start()
    try:
        took = health_while(proxy_url, done)
    finally:
        thread.join()
    return took, answer[0]


def test_a_backtracking_pattern_in_a_tool_schema_does_not_block(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.default = Reply(tool_calls=[{"name": "f", "arguments": DRAFT}])
    cloud.default = Reply(tool_calls=[{"name": "f", "arguments": '{"v": "aaa"}'}])
    with make_proxy() as proxy:
        took, answer = run(proxy.url, {"messages": ASK, "tools": TOOLS})
    assert max(took) < 1.0
    assert answer.status_code == 200, answer.text
    assert "tool_call_arguments_invalid" in spec(answer.json())["reasons"]  # judged: refused


def test_a_backtracking_pattern_in_a_response_format_does_not_block(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.default = Reply(DRAFT)
    cloud.default = Reply('{"v": "aaa"}')
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": EVIL}}
    with make_proxy() as proxy:
        took, answer = run(proxy.url, {"messages": ASK, "response_format": fmt})
    assert max(took) < 1.0
    assert answer.status_code == 200, answer.text
    assert "output_schema_invalid" in spec(answer.json())["reasons"]
