"""The proxy's own llama-server (a `launch:` section), killed under a live stream and restarted.

The proxy starts, supervises and stops the real server itself; the tests only read its pid from
``/stats`` and SIGKILL that pid (a child of this test process, checked before the kill).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from app.config import settings_from_mapping
from tests.fakes import FakeCerebras, Reply
from tests.real.support import (
    FRANCE,
    GREEDY,
    LOCAL_TIMEOUT,
    SERVER_ARGS,
    STORY,
    our_child,
    poll_until,
    spec,
    stream_chat,
)
from tests.support.processes import alive
from tests.support.proxy import CLOUD_KEY, Proxy, dead_url, proxy_config, run_proxy

pytestmark = pytest.mark.real

CLOUD_ANSWER = "Paris is the capital of France."


@contextmanager
def managed_proxy(cloud_url: str, **launch: Any) -> Iterator[Proxy]:
    """A proxy whose local model is a llama-server it launches itself; checks none is left."""
    launch = {
        "port": 0,
        "args": SERVER_ARGS,
        "startup_timeout": 60,
        "restart_backoff_initial": 0.2,
        "restart_backoff_max": 1,
        **launch,
    }
    tree = proxy_config(
        dead_url(),
        cloud_url,
        models={"local": {"base_url": None, "launch": launch, "timeout": LOCAL_TIMEOUT}},
    )
    settings = settings_from_mapping(tree, env={"CEREBRAS_API_KEY": CLOUD_KEY})
    # The lifespan starts llama-server (launch.startup_timeout) after the pair check.
    with run_proxy(settings, startup_timeout=90) as proxy:
        yield proxy
        last = local_server(proxy)["pid"]
    if last is not None:  # the proxy's shutdown stops and reaps its server
        poll_until(lambda: not alive(last), 10, f"llama-server pid {last} stopped")


def local_server(proxy: Proxy) -> dict[str, Any]:
    return proxy.stats()["local_servers"]["local"]  # type: ignore[no-any-return]


def healthy(proxy: Proxy) -> bool:
    response = proxy.http.get("/health")
    return response.status_code == 200 and response.json() == {"status": "ok"}


def kill_local(proxy: Proxy) -> int:
    """SIGKILL the proxy's llama-server; returns its pid."""
    pid = local_server(proxy)["pid"]
    assert isinstance(pid, int) and our_child(pid), "the managed server is not our child"
    os.kill(pid, signal.SIGKILL)
    return pid


def test_real_managed_server_killed_mid_stream_is_restarted(
    real_assets: tuple[Path, Path], cloud: FakeCerebras
) -> None:
    binary, model = real_assets
    with managed_proxy(cloud.url) as proxy:
        assert healthy(proxy)
        status = local_server(proxy)
        assert status["state"] == "running" and status["restarts"] == 0
        assert status["binary"] == str(binary) and status["model"] == str(model)
        first = status["pid"]
        assert isinstance(first, int) and our_child(first)
        assert proxy.stats()["features"]["upstreams"]["local"]["reachable"] is True

        killed: list[tuple[int, float]] = []

        def kill_after_first_token() -> None:
            killed.append((kill_local(proxy), time.monotonic()))

        story = {"model": "local", "messages": STORY, "max_tokens": 400, **GREEDY}
        # A 10 s read timeout: a proxy that hung on the dead upstream would fail here.
        streamed = stream_chat(
            proxy, story, on_first_content=kill_after_first_token, read_timeout=10
        )
        ended = time.monotonic()

        [(pid, killed_at)] = killed
        assert pid == first
        assert ended - killed_at < 10
        assert streamed.lines[-1] == "data: [DONE]"
        error = streamed.events[-1]["error"]
        assert error["message"].startswith("local: ") and error["type"].startswith("upstream")
        assert not any(
            c.get("finish_reason") for e in streamed.events for c in e.get("choices") or []
        )  # the answer was cut, and the client is not told otherwise
        assert healthy(proxy)  # the proxy itself never went down

        def restarted() -> bool:
            assert healthy(proxy)  # while the local model is down and coming back
            now = local_server(proxy)
            return now["state"] == "running" and now["pid"] not in (None, first)

        poll_until(restarted, 30, "llama-server restarted")
        status = local_server(proxy)
        assert status["restarts"] >= 1 and status["last_exit_code"] == -signal.SIGKILL
        assert not alive(first) and our_child(status["pid"])
        assert healthy(proxy)

        answer = proxy.openai.chat.completions.create(
            model="local", messages=FRANCE, max_tokens=16, **GREEDY
        )
        assert answer.choices[0].message.content
        assert answer.to_dict()["model_used"] == "local"
        stats = proxy.stats()
        assert stats["requests"]["by_outcome"] == {"error": 1, "passed_through": 1}
        assert stats["features"]["upstreams"]["local"]["reachable"] is True
    assert cloud.requests == []


def test_real_managed_server_gone_for_good_sends_requests_to_the_cloud(
    real_assets: tuple[Path, Path], cloud: FakeCerebras
) -> None:
    # max_restarts 0: once killed the server stays down, so "local is dead" is a state to
    # wait for rather than a race with the restart.
    cloud.enqueue(Reply(CLOUD_ANSWER), Reply(CLOUD_ANSWER))
    with managed_proxy(cloud.url, max_restarts=0) as proxy:
        pid = kill_local(proxy)
        poll_until(lambda: local_server(proxy)["state"] == "failed", 10, "supervisor gave up")
        assert not alive(pid) and local_server(proxy)["pid"] is None
        assert healthy(proxy)

        answer = proxy.openai.chat.completions.create(model="auto", messages=FRANCE, **GREEDY)
        body = answer.to_dict()
        assert body["choices"][0]["message"]["content"] == CLOUD_ANSWER
        assert body["model_used"] == "cerebras"
        assert spec(body)["reasons"] == ["local_unavailable"]

        streamed = stream_chat(proxy, {"model": "auto", "messages": FRANCE, **GREEDY})
        assert streamed.text == CLOUD_ANSWER and streamed.lines[-1] == "data: [DONE]"
        assert spec(streamed.final)["reasons"] == ["local_unavailable"]

        stats = proxy.stats()
        assert stats["requests"]["by_outcome"] == {"local_down_cloud_used": 2}
        assert stats["features"]["upstreams"]["local"]["reachable"] is False
        assert healthy(proxy)
    # The cloud got the client's own requests.
    assert [r.json.get("stream", False) for r in cloud.requests] == [False, True]


def test_real_draft_server_answers_and_the_probe_finds_no_per_request_depth(
    cloud: FakeCerebras,
) -> None:
    """The shipped build speculates with a draft model but takes no per-request
    speculative.n_max (its /props does not list it): adaptive server depth stays idle and
    /stats says why."""
    with managed_proxy(cloud.url, model="auto", draft_model="auto", spec_n_max=4) as proxy:
        body = {"messages": FRANCE, "max_tokens": 16, **GREEDY}
        response = proxy.http.post(
            "/v1/chat/completions", json=body, headers={"X-Routing-Strategy": "local_only"}
        )
        assert response.status_code == 200, response.text
        stats = proxy.stats()
    knob = stats["adaptive_depth"]["server_n_max"]
    assert knob["active"] is False
    assert knob["note"] == "this llama-server build takes no per-request speculative.n_max"
    assert stats["local_servers"]["local"]["speculative"]["n_max"] == 4
