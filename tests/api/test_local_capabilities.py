"""What the local model cannot do goes to the cloud: images, audio, a demanded tool call.

llama-server reads images or audio only with a projector loaded; without one it answers
them with a 500 ("image input is not supported"), which would count against its circuit:
a handful of image requests would turn the local model off for everyone. A model whose
chat template has no tools never makes the call ``tool_choice`` demands, so its draft is
thrown away every time. What it can do is asked of ``/props`` at start.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.support.proxy import MakeProxy, Proxy, chat_bodies

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
LOOK = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, IMAGE]}]
LOCAL_ONLY = {"X-Routing-Strategy": "local_only"}


def ask(proxy: Proxy, headers: dict[str, str] | None = None, **extra: Any) -> Any:
    body = {"messages": LOOK, "max_tokens": 16, **extra}
    return proxy.http.post("/v1/chat/completions", json=body, headers=headers)


@pytest.mark.parametrize("stream", [False, True])
def test_an_image_the_local_model_cannot_read_is_the_clouds_alone(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras, stream: bool
) -> None:
    answer = ask(proxy, stream=stream)
    assert answer.status_code == 200
    assert answer.headers["x-model-used"] == "cerebras"
    assert chat_bodies(local) == []  # no blind draft
    assert chat_bodies(cloud)[0]["messages"] == LOOK  # the image went to the cloud
    stats = proxy.stats()
    assert stats["requests"]["by_strategy"] == {"cerebras_only": 1}


def test_an_image_asked_of_the_local_model_alone_is_the_clients_400_and_never_trips_a_circuit(
    proxy: Proxy, local: FakeLlamaServer
) -> None:
    for _ in range(6):  # more than the circuit's failure count
        answer = ask(proxy, LOCAL_ONLY)
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["param"] == "messages.0.content.1"
        assert "does not read images" in error["message"]
    assert chat_bodies(local) == []
    stats = proxy.stats()
    assert stats["requests"]["refused"] == {"400": 6}
    assert stats["features"]["upstreams"]["local"]["circuit"]["state"] == "closed"


def test_a_local_model_with_a_projector_drafts_images(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.modalities["vision"] = True  # /props says so; asked as the proxy starts
    with make_proxy() as proxy:
        assert ask(proxy, LOCAL_ONLY).status_code == 200
        ask(proxy)
    assert [body["messages"] for body in chat_bodies(local)] == [LOOK, LOOK]


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
CALL_IT = [{"role": "user", "content": "The weather in Paris?"}]


@pytest.mark.parametrize(
    ("tool_choice", "drafted"),
    [
        ("required", False),
        ({"type": "function", "function": {"name": "get_weather"}}, False),
        ("auto", True),
    ],
)
def test_a_call_demanded_of_a_template_without_tools_is_the_clouds_alone(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    tool_choice: Any,
    drafted: bool,
) -> None:
    local.template_caps = {"supports_tools": False, "supports_tool_calls": False}  # SmolLM2's
    body = {"messages": CALL_IT, "tools": [WEATHER], "tool_choice": tool_choice}
    with make_proxy() as proxy:
        answer = proxy.http.post("/v1/chat/completions", json=body)
        refused = proxy.http.post("/v1/chat/completions", json=body, headers=LOCAL_ONLY)
    assert answer.status_code == 200
    assert bool(chat_bodies(local)) is drafted  # "auto" may be answered in text: drafted
    assert (refused.status_code == 400) is not drafted
    if not drafted:
        assert refused.json()["error"]["param"] == "tool_choice"
        assert "does not make tool calls" in refused.json()["error"]["message"]


def test_with_no_cloud_key_a_request_only_the_cloud_can_answer_says_why(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    with make_proxy(env={}) as proxy:
        answer = ask(proxy)
        stats = proxy.stats()
    assert answer.status_code == 503 and answer.headers["x-should-retry"] == "false"
    error = answer.json()["error"]
    assert error["code"] == "upstream_not_configured"
    assert error["message"].startswith(
        "cerebras: messages.0.content.1: the local model does not read images, "
        "so only the cloud can answer it, and it has no API key configured"
    )
    assert chat_bodies(local) == [] and chat_bodies(cloud) == []
    assert stats["requests"]["refused"] == {"503": 1}
