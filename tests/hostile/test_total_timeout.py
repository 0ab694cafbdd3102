"""D4: ``timeout.total`` holds on every path: a draft read whole (early abort), a stream
before its first chunk, a verification."""

from __future__ import annotations

import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import spec
from tests.support.proxy import MakeProxy

ASK = [{"role": "user", "content": "Say hello"}]
TOTAL = {"connect": 1, "read": 5, "total": 1}
SLOW_WORDS = " ".join(["slowly"] * 30)


def test_an_early_abort_draft_at_a_trickle_is_cut_at_total(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    # 30 tokens, 0.2 s apart: 6 s, each gap well under `read`
    local.enqueue(Reply(SLOW_WORDS, chunk_delay=0.2))
    cloud.enqueue(Reply("Hello from the cloud."))
    overrides = {"early_abort": True, "abort_min_token_prob": 0.0}
    with make_proxy(models={"local": {"timeout": TOTAL}}, speculative_decoding=overrides) as proxy:
        answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK, "stream": True})
        stats = proxy.stats()
    assert answer.status_code == 200
    assert '"model_used":"cerebras"' in answer.text  # streamed by the cloud after the cut
    assert '"reasons":["local_unavailable"]' in answer.text
    assert stats["upstream_errors"] == {"local:timeout": 1}


@contextmanager
def trickle_upstream(gap_s: float) -> Iterator[str]:
    """An upstream that sends its stream's headers, then one byte per ``gap_s``, never a
    whole chunk (until the proxy hangs up)."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(65536)
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            try:
                while True:
                    self.request.sendall(b"1\r\n \r\n")  # one byte of body
                    time.sleep(gap_s)
            except OSError:
                return  # the proxy hung up

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as server:
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            thread.join()


def test_a_direct_stream_that_never_sends_a_chunk_is_cut_at_total(make_proxy: MakeProxy) -> None:
    with (
        trickle_upstream(0.2) as url,
        make_proxy(
            local_url=url,
            routing={"strategy": "local_only"},
            models={"local": {"timeout": TOTAL}},
        ) as proxy,
    ):
        answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK, "stream": True})
        stats = proxy.stats()
    assert answer.status_code == 504
    assert answer.json()["error"]["message"] == "local: no answer within 1 s"
    assert stats["upstream_errors"] == {"local:timeout": 1}


def test_a_verification_at_a_trickle_is_cut_at_total(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply("I think it is maybe four, but I am not sure about that at all."))
    cloud.enqueue(Reply(SLOW_WORDS, chunk_delay=0.2, delay=2.0))  # headers after 2 s
    with make_proxy(models={"cerebras": {"timeout": TOTAL}}) as proxy:
        answer = proxy.http.post("/v1/chat/completions", json={"messages": ASK})
        stats = proxy.stats()
    assert answer.status_code == 200
    assert spec(answer.json())["reasons"][-1] == "verifier_failed"
    assert stats["upstream_errors"] == {"cerebras:timeout": 1}
