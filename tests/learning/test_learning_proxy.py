"""The learner inside the proxy: labels from verifications and audits, a learned scorer
that every worker and a restarted process serve with."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import settings_from_mapping
from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.learning.traffic import learning_config, questions, script
from tests.support.processes import main_process
from tests.support.proxy import CLOUD_KEY, proxy_config, run_proxy, wait_for
from tests.test_multiworker import supervisor


def ask(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": "speculative", "messages": [{"role": "user", "content": prompt}]}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=15)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def learning(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/stats", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["learning"]  # type: ignore[no-any-return]


def serve_until_learned(url: str, triples: list[tuple[str, str, str]]) -> dict[str, Any]:
    for prompt, _, _ in triples:
        ask(url, prompt)
    wait_for(lambda: learning(url)["scorer"]["version"] >= 1, timeout=20)
    return learning(url)


def test_verified_and_audited_drafts_become_labels_and_a_learned_scorer(
    local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    triples = questions(40)
    script(local, cloud, triples)
    spec_log = tmp_path / "spec.jsonl"
    config = proxy_config(
        local.url,
        cloud.url,
        **learning_config(str(tmp_path / "state")),
        logging={"spec_log_file": str(spec_log)},
        models={"cerebras": {"price": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}}},
    )
    with run_proxy(settings_from_mapping(config, env={"CEREBRAS_API_KEY": CLOUD_KEY})) as proxy:
        # Half the traffic teaches a scorer, the other half is served by it: the refit runs
        # in the background, so traffic sent in one go may all be served before it lands,
        # and a draft only the learned scorer accepts is never audited.
        serve_until_learned(proxy.url, triples[:20])
        status = serve_until_learned(proxy.url, triples[20:])
        # every draft was judged: verified (doubted) or audited (accepted)
        assert status["labels"]["total"] == 40
        assert status["labels"]["agreed"] == 20  # the capitals
        audits = status["audits"]
        assert audits["n"] >= 1 and audits["ci95"][0] <= audits["agree_rate"] <= audits["ci95"][1]
        assert status["scorer"]["trained_on"] >= 8 and status["scorer"]["auroc_holdout"] >= 0.9
        stats = proxy.stats()  # audits are spend of their own, and served quality
        assert stats["cost"]["spend_usd"]["by_purpose"]["audit"] > 0
        assert stats["quality"]["audits"]["n"] == stats["learning"]["audits"]["n"]
        # the learned scorer now tells the kinds apart on questions it has not seen
        fresh = questions(8, offset=40)
        script(local, cloud, fresh)
        served = [ask(proxy.url, p)["speculative_decoding"] for p, _, _ in fresh]
        capitals, letters = served[0::2], served[1::2]
        assert all(s["accepted"] for s in capitals)
        assert not any(s["accepted"] for s in letters)
        assert all(s["agreement"] is False for s in letters)  # verified, the cloud's served
        metrics = proxy.http.get("/metrics").text
        assert 'specproxy_learning_labels_total{agreed="true"}' in metrics
        assert "specproxy_learning_scorer_auroc" in metrics
    lines = [json.loads(line) for line in spec_log.read_text().splitlines()]
    assert len(lines) == 48  # one per request, the audited ones included
    assert {line["audit"] for line in lines} == {True, False}
    audited = [line["cost"]["by_purpose"] for line in lines if line["audit"]]
    assert all(purposes.get("audit", 0) > 0 for purposes in audited)
    assert all(isinstance(line["ngrams"], list) and line["ngrams"] for line in lines)
    assert all(line["agreement"] in (True, False, None) for line in lines)


@pytest.mark.slow
def test_a_restart_keeps_what_was_learned(
    local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    triples = questions(30)
    script(local, cloud, triples)
    config = proxy_config(local.url, cloud.url, **learning_config(str(tmp_path / "state")))
    with main_process(config, tmp_path) as (proc, url):
        before = serve_until_learned(url, triples)
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    with main_process(config, tmp_path) as (proc, url):
        after = learning(url)
        assert after["scorer"] == before["scorer"]  # the same learned scorer, version and all
        assert after["labels"]["stored"] == 30  # every label, the last ones flushed at exit
        assert after["labels"]["total"] == 0  # since this start
        assert not after["cold"]


@pytest.mark.slow
def test_two_workers_serve_with_the_same_learned_scorer(
    local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    triples = questions(40)
    script(local, cloud, triples)
    config = proxy_config(local.url, cloud.url, **learning_config(str(tmp_path / "state")))
    with supervisor(config, tmp_path, "--workers", "2") as (_, url):
        serve_until_learned(url, triples)

        def converged() -> bool:
            status = learning(url)
            versions = set(status.get("per_worker", {}).values())
            return len(status.get("per_worker", {})) == 2 and len(versions) == 1

        wait_for(converged, timeout=20)
        status = learning(url)
        assert status["lead"] is not None  # exactly one worker refits
        assert status["labels"]["total"] == 40  # labels from both workers, counted once
