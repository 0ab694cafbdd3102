"""The quality target inside the proxy: cold, every draft is verified; once the labels
show a threshold that holds the target, drafts under it are served (and audited), and
/stats, /metrics and the spec log say what holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import settings_from_mapping
from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.learning.traffic import learning_config, questions, script
from tests.support.proxy import CLOUD_KEY, proxy_config, run_proxy, wait_for

pytestmark = pytest.mark.process


def ask(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": "speculative", "messages": [{"role": "user", "content": prompt}]}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=15)
    assert response.status_code == 200, response.text
    return response.json()["speculative_decoding"]  # type: ignore[no-any-return]


def target_config(state_dir: str, spec_log: Path) -> dict[str, Any]:
    """Learning as the other learning tests have it, but the threshold from a 0.8 target;
    the draft first while none holds (as when no slot is free to finish it beside the
    cloud's answer): these tests read the judged drafts' spec-log lines."""
    config = learning_config(state_dir, cloud_until_held=False)
    spec = config["speculative_decoding"]
    del spec["spill_threshold"]  # the target decides
    spec["target_agreement"] = 0.8
    return {**config, "logging": {"spec_log_file": str(spec_log)}}


def test_cold_every_draft_is_verified_until_the_labels_hold_the_target(
    local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    triples = questions(80)
    script(local, cloud, triples)
    spec_log = tmp_path / "spec.jsonl"
    config = proxy_config(local.url, cloud.url, **target_config(str(tmp_path / "state"), spec_log))
    with run_proxy(settings_from_mapping(config, env={"CEREBRAS_API_KEY": CLOUD_KEY})) as proxy:
        cold = proxy.stats()["quality"]["target"]
        assert cold["target"] == 0.8 and cold["source"] == "target"
        assert cold["threshold"] is None and cold["in_force"] is None and cold["labels"] == 0
        # cold: the capitals' drafts are right, and still each is verified first, until
        # enough of them agree for the first candidate threshold: twice the 11 that the
        # bound needs alone (11 / (11 + 1.645²) >= 0.8), so none before 43 requests
        served = [ask(proxy.url, prompt) for prompt, _, _ in triples]
        assert not any(s["accepted"] for s in served[:43])

        def holds() -> bool:
            return proxy.stats()["quality"]["target"]["threshold"] is not None

        wait_for(holds, timeout=20)
        warm = proxy.stats()["quality"]["target"]
        assert warm["estimate"] >= warm["lower_bound"] >= 0.8
        assert warm["served_labels"] >= 22 and warm["in_force"] == warm["threshold"]
        # the same questions again: the drafts under the threshold are served (and audited)
        again = [ask(proxy.url, prompt) for prompt, _, _ in triples]
        assert any(s["accepted"] for s in again)
        prompts = [prompt for prompt, _, _ in triples] * 2
        accepted = [p for p, s in zip(prompts, served + again, strict=True) if s["accepted"]]
        right = sum(p.startswith("What is the capital") for p in accepted)
        # every accepted draft audited (rate 1.0): the audits' agreement is the served one's
        wait_for(lambda: proxy.stats()["quality"]["target"]["served"]["audits"] == len(accepted))
        block = proxy.stats()["quality"]["target"]["served"]
        assert block["agreed"] == right and block["agreement"] == round(right / len(accepted), 4)
        assert 0 < block["lower_bound"] < 1.0 and block["holds"] == (block["lower_bound"] >= 0.8)
        metrics = proxy.http.get("/metrics").text
        assert "specproxy_target_agreement 0.8" in metrics
        line = next(m for m in metrics.splitlines() if m.startswith("specproxy_served_agree"))
        assert float(line.split()[-1]) == pytest.approx(block["lower_bound"], abs=1e-4)
    # each line: the threshold it was judged by, and the decision that threshold makes
    lines = [json.loads(line) for line in spec_log.read_text().splitlines()]
    assert len(lines) == 160
    assert sum(line["spill_threshold"] is None for line in lines) >= 43  # cold: none held
    for line in lines:
        held, score = line["spill_threshold"], line["spill_score"]
        expected = "verify" if held is None or score > held else "accept"
        assert line["decision"] == expected, line


def test_no_draft_is_stopped_early_until_a_threshold_holds(
    local: ScriptedLlamaServer, cloud: ScriptedCerebras, tmp_path: Path
) -> None:
    """Warm, with no threshold holding the target, every draft goes to its end
    (``whole_drafts`` 1): early abort would stop the drafts with a token under
    ``abort_min_token_prob``, and a draft stopped early gives no label. The same drafts
    under an explicit threshold, or with ``whole_drafts`` 0, are stopped early."""
    from tests.fakes import Reply
    from tests.pipeline.flows import probs

    triples = questions(16)
    for prompt, draft, answer in triples:
        local.script[prompt] = Reply(draft, token_probs=probs(draft, 0.9, first=0.001))
        cloud.script[prompt] = Reply(answer)
    prompts = [prompt for prompt, _, _ in triples]
    state = str(tmp_path / "state")

    def warm_then(name: str, whole_drafts: float = 1.0, **spec: Any) -> list[dict[str, Any]]:
        """The spec-log lines of the requests asked once the learner is warm."""
        path = tmp_path / f"{name}.jsonl"
        config = target_config(state, path)
        config["speculative_decoding"].update(early_abort=True, **spec)
        config["learning"]["whole_drafts"] = whole_drafts
        settings = settings_from_mapping(
            proxy_config(local.url, cloud.url, **config), env={"CEREBRAS_API_KEY": CLOUD_KEY}
        )
        with run_proxy(settings) as proxy:
            if proxy.stats()["learning"]["cold"]:
                for prompt in prompts[:10]:  # min_labels
                    ask(proxy.url, prompt)
                wait_for(lambda: not proxy.stats()["learning"]["cold"])
            lines = len(path.read_text().splitlines()) if path.exists() else 0
            for prompt in prompts[10:]:
                ask(proxy.url, prompt)
            wait_for(lambda: len(path.read_text().splitlines()) == lines + 6)
        return [json.loads(line) for line in path.read_text().splitlines()[lines:]]

    # 1.0 is never held: warm, and still every draft goes to its end and is labelled
    unheld = warm_then("unheld", target_agreement=1.0)
    assert [line["draft"]["stop_reason"] for line in unheld] == ["complete"] * 6
    assert all(line["agreement"] is not None for line in unheld)
    # the user's own threshold decides: the same drafts are stopped at their first token
    explicit = warm_then("explicit", target_agreement=1.0, spill_threshold=0.5)
    assert [line["draft"]["stop_reason"] for line in explicit] == ["p_min"] * 6
    # whole_drafts 0: early abort from min_labels on, threshold or not
    stopped = warm_then("stopped", whole_drafts=0.0, target_agreement=1.0)
    assert [line["draft"]["stop_reason"] for line in stopped] == ["p_min"] * 6
