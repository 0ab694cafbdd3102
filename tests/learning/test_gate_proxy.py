"""The gate in the real proxy on loopback: a learner that starts with labels fits its
gate, then one request takes each lane, and the stand-ins' call counts prove what each
lane called: ``local`` (an accepted draft) no cloud, streamed or not; ``cloud`` no
draft; ``uncertain`` as without a gate. Audits are off so every cloud call is a lane's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from app.config import settings_from_mapping
from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.fakes.script import Reply
from tests.pipeline.flows import CONFIDENT
from tests.support.gate_labels import RIGHT, WRONG, store_labels, two_kinds
from tests.support.proxy import CLOUD_KEY, chat_bodies, proxy_config, run_proxy, wait_for

OTHER = "Say hello"  # no label reads like it: the uncertain lane
EMPTY = "What is the capital of Peru?"  # RIGHT's kind: the local lane


def ask(url: str, prompt: str, *, stream: bool = False) -> dict[str, Any]:
    """The ``speculative_decoding`` report of one request (a stream's, from its last chunk)."""
    body = {"model": "speculative", "messages": [{"role": "user", "content": prompt}]}
    if not stream:
        response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=15)
        assert response.status_code == 200, response.text
        return response.json()["speculative_decoding"]  # type: ignore[no-any-return]
    report: dict[str, Any] = {}
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=15
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {") and "speculative_decoding" in line:
                report = httpx.Response(200, content=line[6:]).json()["speculative_decoding"]
    return report


def gated(
    local: ScriptedLlamaServer,
    cloud: ScriptedCerebras,
    state: Path,
    prompts: tuple[str, ...],
    **speculative: Any,
) -> dict[str, Any]:
    """A proxy's config with the gate on and its labels stored (120 questions of RIGHT's
    kind agree, 120 of WRONG's do not); each of ``prompts`` drafted confidently (a draft
    the shipped scorer accepts) and answered by the cloud. Audits off: every cloud call is
    a lane's."""
    store_labels(state, two_kinds())
    for prompt in prompts:
        local.script[prompt] = CONFIDENT
        cloud.script[prompt] = Reply("the cloud's answer")
    return proxy_config(
        local.url,
        cloud.url,
        speculative_decoding={
            "policy": "combined",
            "hedge": "streams",
            "stream_first_token_s": 0.25,
            "gate": {"enabled": True, "explore": 0.0},  # explored: test_explore_proxy.py
            **speculative,
        },
        learning={"enabled": True, "state_dir": str(state), "audit_rate": 0.0},
    )


def test_each_lane_calls_what_it_should(
    local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    # the labels carry only what the gate reads: no judge's threshold holds the target on
    # them (the uncertain lane would be answered by the cloud), so the judge's is set
    config = gated(local, cloud, tmp_path / "state", (RIGHT, WRONG, OTHER), spill_threshold=0.5)
    with run_proxy(settings_from_mapping(config, env={"CEREBRAS_API_KEY": CLOUD_KEY})) as proxy:
        wait_for(lambda: proxy.stats()["learning"]["gate"]["fitted"], timeout=20)
        drafts, clouds = (lambda: len(chat_bodies(local))), (lambda: len(chat_bodies(cloud)))

        for stream in (False, True):
            report = ask(proxy.url, RIGHT, stream=stream)
            assert report["lane"] == "local" and report["accepted"], report
        assert (drafts(), clouds()) == (2, 0)  # drafted twice, the cloud never called

        for stream in (False, True):
            report = ask(proxy.url, WRONG, stream=stream)
            assert report["lane"] == "cloud" and report["spilled_over"], report
        assert (drafts(), clouds()) == (2, 2)  # no draft, the cloud answered each

        report = ask(proxy.url, OTHER)
        assert report["lane"] == "uncertain" and report["accepted"], report
        assert (drafts(), clouds()) == (3, 2)  # a whole request is not hedged

        stats = proxy.stats()
        assert stats["lanes"] == {"local": 2, "cloud": 2, "uncertain": 1}
        metrics = proxy.http.get("/metrics").text
        assert 'specproxy_lane_total{lane="cloud"} 2.0' in metrics


def test_the_local_lane_serves_on_the_gates_bound_when_no_judges_threshold_holds(
    local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    """No ``spill_threshold``: on these labels no threshold of the judge's holds the
    target (it reads the draft, and they carry only the request), but the gate's local
    lane does, for its lane: its drafts are served with no cloud call, streamed or not,
    while a request of the uncertain lane is answered by the cloud (nothing holds there)."""
    config = gated(local, cloud, tmp_path / "state", (RIGHT, OTHER, EMPTY))
    with run_proxy(settings_from_mapping(config, env={"CEREBRAS_API_KEY": CLOUD_KEY})) as proxy:
        wait_for(lambda: proxy.stats()["learning"]["gate"]["fitted"], timeout=20)
        assert proxy.stats()["learning"]["target"]["in_force"] is None  # the judge holds none
        for stream in (False, True):
            report = ask(proxy.url, RIGHT, stream=stream)
            assert report["lane"] == "local" and report["accepted"], report
        assert (len(chat_bodies(local)), len(chat_bodies(cloud))) == (2, 0)

        report = ask(proxy.url, OTHER)  # nothing holds in the uncertain lane
        assert report["lane"] == "uncertain" and report["reasons"] == ["verifies_all"], report
        assert len(chat_bodies(cloud)) == 1

        # what no score excuses is still verified in the local lane: an empty answer, a cut one
        for draft in (Reply(""), Reply("Paris " * 300)):
            local.script[EMPTY] = draft
            report = ask(proxy.url, EMPTY)
            assert report["lane"] == "local" and report["spilled_over"], report
        assert len(chat_bodies(cloud)) == 3
