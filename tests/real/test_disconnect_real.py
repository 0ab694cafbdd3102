"""Issue 5: a client that disconnects stops the real llama-server's generation within a second."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.real.support import RealLlama, poll_until, real_proxy

STORY = [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}]
# ignore_eos (llama-server's own field, passed through): 2,000 tokens take ~20 s here,
# so only a cancellation can end the generation within the test's second.
ENDLESS = {"model": "local", "messages": STORY, "max_tokens": 2000, "ignore_eos": True}


def busy(llama: RealLlama) -> bool:
    slots = httpx.get(f"{llama.url}/slots", timeout=2).json()
    return any(slot["is_processing"] for slot in slots)


def cancels(llama: RealLlama) -> int:
    """How many tasks llama-server has cancelled so far, from its own log."""
    return llama.log.read_text(errors="replace").count("stop: cancel task")


def stop_time(llama: RealLlama, cancelled_before: int) -> float:
    """Seconds from now until llama-server logs the cancellation (at most 1 s).

    Its log is watched rather than /slots: polling /slots while a non-streaming
    request runs delays llama-server's own check for the closed connection.
    """
    gone = time.monotonic()
    poll_until(
        lambda: cancels(llama) > cancelled_before,
        timeout=1.0,
        what="llama-server to cancel the generation",
    )
    stopped_after = time.monotonic() - gone
    poll_until(lambda: not busy(llama), timeout=3, what="the slot to be released")
    return stopped_after


@pytest.mark.real
def test_disconnect_mid_stream_stops_real_generation(llama: RealLlama) -> None:
    with real_proxy(llama.url, "http://127.0.0.1:9") as proxy:
        with httpx.stream(
            "POST", f"{proxy.url}/v1/chat/completions", json={**ENDLESS, "stream": True}, timeout=30
        ) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            poll_until(lambda: busy(llama), timeout=3, what="llama-server to generate")
            before = cancels(llama)
        stopped_after = stop_time(llama, before)
        poll_until(
            lambda: proxy.stats()["runtime"]["in_flight"] == 0,
            timeout=3,
            what="the proxy to record the request",
        )
        assert proxy.stats()["requests"]["by_outcome"] == {"client_disconnected": 1}
    print(f"stream: generation stopped {stopped_after * 1000:.0f} ms after the client left")


@pytest.mark.real
def test_disconnect_while_waiting_stops_real_generation(llama: RealLlama) -> None:
    with real_proxy(llama.url, "http://127.0.0.1:9") as proxy:
        client_left = threading.Event()

        def impatient_client() -> None:
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(
                    f"{proxy.url}/v1/chat/completions",
                    json=ENDLESS,
                    timeout=httpx.Timeout(10, read=1.5),
                )
            client_left.set()

        before = cancels(llama)
        thread = threading.Thread(target=impatient_client)
        thread.start()
        poll_until(lambda: busy(llama), timeout=3, what="llama-server to start generating")
        assert client_left.wait(5)
        stopped_after = stop_time(llama, before)
        thread.join()
        poll_until(
            lambda: proxy.stats()["runtime"]["in_flight"] == 0,
            timeout=3,
            what="the proxy to record the request",
        )
        assert proxy.stats()["requests"]["by_outcome"] == {"client_disconnected": 1}
    print(f"non-stream: generation stopped {stopped_after * 1000:.0f} ms after the client left")
