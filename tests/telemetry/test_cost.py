"""Spend, the all-cloud baseline and savings: priced per call, shown in /stats, /metrics
and the spec log.

The pure parts (``app.pricing``, ``app.spend``) are held to tables; the end-to-end test
runs the proxy against the stand-ins with known prices and holds every place the money
shows to a hand computation from the tokens the stand-ins counted.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from app.baseline import Calibration, Estimate, Estimates, Pair
from app.config import ConfigError, Price, settings_from_mapping
from app.pricing import Bill, Charge, Pricing
from app.record import RequestRecord, Usage
from app.routing.signals import OUT_OF_TIME, DraftSignals
from app.spend import Spend
from app.vocabulary import Purpose, Strategy
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.fakes.script import prompt_tokens, tokenize
from tests.support.proxy import MakeProxy, chat_bodies, proxy_config
from tests.telemetry.test_metrics import (
    ASK,
    CLOUD_OTHER,
    CLOUD_SAME,
    GOOD_DRAFT,
    HEDGED,
    by_label,
    one,
    scrape,
)

LOCAL = Price(input_per_mtok=0.1, output_per_mtok=0.2)
CLOUD = Price(input_per_mtok=0.6, output_per_mtok=1.2)
PRICING = Pricing({"local": LOCAL, "cerebras": CLOUD}, baseline_model="cerebras")


def record(*usage: Usage, prompt: int = 0, finish: str | None = None) -> RequestRecord:
    rec = RequestRecord(Strategy.SPECULATIVE, draft_model="local", verify_model="cerebras")
    rec.usage, rec.prompt_tokens = list(usage), prompt
    if finish is not None:
        rec.draft = DraftSignals("a draft", 3, 32, finish)
    return rec


def usd(price: Price, prompt: int, completion: int) -> float:
    """By hand: USD per million tokens."""
    return prompt * price.input_per_mtok / 1e6 + completion * price.output_per_mtok / 1e6


@pytest.mark.parametrize(
    ("usage", "spend", "baseline", "source"),
    [
        # an accepted draft: the baseline is the draft's length at the cloud's prices
        (
            [Usage("local", Purpose.DRAFT, 20, 30)],
            usd(LOCAL, 20, 30),
            usd(CLOUD, 20, 30),
            "estimated",
        ),
        # a spill: the cloud's own counts are the baseline
        (
            [Usage("local", Purpose.DRAFT, 20, 30), Usage("cerebras", Purpose.SPILL, 25, 80)],
            usd(LOCAL, 20, 30) + usd(CLOUD, 25, 80),
            usd(CLOUD, 25, 80),
            "verified",
        ),
        # a cancelled hedge costs its prompt (estimated) and is no baseline
        (
            [
                Usage("local", Purpose.DRAFT, 20, 30),
                Usage("cerebras", Purpose.HEDGE_CANCELLED, 20, 0, estimated=True),
            ],
            usd(LOCAL, 20, 30) + usd(CLOUD, 20, 0),
            usd(CLOUD, 20, 30),
            "estimated",
        ),
        # a cloud stream without usage: counted, but no verified baseline
        (
            [Usage("cerebras", Purpose.PASS_THROUGH, 0, 12, estimated=True)],
            usd(CLOUD, 0, 12),
            usd(CLOUD, 0, 12),
            "estimated",
        ),
        # a model without a price costs nothing; nothing answered: no baseline
        ([Usage("elsewhere", Purpose.DRAFT, 5, 5)], 0.0, usd(CLOUD, 5, 5), "estimated"),
        ([], 0.0, 0.0, "none"),
    ],
)
def test_a_bill_prices_each_call_and_the_all_cloud_baseline(
    usage: list[Usage], spend: float, baseline: float, source: str
) -> None:
    bill = PRICING.bill(record(*usage))
    assert bill.spend_usd == pytest.approx(spend)
    assert bill.baseline_usd == pytest.approx(baseline)
    assert bill.baseline_from == source


def test_a_bill_counts_cloud_calls_and_pairs_whole_drafts_with_the_clouds_answer() -> None:
    draft, spill = Usage("local", Purpose.DRAFT, 20, 30), Usage("cerebras", Purpose.SPILL, 25, 8)
    bill = PRICING.bill(record(draft, spill, finish="stop"))
    assert bill.pair == Pair(20, 30, 25, 8)
    assert bill.cloud_calls() == {"total": 1, "by_purpose": {"spill": 1}}
    assert bill.log_entry()["cloud_calls"] == bill.cloud_calls()
    # a draft cut at its budget is no whole answer: a pair for the prompt and the mean only
    assert PRICING.bill(record(draft, spill, finish="length")).pair == Pair(20, 0, 25, 8)
    # one that filled the client's own limit is whole, but no measure of how long the cloud
    # would have been: both stop there
    at_limit = record(draft, spill, finish="length")
    at_limit.draft = DraftSignals("a draft", 32, 32, "length", client_limit=32)
    assert not at_limit.draft.partial
    assert PRICING.bill(at_limit).pair == Pair(20, 0, 25, 8)
    # a pass-through is no speculative request: no pair
    passed = record(Usage("cerebras", Purpose.PASS_THROUGH, 25, 8))
    passed.strategy = Strategy.CEREBRAS_ONLY
    assert PRICING.bill(passed).pair is None
    # a draft stopped before the server counted the prompt: the cloud's answer, for the mean
    stopped = Usage("local", Purpose.DRAFT, 0, 12, estimated=True)
    assert PRICING.bill(record(stopped, spill, finish=OUT_OF_TIME)).pair == Pair(0, 0, 25, 8)
    # an accepted draft: its estimate split so a calibration can scale each part
    alone = PRICING.bill(record(draft, prompt=22, finish="stop"))
    assert alone.pair is None and alone.cloud_calls()["total"] == 0
    assert alone.estimate == Estimate(usd(CLOUD, 22, 0), usd(CLOUD, 0, 30), usd(CLOUD, 0, 1))
    assert alone.baseline_usd == pytest.approx(usd(CLOUD, 22, 30))
    # an audit's call comes later: it makes the pair then, once
    late = [PRICING.charge(Usage("cerebras", Purpose.AUDIT, 26, 9))]
    assert alone.add_late(late, Pair(22, 30, 26, 9)) == Pair(22, 30, 26, 9)
    assert alone.add_late([], Pair(22, 30, 26, 9)) is None
    assert alone.cloud_calls() == {"total": 1, "by_purpose": {"audit": 1}}
    # a cancelled hedge is a cloud call; a local pass-through is not
    cancelled = Usage("cerebras", Purpose.HEDGE_CANCELLED, 20, 0, estimated=True)
    assert PRICING.bill(record(draft, cancelled)).cloud_calls()["by_purpose"] == {
        "hedge_cancelled": 1
    }
    assert PRICING.bill(record(Usage("local", Purpose.PASS_THROUGH, 5, 5))).cloud_calls() == {
        "total": 0,
        "by_purpose": {},
    }


def test_what_a_request_spends_after_its_bill_is_added_to_it_once() -> None:
    spill = Usage("cerebras", Purpose.SPILL, 25, 8)
    unbilled = record(spill)
    assert PRICING.bill_late(unbilled) is None  # never billed: nothing to add to
    # the cloud answered while the draft ran beside it: billed unpaired, then the draft ends
    rec = record(spill, finish="stop")
    rec.bill = PRICING.bill(rec, paired=False)
    draft = Usage("local", Purpose.DRAFT, 20, 3)
    rec.usage.append(draft)
    late = PRICING.bill_late(rec)
    assert late is not None
    assert late.usages == (draft,) and late.charges == (PRICING.charge(draft),)
    assert late.draft_model == "local" and late.pair == Pair(20, 3, 25, 8)
    assert rec.bill.charges[-1] == PRICING.charge(draft)
    # asked again with nothing new: nothing more, and the pair is not counted twice
    again = PRICING.bill_late(rec)
    assert again is not None and again.usages == () and again.pair is None


def test_the_calibration_estimates_from_pairs_by_hand() -> None:
    """Ratios of the cloud's counts to the local ones; for the completion, the rule that
    predicted the pairs better (each before it was counted)."""
    estimates = Estimates()
    for prompt, completion in ((40, 100), (60, 20)):
        estimates.add(Estimate(usd(CLOUD, prompt, 0), usd(CLOUD, 0, completion), usd(CLOUD, 0, 1)))
    cold = Calibration()
    assert cold.method == "local_tokens"  # no pair yet: the local counts as they are
    assert cold.estimate(estimates) == pytest.approx(usd(CLOUD, 100, 120))

    # answers as long as the local ones, twice over: the ratio predicts them exactly
    scaled = Calibration()
    for pair in (Pair(10, 50, 15, 100), Pair(20, 10, 30, 20), Pair(10, 30, 15, 60)):
        scaled.add(pair)
    assert (scaled.prompt_ratio, scaled.completion_ratio) == (1.5, 2.0)
    assert scaled.ratio_error == 0
    assert scaled.mean_error == pytest.approx(80 + 0)  # 100 for 20, then 60 for 60
    assert scaled.method == "ratios"
    assert scaled.estimate(estimates) == pytest.approx(usd(CLOUD, 1.5 * 100, 2.0 * 120))

    # one pair: neither rule has predicted anything yet, so the mean (bounded) stands
    one = Calibration()
    one.add(Pair(10, 50, 15, 100))
    assert one.method == "prompt_ratio_mean_completion"
    assert one.estimate(estimates) == pytest.approx(usd(CLOUD, 1.5 * 100, 2 * 100))
    # a cut draft counts for the prompt and the mean, not for the ratio
    one.add(Pair(20, 0, 30, 40))
    assert (one.pairs, one.whole, one.prompt_ratio, one.mean_completion) == (2, 1, 1.5, 70)
    assert one.completion_ratio == 2.0 and one.ratio_error == one.mean_error == 0
    # a cloud answer whose prompt the local model never counted: for the mean alone
    one.add(Pair(0, 0, 50, 10))
    assert (one.answers, one.pairs, one.prompt_ratio, one.mean_completion) == (3, 2, 1.5, 50)

    # the cloud's answers the same length whatever the local model wrote: the mean wins
    fixed = Calibration()
    for pair in (Pair(10, 100, 12, 5), Pair(10, 20, 12, 5), Pair(10, 60, 12, 5)):
        fixed.add(pair)
    assert fixed.mean_error == 0 and fixed.ratio_error == pytest.approx(4 + 0)  # 1 for 5, 5 for 5
    assert fixed.method == "prompt_ratio_mean_completion"
    assert fixed.estimate(estimates) == pytest.approx(usd(CLOUD, 1.2 * 100, 2 * 5))
    summary = fixed.summary()
    assert summary["pairs"] == 3 and summary["mean_cloud_completion"] == 5
    assert summary["completion_error_per_pair"]["mean"] == 0


def test_spend_calibrates_the_estimated_baseline_and_counts_cloud_calls() -> None:
    """An accepted draft (estimated), a verified one (measured, a pair), a late audit
    call; two places merged equal one."""
    accepted = PRICING.bill(record(Usage("local", Purpose.DRAFT, 40, 100), finish="stop"))
    verified = PRICING.bill(
        record(
            Usage("local", Purpose.DRAFT, 20, 10),
            Usage("cerebras", Purpose.VERIFICATION, 30, 20),
            finish="stop",
        )
    )
    audit = PRICING.charge(Usage("cerebras", Purpose.AUDIT, 60, 7))
    one_place, parts = Spend(), [Spend(), Spend()]
    for spend in (one_place, parts[0]):
        spend.add(accepted)
    for spend in (one_place, parts[1]):
        spend.add(verified)
        spend.add_charge(audit)
    merged = Spend()
    for part in parts:
        merged.merge(Spend.from_state(orjson.loads(orjson.dumps(part.state()))))
    assert merged.summary() == one_place.summary()
    cost = one_place.summary()
    measured, estimated = usd(CLOUD, 30, 20), usd(CLOUD, 40 * 1.5, 20)  # the mean: 20
    assert cost["baseline"] == {
        "measured_usd": pytest.approx(measured),
        "estimated_usd": pytest.approx(estimated),
        "uncalibrated_estimated_usd": pytest.approx(usd(CLOUD, 40, 100)),
        "estimated_requests": 1,
        "cloud_answers": 1,
        "pairs": 1,
        "whole_pairs": 1,
        "method": "prompt_ratio_mean_completion",
        "prompt_ratio": 1.5,
        "completion_ratio": 2.0,
        "mean_cloud_completion": 20.0,
        "completion_error_per_pair": {"ratio": None, "mean": None},
    }
    assert cost["baseline_usd"] == pytest.approx(measured + estimated)
    assert cost["baseline_estimated_usd"] == pytest.approx(estimated)
    spend = usd(LOCAL, 40, 100) + usd(LOCAL, 20, 10) + usd(CLOUD, 30, 20) + usd(CLOUD, 60, 7)
    assert cost["savings_usd"] == pytest.approx(measured + estimated - spend)
    assert cost["cloud_calls"] == {
        "total": 2,
        "per_request": 1.0,
        "by_purpose": {"audit": 1, "verification": 1},
    }


def test_a_negative_price_is_refused_at_start() -> None:
    tree = proxy_config("http://127.0.0.1:1", "http://127.0.0.1:2")
    tree["models"]["cerebras"]["price"] = {"output_per_mtok": -1}
    with pytest.raises(ConfigError, match=r"models\.cerebras\.price\.output_per_mtok"):
        settings_from_mapping(tree, env={"CEREBRAS_API_KEY": "k"})


def test_spend_adds_bills_and_late_charges_and_merges_like_one() -> None:
    first = Bill([Charge("local", "draft", 2e-6)], 5e-6, "estimated")
    second = Bill(
        [Charge("local", "draft", 1e-6), Charge("cerebras", "spill", 4e-6)], 4e-6, "verified"
    )
    one_place, parts = Spend(), [Spend(), Spend()]
    for spend in (one_place, parts[0]):
        spend.add(first)
    for spend in (one_place, parts[1]):
        spend.add(second)
        spend.add_charge(Charge("cerebras", "audit", 3e-6))
    merged = Spend()
    for part in parts:
        merged.merge(Spend.from_state(orjson.loads(orjson.dumps(part.state()))))
    assert merged.summary() == one_place.summary()
    summary = one_place.summary()
    assert summary["spend_usd"] == {
        "total": pytest.approx(10e-6),
        "by_model": {"cerebras": pytest.approx(7e-6), "local": pytest.approx(3e-6)},
        "by_purpose": {
            "audit": pytest.approx(3e-6),
            "draft": pytest.approx(3e-6),
            "spill": pytest.approx(4e-6),
        },
    }
    assert summary["baseline_usd"] == pytest.approx(9e-6)
    assert summary["baseline_estimated_usd"] == pytest.approx(5e-6)
    assert summary["savings_usd"] == pytest.approx(-1e-6)
    assert summary["savings_pct"] == pytest.approx(-11.11, abs=0.01)


def test_spend_baseline_and_savings_equal_a_hand_computation_everywhere(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, tmp_path: Path
) -> None:
    """Five requests, every way money is spent; /stats, /metrics and the spec log agree
    with a computation from the tokens the stand-ins counted."""
    local.enqueue(Reply(GOOD_DRAFT), Reply(HEDGED), Reply(HEDGED), Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_SAME), Reply(CLOUD_OTHER), Reply(CLOUD_OTHER), Reply(CLOUD_OTHER))
    log_path = tmp_path / "spec.jsonl"
    prices = {
        "models": {
            "local": {"price": LOCAL.model_dump()},
            "cerebras": {"price": CLOUD.model_dump()},
        },
        "logging": {"spec_log_file": str(log_path)},
    }
    with make_proxy(**prices) as proxy:
        for _ in range(3):  # accepted, verified and kept, spilled over
            proxy.openai.chat.completions.create(model="auto", messages=ASK)
        stream = proxy.openai.chat.completions.create(model="auto", messages=ASK, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        proxy.openai.chat.completions.create(
            model="auto", messages=ASK, extra_headers={"X-Routing-Strategy": "cerebras_only"}
        )
        stats, samples = proxy.stats(), scrape(proxy)
    assert stats["requests"]["by_outcome"] == {
        "accepted_without_verification": 1,
        "verified_draft_used": 1,
        "spilled_over": 2,
        "passed_through": 1,
    }

    # By hand: each call's prompt as the stand-in counted it, each answer's tokens.
    p_local = [prompt_tokens(body) for body in chat_bodies(local)]
    p_cloud = [prompt_tokens(body) for body in chat_bodies(cloud)]
    n = {text: len(tokenize(text)) for text in (GOOD_DRAFT, HEDGED, CLOUD_SAME, CLOUD_OTHER)}
    drafts = [  # llama-server counts the end token of an answer that stopped by itself
        usd(LOCAL, p, n[t] + 1) for p, t in zip(p_local, (GOOD_DRAFT, *[HEDGED] * 3), strict=True)
    ]
    answers = [
        usd(CLOUD, p, n[t]) for p, t in zip(p_cloud, (CLOUD_SAME, *[CLOUD_OTHER] * 3), strict=True)
    ]
    per_request = [  # (spend by purpose, baseline)
        ({"draft": drafts[0]}, usd(CLOUD, p_local[0], n[GOOD_DRAFT] + 1)),
        ({"draft": drafts[1], "verification": answers[0]}, answers[0]),
        ({"draft": drafts[2], "spill": answers[1]}, answers[1]),
        ({"draft": drafts[3], "spill": answers[2]}, answers[2]),
        ({"pass_through": answers[3]}, answers[3]),
    ]
    spend = sum(drafts) + sum(answers)
    # /stats calibrates the accepted draft's baseline on the three requests both answered:
    # its prompt by the cloud's prompt tokens per local one; its answer at the cloud's mean
    # (every local answer is as long, so both completion rules predict alike: the mean
    # stands)
    cloud_texts = (CLOUD_SAME, CLOUD_OTHER, CLOUD_OTHER)
    prompt_ratio = sum(p_cloud[:3]) / sum(p_local[1:])
    mean = sum(n[t] for t in cloud_texts) / 3
    completion_ratio = 3 * mean / (3 * (n[HEDGED] + 1))
    estimated = usd(CLOUD, p_local[0] * prompt_ratio, mean)
    baseline = estimated + sum(b for _, b in per_request[1:])

    cost = stats["cost"]
    assert cost["spend_usd"]["total"] == pytest.approx(spend, abs=1e-9)
    assert cost["spend_usd"]["by_model"] == {
        "cerebras": pytest.approx(sum(answers), abs=1e-9),
        "local": pytest.approx(sum(drafts), abs=1e-9),
    }
    assert cost["spend_usd"]["by_purpose"] == {
        "draft": pytest.approx(sum(drafts), abs=1e-9),
        "verification": pytest.approx(answers[0], abs=1e-9),
        "spill": pytest.approx(answers[1] + answers[2], abs=1e-9),
        "pass_through": pytest.approx(answers[3], abs=1e-9),
    }
    assert cost["baseline_usd"] == pytest.approx(baseline, abs=1e-9)
    assert cost["baseline_estimated_usd"] == pytest.approx(estimated, abs=1e-9)
    assert cost["baseline"] == {
        "measured_usd": pytest.approx(baseline - estimated, abs=1e-9),
        "estimated_usd": pytest.approx(estimated, abs=1e-9),
        "uncalibrated_estimated_usd": pytest.approx(per_request[0][1], abs=1e-9),
        "estimated_requests": 1,
        "cloud_answers": 3,
        "pairs": 3,
        "whole_pairs": 3,
        "method": "prompt_ratio_mean_completion",
        "prompt_ratio": pytest.approx(prompt_ratio, abs=1e-4),
        "completion_ratio": pytest.approx(completion_ratio, abs=1e-4),
        "mean_cloud_completion": pytest.approx(mean, abs=1e-4),
        "completion_error_per_pair": cost["baseline"]["completion_error_per_pair"],
    }
    errors = cost["baseline"]["completion_error_per_pair"]
    assert errors["ratio"] == errors["mean"]
    assert cost["cloud_calls"] == {
        "total": 4,
        "per_request": 0.8,
        "by_purpose": {"pass_through": 1, "spill": 2, "verification": 1},
    }
    assert cost["windows"]["5m"]["cloud_calls"] == cost["cloud_calls"]
    assert cost["savings_usd"] == pytest.approx(baseline - spend, abs=1e-9)
    assert cost["savings_pct"] == pytest.approx(100 * (baseline - spend) / baseline, abs=0.01)
    assert cost["windows"]["5m"]["spend_usd"] == cost["spend_usd"]
    assert cost["windows"]["30s"]["baseline_usd"] == cost["baseline_usd"]

    quality = stats["quality"]
    assert quality["served_locally"] == 2  # the accepted draft and the verified one
    assert quality["served_locally_share"] == 0.5  # of four speculative requests
    assert (quality["verified_drafts"], quality["verified_disagreed"]) == (3, 2)
    assert quality["audits"] is None  # learning (and its audits) is off

    metered = by_label(samples, "specproxy_cost_usd_total", "purpose")
    for purpose, amount in cost["spend_usd"]["by_purpose"].items():
        assert metered[purpose] == pytest.approx(amount, abs=1e-9)
    # the counter adds each request's own baseline as it was billed (uncalibrated)
    billed = sum(b for _, b in per_request)
    assert one(samples, "specproxy_baseline_cost_usd_total") == pytest.approx(billed, abs=1e-9)
    assert by_label(samples, "specproxy_cloud_calls_total", "purpose") == {
        "verification": 1,
        "spill": 2,
        "pass_through": 1,
    }

    lines = [orjson.loads(line) for line in log_path.read_bytes().splitlines()]
    assert len(lines) == 4  # the speculative requests
    for line, (purposes, line_baseline) in zip(lines, per_request, strict=False):
        assert line["cost"]["by_purpose"] == pytest.approx(purposes, abs=1e-9)
        assert line["cost"]["spend_usd"] == pytest.approx(sum(purposes.values()), abs=1e-9)
        assert line["cost"]["baseline_usd"] == pytest.approx(line_baseline, abs=1e-9)
    assert [line["cost"]["baseline_from"] for line in lines] == ["estimated", *["verified"] * 3]
    assert [line["cost"]["cloud_calls"] for line in lines] == [
        {"total": 0, "by_purpose": {}},
        {"total": 1, "by_purpose": {"verification": 1}},
        {"total": 1, "by_purpose": {"spill": 1}},
        {"total": 1, "by_purpose": {"spill": 1}},
    ]
