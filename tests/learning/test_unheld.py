"""While no threshold holds the target, the cloud answers (``learning.cloud_until_held``).

No threshold holding means every draft would be verified whatever it scores: the cloud's
call is certain. So it is made at once and its answer served, whole or streamed live, and
the draft, made beside it, is judged against that answer for the learner's label
(``app.pipeline.verify.LateDrafts``). Through the running proxy, the official ``openai``
SDK and the loopback stand-ins; ordered by events: each draft is held until the client
has its whole answer, so a proxy that waited for the draft would leave the client waiting.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import Reply
from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.fakes.script import tokenize
from tests.learning.test_late_drafts import labels, stored, text
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT, spec
from tests.support.proxy import MakeProxy, Proxy, chat_bodies, wait_for

pytestmark = pytest.mark.process

TIDES, WAVES = "Explain tides", "Explain waves"


def cold_config(state_dir: Path, **learning: Any) -> dict[str, Any]:
    """Learning on and cold (no threshold holds the target), as shipped otherwise: the
    combined scorer, facts agreement, streams hedged under a first-token budget."""
    return {
        "speculative_decoding": {
            "policy": "combined",
            "agreement": "facts",
            "spill_threshold": None,
            "gate": {"enabled": False},
        },
        "learning": {
            "enabled": True,
            "state_dir": str(state_dir),
            "audit_rate": 0.0,
            "cold_audit_rate": 0.0,
            **learning,
        },
    }


def ask(proxy: Proxy, prompt: str, *, stream: bool = False) -> tuple[str, dict[str, Any]]:
    """The answer's text, and its ``speculative_decoding`` block with ``model_used`` (the
    answer's own field) added, through the SDK."""
    messages = [{"role": "user", "content": prompt}]
    if not stream:
        answer = proxy.openai.chat.completions.create(model="auto", messages=messages).to_dict()
        served = answer["choices"][0]["message"]["content"]
    else:
        chunks = proxy.openai.chat.completions.create(model="auto", messages=messages, stream=True)
        *_, answer = read = [chunk.to_dict() for chunk in chunks]
        served = text(read)
    return served, {**spec(answer), "model_used": answer["model_used"]}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_clouds_answer_goes_out_at_once_and_the_draft_beside_it_is_a_label(
    make_proxy: MakeProxy,
    local: ScriptedLlamaServer,
    cloud: ScriptedCerebras,
    tmp_path: Path,
    stream: bool,
) -> None:
    agree, disagree = threading.Event(), threading.Event()
    local.script |= {TIDES: Reply(GOOD_DRAFT, hold=agree), WAVES: Reply(GOOD_DRAFT, hold=disagree)}
    cloud.script |= {TIDES: Reply(GOOD_DRAFT), WAVES: Reply(CLOUD_OTHER)}
    state = tmp_path / "state"
    with make_proxy(**cold_config(state)) as proxy:
        served, block = ask(proxy, TIDES, stream=stream)  # its draft is held meanwhile
        assert served == GOOD_DRAFT and block["model_used"] == "cerebras"
        assert block["reasons"] == ["verifies_all"]
        assert block["lane"] == "uncertain" and not block["accepted"]
        # drafting beside it (its request may reach the stand-in after the cloud's answer),
        # held: no label yet
        wait_for(lambda: len(chat_bodies(local)) == 1)
        assert labels(proxy)["total"] == 0
        agree.set()
        wait_for(lambda: labels(proxy)["late"] == 1)
        served, _ = ask(proxy, WAVES, stream=stream)
        assert served == CLOUD_OTHER
        disagree.set()
        wait_for(lambda: labels(proxy)["late"] == 2)
        wait_for(lambda: len(stored(state)) == 2)
        # each draft's tokens counted once it ended, after its request was
        whole = len(tokenize(GOOD_DRAFT)) + 1  # as llama-server counts it: its end token too
        wait_for(lambda: proxy.stats()["tokens"]["local"] == 2 * whole)
        stats = proxy.stats()
    # one cloud call a request, each one's answer served: nothing paid for and not used
    assert len(chat_bodies(cloud)) == 2
    assert stats["cost"]["cloud_calls"]["by_purpose"] == {"spill": 2}
    assert stats["requests"]["by_outcome"] == {"spilled_over": 2}
    assert [label["agreed"] for label in stored(state)] == [True, False]
    assert all(label["weight"] == 1.0 and label["features"] for label in stored(state))
    # each request's pair for the baseline's calibration waited for its draft's prompt count
    baseline = stats["cost"]["baseline"]
    assert (baseline["cloud_answers"], baseline["pairs"]) == (2, 2)
    assert baseline["method"] == "prompt_ratio_mean_completion"


