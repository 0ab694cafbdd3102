"""The Responses door's own behaviour over HTTP: refusals in OpenAI's shape, stored
responses kept per API key, what it accepts and drops, the token limit's ``incomplete``.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.fakes import FakeLlamaServer
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, chat_bodies

KEY_A, KEY_B = "sk-door-a-1111", "sk-door-b-2222"
LOCAL = {"X-Routing-Strategy": "local_only"}
ENVELOPE = {"message", "type", "param", "code"}


def error_of(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error"} and set(body["error"]) == ENVELOPE
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize("tool", ["web_search", "file_search", "computer_use_preview"])
def test_built_in_tools_are_refused_by_name(proxy: Proxy, tool: str) -> None:
    body = {"model": "auto", "input": "hi", "tools": [{"type": tool}]}
    error = error_of(proxy.http.post("/v1/responses", json=body, headers=LOCAL), 400)
    assert error["type"] == "invalid_request_error" and error["param"] == "tools.0.type"
    assert repr(tool) in error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": 7}, "input"),
        ({"model": "auto"}, "input"),
        ({"input": "hi", "max_tokens": 5}, "max_tokens"),
        ({"input": "hi", "messages": []}, "messages"),
        ({"input": "hi", "conversation": "conv_123"}, "conversation"),
        ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
        (
            {
                "input": "hi",
                "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "function", "name": "nope"},
            },
            "tool_choice",
        ),
        (
            {
                "input": "hi",
                "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"name": "f"}]},
            },
            "tool_choice.tools.0.type",
        ),
        # named in the Responses API's words, not the chat's the door translates to
        *[
            (
                {
                    "input": "hi",
                    "tools": [{"type": "function", "name": "f"}],
                    "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": allowed},
                },
                param,
            )
            for allowed, param in (
                ([{"type": "function", "name": "nope"}], "tool_choice"),
                ([{"type": "web_search"}], "tool_choice.tools.0"),
                ([{"type": "function"}], "tool_choice.tools.0"),
                ([], "tool_choice"),
            )
        ],
        ({"instructions": "Be brief."}, "input"),
        ({"input": "hi", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"input": "hi", "metadata": {"k": "v" * 513}}, "metadata.k"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input.0"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "hi", "text": {"format": {"type": "json_schema"}}}, "text.format"),
        ({"input": "hi", "previous_response_id": "resp_nowhere"}, "previous_response_id"),
    ],
)
def test_malformed_requests_name_their_field(
    proxy: Proxy, body: dict[str, Any], param: str
) -> None:
    error = error_of(proxy.http.post("/v1/responses", json=body, headers=LOCAL), 400)
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_stored_responses_are_per_api_key(make_proxy: MakeProxy) -> None:
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "PROXY_KEYS": f"{KEY_A},{KEY_B}"}
    with make_proxy(env=env, api_key=KEY_A, server={"api_keys": "${PROXY_KEYS}"}) as proxy:
        created = proxy.http.post("/v1/responses", json={"input": "hi"}, headers=LOCAL).json()
        path = f"/v1/responses/{created['id']}"
        assert proxy.http.get(path).json()["output"] == created["output"]
        other = {"Authorization": f"Bearer {KEY_B}"}
        assert "not found" in error_of(proxy.http.get(path, headers=other), 404)["message"]
        error_of(proxy.http.delete(path, headers=other), 404)
        error_of(proxy.http.get("/v1/responses/resp_unknown"), 404)
        follow = {"input": "more", "previous_response_id": created["id"]}
        refused = proxy.http.post("/v1/responses", json=follow, headers=LOCAL | other)
        assert error_of(refused, 400)["param"] == "previous_response_id"
        assert proxy.http.delete(path).json() == {
            "id": created["id"],
            "object": "response.deleted",
            "deleted": True,
        }
        error_of(proxy.http.get(path), 404)
        error_of(proxy.http.delete(path), 404)


def test_what_the_proxy_does_not_act_on_is_accepted_and_dropped(
    proxy: Proxy, local: FakeLlamaServer
) -> None:
    body = {
        "model": "auto",
        "input": [
            {"role": "developer", "content": "Be brief."},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "id": "msg_1",
                "role": "user",
                "status": "completed",
                "content": [{"type": "input_text", "text": "hi"}],
            },
        ],
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "parallel_tool_calls": False,
        "prompt_cache_key": "k",
        "user": "u-1",
        "truncation": "auto",
        "service_tier": "auto",
        "safety_identifier": "s",
        "metadata": {"trace": "t-1"},
        "store": False,
    }
    answer = proxy.http.post("/v1/responses", json=body, headers=LOCAL)
    assert answer.status_code == 200, answer.text
    assert answer.json()["metadata"] == {"trace": "t-1"}  # the client's, as it came
    assert answer.json()["specproxy"]["model_used"]  # the proxy's report beside it
    [sent] = chat_bodies(local)
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]
    dropped = {"reasoning", "include", "prompt_cache_key", "truncation", "metadata", "input"}
    assert not dropped & set(sent)


def test_the_token_limit_makes_an_incomplete_response(proxy: Proxy) -> None:
    body = {"model": "auto", "input": "hi", "max_output_tokens": 2}
    whole = proxy.http.post("/v1/responses", json=body, headers=LOCAL)
    assert whole.json()["status"] == "incomplete"
    assert whole.json()["incomplete_details"] == {"reason": "max_output_tokens"}
    assert whole.json()["output"][-1]["status"] == "incomplete"
    assert whole.headers["X-Model-Used"] and whole.headers["X-Routing-Strategy"] == "local_only"
    with proxy.http.stream(
        "POST", "/v1/responses", json=body | {"stream": True}, headers=LOCAL
    ) as streamed:
        assert streamed.headers["X-Model-Used"] and streamed.headers["X-Request-Id"]
        text = streamed.read().decode()
    events = [e for e in text.split("\n\n") if e]
    last = orjson.loads(events[-1].split("data: ", 1)[1])
    assert events[-1].startswith("event: response.incomplete\n")
    assert last["response"]["usage"]["output_tokens"] == 2
    done = [e for e in events if e.startswith("event: response.output_item.done\n")]
    assert orjson.loads(done[-1].split("data: ", 1)[1])["item"]["status"] == "incomplete"
    assert last["response"]["output"][-1]["status"] == "incomplete"
    assert isinstance(last["response"]["created_at"], int)


def test_the_store_keeps_to_its_configured_bound(make_proxy: MakeProxy) -> None:
    """``responses.store_max_bytes``: a response beyond the bound pushes the oldest out."""
    env = {"CEREBRAS_API_KEY": CLOUD_KEY}
    with make_proxy(env=env, responses={"store_max_bytes": 8192}) as proxy:
        ids = []
        for n in range(5):
            ask = {"input": f"{n} " + "lorem ipsum " * 120}
            ids.append(proxy.http.post("/v1/responses", json=ask, headers=LOCAL).json()["id"])
        kept = [proxy.http.get(f"/v1/responses/{i}").status_code for i in ids]
    # each entry is ~2-3 KB: the newest two or three fit, the older ones went first
    gone = kept.count(404)
    assert 2 <= gone <= 3 and kept == [404] * gone + [200] * (5 - gone)


def test_allowed_tools_narrow_the_tools_sent(proxy: Proxy, local: FakeLlamaServer) -> None:
    """Once only the mode was kept: the model could call any tool offered."""
    tools = [{"type": "function", "name": name} for name in ("f", "g")]
    choice = {"type": "allowed_tools", "mode": "required", "tools": [tools[1]]}
    body = {"input": "hi", "tools": tools, "tool_choice": choice}
    assert proxy.http.post("/v1/responses", json=body, headers=LOCAL).status_code == 200
    no_mode = body | {"tool_choice": {"type": "allowed_tools", "tools": [tools[0]]}}
    assert proxy.http.post("/v1/responses", json=no_mode, headers=LOCAL).status_code == 200
    sent, sent_no_mode = chat_bodies(local)
    assert [t["function"]["name"] for t in sent["tools"]] == ["g"]
    assert sent["tool_choice"] == "required"
    # no mode: auto, as before the allowed tools were narrowed
    assert [t["function"]["name"] for t in sent_no_mode["tools"]] == ["f"]
    assert sent_no_mode["tool_choice"] == "auto"
