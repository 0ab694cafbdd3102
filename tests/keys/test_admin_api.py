"""The admin API on a real proxy, on each edge: keys made, listed, shown, rotated and
revoked through it are accepted and refused at once; it is guarded by the admin key
and absent without one; bad input is a 4xx in OpenAI's shape."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy

ADMIN_KEY = "sk-admin-0a1b2c3d4e5f"
TEAM_KEY = "sk-team-5f4e3d2c1b0a"
ENV = {"CEREBRAS_API_KEY": CLOUD_KEY, "ADMIN_KEY": ADMIN_KEY, "TEAM_KEY": TEAM_KEY}
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
ASK = [{"role": "user", "content": "hi"}]
WITH_ADMIN = {"server": {"admin_key": "${ADMIN_KEY}"}}


def chat(proxy: Proxy, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {"Authorization": ""}
    body = {"model": "local", "messages": ASK}
    return proxy.http.post("/v1/chat/completions", json=body, headers=headers).status_code


def admin(proxy: Proxy, method: str, path: str = "", **kwargs: Any) -> httpx.Response:
    headers = kwargs.pop("headers", ADMIN)
    return proxy.http.request(method, f"/admin/keys{path}", headers=headers, **kwargs)


def openai_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"], error
    if code is not None:
        assert error["code"] == code, error
    return error


def test_a_made_key_is_served_rotated_and_revoked_at_once(make_proxy: MakeProxy) -> None:
    with make_proxy(env=ENV, **WITH_ADMIN) as proxy:
        assert chat(proxy, None) == 401  # the admin API on: a key is asked for, none exists
        made = admin(proxy, "POST", json={"name": "search", "team": "retrieval", "rpm": 10})
        assert made.status_code == 201, made.text
        body = made.json()
        key, key_id = body["key"], body["id"]
        assert key.startswith("sk-sp-") and len(key) > 40 and key_id.startswith("key_")
        assert (body["name"], body["team"], body["rpm"], body["on_budget"]) == (
            "search",
            "retrieval",
            10,
            "refuse",
        )
        # The SDK with the new key is served; nobody else is, once a key exists.
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)
        assert client.chat.completions.create(model="local", messages=ASK).choices  # type: ignore[arg-type]
        assert chat(proxy, None) == 401 and chat(proxy, "sk-sp-guess") == 401

        listed = admin(proxy, "GET").json()["data"]
        assert [k["id"] for k in listed] == [key_id]
        shown = admin(proxy, "GET", f"/{key_id}").json()
        assert shown == listed[0] and "key" not in shown and "hash" not in shown
        assert key not in admin(proxy, "GET").text

        rotated = admin(proxy, "POST", f"/{key_id}/rotate")
        assert rotated.status_code == 200, rotated.text
        new = rotated.json()["key"]
        assert rotated.json()["id"] == key_id and new != key and rotated.json()["rotated_at"]
        assert chat(proxy, key) == 401 and chat(proxy, new) == 200

        gone = admin(proxy, "DELETE", f"/{key_id}")
        assert gone.json() == {"id": key_id, "object": "key", "deleted": True}
        assert chat(proxy, new) == 401
        openai_error(admin(proxy, "GET", f"/{key_id}"), 404, "key_not_found")
        openai_error(admin(proxy, "DELETE", f"/{key_id}"), 404, "key_not_found")
        openai_error(admin(proxy, "POST", f"/{key_id}/rotate"), 404, "key_not_found")
        assert chat(proxy, None) == 401  # the last key gone: still no auth-free access


def test_managed_and_configured_keys_serve_side_by_side(make_proxy: MakeProxy) -> None:
    server = {
        "admin_key": "${ADMIN_KEY}",
        "keys": [{"name": "team", "key": "${TEAM_KEY}", "team": "core", "tpm": 1000}],
    }
    with make_proxy(env=ENV, server=server) as proxy:
        made = admin(proxy, "POST", json={"name": "bot"}).json()
        key, bot = made["key"], made["id"]
        assert chat(proxy, TEAM_KEY) == 200 and chat(proxy, key) == 200
        listed = admin(proxy, "GET").json()["data"]
        assert [(k["id"], k["managed"]) for k in listed] == [("team", False), (bot, True)]
        assert TEAM_KEY not in admin(proxy, "GET").text
        assert admin(proxy, "GET", "/team").json()["tpm"] == 1000
        openai_error(admin(proxy, "DELETE", "/team"), 409, "key_in_config")
        openai_error(admin(proxy, "POST", "/team/rotate"), 409, "key_in_config")
        openai_error(admin(proxy, "POST", json={"name": "team"}), 409, "name_taken")
        openai_error(admin(proxy, "POST", json={"name": "bot"}), 409, "name_taken")
        assert chat(proxy, TEAM_KEY) == 200


def test_the_admin_api_needs_the_admin_key(make_proxy: MakeProxy) -> None:
    with make_proxy(env=ENV, **WITH_ADMIN) as proxy:
        calls = [("GET", ""), ("POST", ""), ("GET", "/key_1"), ("DELETE", "/key_1")]
        for method, path in calls:
            for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
                response = admin(proxy, method, path, headers=headers, json={"name": "x"})
                openai_error(response, 401, "invalid_admin_key")
        # A client key is not the admin key, and the admin key is not a client key.
        key = admin(proxy, "POST", json={"name": "x"}).json()["key"]
        refused = admin(proxy, "GET", headers={"Authorization": f"Bearer {key}"})
        openai_error(refused, 401, "invalid_admin_key")
        assert chat(proxy, ADMIN_KEY) == 401
        assert proxy.http.get("/stats", headers={"Authorization": f"Bearer {key}"}).json()[
            "requests"
        ]["refused"] == {"401": 10}


def test_without_an_admin_key_there_is_no_admin_api(make_proxy: MakeProxy) -> None:
    with make_proxy(env=ENV) as proxy:
        for method, path in [("GET", ""), ("POST", ""), ("GET", "/k"), ("POST", "/k/rotate")]:
            openai_error(admin(proxy, method, path, json={"name": "x"}), 404, "not_found")
        assert chat(proxy, None) == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x", "key": "sk-mine"}, "key"),
        ({"name": "x", "rpm": 0}, "rpm"),
        ({"name": "x", "budget_usd_day": -1}, "budget_usd_day"),
        ({"name": "x", "strategies": ["fastest"]}, "strategies.0"),
        ({"name": "x", "on_budget": "shrug"}, "on_budget"),
        ({"name": "x", "colour": "red"}, "colour"),
        ({"name": ["x"]}, "name"),
    ],
)
def test_a_bad_body_is_a_400_naming_its_field(
    make_proxy: MakeProxy, body: dict[str, Any], param: str
) -> None:
    with make_proxy(env=ENV, **WITH_ADMIN) as proxy:
        error = openai_error(admin(proxy, "POST", json=body), 400)
        assert error["param"] == param, error
        assert admin(proxy, "GET").json()["data"] == []
        for content in (b"{not json", b"[1]"):
            openai_error(admin(proxy, "POST", content=content), 400)


def test_a_managed_key_opens_every_door(make_proxy: MakeProxy) -> None:
    with make_proxy(env=ENV, **WITH_ADMIN) as proxy:
        key = admin(proxy, "POST", json={"name": "agent"}).json()["key"]
        bearer = {"Authorization": f"Bearer {key}"}
        anthropic = {"Authorization": "", "x-api-key": key}
        messages = {"model": "local", "max_tokens": 16, "messages": ASK}
        calls = [
            ("/v1/messages", messages, anthropic),
            ("/v1/responses", {"model": "local", "input": "hi"}, bearer),
            ("/v1/completions", {"model": "local", "prompt": "hi"}, bearer),
        ]
        for path, body, headers in calls:
            assert proxy.http.post(path, json=body, headers=headers).status_code == 200, path
            refused = {k: v.replace(key, "sk-sp-guess") for k, v in headers.items()}
            assert proxy.http.post(path, json=body, headers=refused).status_code == 401, path


def test_a_managed_keys_policy_is_enforced_and_outlives_its_rotation(
    make_proxy: MakeProxy,
) -> None:
    with make_proxy(env=ENV, **WITH_ADMIN) as proxy:
        made = admin(proxy, "POST", json={"name": "paced", "rpm": 2, "strategies": ["local_only"]})
        key, key_id = made.json()["key"], made.json()["id"]
        headers = {"Authorization": f"Bearer {key}", "X-Routing-Strategy": "cerebras_only"}
        body = {"model": "local", "messages": ASK}
        refused = proxy.http.post("/v1/chat/completions", json=body, headers=headers)
        assert refused.status_code == 403, refused.text  # a strategy the key may not use
        assert chat(proxy, key) == 200
        new = admin(proxy, "POST", f"/{key_id}/rotate").json()["key"]
        assert chat(proxy, new) == 200  # the same id: the same minute's count
        limited = proxy.http.post(
            "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {new}"}
        )
        assert limited.status_code == 429 and limited.headers["retry-after"], limited.text
