"""bench/routing_eval.py: the pure report on hand-made records, and one real run."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

import bench.routing_eval as harness
from app.config import SpeculativeConfig
from app.evaluation.judges import EvalItem
from app.routing.policy import Policy, SpillReason, decide
from app.routing.scorer import Scorer
from app.routing.signals import DraftSignals, TokenSignal
from bench.routing_eval import ask_cloud, cloud_config, round_robin, with_cloud
from bench.routing_eval_report import (
    POLICIES,
    DraftRecord,
    evaluate,
    make_record,
    margin_over,
    markdown,
    operating_point,
    policy_curves,
    policy_scores,
)
from tests.fakes import FakeCerebras, Reply, serve
from tests.fakes.script import JSON
from tests.support.proxy import CLOUD_KEY

ROOT = Path(__file__).resolve().parents[2]
ROUTERS = {p.name for p in POLICIES} | {"oracle", "random"}


def record(
    item_id: str, correct: bool, mean_p: float | None, *, accept: bool = False, kind: str = "fact"
) -> DraftRecord:
    """A record whose every confidence signal follows ``mean_p`` (None: no tokens)."""
    p = mean_p
    return DraftRecord(
        id=item_id,
        kind=kind,
        context_type="prose",
        draft="x" * (10 if p is None else int(100 * p)),
        correct=correct,
        judged_correct=correct,
        n_tokens=0 if p is None else 5,
        finish_reason="stop",
        truncated=False,
        mean_p=p,
        min_p=None if p is None else p / 2,
        mean_entropy=None if p is None else 1 - p,
        max_entropy=None if p is None else 1 - p / 2,
        mean_margin=p,
        chars=10 if p is None else int(100 * p),
        hedging=False,
        seed_accept=accept,
        seed_reasons=() if accept else ("low_confidence",),
        features={"log_chars": math.log1p(10 if p is None else int(100 * p))},
    )


# ------------------------------------------------------------------------- record building


def test_make_record_summarises_signals_and_the_seed_decision() -> None:
    tokens = (
        TokenSignal("I think", 0.9, 0.2, top_k=((1, 0.9), (2, 0.05))),
        TokenSignal(" 4", 0.3, 1.0, top_k=((3, 0.3), (4, 0.3))),
    )
    signals = DraftSignals("I think 4", n_tokens=2, budget=10, finish_reason="stop", tokens=tokens)
    policy = Policy()
    rec = make_record(
        item_id="a-1",
        kind="arithmetic",
        context_type="math",
        signals=signals,
        correct=True,
        decision=decide(signals, policy),
        hedging_markers=policy.uncertainty_markers,
    )
    assert (rec.mean_p, rec.min_p) == (pytest.approx(0.6), 0.3)
    assert (rec.mean_entropy, rec.max_entropy) == (pytest.approx(0.6), 1.0)
    assert rec.mean_margin == pytest.approx((0.85 + 0.0) / 2)
    assert (rec.chars, rec.hedging, rec.truncated, rec.seed_accept) == (9, True, False, False)
    assert SpillReason.UNCERTAINTY_MARKER.value in rec.seed_reasons
    assert rec.features["ctx_math"] == 1.0 and rec.features["marker"] == 1.0
    assert DraftRecord.from_mapping(json.loads(json.dumps(asdict(rec)))) == rec


def test_an_empty_draft_is_doubted_most_by_every_confidence_policy() -> None:
    records = [record("a", True, 0.9), record("b", False, None)]
    scores = policy_scores(records)
    for name in ("mean_p", "min_p", "entropy", "margin"):
        assert scores[name][1] > scores[name][0], name
    assert scores["entropy"][1] == math.inf


def test_round_robin_interleaves_kinds_in_file_order() -> None:
    spec = {"type": "exact", "answers": ["x"]}
    items = [EvalItem(f"{k}-{i}", k, "p", spec, "x") for k in ("fact", "code") for i in (1, 2, 3)]
    assert [i.id for i in round_robin(items, 3)] == ["fact-1", "code-1", "fact-2"]
    assert round_robin(items, None) == items


# ---------------------------------------------------------------------------------- report


def test_a_signal_that_separates_perfectly_matches_the_oracle() -> None:
    records = [
        record("w1", False, 0.1),
        record("w2", False, 0.2),
        record("r1", True, 0.8, accept=True),
        record("r2", True, 0.9, accept=True),
    ]
    report = evaluate(records)
    assert report["q_local"] == 0.5 and report["q_cloud"] == 1.0
    assert report["seed"]["cloud_share"] == 0.5 and report["seed"]["quality"] == 1.0
    rows = report["policies"]
    assert set(rows) == ROUTERS
    for name in ("seed", "mean_p", "min_p", "entropy", "margin", "length", "oracle"):
        assert rows[name]["auroc"] == 1.0, name
        assert rows[name]["apgr"] == pytest.approx(rows["oracle"]["apgr"]), name
        assert rows[name]["pgr_at_seed_share"] == 1.0, name
    assert rows["oracle"]["apgr"] == pytest.approx(0.75)  # PGR 1 from share 0.5 on
    assert rows["oracle"]["cpt50"] == 0.25 and rows["oracle"]["cpt80"] == pytest.approx(0.4)
    assert rows["random"]["apgr"] == 0.5 and rows["random"]["pgr_at_seed_share"] == 0.5


def test_a_reversed_signal_scores_below_random() -> None:
    # The confident drafts are the wrong ones: confidence-based routers do worse than random.
    records = [record("w", False, 0.9), record("r", True, 0.1, accept=True)]
    rows = evaluate(records)["policies"]
    assert rows["mean_p"]["auroc"] == 0.0
    assert rows["mean_p"]["apgr"] == pytest.approx(0.25)
    assert rows["mean_p"]["apgr"] < rows["random"]["apgr"]


def test_the_binary_seed_curve_has_only_its_operating_point() -> None:
    records = [record(str(i), i < 2, 0.5, accept=i in (0, 2)) for i in range(4)]
    curve = evaluate(records)["policies"]["seed"]["curve"]
    assert curve == [[0.0, 0.5], [0.5, 0.75], [1.0, 1.0]]


def test_every_draft_correct_leaves_pgr_undefined_not_an_error() -> None:
    report = evaluate([record("a", True, 0.9, accept=True), record("b", True, 0.2)])
    row = report["policies"]["mean_p"]
    assert (row["apgr"], row["cpt50"], row["cpt80"], row["pgr_at_seed_share"]) == (None,) * 4
    assert row["auroc"] is None  # one class only
    assert "n/a" in markdown(report)


def test_per_kind_accuracy_and_reasons() -> None:
    records = [
        record("f1", True, 0.9, accept=True, kind="fact"),
        record("f2", False, 0.2, kind="fact"),
        record("c1", False, 0.3, kind="code"),
    ]
    report = evaluate(records)
    assert report["by_kind"]["fact"] == {
        "n": 2,
        "accuracy": 0.5,
        "seed_verify_share": 0.5,
        "truncated_share": 0.0,
    }
    assert report["by_kind"]["code"]["accuracy"] == 0.0
    assert report["seed"]["reasons"] == {"low_confidence": 2}
    assert report["seed"]["accuracy_of_accepted"] == 1.0


def test_markdown_has_a_row_per_policy_and_kind() -> None:
    records = [record("w", False, 0.2), replace(record("r", True, 0.8), kind="code")]
    text = markdown(evaluate(records))
    for name in ROUTERS:
        assert f"| {name} |" in text
    assert "| fact | 1 |" in text and "| code | 1 |" in text
    assert "q_local (draft accuracy): 50.0%" in text


def test_a_cut_draft_is_wrong_whatever_the_judge_says() -> None:
    signals = DraftSignals("Paris is", n_tokens=3, budget=3, finish_reason="length")
    rec = make_record(
        item_id="f",
        kind="fact",
        context_type="prose",
        signals=signals,
        correct=True,
        decision=decide(signals, Policy()),
        hedging_markers=(),
    )
    assert (rec.correct, rec.judged_correct, rec.truncated) == (False, True, True)


# A scorer on one feature: fewer characters = more likely wrong.
SHORT_IS_WRONG = Scorer("short", ("log_chars",), (0.0,), (1.0,), (-1.0,), 3.0, threshold=0.5)


def test_a_scored_policy_sends_cut_drafts_first_and_reports_its_operating_point() -> None:
    records = [
        record("w", False, 0.1),  # 10 chars: score high
        record("r", True, 0.9),  # 90 chars: score low
        replace(record("cut", False, 0.95), truncated=True),  # longest, but cut
    ]
    scores = policy_scores(records, [SHORT_IS_WRONG])["short"]
    assert scores[2] > scores[0] > scores[1]
    report = evaluate(records, [SHORT_IS_WRONG])
    row = report["policies"]["short"]
    assert row["auroc"] == 1.0
    point = operating_point(SHORT_IS_WRONG, records)
    assert point == row["at_threshold"]
    # sigmoid(3 - log1p(10)) > 0.5 > sigmoid(3 - log1p(90)): the wrong and the cut go
    assert point["cloud_share"] == pytest.approx(2 / 3) and point["quality"] == 1.0


def test_margin_over_is_the_smallest_inner_gap() -> None:
    records = [record("w", False, 0.1), record("r", True, 0.9, accept=True)]
    curves = policy_curves(records, [SHORT_IS_WRONG])
    assert margin_over(curves["short"], curves["seed"]) == pytest.approx(0.0, abs=1e-9)
    assert margin_over(curves["random"], curves["short"]) < 0


def test_no_records_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        evaluate([])


# ------------------------------------------------------------------------------ real cloud


def test_an_old_record_without_cloud_fields_still_loads() -> None:
    rec = record("a", True, 0.5)
    raw = json.loads(json.dumps(asdict(rec)))
    del raw["cloud_correct"], raw["cloud_error"]
    assert DraftRecord.from_mapping(raw) == rec
    assert (rec.cloud_correct, rec.cloud_error) == (None, None)


def test_a_real_cloud_wrong_on_one_item_is_measured_not_assumed() -> None:
    records = [
        replace(record("w1", False, 0.1), cloud_correct=True),
        replace(record("r", True, 0.9, accept=True), cloud_correct=True),
        replace(record("w2", False, 0.2), cloud_correct=False, cloud_error="cloud: HTTP 500"),
    ]
    report = evaluate(records, cloud="gpt-oss-120b at https://api.cerebras.ai/v1")
    assert report["q_local"] == pytest.approx(1 / 3)
    assert report["q_cloud"] == pytest.approx(2 / 3) and report["cloud_errors"] == 1
    assert report["cloud"].startswith("gpt-oss-120b at https://api.cerebras.ai/v1")
    rows = report["policies"]
    # The oracle sends the one draft the cloud fixes, then has nothing left to gain.
    assert rows["oracle"]["curve"] == [
        [0.0, pytest.approx(1 / 3)],
        [pytest.approx(1 / 3), pytest.approx(2 / 3)],
        [1.0, pytest.approx(2 / 3)],
    ]
    assert rows["oracle"]["apgr"] == pytest.approx(5 / 6)  # PGR 1 from share 1/3 on
    assert rows["random"]["curve"][-1] == [1.0, pytest.approx(2 / 3)]
    assert rows["mean_p"]["auroc"] == 1.0  # still about spotting wrong drafts
    assert "1 errors" in markdown(report) and "perfect cloud" not in markdown(report)


def test_the_operating_point_serves_the_clouds_wrong_answers_as_wrong() -> None:
    records = [
        replace(record("w", False, 0.1), cloud_correct=True),  # 10 chars: sent, fixed
        replace(record("r", True, 0.15), cloud_correct=False),  # 15 chars: sent, broken
        replace(record("r2", True, 0.9), cloud_correct=False),  # 90 chars: kept, right
    ]
    point = operating_point(SHORT_IS_WRONG, records)
    assert point["cloud_share"] == pytest.approx(2 / 3)
    assert point["quality"] == pytest.approx(2 / 3)
    perfect = [replace(r, cloud_correct=None) for r in records]
    assert operating_point(SHORT_IS_WRONG, perfect)["quality"] == 1.0
    assert evaluate(records, [SHORT_IS_WRONG])["policies"]["short"]["at_threshold"] == point


def test_a_cloud_no_better_than_the_drafts_leaves_pgr_undefined() -> None:
    records = [
        replace(record("a", True, 0.9, accept=True), cloud_correct=True),
        replace(record("b", True, 0.2), cloud_correct=False),
    ]
    report = evaluate(records)
    assert (report["q_local"], report["q_cloud"], report["cloud_errors"]) == (1.0, 0.5, 0)
    row = report["policies"]["oracle"]
    assert (row["apgr"], row["cpt50"], row["pgr_at_seed_share"]) == (None,) * 3
    assert "n/a" in markdown(report)


def test_the_perfect_cloud_report_has_no_cloud_errors() -> None:
    report = evaluate([record("w", False, 0.1), record("r", True, 0.9)])
    assert report["q_cloud"] == 1.0 and report["cloud"].startswith("perfect")
    assert "cloud_errors" not in report and "(perfect cloud)" in markdown(report)


def test_with_cloud_attaches_each_verdict_to_its_record() -> None:
    records = [record("a", True, 0.9), record("b", False, 0.1)]
    out = with_cloud(records, [(True, None), (False, "cloud: boom")])
    assert [(r.cloud_correct, r.cloud_error) for r in out] == [(True, None), (False, "cloud: boom")]


class PromptCloud(FakeCerebras):
    """The Cerebras stand-in answering each prompt with its own reply (default: a wrong one)."""

    def __init__(self, replies: dict[str, Reply]) -> None:
        super().__init__(api_key=CLOUD_KEY)
        self.replies = replies

    async def play(self, request: Request, body: JSON, limit: int | None) -> Response:
        prompt = body["messages"][-1]["content"]
        self.enqueue(self.replies.get(prompt, Reply(text="I do not know.")))
        return await super().play(request, body, limit)


def item(item_id: str, prompt: str, answer: str) -> EvalItem:
    """A fact item judged by whether the answer contains ``answer``."""
    return EvalItem(item_id, "fact", prompt, {"type": "contains", "answers": [answer]}, answer)


ITEMS = [
    item("right", "Capital of France?", "Paris"),
    item("wrong", "Capital of Japan?", "Tokyo"),
    item("error", "Capital of Italy?", "Rome"),
]
REPLIES = {
    "Capital of France?": Reply(text="The capital of France is Paris."),
    "Capital of Italy?": Reply(status=500),
}


@pytest.fixture
def prompt_cloud() -> Iterator[tuple[PromptCloud, str]]:
    fake = PromptCloud(REPLIES)
    with serve(fake.app) as url:
        yield fake, f"{url}/v1"


def test_ask_cloud_judges_each_answer_and_counts_errors(
    prompt_cloud: tuple[PromptCloud, str],
) -> None:
    fake, url = prompt_cloud
    config = cloud_config(url, "gpt-oss-120b", "cerebras", CLOUD_KEY)
    answers = asyncio.run(ask_cloud(ITEMS, config.model_copy(update={"max_retries": 0})))
    assert [ok for ok, _ in answers] == [True, False, False]
    assert answers[0][1] is None and answers[1][1] is None
    assert answers[2][1] is not None and "500" in answers[2][1]
    bodies = [r.json for r in fake.requests if r.path.endswith("/chat/completions")]
    assert len(bodies) == 3
    for body, asked in zip(bodies, ITEMS, strict=True):  # the verifier's request, as is
        assert body["messages"] == [{"role": "user", "content": asked.prompt}]
        assert body["temperature"] == 0 and body["model"] == "gpt-oss-120b"
        assert "max_tokens" not in body and "max_completion_tokens" not in body


def fake_drafts(items: Sequence[EvalItem], local: Any, spec: SpeculativeConfig, budget: int) -> Any:
    """draft_all without llama-server: every draft is "Paris" at p = 0.9 per token."""

    async def run() -> tuple[list[DraftRecord], dict[str, Any]]:
        policy = harness.seed_policy(spec)
        signals = DraftSignals(
            "Paris",
            n_tokens=1,
            budget=budget,
            finish_reason="stop",
            tokens=(TokenSignal("Paris", 0.9, 0.3, top_k=((1, 0.9), (2, 0.05))),),
        )
        records = [
            make_record(
                item_id=i.id,
                kind=i.kind,
                context_type="prose",
                signals=signals,
                correct=i.passes(signals.text),
                decision=decide(signals, policy),
                hedging_markers=policy.uncertainty_markers,
            )
            for i in items
        ]
        return records, {"server": {"binary": None, "model": None}, "drafting_s": 0.0}

    return run()


@pytest.fixture
def no_llama_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The harness with stand-in drafting, no plot, no git; returns an items file."""
    monkeypatch.setattr(harness, "draft_all", fake_drafts)
    monkeypatch.setattr(harness, "plot", lambda *args: None)
    monkeypatch.setattr(harness, "machine_facts", lambda *args: {k: "x" for k in MACHINE})
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(asdict(i)) + "\n" for i in ITEMS), encoding="utf-8")
    return data


