"""A doubted stream relayed from the cloud still gives the learner a label (issue 31).

Past its first-token budget a streamed request gets the cloud's stream, live; its draft,
which used to be cancelled, finishes in the background and is judged against the relayed
answer as a verification would (``app.pipeline.verify.LateDrafts``): a label for the
learner only. Through the running proxy and the loopback stand-ins; order by events: the
draft is held (or slow) until the client has read the whole stream, so a proxy that
waited for the draft would leave the client waiting past its timeout.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import Reply
from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.fakes.script import tokenize
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT, spec
from tests.support.proxy import MakeProxy, Proxy, wait_for

pytestmark = pytest.mark.process

TIDES, WAVES = "Explain tides", "Explain waves"  # the stand-ins here answer by prompt
SLOW = 30.0  # a draft this slow never comes within the client's timeout (15 s)


def late_config(state_dir: Path, late_drafts: int = 2) -> dict[str, Any]:
    """Learning on (cold: every draft verified, no audits), a stream's first-token budget
    of 0.05 s with the cloud's stream hedged from the start, no trust past it."""
    return {
        "speculative_decoding": {
            "policy": "combined",
            "agreement": "facts",
            "spill_threshold": None,
            "hedge": "always",
            "stream_first_token_s": 0.05,
            "stream_trust_score": None,
            "gate": {"enabled": False},
        },
        "learning": {
            "enabled": True,
            "state_dir": str(state_dir),
            "audit_rate": 0.0,
            "cold_audit_rate": 0.0,
            "late_drafts": late_drafts,
            "cloud_until_held": False,  # the draft first: its stream's budget runs out
        },
    }


def stream(proxy: Proxy, prompt: str = TIDES) -> list[dict[str, Any]]:
    """One streamed request, read to its end with the official SDK."""
    messages = [{"role": "user", "content": prompt}]
    chunks = proxy.openai.chat.completions.create(model="auto", stream=True, messages=messages)
    return [chunk.to_dict() for chunk in chunks]


def text(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def labels(proxy: Proxy) -> dict[str, int]:
    return proxy.stats()["learning"]["labels"]  # type: ignore[no-any-return]


def stored(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / "labels.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_relayed_stream_labels_its_draft_once_it_finishes_without_delaying_the_client(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    agree, disagree = threading.Event(), threading.Event()
    local.script |= {TIDES: Reply(GOOD_DRAFT, hold=agree), WAVES: Reply(GOOD_DRAFT, hold=disagree)}
    cloud.script |= {TIDES: Reply(GOOD_DRAFT), WAVES: Reply(CLOUD_OTHER)}
    state = tmp_path / "state"
    with make_proxy(**late_config(state)) as proxy:
        first = stream(proxy)  # read whole while its draft is held: the client never waits
        assert first[-1]["model_used"] == "cerebras"
        assert spec(first[-1])["reasons"] == ["hedged", "first_token_budget"]
        assert labels(proxy)["total"] == 0  # the draft has not come yet
        agree.set()
        wait_for(lambda: labels(proxy)["late"] == 1)
        assert text(stream(proxy, WAVES)) == CLOUD_OTHER  # its draft held as well
        disagree.set()
        wait_for(lambda: labels(proxy)["late"] == 2)
        counted = labels(proxy)
        whole = len(tokenize(GOOD_DRAFT)) + 1  # as llama-server counts it: its end token too
        # the drafts' tokens, counted once each ended, after its request was
        wait_for(lambda: proxy.stats()["tokens"]["local"] == 2 * whole)
        stats = proxy.stats()
        wait_for(lambda: len(stored(state)) == 2)  # the learner's store has both
    assert (counted["total"], counted["agreed"]) == (2, 1)
    assert stats["requests"]["by_outcome"] == {"spilled_over": 2}  # served: the cloud's
    # a label for the learner only: the records were written before the drafts came
    assert stats["quality"]["verified_drafts"] == 0
    agreed = [label["agreed"] for label in stored(state)]
    assert agreed == [True, False]
    assert all(label["weight"] == 1.0 and not label["audit"] for label in stored(state))
    assert all(label["features"] for label in stored(state))


def test_the_draft_left_running_is_cancelled_on_shutdown(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    local.script[TIDES] = Reply(GOOD_DRAFT, delay=SLOW)  # it stops waiting if we hang up
    cloud.script[TIDES] = Reply(GOOD_DRAFT)
    state = tmp_path / "state"
    with make_proxy(**late_config(state)) as proxy:
        assert stream(proxy)[-1]["model_used"] == "cerebras"
        wait_for(lambda: local.in_flight == 1)  # the draft runs on, not cancelled
        assert labels(proxy)["late"] == 0
    # the proxy shut down: the draft's call was hung up on, and it made no label
    wait_for(lambda: local.in_flight == 0)
    assert stored(state) == []


def test_with_late_drafts_off_the_draft_is_cancelled_as_before(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    local.script[TIDES] = Reply(GOOD_DRAFT, delay=SLOW)
    cloud.script[TIDES] = Reply(GOOD_DRAFT)
    with make_proxy(**late_config(tmp_path / "state", late_drafts=0)) as proxy:
        assert stream(proxy)[-1]["model_used"] == "cerebras"
        wait_for(lambda: local.in_flight == 0)  # hung up on at once
        assert labels(proxy)["total"] == 0
