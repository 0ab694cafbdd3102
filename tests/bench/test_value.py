"""bench/value: the trace, the stand-in's bill, a small trace through every arm, and the
Done-when checks and the targets' table held to hand-made figures.

The small run drafts on the llama-server stand-in (answering some items right, the others
wrong) so the table's invariants can be held exactly; the real tier runs the command.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
import yaml

from app.evaluation.judges import load_items
from bench.routing_eval import round_robin
from bench.value import (
    BEFORE_ISSUE_31,
    DEFAULTS_THEN,
    FIRST_TOKEN_S,
    OFFLINE_ARMS,
    PROXY_ARMS,
    SETS,
    BillingCloud,
    arm_tree,
    build_trace,
    calls_markdown,
    done_when,
    done_when_text,
    evaluate,
    markdown,
    run,
    settle,
    target_arm,
    targets_markdown,
    vary,
)
from bench.value.checks import target_checks
from bench.value.labels import PATHS, label_yield, yield_markdown
from tests.fakes.by_prompt import ScriptedLlamaServer
from tests.fakes.script import Reply, prompt_tokens, tokenize
from tests.fakes.server import serve

ROOT = Path(__file__).resolve().parents[2]
PRICES = (0.35, 0.75)


def items(name: str = "eval", limit: int | None = None) -> list:
    return round_robin(load_items(SETS[name].read_text(encoding="utf-8").splitlines()), limit)


@pytest.mark.parametrize("name", sorted(SETS))
def test_the_trace_is_seeded_a_third_repeats_half_streamed(name: str) -> None:
    chosen = items(name, 30)
    trace = build_trace(chosen, seed=3)
    assert trace == build_trace(chosen, seed=3)
    assert trace != build_trace(chosen, seed=4)
    assert [r.n for r in trace] == list(range(len(trace)))
    repeats = [r for r in trace if r.repeat]
    assert len(repeats) == len(trace) // 3
    assert sum(r.stream for r in trace) == len(trace) // 2
    # every item asked once, first as written, before any of its repeats
    firsts = [r for r in trace if not r.repeat]
    assert [r.item for r in firsts] == chosen
    assert all(r.prompt == r.item.prompt and r.variant == "first" for r in firsts)
    first_at = {r.item.id: r.n for r in firsts}
    assert all(first_at[r.item.id] < r.n for r in repeats)
    # repeats change the text (but for "exact") and come back to popular items more often
    assert all((r.prompt == r.item.prompt) == (r.variant == "exact") for r in repeats)
    assert {r.variant for r in repeats} <= {"exact", "case", "spacing", "punctuation"}
    assert len({r.variant for r in repeats}) >= 3
    assert Counter(r.item.id for r in repeats).most_common(1)[0][1] >= 2


@pytest.mark.parametrize(
    ("prompt", "how", "varied"),
    [
        ("What does Python's len('abc') return?", "case", "what does python's len('abc') return?"),
        ('Spell "Cat" backwards.', "case", 'spell "Cat" backwards.'),
        ("Is `A` in `ABC`?", "case", "is `A` in `ABC`?"),
        ("What is 2 + 2?", "spacing", " What  is 2 + 2? "),
        ("'A B' or 'C D'?", "spacing", " 'A B'  or 'C D'? "),
        ("What is 2 + 2?", "punctuation", "What is 2 + 2"),
        ("Name a colour", "punctuation", "Name a colour?"),
        ("What is 2 + 2?", "exact", "What is 2 + 2?"),
    ],
)
def test_a_repeat_changes_case_spacing_or_punctuation_never_a_quoted_part(
    prompt: str, how: str, varied: str
) -> None:
    assert vary(prompt, how) == varied


def test_the_stand_in_bills_the_prompt_and_what_it_sent() -> None:
    reference = " word" * 2000  # 2,000 tokens: 1 s of streaming at 2,000 tok/s
    body = {"model": "gpt-oss-120b", "messages": [{"role": "user", "content": "Say it."}]}
    cloud = BillingCloud({"Say it.": reference}, ["a", "b"])
    with serve(cloud.app) as url, httpx.Client(timeout=10) as http:
        whole = http.post(
            f"{url}/v1/chat/completions", json=body, headers={"Authorization": "Bearer a"}
        )
        assert whole.json()["choices"][0]["message"]["content"] == reference
        with http.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json=body | {"stream": True},
            headers={"Authorization": "Bearer b"},
        ) as stream:
            content = 0
            for line in stream.iter_lines():
                content += '"content"' in line and '"role"' not in line
                if content == 3:
                    break
        refused = http.post(f"{url}/v1/chat/completions", json=body)
        assert refused.status_code == 401
        settle(cloud)
    n, prompt = len(tokenize(reference)), prompt_tokens(body)
    a, b = cloud.bill("a"), cloud.bill("b")
    assert (a.calls, a.prompt_tokens, a.completion_tokens) == (1, prompt, n)
    assert (b.calls, b.prompt_tokens) == (1, prompt)
    # stopped after a few chunks: billed what went out by the time the stand-in noticed
    # (not the whole answer; how much more than 3 depends on how busy the machine is)
    assert 3 <= b.completion_tokens < n
    assert a.usd(*PRICES) == pytest.approx((prompt * 0.35 + n * 0.75) / 1e6)
    assert cloud.unknown_prompts == 0


def test_a_small_trace_keeps_the_tables_invariants() -> None:
    chosen = items("eval", 6)
    trace = build_trace(chosen, seed=0)
    right = {item.id for item in chosen[::2]}  # the local model knows every other item
    local = ScriptedLlamaServer(default=Reply(text="I do not know that one, sorry."))
    for r in trace:
        if r.item.id in right:
            local.script[r.prompt] = Reply(text=r.item.reference)
    shipped = {
        "models": {
            "local": {"provider": "llama_server", "model": "local"},
            "cerebras": {
                "provider": "cerebras",
                "model": "gpt-oss-120b",
                "api_key": "${CEREBRAS_API_KEY}",
                "max_retries": 0,
                "price": {"input_per_mtok": PRICES[0], "output_per_mtok": PRICES[1]},
            },
        },
        "speculative_decoding": {"draft_model": "local", "verify_model": "cerebras"},
    }
    started = time.perf_counter()
    target = target_arm(0.9)  # the shipped arm at target_agreement 0.9
    with serve(local.app) as local_url:
        measured = run(trace, shipped, local_url, max_tokens=64, arms=(*PROXY_ARMS, target))
    assert time.perf_counter() - started < 60
    assert measured["unknown_prompts"] == 0
    summary = evaluate(measured, PRICES)
    assert list(summary) == [*PROXY_ARMS, target, *OFFLINE_ARMS]
    n = len(trace)
    assert all(s["n"] == n and s["errors"] == 0 for s in summary.values())

    cloud, here = summary["cloud_only"], summary["local_only"]
    assert (cloud["spend_vs_cloud"], cloud["calls_per_request"], cloud["cloud_served"]) == (
        1.0,
        1.0,
        1.0,
    )
    assert cloud["quality"] == 1.0  # every reference passes its judge
    assert cloud["ttft_p50_s"] >= FIRST_TOKEN_S
    assert cloud["proxy_savings_pct"] == pytest.approx(0, abs=0.01)
    assert cloud["bill_savings_pct"] == pytest.approx(0)
    assert measured["bills"]["cloud_only"]["calls"] == n
    assert (here["cloud_calls"], here["spend_usd"], here["cloud_served"]) == (0, 0.0, 0.0)
    assert here["bill_savings_pct"] == 100.0 and here["proxy_savings_pct"] == 100.0
    assert here["quality"] == pytest.approx(sum(r.item.id in right for r in trace) / n)

    oracle = summary["oracle"]
    assert oracle["quality"] == 1.0
    assert all(oracle["quality"] >= s["quality"] for s in summary.values())
    for arm, s in summary.items():
        if s["quality"] >= oracle["quality"]:
            assert oracle["spend_usd"] <= s["spend_usd"] + 1e-12, arm
    wrong_items = {r.item.id for r in trace if r.item.id not in right}
    assert oracle["cloud_calls"] == len(wrong_items)  # each once, then the cache
    assert oracle["oracle_saving_share"] == 1.0

    rand, shipped_arm = summary["random"], summary["shipped"]
    assert abs(rand["cloud_served"] - shipped_arm["cloud_served"]) <= 1 / n
    assert rand["calls_per_request"] == rand["cloud_served"]
    assert here["quality"] <= rand["quality"] <= cloud["quality"]
    for s in summary.values():
        assert s["spend_vs_cloud"] >= 0 and 0 <= s["quality"] <= 1
        assert 0 <= s["local_unverified"] <= s["local_drafts"]  # no cloud call: a subset
    # every speculative answer tells whether its draft went out unverified
    assert all(isinstance(r["accepted"], bool) for r in measured["rows"]["seed"])
    table = markdown(summary)
    assert all(f"| {arm} |" in table for arm in summary if arm != target)
    assert f"| {target} |" not in table  # the targets have their own table
    assert "| cloud_only | 100.0% | 100.0% | 1.000 | 0% | 1.00 | 0.00 | 100.0% |" in table

    # the proxies' own count of their cloud calls, by purpose, per request
    assert cloud["calls_by_purpose"] == {"pass_through": 1.0} and cloud["audit_share"] == 0
    assert here["calls_by_purpose"] == {} and here["audit_share"] == 0
    for arm in ("cloud_only", "local_only", "seed"):  # no hedge: the stand-in saw each call
        s = summary[arm]
        assert sum(s["calls_by_purpose"].values()) == pytest.approx(s["calls_per_request"]), arm
    assert set(summary["seed"]["calls_by_purpose"]) <= {"verification", "spill"}
    assert oracle["calls_by_purpose"] is None  # computed, not a proxy: no count of its own
    assert oracle["cache_hit_share"] == pytest.approx(
        (n - sum(r.item.id in right for r in trace) - len(wrong_items)) / n
    )
    assert cloud["lane_shares"] is None  # a pass-through has no lane
    assert measured["stats_quality"]["cloud_only"]["served_locally"] == 0
    assert cloud["proxy_baseline"]["pairs"] == 0  # the cloud answered every request
    assert here["proxy_baseline"]["method"] == "local_tokens"  # no pair to calibrate on
    calls = calls_markdown(summary)
    assert "| cloud_only | " in calls and "| oracle |" not in calls
    assert "local_tokens (0 pairs, 0 cloud answers)" in calls

    targets = targets_markdown(summary)
    assert targets.splitlines()[2].startswith("| 0.9 | ")
    assert summary[target]["n"] == n and summary[target]["errors"] == 0

    checks = done_when(summary)
    assert [ok is None for _, ok, _ in checks] == [False] * 5  # every figure is there


def figures(**shipped: object) -> dict:
    """A hand-made summary of the three arms the checks read (shipped's figures given)."""
    arm = {
        "quality": 1.0,
        "spend_vs_cloud": 1.0,
        "oracle_saving_share": 0.0,
        "calls_per_request": 1.0,
        "cloud_served": 1.0,
        "audit_share": 0.0,
        "ttft_p90_s": 0.3,
        "proxy_savings_pct": 0.0,
        "bill_savings_pct": 0.0,
    }
    good = {
        "quality": 0.96,
        "spend_vs_cloud": 0.7,
        "oracle_saving_share": 0.6,
        "calls_per_request": 0.55,
        "cloud_served": 0.5,
        "audit_share": 0.04,
        "ttft_p90_s": 0.39,
        "proxy_savings_pct": 31.5,
        "bill_savings_pct": 30.0,
    }
    oracle = arm | {"spend_vs_cloud": 0.5, "oracle_saving_share": 1.0}
    return {"cloud_only": arm, "shipped": good | shipped, "oracle": oracle}


@pytest.mark.parametrize(
    ("shipped", "failed"),
    [
        ({}, None),
        ({"quality": 0.94}, 0),  # under 0.95 x 1.0
        ({"oracle_saving_share": 0.49}, 1),
        ({"calls_per_request": 0.57}, 2),  # over 0.5 + 0.04 + 0.02 = 0.56
        ({"cloud_called_served": 0.3}, 2),  # strict: cache hits of cloud answers call nothing
        ({"ttft_p90_s": 0.41}, 3),  # over 0.3 + 0.1
        ({"proxy_savings_pct": 32.5}, 4),  # 2.5 points off the bill's
        ({"proxy_savings_pct": 27.9}, 4),
    ],
)
def test_the_done_when_checks_pass_and_fail_at_their_bounds(
    shipped: dict, failed: int | None
) -> None:
    checks = done_when(figures(**shipped))
    assert [ok for _, ok, _ in checks] == [i != failed for i in range(5)]
    text = done_when_text(checks)
    assert text.count("PASS") == 5 - (failed is not None)
    if not shipped:
        assert "0.550 vs 0.500 + 0.040 + 0.02 = 0.560" in text
        assert "|31.5% - 30.0%| = 1.5 points" in text
        assert "0.960 vs 0.95 x 1.000 = 0.950" in text


def test_a_check_without_its_figures_says_so() -> None:
    checks = done_when(figures(audit_share=None, ttft_p90_s=None))
    assert [ok for _, ok, _ in checks] == [True, True, None, None, True]
    assert done_when_text(checks).count("n/a") == 2
    assert done_when({"cloud_only": figures()["cloud_only"]})[0][1] is None


def test_the_targets_table_shows_the_audited_agreement_and_its_bound() -> None:
    base = figures()["shipped"] | {"local_right": 0.9, "served_agreement": None}
    summary = {
        "target_0.98": base | {"cloud_served": 0.8, "quality": 0.99},
        "target_0.9": base
        | {
            "cloud_served": 0.4,
            "served_agreement": {"audits": 40, "agreement": 0.925, "lower_bound": 0.83},
        },
        "shipped": base,
    }
    rows = targets_markdown(summary).splitlines()[2:]
    assert rows == [
        "| 0.9 | 60.0% | - | - | 92.5% (40) | 83.0% | 90.0% | 96.0% | 0.700 |",
        "| 0.98 | 20.0% | - | - | - | - | 90.0% | 99.0% | 0.700 |",
    ]


def target_figures(local_08: float, local_095: float, agreement: float = 0.9) -> dict:
    base = figures()["shipped"] | {"local_right": 0.85}
    served = {"audits": 40, "agreement": agreement, "lower_bound": agreement - 0.05}
    return {
        "target_0.8": base | {"cloud_served": 1 - local_08, "served_agreement": served},
        "target_0.95": base | {"cloud_served": 1 - local_095, "served_agreement": served},
    }


def test_the_target_checks_hold_the_agreement_to_the_bound_and_the_order_of_targets() -> None:
    checks = target_checks(target_figures(0.6, 0.2))
    names = [name for name, _, _ in checks]
    assert [ok for _, ok, _ in checks] == [True, True, True, False, True]
    assert "target 0.95: audited agreement >= target - the bound's width" in names
    # 36 of 40 audits: the upper bound 0.954, so 0.95 - (0.954 - 0.9) = 0.896: the
    # agreement passes, the judges' 0.85 does not
    assert "0.900 (40 audits) vs 0.95 - (0.954 - 0.900) = 0.896" in done_when_text(checks)
    # one audit that disagreed does not show a 0.5 target missed (its upper bound is 0.73);
    # ten that all disagreed do
    for audits, ok in ((1, True), (10, False)):
        served = {"audits": audits, "agreement": 0.0, "lower_bound": 0.0}
        arm = figures()["shipped"] | {"served_agreement": served, "local_right": 0.0}
        one = target_checks({"target_0.5": arm})
        assert one[0][1] is ok
    same = target_checks(target_figures(0.2, 0.2))
    assert same[-1] == (
        "a lower target serves more locally (drafts with no cloud call)",
        False,
        "0.8: 20.0%, 0.95: 20.0%",
    )
    # what orders is the drafts served unverified, not those merged after a verification
    # (a higher target verifies more drafts, and more of them merge)
    merged = target_figures(0.2, 0.2)
    merged["target_0.8"] |= {"local_drafts": 0.10, "local_unverified": 0.07}
    merged["target_0.95"] |= {"local_drafts": 0.12, "local_unverified": 0.0}
    assert target_checks(merged)[-1][1:] == (True, "0.8: 7.0%, 0.95: 0.0%")
    unaudited = figures()["shipped"] | {"served_agreement": None, "local_right": None}
    none = target_checks(target_figures(0.6, 0.2) | {"target_0.9": unaudited})
    assert none[2][1] is None and none[3][1] is None  # no audits: n/a


def test_label_yield_puts_each_request_on_its_path() -> None:
    rows = [
        {"request_id": "a", "stream": False, "cache": "hit"},
        {"request_id": "b", "stream": True, "lane": "cloud"},
        {"request_id": "h", "stream": True, "lane": "uncertain", "unheld": True},
        {"request_id": "c", "stream": False},  # no line: the draft failed
        {"request_id": "d", "stream": True},
        {"request_id": "e", "stream": False},
        {"request_id": "f", "stream": False},
        {"request_id": "g", "stream": False},
    ]
    features = {"mean_p": 0.5}
    lines = [
        {"request_id": "d", "decision": None, "reasons": ["hedged", "first_token_budget"]},
        {"request_id": "e", "decision": "accept", "audit": True, "agreement": True,
         "features": features},
        {"request_id": "f", "decision": "verify", "agreement": False, "features": features,
         "hedged": True},
        {"request_id": "g", "decision": "verify", "agreement": None, "features": features},
    ]  # fmt: skip
    table = label_yield(rows, lines)
    assert [(r["path"], r["requests"], r["labels"]) for r in table] == [
        (PATHS[0], 1, 0),
        (PATHS[1], 1, 0),
        (PATHS[2], 1, 0),
        (PATHS[3], 1, 0),
        (PATHS[4], 1, 0),
        (PATHS[5], 1, 1),
        (PATHS[7], 1, 1),
        (PATHS[8], 1, 0),
    ]
    text = yield_markdown(table, learner_labels=4)
    assert "| **all** | | 8 | 100% | 1 | 2 |" in text
    assert "learning.labels.total`): 4 (0.50 per request)" in text


@pytest.mark.real
def test_the_command_runs_every_arm_on_the_real_llama_server(
    real_assets: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "value.json"
    argv = [sys.executable, "-m", "bench.value", "--set", "transfer", "--limit", "2"]
    done = subprocess.run(
        [*argv, "--max-tokens", "16", "--targets", "0.9", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert set(document["summary"]) == {*PROXY_ARMS, *OFFLINE_ARMS, target_arm(0.9)}
    assert document["summary"]["local_only"]["cloud_calls"] == 0
    assert document["summary"]["cloud_only"]["spend_vs_cloud"] == 1.0
    assert "$ .venv/bin/python -m bench.value --set transfer" in done.stdout
    assert "| oracle |" in done.stdout
    assert "Done when (issue 31), shipped on transfer.jsonl:" in done.stdout
    assert len(document["done_when"]) == 5
    assert "\n| 0.9 | " in done.stdout  # the targets' table


@pytest.mark.process  # it runs git
def test_the_before_arm_is_config_yaml_at_06ca9f8() -> None:
    shown = subprocess.run(
        ["git", "-C", str(ROOT), "show", "06ca9f8:config.yaml"], capture_output=True, text=True
    )
    if shown.returncode != 0:
        pytest.skip("the checkout has no 06ca9f8 (a shallow clone)")
    then = yaml.safe_load(shown.stdout)
    spec = {
        k: v
        for k, v in then["speculative_decoding"].items()
        if k not in ("draft_model", "verify_model")
    }
    assert BEFORE_ISSUE_31["speculative_decoding"] == spec
    assert BEFORE_ISSUE_31["adaptive_depth"] == then["adaptive_depth"]
    assert "learning" not in then  # off then, by default: pinned off here
    # defaults changed since, pinned to what they were then
    schema = subprocess.run(
        ["git", "-C", str(ROOT), "show", "06ca9f8:app/config/schema.py"],
        capture_output=True,
        text=True,
    ).stdout
    assert "AgreementMode.SIMILARITY," in schema and "gate" not in schema
    assert DEFAULTS_THEN["speculative_decoding"]["agreement"] == "similarity"
    for arm in ("before", "seed"):
        tree = arm_tree(arm, yaml.safe_load((ROOT / "config.yaml").read_text()), "a", "b", ROOT)
        assert tree["speculative_decoding"]["agreement"] == "similarity"
        assert tree["speculative_decoding"]["gate"]["enabled"] is False
