"""D2: a cloud that echoes its key into every field and header of an error leaks nothing."""

from __future__ import annotations

import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.proxy import CLOUD_KEY, MakeProxy

ASK = [{"role": "user", "content": "Say hello"}]
ECHO = f"Bearer {CLOUD_KEY}"


@pytest.mark.parametrize("status", [401, 429, 400, 503])
@pytest.mark.parametrize("stream", [False, True])
def test_a_key_echoed_into_an_error_never_reaches_the_client(
    make_proxy: MakeProxy, cloud: FakeCerebras, status: int, stream: bool
) -> None:
    error = {"message": ECHO, "type": ECHO, "param": ECHO, "code": ECHO}
    headers = {"retry-after": ECHO, "retry-after-ms": ECHO}
    cloud.enqueue(*[Reply(status=status, error=error, headers=headers)] * 3)
    with make_proxy(routing={"strategy": "cerebras_only"}) as proxy:
        answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK, "stream": stream})
    assert answer.status_code >= 400
    seen = answer.text + str(answer.headers)
    assert CLOUD_KEY not in seen
    assert "***" in answer.json()["error"]["message"]


def test_a_key_echoed_into_a_mid_stream_error_event_never_reaches_the_client(
    make_proxy: MakeProxy, cloud: FakeCerebras, local: FakeLlamaServer
) -> None:
    # Cerebras-shaped error event in the middle of a stream, and no continuation (the local
    # model fails it): the relay ends with it.
    local.enqueue(Reply(status=500))
    event = {"message": ECHO, "type": ECHO, "code": ECHO}
    cloud.enqueue(Reply("Hello there, friend.", fail_after_chunks=2, error=event))
    cloud.stream_failure = lambda reply: [reply.error]  # type: ignore[method-assign]
    with make_proxy(routing={"strategy": "cerebras_only"}) as proxy:
        answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK, "stream": True})
    assert answer.status_code == 200
    assert '"error"' in answer.text
    assert CLOUD_KEY not in answer.text