MACHINE = ("cpu", "cores", "python", "kernel", "llama_server", "model", "specproxy_commit")


def test_main_with_a_real_cloud_records_it_without_the_key(
    prompt_cloud: tuple[PromptCloud, str],
    no_llama_server: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, url = prompt_cloud
    monkeypatch.setenv("BENCH_CLOUD_KEY", CLOUD_KEY)
    out = tmp_path / "eval.json"
    argv = ["--data", str(no_llama_server), "--json", str(out), "--scorer", "confidence"]
    argv += ["--cloud-url", url, "--cloud-key-env", "BENCH_CLOUD_KEY"]
    assert harness.main(argv) == 0
    text = out.read_text()
    printed = capsys.readouterr()
    assert CLOUD_KEY not in text and CLOUD_KEY not in printed.out + printed.err
    document = json.loads(text)
    assert document["setup"]["cloud"] == {
        "url": url,
        "model": "gpt-oss-120b",  # the config's verifier
        "provider": "cerebras",
    }
    report = document["report"]
    assert report["q_cloud"] == pytest.approx(1 / 3) and report["cloud_errors"] == 1
    assert report["q_local"] == pytest.approx(1 / 3)  # "Paris" is right once
    assert [r["cloud_correct"] for r in document["records"]] == [True, False, False]
    assert f"cloud: gpt-oss-120b at {url}" in printed.out


def test_main_without_the_clouds_key_stops_before_drafting(
    no_llama_server: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("BENCH_CLOUD_KEY", raising=False)
    monkeypatch.setattr(harness, "draft_all", None)  # calling it would fail loudly
    argv = ["--data", str(no_llama_server), "--json", str(tmp_path / "eval.json")]
    argv += ["--cloud-url", "https://cloud.invalid/v1", "--cloud-key-env", "BENCH_CLOUD_KEY"]
    assert harness.main(argv) == 2
    assert "$BENCH_CLOUD_KEY" in capsys.readouterr().err
    assert not (tmp_path / "eval.json").exists()


# ------------------------------------------------------------------------------------ real


@pytest.mark.real
def test_harness_drafts_on_the_real_llama_server(
    real_assets: tuple[Path, Path], tmp_path: Path
) -> None:
    out, png = tmp_path / "routing_eval.json", tmp_path / "curves.png"
    argv = [sys.executable, "-m", "bench.routing_eval", "--limit", "12"]
    argv += ["--json", str(out), "--plot", str(png)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    result = json.loads(out.read_text())
    assert len(result["records"]) == 12
    assert {r["kind"] for r in result["records"]} == {
        "fact",
        "arithmetic",
        "code",
        "reasoning",
        "open",
    }
    assert all(r["n_tokens"] <= 128 for r in result["records"])
    policies = result["report"]["policies"]
    assert set(policies) == ROUTERS | {"confidence", "combined"}  # the shipped scorers
    for name, row in policies.items():
        assert row["apgr"] is not None and -1.0 <= row["apgr"] <= 2.0, name
    assert result["setup"]["temperature"] == 0 and result["setup"]["cloud"] == "perfect"
    assert "cloud_errors" not in result["report"] and result["report"]["q_cloud"] == 1.0
    assert png.stat().st_size > 0
    assert "| oracle |" in done.stdout
