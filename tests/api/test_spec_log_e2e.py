"""The speculation log through the running proxy: one line per speculative draft."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply, tokenize
from tests.support.answers import CLOUD_OTHER, CLOUD_SAME, GOOD_DRAFT, HEDGED, LONG
from tests.support.proxy import MakeProxy

ASK = [{"role": "user", "content": "Write a Python function that adds two numbers"}]


def test_each_outcome_is_logged_and_flushed_on_shutdown(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    path = tmp_path / "spec.jsonl"
    local.enqueue(Reply(GOOD_DRAFT), Reply(HEDGED), Reply(HEDGED), Reply(LONG))
    cloud.enqueue(Reply(CLOUD_SAME), Reply(CLOUD_OTHER), Reply(CLOUD_OTHER))
    with make_proxy(logging={"spec_log_file": str(path)}) as proxy:
        for stream in (False, False, False, True):
            proxy.http.post(
                "/v1/chat/completions", json={"messages": ASK, "stream": stream}
            ).raise_for_status()
        proxy.http.post("/v1/chat/completions", json={"model": "local", "messages": ASK})
    entries = [json.loads(line) for line in path.read_text().splitlines()]

    assert [e["outcome"] for e in entries] == [
        "accepted_without_verification",
        "verified_draft_used",
        "spilled_over",
        "spilled_over",
    ]
    accepted, similar, different, live = entries
    assert accepted["verify"] is None and accepted["decision"] == "accept"
    assert accepted["draft"]["n"] == len(tokenize(GOOD_DRAFT))
    assert accepted["draft"]["stop_reason"] == "complete"
    assert all(e["context_type"] == "code" for e in entries)
    assert similar["verify"]["n_accepted"] == len(tokenize(HEDGED)) - 1  # "!" vs "."
    assert similar["verify"]["rej_pos"] == len(tokenize(HEDGED)) - 1
    assert different["verify"] == {"n_accepted": 0, "rej_pos": 0, "target_id": "Two"}
    assert live["stream"] is True and live["draft"]["stop_reason"] == "n_max"
    assert live["verify"]["n_accepted"] == 0 and live["timing"]["t_verify_us"] > 0
    token = accepted["draft"]["tokens"][0]
    assert set(token) == {"pos", "id", "p", "entropy", "top_k"} and len(token["top_k"]) == 5
    assert [e["round_id"] for e in entries] == [1, 2, 3, 4]
    assert "content" not in accepted  # prompts and answers stay out unless configured
