"""Usage by key end to end (issue 34's Done-when): two keys of one team send a scripted
mixed run (local answers, a spill, a cloud pass-through, a cache hit) through the real
proxy and the stand-ins; /stats → keys, the /metrics key series, the spec log and
``specproxy usage`` agree with a hand computation from the tokens the stand-ins counted,
and no key appears in any of them."""

from __future__ import annotations

from pathlib import Path

import openai
import orjson
import pytest

from app.tools.usage import main as usage_main
from app.tools.usage import read, usage_by_key
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.fakes.script import prompt_tokens, tokenize
from tests.learning.traffic import learning_config
from tests.support.answers import CLOUD_OTHER, CLOUD_SAME, GOOD_DRAFT, HEDGED
from tests.support.proxy import CLOUD_KEY, MakeProxy, chat_bodies, wait_for
from tests.telemetry.test_cost import CLOUD, LOCAL, usd
from tests.telemetry.test_metrics import scrape

pytestmark = pytest.mark.process

ALICE, BOB = "sk-alice-3f9a1c0d7e", "sk-bob-8b2e4d6f0a"
KEYS = {
    "keys": [
        {"name": "alice", "key": "${ALICE_KEY}", "team": "search"},
        {"name": "bob", "key": "${BOB_KEY}", "team": "search"},
    ]
}
ENV = {"CEREBRAS_API_KEY": CLOUD_KEY, "ALICE_KEY": ALICE, "BOB_KEY": BOB}
PRICES = {"local": {"price": LOCAL.model_dump()}, "cerebras": {"price": CLOUD.model_dump()}}


@pytest.fixture(params=("lean", "standard"))
def edge(request: pytest.FixtureRequest) -> str:
    """Each HTTP edge: the caller reaches the record, the audits and the log through both."""
    edge: str = request.param
    return edge


def ask(client: openai.OpenAI, text: str, strategy: str = "speculative_decoding") -> str:
    answer = client.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": text}],
        extra_headers={"X-Routing-Strategy": strategy},
    )
    return answer.choices[0].message.content or ""


