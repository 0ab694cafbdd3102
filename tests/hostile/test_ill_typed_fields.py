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
