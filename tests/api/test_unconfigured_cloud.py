"""A cloud with no API key configured: a request that needs it gets a 503 saying so, and
the official SDKs, retries on, do not ask again (``x-should-retry: false``): waiting will
not give the proxy a key. The Anthropic door calls it an ``api_error``, not overload."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.api.test_messages import ASK, MODEL
from tests.fakes import FakeCerebras
from tests.support.proxy import MakeProxy

pytestmark = pytest.mark.process

CLOUD_ONLY = {"X-Routing-Strategy": "cerebras_only"}


def test_the_openai_sdk_is_told_not_to_retry(make_proxy: MakeProxy, cloud: FakeCerebras) -> None:
    with make_proxy(env={}) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="unused", max_retries=2)
        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(
                model="auto", messages=ASK, extra_headers=CLOUD_ONLY, timeout=30
            )
        requests = proxy.stats()["requests"]["total"]
    response = failed.value.response
    assert response.status_code == 503 and response.headers["x-should-retry"] == "false"
    error = response.json()["error"]
    assert error["code"] == "upstream_not_configured" and "no API key" in error["message"]
    assert requests == 1  # two retries were allowed; none was made
    assert cloud.requests == []


def test_the_anthropic_sdk_is_told_not_to_retry(make_proxy: MakeProxy, cloud: FakeCerebras) -> None:
    with make_proxy(env={}) as proxy:
        client = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=2)
        with pytest.raises(anthropic.APIStatusError) as failed:
            client.messages.create(
                model=MODEL, max_tokens=32, messages=ASK, extra_headers=CLOUD_ONLY, timeout=30
            )
        requests = proxy.stats()["requests"]["total"]
    response = failed.value.response
    assert response.status_code == 503 and response.headers["x-should-retry"] == "false"
    assert response.json()["error"]["type"] == "api_error"  # not overloaded: it will not pass
    assert requests == 1
    assert cloud.requests == []
