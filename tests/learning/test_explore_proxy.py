"""Exploring the gate's cloud lane through the running proxy on loopback (issue 31).

A cloud-lane request makes no draft, so it gives no label: a gate that fitted early labels
of a kind that the local model got wrong sent that kind to the cloud for good, and the
learner starved. With ``gate.explore`` a share of cloud-lane requests has its draft made in
the background and judged against the cloud's answer that was served (no other cloud
call): a label, and a way out of the cloud lane once the local model gets the kind right.

The learner starts with the two kinds' labels (``tests.support.gate_labels``): ``WRONG``
takes the cloud lane. Order by events: a held draft (the stand-in's ``hold``) shows the
client's answer never waits for it. Audits are off, so every cloud call is the lane's.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.fakes.script import Reply
from tests.pipeline.flows import CONFIDENT
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT
from tests.support.gate_labels import WRONG, store_labels, two_kinds
from tests.support.proxy import MakeProxy, Proxy, chat_bodies, wait_for

pytestmark = pytest.mark.process


def explore_config(state: Path, explore: float, **learning: Any) -> dict[str, Any]:
    """The gate on, exploring ``explore`` of its cloud lane; the judge's threshold set (the
    stored labels carry only what the gate reads, so no learned one would hold)."""
    return {
        "speculative_decoding": {
            "policy": "combined",
            "agreement": "facts",
            "hedge": "streams",
            "stream_first_token_s": 0.25,
            "spill_threshold": 0.5,
            "gate": {"enabled": True, "explore": explore},
        },
        "learning": {"enabled": True, "state_dir": str(state), "audit_rate": 0.0, **learning},
    }


def ask(proxy: Proxy, prompt: str, *, stream: bool = False) -> tuple[str, dict[str, Any]]:
    """The served text and the ``speculative_decoding`` report (a stream's last chunk's)."""
    messages = [{"role": "user", "content": prompt}]
    if not stream:
        answer = proxy.openai.chat.completions.create(model="speculative", messages=messages)
        data = answer.to_dict()
        return data["choices"][0]["message"]["content"], data["speculative_decoding"]
    chunks = proxy.openai.chat.completions.create(
        model="speculative", messages=messages, stream=True
    )
    read = [chunk.to_dict() for chunk in chunks]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in read if c["choices"])
    return text, read[-1]["speculative_decoding"]


def labels(proxy: Proxy) -> dict[str, int]:
    return proxy.stats()["learning"]["labels"]  # type: ignore[no-any-return]


def gate_fitted_on(proxy: Proxy) -> int:
    gate = proxy.stats()["learning"]["gate"]
    return int(gate["labels"]) if gate["fitted"] else 0


def test_an_explored_request_makes_one_cloud_call_and_gives_a_label_after_its_answer(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    store_labels(state, two_kinds())
    cloud.script[WRONG] = Reply(CLOUD_OTHER)
    with make_proxy(**explore_config(state, 1.0)) as proxy:
        wait_for(lambda: gate_fitted_on(proxy) == 240, timeout=20)
        for n, stream in enumerate((False, True), start=1):
            held = threading.Event()
            local.script[WRONG] = Reply(GOOD_DRAFT, token_probs=CONFIDENT.token_probs, hold=held)
            text, report = ask(proxy, WRONG, stream=stream)  # read whole, the draft held
            assert text == CLOUD_OTHER and report["lane"] == "cloud"
            assert report["reasons"] == ["gate_cloud"] and report["draft_tokens"] == 0
            assert labels(proxy)["explored"] == n - 1  # its draft has not come yet
            # but it was asked for (the request may reach the stand-in after the answer)
            wait_for(lambda n=n: len(chat_bodies(local)) == n)
            held.set()
            wait_for(lambda n=n: labels(proxy)["explored"] == n)
            assert len(chat_bodies(cloud)) == n  # exactly one cloud call per request
        stats = proxy.stats()
    assert stats["lanes"] == {"cloud": 2}
    assert stats["cost"]["cloud_calls"]["by_purpose"] == {"spill": 2}
    counted = stats["learning"]["labels"]
    assert (counted["total"], counted["agreed"], counted["late"]) == (2, 0, 0)
    assert [bool(b.get("stream")) for b in chat_bodies(cloud)] == [False, True]


def test_with_explore_off_the_cloud_lane_gives_no_label(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    store_labels(state, two_kinds())
    local.script[WRONG] = CONFIDENT
    cloud.script[WRONG] = Reply(CLOUD_OTHER)
    with make_proxy(**explore_config(state, 0.0)) as proxy:
        wait_for(lambda: gate_fitted_on(proxy) == 240, timeout=20)
        for stream in (False, True):
            assert ask(proxy, WRONG, stream=stream)[1]["lane"] == "cloud"
        assert labels(proxy)["total"] == 0 and labels(proxy)["explored"] == 0
    assert chat_bodies(local) == [] and len(chat_bodies(cloud)) == 2


def test_the_gate_leaves_the_cloud_lane_once_explored_drafts_come_right(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    # The gate learned WRONG's drafts disagree (80 labels); now the local model answers it
    # as the cloud does. Explored, its labels agree, and the refits move it out of the cloud.
    state = tmp_path / "state"
    store_labels(state, two_kinds(80))
    local.script[WRONG] = Reply(GOOD_DRAFT, token_probs=CONFIDENT.token_probs)
    cloud.script[WRONG] = Reply(GOOD_DRAFT)
    lanes: list[str] = []
    with make_proxy(**explore_config(state, 1.0, refit_every=10)) as proxy:
        wait_for(lambda: gate_fitted_on(proxy) == 160, timeout=20)
        while len(lanes) < 60 and (not lanes or lanes[-1] == "cloud"):
            lanes.append(ask(proxy, WRONG, stream=len(lanes) % 2 == 1)[1]["lane"])
            n = lanes.count("cloud")
            wait_for(lambda n=n: labels(proxy)["explored"] == n)  # each cloud one explored
            if n % 10 == 0:  # a refit is due: the next request meets the gate it fitted
                wait_for(lambda n=n: gate_fitted_on(proxy) >= 160 + n, timeout=20)
        counted = labels(proxy)
    assert lanes[0] == "cloud" and lanes[-1] == "uncertain", lanes
    assert counted["explored"] == lanes.count("cloud") == counted["agreed"]
    # one cloud call per cloud-lane request; the uncertain one's draft was accepted (whole,
    # not hedged): no other call, the labels' included
    assert len(chat_bodies(cloud)) == lanes.count("cloud")


def test_the_stats_name_the_share(make_proxy: MakeProxy, tmp_path: Path) -> None:
    with make_proxy(**explore_config(tmp_path / "state", 0.2)) as proxy:
        assert proxy.stats()["learning"]["gate"]["explore"] == 0.2
        assert httpx.get(f"{proxy.url}/stats").json()["learning"]["labels"]["explored"] == 0
