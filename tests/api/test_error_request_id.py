"""An error carries the request's id as an answer does (``X-Request-Id``; Anthropic's
door ``request-id``): the value to look the request up by in the proxy's log."""

from __future__ import annotations

import re

import anthropic
import openai
import pytest

from tests.api.test_messages import ASK, MODEL
from tests.support.proxy import MakeProxy

pytestmark = pytest.mark.process

AN_ID = re.compile(r"[0-9a-f]{16}")


def test_openai_errors_carry_the_request_id(make_proxy: MakeProxy) -> None:
    with make_proxy() as proxy:
        ids = []
        for _ in range(2):  # n > 1 is refused by the speculative strategy: a 400
            with pytest.raises(openai.BadRequestError) as refused:
                proxy.openai.chat.completions.create(model="auto", messages=ASK, n=2)
            ids.append(refused.value.response.headers.get("x-request-id", ""))
        unknown = proxy.http.get("/v1/nowhere")  # no door opened: no id to give
    assert all(AN_ID.fullmatch(rid) for rid in ids) and ids[0] != ids[1]
    assert unknown.status_code == 404 and "x-request-id" not in unknown.headers


def test_the_routes_that_are_not_doors_give_their_errors_an_id_too(
    make_proxy: MakeProxy,
) -> None:
    with make_proxy() as proxy:
        missing = [
            proxy.http.get("/v1/models/nope"),
            proxy.http.get("/v1/responses/resp_nowhere"),
            proxy.http.delete("/v1/responses/resp_nowhere"),
        ]
    assert [r.status_code for r in missing] == [404, 404, 404]
    ids = [r.headers.get("x-request-id", "") for r in missing]
    assert all(AN_ID.fullmatch(rid) for rid in ids) and len(set(ids)) == 3


def test_anthropic_errors_carry_the_request_id(make_proxy: MakeProxy) -> None:
    with make_proxy() as proxy:
        client = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(model=MODEL, max_tokens=0, messages=ASK)
    assert AN_ID.fullmatch(refused.value.response.headers.get("request-id", ""))
