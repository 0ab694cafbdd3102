"""Fuzz of the admin API: no generated body, id or header makes the proxy fail; every
refusal is a 4xx in OpenAI's error shape, and no key made shows up in a refusal.

Two generators, as for the doors (tests/load): schemathesis over ``POST /admin/keys``'
OpenAPI schema (valid and invalid bodies), and a Hypothesis mutation of a valid body,
one member replaced by any JSON value, sent to any of the API's routes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy

pytestmark = pytest.mark.process
ADMIN_KEY = "sk-admin-fuzz-0a1b2c3d4e5f"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
VALID: dict[str, Any] = {
    "name": "search",
    "team": "retrieval",
    "budget_usd_day": 1.5,
    "budget_usd_month": 30,
    "rpm": 10,
    "tpm": 10000,
    "max_concurrent": 2,
    "strategies": ["speculative_decoding", "local_only"],
    "on_budget": "local",
}
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


def check(status: int, content: bytes) -> None:
    """A success with the route's body, or a 4xx in OpenAI's shape; never a 5xx."""
    assert status < 500, f"status {status}: {content[:300]!r}"
    body = orjson.loads(content)
    if status >= 400:
        assert set(body) == {"error"}, body
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
        assert body["error"]["message"], body
        assert ADMIN_KEY not in content.decode() and "sk-sp-" not in content.decode()
    elif status == 201:
        assert body["key"].startswith("sk-sp-") and body["id"].startswith("key_"), body


@pytest.fixture
def running(make_proxy: MakeProxy) -> Iterator[Proxy]:
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "ADMIN_KEY": ADMIN_KEY}
    with make_proxy(env=env, server={"admin_key": "${ADMIN_KEY}"}) as proxy:
        yield proxy


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_schema_fuzz_of_making_keys_gets_openai_errors_never_a_500(
    running: Proxy, mode: GenerationMode
) -> None:
    config = schemathesis.Config.from_dict({"base-url": running.url, "request-retries": 0})
    document = running.http.get("/openapi.json", headers=ADMIN).json()
    operation = schemathesis.openapi.from_dict(document, config=config)["/admin/keys"]["POST"]
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
        response = case.call(headers=ADMIN)
        statuses.append(response.status_code)
        check(response.status_code, response.content)

    call()
    if mode is GenerationMode.NEGATIVE:
        assert any(400 <= s < 500 for s in statuses)
    else:
        assert 201 in statuses  # valid bodies made keys, not all refused


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/admin/keys"),
        ("GET", "/admin/keys/{id}"),
        ("DELETE", "/admin/keys/{id}"),
        ("POST", "/admin/keys/{id}/rotate"),
    ],
)
def test_any_member_any_id_any_header_is_never_a_500(
    running: Proxy, method: str, path: str
) -> None:
    made = running.http.post("/admin/keys", json={"name": "fixed"}, headers=ADMIN).json()
    names = itertools.count()  # a fresh name each time: a valid body makes a key

    @given(
        member=st.sampled_from(sorted(VALID)),
        value=JSON_VALUES,
        key_id=st.sampled_from([made["id"], "key_0", "fixed", "%2e%2e", "x" * 300]) | st.text(),
        auth=st.sampled_from([f"Bearer {ADMIN_KEY}", "", "Bearer wrong", f"bearer  {ADMIN_KEY}x"]),
    )
    @settings(max_examples=60, deadline=None, derandomize=True, database=None)
    def call(member: str, value: Any, key_id: str, auth: str) -> None:
        body = {**VALID, "name": f"n{next(names)}", member: value}
        url = path.replace("{id}", quote(key_id, safe="") or "x")
        response = running.http.request(method, url, json=body, headers={"Authorization": auth})
        check(response.status_code, response.content)

    call()