def test_with_no_slot_free_the_draft_goes_first_verified_and_merged(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    held = threading.Event()
    local.script |= {TIDES: Reply(GOOD_DRAFT, hold=held), WAVES: Reply(GOOD_DRAFT)}
    cloud.script |= {TIDES: Reply(GOOD_DRAFT), WAVES: Reply(GOOD_DRAFT)}
    with make_proxy(**cold_config(tmp_path / "state", late_drafts=1)) as proxy:
        assert ask(proxy, TIDES)[1]["reasons"] == ["verifies_all"]
        # TIDES' draft holds the one slot: WAVES' draft goes first, verified, and the
        # cloud agreeing, the draft is served (the seed's merge)
        served, block = ask(proxy, WAVES)
        assert served == GOOD_DRAFT and block["model_used"] == "local"
        assert "verifies_all" not in block["reasons"] and not block["accepted"]
        held.set()
        wait_for(lambda: labels(proxy)["late"] == 1)
        assert labels(proxy)["total"] == 2  # the verified draft's label, and the late one


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_cloud_that_fails_is_not_asked_again_the_draft_answers_degraded(
    make_proxy: MakeProxy,
    local: ScriptedLlamaServer,
    cloud: ScriptedCerebras,
    tmp_path: Path,
    stream: bool,
) -> None:
    local.script[TIDES] = Reply(GOOD_DRAFT)
    cloud.script[TIDES] = Reply(status=503)
    with make_proxy(**cold_config(tmp_path / "state")) as proxy:
        served, block = ask(proxy, TIDES, stream=stream)
        labelled = labels(proxy)
    assert served == GOOD_DRAFT and block["model_used"] == "local" and block["degraded"]
    # one call for the answer; none again to verify the draft after it
    assert len(chat_bodies(cloud)) == 1
    # the answer's draft, after the one beside the cloud's call was cancelled (that one
    # reached the stand-in only if the cloud's 503 came after its request went out)
    assert len(chat_bodies(local)) in (1, 2)
    assert labelled["total"] == 0  # nothing to label a draft against


def test_with_a_threshold_in_force_the_draft_goes_first(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    local.script[TIDES] = Reply(GOOD_DRAFT)
    cloud.script[TIDES] = Reply(GOOD_DRAFT)
    config = cold_config(tmp_path / "state")
    config["speculative_decoding"]["spill_threshold"] = 1.0  # the user's: every draft accepted
    with make_proxy(**config) as proxy:
        served, block = ask(proxy, TIDES)
        assert served == GOOD_DRAFT and block["accepted"] and block["model_used"] == "local"
    assert chat_bodies(cloud) == []


def test_cloud_until_held_off_keeps_the_draft_first(
    make_proxy: MakeProxy, local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    local.script[TIDES] = Reply(GOOD_DRAFT)
    cloud.script[TIDES] = Reply(GOOD_DRAFT)
    with make_proxy(**cold_config(tmp_path / "state", cloud_until_held=False)) as proxy:
        served, block = ask(proxy, TIDES)
        assert served == GOOD_DRAFT and block["model_used"] == "local"  # verified, merged
        assert labels(proxy)["total"] == 1 and labels(proxy)["late"] == 0
    assert len(chat_bodies(cloud)) == 1