def test_usage_by_key_agrees_with_a_hand_computation_everywhere(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log_path = tmp_path / "spec.jsonl"
    local.enqueue(Reply(GOOD_DRAFT), Reply(HEDGED), Reply(GOOD_DRAFT))
    cloud.enqueue(Reply(CLOUD_OTHER), Reply(CLOUD_SAME))
    with make_proxy(
        env=ENV,
        api_key=ALICE,
        server=KEYS,
        cache={"enabled": True, "audit_rate": 0},
        models=PRICES,
        logging={"spec_log_file": str(log_path)},
    ) as proxy:
        bob = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=BOB, max_retries=0, timeout=15)
        assert ask(proxy.openai, "Say hello") == GOOD_DRAFT  # alice: served locally
        assert ask(proxy.openai, "What is two plus two?") == CLOUD_OTHER  # alice: a spill
        wait_for(lambda: proxy.stats()["cache"]["entries"] >= 2)
        assert ask(proxy.openai, "What is two plus two?") == CLOUD_OTHER  # alice: a hit
        assert ask(bob, "Say hello") == GOOD_DRAFT  # bob: served locally
        assert ask(bob, "Name a colour", strategy="cerebras_only") == CLOUD_SAME  # bob: cloud
        stats, samples = proxy.stats(), scrape(proxy)
        exposition = proxy.http.get("/metrics").text
        stats_text = proxy.http.get("/stats").text
    assert stats["cache"]["hits"] == 1

    # By hand: each call's prompt as the stand-in counted it, each answer's tokens (the
    # local server counts the end token of an answer that stopped by itself).
    p_local = [prompt_tokens(body) for body in chat_bodies(local)]
    p_cloud = [prompt_tokens(body) for body in chat_bodies(cloud)]
    n = {t: len(tokenize(t)) for t in (GOOD_DRAFT, HEDGED, CLOUD_SAME, CLOUD_OTHER)}
    drafts = [
        usd(LOCAL, p, n[t] + 1)
        for p, t in zip(p_local, (GOOD_DRAFT, HEDGED, GOOD_DRAFT), strict=True)
    ]
    spill, passed = usd(CLOUD, p_cloud[0], n[CLOUD_OTHER]), usd(CLOUD, p_cloud[1], n[CLOUD_SAME])
    # the one pair (alice's spill) calibrates the accepted drafts' baselines: the cloud's
    # prompt tokens per local one, and the cloud's mean answer
    ratio, mean = p_cloud[0] / p_local[1], n[CLOUD_OTHER]
    estimated = [usd(CLOUD, p_local[i] * ratio, mean) for i in (0, 2)]
    hand = {
        "alice": {
            "requests": 3,
            "spend": drafts[0] + drafts[1] + spill,
            "cloud": spill,
            "by_purpose": {"draft": drafts[0] + drafts[1], "spill": spill},
            "baseline": estimated[0] + spill + spill,  # the hit's: the stored answer's counts
            "billed_baseline": usd(CLOUD, p_local[0], n[GOOD_DRAFT] + 1) + 2 * spill,
            "tokens": {
                "prompt": {"local": p_local[0] + p_local[1], "cloud": p_cloud[0]},
                "completion": {"local": n[GOOD_DRAFT] + n[HEDGED] + 2, "cloud": n[CLOUD_OTHER]},
            },
            "hits": 1,
        },
        "bob": {
            "requests": 2,
            "spend": drafts[2] + passed,
            "cloud": passed,
            "by_purpose": {"draft": drafts[2], "pass_through": passed},
            "baseline": estimated[1] + passed,
            "billed_baseline": usd(CLOUD, p_local[2], n[GOOD_DRAFT] + 1) + passed,
            "tokens": {
                "prompt": {"local": p_local[2], "cloud": p_cloud[1]},
                "completion": {"local": n[GOOD_DRAFT] + 1, "cloud": n[CLOUD_SAME]},
            },
            "hits": 0,
        },
    }

    keys = stats["keys"]
    assert set(keys["by_key"]) == {"alice", "bob"}
    for name, want in hand.items():
        got = keys["by_key"][name]
        assert got["team"] == "search" and got["requests"] == want["requests"]
        assert got["spend_usd"]["total"] == pytest.approx(want["spend"], abs=1e-9)
        assert got["spend_usd"]["cloud"] == pytest.approx(want["cloud"], abs=1e-9)
        assert got["spend_usd"]["by_purpose"] == pytest.approx(want["by_purpose"], abs=1e-9)
        assert got["baseline_usd"] == pytest.approx(want["baseline"], abs=1e-9)
        assert got["savings_usd"] == pytest.approx(want["baseline"] - want["spend"], abs=1e-9)
        assert got["tokens"] == want["tokens"]
        assert got["cache"]["hits"] == want["hits"]
        assert got["cloud_calls"]["total"] == 1
    team = keys["by_team"]["search"]
    assert team["keys"] == ["alice", "bob"] and team["requests"] == 5
    assert team["spend_usd"]["total"] == pytest.approx(
        stats["cost"]["spend_usd"]["total"], abs=1e-9
    )
    assert team["savings_usd"] == pytest.approx(stats["cost"]["savings_usd"], abs=1e-9)

    for name, want in hand.items():
        mine = [s for s in samples["specproxy_key_cost_usd_total"] if s.labels["key"] == name]
        assert {s.labels["team"] for s in mine} == {"search"}
        assert sum(s.value for s in mine) == pytest.approx(want["spend"], abs=1e-9)
        for purpose, amount in want["by_purpose"].items():
            spent = sum(s.value for s in mine if s.labels["purpose"] == purpose)
            assert spent == pytest.approx(amount, abs=1e-9)
        [requests] = [s for s in samples["specproxy_key_requests_total"] if s.labels["key"] == name]
        assert requests.value == want["requests"]
        [billed] = [
            s for s in samples["specproxy_key_baseline_cost_usd_total"] if s.labels["key"] == name
        ]
        assert billed.value == pytest.approx(want["billed_baseline"], abs=1e-9)

    lines = [orjson.loads(line) for line in log_path.read_bytes().splitlines()]
    assert [(line["key"], line["team"]) for line in lines] == [("alice", "search")] * 2 + [
        ("bob", "search")
    ]
    assert lines[1]["cloud_usd"] == pytest.approx(spill, abs=1e-9)
    assert lines[1]["tokens"] == {
        "prompt": {"local": p_local[1], "cloud": p_cloud[0]},
        "completion": {"local": n[HEDGED] + 1, "cloud": n[CLOUD_OTHER]},
    }
    # specproxy usage over the log: its drafted requests (no hit, no pass-through)
    found = usage_by_key(read([str(log_path)]))
    assert found["alice"].requests == 2 and found["bob"].requests == 1
    assert found["alice"].spend_usd == pytest.approx(drafts[0] + drafts[1] + spill, abs=1e-9)
    assert found["alice"].cloud_usd == pytest.approx(spill, abs=1e-9)
    assert usage_main([str(log_path), "--team", "search", "--key", "bob", "--since", "1h"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [row.split()[:3] for row in printed[1:]] == [
        ["bob", "search", "1"],
        ["total", "1", "0.000000"],  # bob's drafts cost the cloud nothing
    ]

    everything = log_path.read_text() + exposition + stats_text
    assert ALICE not in everything and BOB not in everything


def test_an_audit_is_charged_to_the_key_of_the_request_it_audits(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    """Learning audits every accepted draft in the background, after its request was
    counted: the audit's cloud call lands on bob's key, not on nobody's."""
    local.enqueue(Reply(GOOD_DRAFT))
    cloud.enqueue(Reply(CLOUD_SAME))
    learning = learning_config(str(tmp_path / "state"))
    learning["speculative_decoding"]["spill_threshold"] = 1.0  # every draft served as it is
    with make_proxy(env=ENV, api_key=BOB, server=KEYS, models=PRICES, **learning) as proxy:
        assert ask(proxy.openai, "Say hello") == GOOD_DRAFT
        wait_for(lambda: proxy.stats()["cost"]["cloud_calls"]["total"] == 1)
        stats = proxy.stats()
    [audit] = chat_bodies(cloud)
    bob = stats["keys"]["by_key"]["bob"]
    assert bob["cloud_calls"]["by_purpose"] == {"audit": 1}
    audited = usd(CLOUD, prompt_tokens(audit), len(tokenize(CLOUD_SAME)))
    assert bob["spend_usd"]["by_purpose"]["audit"] == pytest.approx(audited, abs=1e-9)
    assert bob["spend_usd"]["cloud"] == pytest.approx(audited, abs=1e-9)
    assert bob["spend_usd"]["total"] == pytest.approx(stats["cost"]["spend_usd"]["total"], abs=1e-9)
