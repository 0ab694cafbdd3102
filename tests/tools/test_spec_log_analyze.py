"""The speculation log analyzer: exact figures, /stats parity, layout, bad lines, CLI, streaming."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cli import main as specproxy
from app.record import RequestRecord
from app.routing.acceptance import Acceptance
from app.routing.signals import DraftSignals, TokenSignal
from app.telemetry.spec_log import BadLine, entry_problem, iter_entries, spec_log_entry
from app.telemetry.stats import Stats
from app.tools.spec_log_analyze import (
    POSITION_HEADER,
    Analysis,
    analyze,
    main,
    position_row,
    render_text,
    stat_line,
)
from app.vocabulary import Outcome, Strategy

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def record(
    tokens: Iterable[tuple[float, float]],
    accepted: int | None,
    *,
    context: str = "prose",
    outcome: Outcome = Outcome.VERIFIED_DRAFT_USED,
    draft_s: float | None = 0.01,
    verify_s: float | None = 0.02,
    truncated: bool = False,
    server_spec: dict[str, int] | None = None,
) -> RequestRecord:
    """A speculative request, one (p, entropy) per draft token; accepted None: not verified."""
    signals = tuple(
        TokenSignal(text=f" w{i}", p=p, entropy=e, token_id=i, top_k=((i, p),))
        for i, (p, e) in enumerate(tokens)
    )
    n = len(signals)
    acceptance = (
        None
        if accepted is None
        else Acceptance(n, accepted, -1 if accepted == n else accepted, None)
    )
    return RequestRecord(
        strategy=Strategy.SPECULATIVE,
        context_type=context,
        outcome=outcome,
        draft=DraftSignals(
            text="".join(t.text for t in signals),
            n_tokens=n,
            budget=n if truncated else 64,
            finish_reason="length" if truncated else "stop",
            tokens=signals,
        ),
        acceptance=acceptance,
        draft_s=draft_s,
        verify_s=verify_s if accepted is not None else None,
        server_spec=server_spec,
    )


def write_log(path: Path, lines: Iterable[dict[str, Any] | str]) -> Path:
    """Write entries (dicts, serialised) and raw strings (as they are), one per line."""
    with path.open("w") as out:
        for line in lines:
            out.write(line if isinstance(line, str) else orjson.dumps(line).decode())
            out.write("\n")
    return path


def entries_of(records: Iterable[RequestRecord]) -> list[dict[str, Any]]:
    return [spec_log_entry(rec, i, ts_ms=0) for i, rec in enumerate(records, start=1)]


def entry(
    n: int,
    accepted: int | None,
    *,
    context: str | None = "prose",
    outcome: str | None = "verified_draft_used",
    stop: str = "complete",
) -> dict[str, Any]:
    """A hand-written line with only the fields the analyzer reads."""
    line: dict[str, Any] = {
        "draft": {
            "n": n,
            "stop_reason": stop,
            "tokens": [{"pos": i, "p": 0.9, "entropy": 0.1} for i in range(n)],
        },
        "verify": None if accepted is None else {"n_accepted": accepted, "rej_pos": -1},
        "timing": {"t_draft_us": 1000, "t_verify_us": None if accepted is None else 2000},
    }
    if context is not None:
        line["context_type"] = context
    if outcome is not None:
        line["outcome"] = outcome
    return line


# The hand-computed example: three verified rounds (n = 4, 3, 2; accepted 4, 1, 0) and one
# draft served unverified (n = 5).
HAND = [
    record(
        [(0.9, 0.1), (0.8, 0.2), (0.7, 0.3), (0.6, 0.4)],
        4,
        context="code",
        draft_s=0.010,
        verify_s=0.040,
        truncated=True,
        server_spec={"draft_n": 10, "draft_n_accepted": 7},
    ),
    record(
        [(0.5, 0.5), (0.4, 0.6), (0.3, 0.7)],
        1,
        context="code",
        outcome=Outcome.SPILLED_OVER,
        draft_s=0.020,
        verify_s=0.030,
        truncated=True,
    ),
    record(
        [(0.2, 1.0), (0.1, 1.1)],
        0,
        outcome=Outcome.SPILLED_OVER,
        draft_s=0.030,
        verify_s=0.050,
    ),
    record([(0.99, 0.0)] * 5, None, outcome=Outcome.ACCEPTED, draft_s=0.040),
]


@pytest.fixture
def hand_log(tmp_path: Path) -> Path:
    return write_log(tmp_path / "spec.jsonl", entries_of(HAND))


def test_hand_computed_figures(hand_log: Path) -> None:
    report = analyze(hand_log)
    assert report["overall"] == {
        "total_lines": 4,
        "valid_lines": 4,
        "bad_lines": 0,
        "rounds": 3,
        "unverified_drafts": 1,
        "drafted": 9,
        "accepted": 5,
        "acceptance_rate": 0.5556,  # 5 / 9
        "mean_acceptance_length": 2.6667,  # 1 + 5 / 3
        "longest_draft": 5,
        "token_count_mismatches": 0,
    }
    assert report["positions"] == [
        {
            "pos": 0,
            "drafted": 3,
            "accepted": 2,
            "rate": 0.6667,
            "rate_per_round": 0.6667,
            "avg_entropy": 0.5333,  # (0.1 + 0.5 + 1.0) / 3
            "avg_prob": 0.5333,  # (0.9 + 0.5 + 0.2) / 3
        },
        {
            "pos": 1,
            "drafted": 3,
            "accepted": 1,
            "rate": 0.3333,
            "rate_per_round": 0.3333,
            "avg_entropy": 0.6333,
            "avg_prob": 0.4333,
        },
        {
            "pos": 2,
            "drafted": 2,
            "accepted": 1,
            "rate": 0.5,
            "rate_per_round": 0.3333,
            "avg_entropy": 0.5,
            "avg_prob": 0.5,
        },
        {
            "pos": 3,
            "drafted": 1,
            "accepted": 1,
            "rate": 1.0,
            "rate_per_round": 0.3333,
            "avg_entropy": 0.4,
            "avg_prob": 0.6,
        },
    ]
    code, prose = report["by_context_type"]["code"], report["by_context_type"]["prose"]
    assert (code["lines"], code["num_drafts"], code["num_draft_tokens"]) == (2, 2, 7)
    assert (code["acceptance_rate"], code["mean_acceptance_length"]) == (0.7143, 3.5)
    assert (prose["lines"], prose["num_drafts"], prose["unverified_drafts"]) == (2, 1, 1)
    assert (prose["acceptance_rate"], prose["mean_acceptance_length"]) == (0.0, 1.0)
    assert code["spilled_over"] == prose["spilled_over"] == 1
    outcomes = report["by_outcome"]
    assert list(outcomes) == [
        "spilled_over",
        "accepted_without_verification",
        "verified_draft_used",
    ]
    assert (outcomes["spilled_over"]["lines"], outcomes["spilled_over"]["share"]) == (2, 0.5)
    assert outcomes["spilled_over"]["acceptance_rate"] == 0.2  # 1 / 5
    assert outcomes["accepted_without_verification"]["num_drafts"] == 0
    assert report["spill_over"] == {"lines": 2, "share": 0.5}
    assert report["stop_reasons"] == {"n_max": 2, "complete": 2}
    assert report["latency_ms"] == {
        "draft": {"n": 4, "p50": 20.0, "p95": 40.0, "p99": 40.0},
        "verify": {"n": 3, "p50": 40.0, "p95": 50.0, "p99": 50.0},
    }
    assert report["server_spec"] == {
        "lines": 1,
        "draft_n": 10,
        "draft_n_accepted": 7,
        "acceptance_rate": 0.7,
    }
    assert report["bad_lines"] == {"count": 0, "first": []}


def test_hand_computed_advice(hand_log: Path) -> None:
    tuning = analyze(hand_log)["tuning"]
    assert tuning["k"] == 3  # positions 0..2 are reached by >= half of the 3 rounds
    by_topic = {a["topic"]: a for a in tuning["advice"]}
    assert by_topic["acceptance_rate"]["value"] == 0.5556
    assert "55.56% within 40-60%: fair" in by_topic["acceptance_rate"]["advice"]
    assert "2.67 >= 1.2: speculation pays" in by_topic["mean_acceptance_length"]["advice"]
    assert "position 0 acceptance 66.67% < 70%" in by_topic["position_0"]["advice"]
    k_advice = by_topic["max_draft_tokens"]
    assert k_advice["value"] == 0.3333
    assert "position 2 acceptance 33.33% of rounds" in k_advice["advice"]
    assert "> 30%: raise K" in k_advice["advice"]
    assert "50.00% of drafts stopped at the budget (n_max)" in k_advice["advice"]
    assert by_topic["context_type"]["advice"].endswith("to judge: code (2), prose (1)")


def test_matches_stats_for_the_same_requests(tmp_path: Path) -> None:
    """The analyzer's speculation figures are /stats' ones for the requests the log holds."""
    rng = random.Random(3)
    records = []
    for _ in range(60):
        n = rng.randint(0, 9)
        tokens = [(rng.random(), rng.random() * 2) for _ in range(n)]
        accepted = None if rng.random() < 0.2 else rng.randint(0, n)
        outcome = Outcome.ACCEPTED if accepted is None else Outcome.SPILLED_OVER
        records.append(
            record(
                tokens,
                accepted,
                context=rng.choice(["code", "prose", "math"]),
                outcome=outcome,
                draft_s=rng.randint(1_000, 90_000) / 1e6,  # whole microseconds: exact in the log
                verify_s=rng.randint(1_000, 900_000) / 1e6,
            )
        )
    # A draft without logprobs: /stats judges 3 word pieces while the server counted 7 tokens.
    no_logprobs = record([], None, context="prose", outcome=Outcome.SPILLED_OVER)
    assert no_logprobs.draft is not None
    no_logprobs.draft = replace(no_logprobs.draft, text="a b c", n_tokens=7)
    no_logprobs.acceptance = Acceptance(3, 2, 2, "d")
    no_logprobs.verify_s = 0.05
    records.append(no_logprobs)
    stats = Stats()
    for rec in records:
        stats.record(rec)
    metrics = stats.get_metrics()
    report = analyze(write_log(tmp_path / "spec.jsonl", entries_of(records)))

    def without_throughput(summary: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in summary.items() if not k.endswith("_per_s")}

    assert report["speculation"] == without_throughput(metrics["speculation"])
    assert report["overall"]["acceptance_rate"] == metrics["speculation"]["acceptance_rate"]
    assert [row["rate_per_round"] for row in report["positions"]] == metrics["speculation"][
        "per_position_acceptance_rate"
    ]
    for kind, counts in metrics["by_context_type"].items():
        ours = report["by_context_type"][kind]
        assert ours["lines"] == counts["requests"]
        for key, value in without_throughput(speculation_part(counts)).items():
            assert ours[key] == value, (kind, key)
    for phase in ("draft", "verify"):
        theirs = metrics["latency_ms"][phase]
        ours = report["latency_ms"][phase]
        assert (ours["n"], ours["p50"], ours["p95"]) == (theirs["n"], theirs["p50"], theirs["p95"])
    spilled = metrics["requests"]["by_outcome"][Outcome.SPILLED_OVER.value]
    assert report["spill_over"]["lines"] == spilled


def speculation_part(counts: dict[str, Any]) -> dict[str, Any]:
    """The speculation part of one /stats by_context_type entry (its summary() keys)."""
    keys = {
        "num_drafts",
        "num_draft_tokens",
        "num_accepted_tokens",
        "num_accepted_tokens_per_pos",
        "acceptance_rate",
        "mean_acceptance_length",
        "per_position_acceptance_rate",
    }
    return {k: v for k, v in counts.items() if k in keys}


def test_text_layout(hand_log: Path) -> None:
    text = render_text(analyze(hand_log))
    lines = text.splitlines()
    assert lines[:4] == [
        "SPECULATIVE DECODING LOG ANALYSIS",
        "=" * 70,
        "OVERALL STATISTICS",
        "-" * 70,
    ]
    assert "  Total Rounds:              3" in lines
    assert "  Total Drafted:             9" in lines
    assert "  Acceptance Rate:       55.56%" in lines
    assert "  Mean Acceptance Length: 2.67" in lines
    assert "  Unverified Drafts:         1" in lines
    at = lines.index("POSITION-WISE ANALYSIS")
    assert lines[at + 1] == "-" * 70
    assert (
        lines[at + 2] == "Pos   Drafted   Accepted   Rate %     Avg Entropy  Avg Prob  Rate/Round %"
    )
    assert lines[at + 3] == "0     3         2          66.67      0.5333       0.5333    66.67"
    assert lines[at + 5] == "2     2         1          50.00      0.5000       0.5000    33.33"
    for heading in (
        "BY CONTEXT TYPE",
        "BY OUTCOME",
        "LATENCY (ms)",
        "LLAMA-SERVER SPECULATION",
        "TUNING ADVICE",
        "BAD LINES (0)",
    ):
        assert lines[lines.index(heading) + 1] == "-" * 70
    assert any(line.startswith("spilled_over ") and "50.00" in line for line in lines)
    assert any(line.startswith("draft     4         20.000") for line in lines)
    assert any("> 30%: raise K" in line for line in lines)


def test_seed_lines_reproduced_exactly() -> None:
    """Seed 000's sample output, line for line (the seed's table plus the Rate/Round column)."""
    assert stat_line("Total Rounds", 128) == "  Total Rounds:            128"
    assert stat_line("Total Drafted", 1024) == "  Total Drafted:          1024"
    assert stat_line("Total Accepted", 669) == "  Total Accepted:          669"
    assert stat_line("Acceptance Rate", 0.6532, percent=True) == "  Acceptance Rate:       65.32%"
    assert POSITION_HEADER.startswith("Pos   Drafted   Accepted   Rate %     Avg Entropy  Avg Prob")
    row = {
        "pos": 0,
        "drafted": 128,
        "accepted": 115,
        "rate": 0.8984,
        "rate_per_round": 0.8984,
        "avg_entropy": 0.3421,
        "avg_prob": 0.8932,
    }
    assert position_row(row) == "0     128       115        89.84      0.3421       0.8932    89.84"


BAD_CASES = [
    ("[1, 2]", "not a JSON object (got an array)"),
    ('"text"', "not a JSON object (got a string)"),
    ('{"verify": null}', "missing field 'draft'"),
    ('{"draft": [], "verify": null}', "field 'draft' should be an object, got []"),
    ('{"draft": {"tokens": []}, "verify": null}', "missing field 'draft.n'"),
    ('{"draft": {"n": -1, "tokens": []}, "verify": null}', "field 'draft.n' should be a non-ne"),
    ('{"draft": {"n": true, "tokens": []}, "verify": null}', "field 'draft.n' should be a non-ne"),
    ('{"draft": {"n": 1}, "verify": null}', "missing field 'draft.tokens'"),
    ('{"draft": {"n": 1, "tokens": [{"p": 0.5}]}, "verify": null}', "'draft.tokens[0].entropy'"),
    ('{"draft": {"n": 1, "tokens": [{"p": "x", "entropy": 1}]}, "verify": null}', '"x"'),
    ('{"draft": {"n": 1, "tokens": []}}', "missing field 'verify' (null when"),
    ('{"draft": {"n": 1, "tokens": []}, "verify": 3}', "'verify' should be an object or null"),
    ('{"draft": {"n": 1, "tokens": []}, "verify": {}}', "missing field 'verify.n_accepted'"),
    ('{"draft": {"n": 1, "tokens": []}, "verify": {"n_accepted": "1"}}', "verify.n_accepted"),
    ('{"draft": {"n": 1, "tokens": []}, "verify": {"n_accepted": 2}}', "(2) exceeds draft.n (1)"),
    ('{"draft": {"n": 0, "tokens": []}, "verify": null, "timing": 5}', "'timing' should be"),
    (
        '{"draft": {"n": 0, "tokens": []}, "verify": null, "timing": {"t_draft_us": -1}}',
        "'timing.t_draft_us' should be a non-negative number or null, got -1",
    ),
    ('{"draft": {"n": 0, "tokens": []}, "verify": null, "outcome": 1}', "'outcome' should be"),
    (
        '{"draft": {"n": 0, "tokens": []}, "verify": null, "server_spec": {"draft_n": 1}}',
        "missing field 'server_spec.draft_n_accepted'",
    ),
]


@pytest.mark.parametrize(("line", "reason"), BAD_CASES)
def test_entry_problem_names_the_field(line: str, reason: str) -> None:
    problem = entry_problem(orjson.loads(line))
    assert problem is not None
    assert reason in problem


def test_minimal_seed_format_line_is_valid() -> None:
    """llama-server's own spec-log line (seed 000, no proxy fields) is accepted as it is."""
    seed_line = {
        "ts_ms": 1703001234567,
        "slot_id": 0,
        "prompt_pos": 125,
        "round_id": 42,
        "draft": {
            "n": 5,
            "stop_reason": "p_min",
            "tokens": [{"pos": 0, "id": 1234, "p": 0.85, "entropy": 0.45, "top_k": [[1234, 0.85]]}],
        },
        "verify": {"n_accepted": 3, "rej_pos": 3, "target_id": 7890},
        "timing": {"t_draft_us": 12500, "t_verify_us": 45000},
    }
    assert entry_problem(seed_line) is None
    analysis = Analysis()
    analysis.add(seed_line)
    report = analysis.report()
    assert report["overall"]["rounds"] == 1
    assert report["overall"]["token_count_mismatches"] == 1  # the seed logs 1 of its 5 tokens
    assert list(report["by_context_type"]) == ["(unset)"]
    assert report["spill_over"]["share"] is None  # no line says its outcome


def test_bad_lines_reported_with_numbers_and_valid_lines_still_counted(tmp_path: Path) -> None:
    good = entries_of(HAND)
    path = tmp_path / "spec.jsonl"
    write_log(
        path,
        [
            good[0],
            "{not json",  # 2
            "",  # 3: blank lines are skipped, not bad
            good[1],
            "[1, 2]",  # 5
            entry(2, 3),  # 6
            good[2],
            good[3],
        ],
    )
    with path.open("a") as out:
        out.write(orjson.dumps(good[0]).decode()[:50])  # 9: cut short, no newline
    report = analyze(path)
    assert report["overall"]["valid_lines"] == 4
    assert report["overall"]["rounds"] == 3
    assert report["overall"]["total_lines"] == 8
    assert report["bad_lines"]["count"] == 3 + 1
    numbered = [(b["line"], b["reason"]) for b in report["bad_lines"]["first"]]
    assert [n for n, _ in numbered] == [2, 5, 6, 9]
    assert numbered[0][1].startswith("invalid JSON")
    assert numbered[1][1] == "not a JSON object (got an array)"
    assert numbered[2][1] == "verify.n_accepted (3) exceeds draft.n (2)"
    text = render_text(report)
    assert "BAD LINES (4)" in text
    assert "  line 5: not a JSON object (got an array)" in text


def test_many_bad_lines_show_the_first_twenty_then_a_count(tmp_path: Path) -> None:
    path = write_log(tmp_path / "spec.jsonl", [entry(1, 1)] + ["oops"] * 25)
    report = analyze(path)
    assert report["bad_lines"]["count"] == 25
    assert [b["line"] for b in report["bad_lines"]["first"]] == list(range(2, 22))
    assert "  ... and 5 more" in render_text(report).splitlines()


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        # every round accepts its 4 tokens: position 3 at 100% of rounds
        ([entry(4, 4, stop="n_max")] * 6, ["> 80%: excellent", "> 30%: raise K"]),
        # nothing accepted: not paying, lower K
        (
            [entry(4, 0)] * 6,
            ["< 40%: poor", "1.00 < 1.2: speculation is not paying", "< 10%: lower K"],
        ),
        # position 3 accepted by 2 rounds in 10
        (
            [entry(4, 4)] * 2 + [entry(4, 2)] * 8,
            ["60.00% within 40-60%: fair", "20.00% of rounds", "within 10-30%: K looks balanced"],
        ),
        (
            [entry(5, 4, context="code")] * 5 + [entry(5, 1, context="chat")] * 2,
            ["context 'code': acceptance 80.00% > 60% over 5 rounds: good", "judge: chat (2)"],
        ),
        ([entry(3, None)] * 3, ["no verified rounds (3 drafts not verified)"]),
    ],
)
def test_advice_rules(tmp_path: Path, entries: list[dict[str, Any]], expected: list[str]) -> None:
    report = analyze(write_log(tmp_path / "spec.jsonl", entries))
    advice = "\n".join(a["advice"] for a in report["tuning"]["advice"])
    for phrase in expected:
        assert phrase in advice


def test_drafts_stopped_at_the_first_token_budget_are_not_cut_by_k(tmp_path: Path) -> None:
    """The proxy logs a stream's draft stopped at its first-token budget as ``n_max`` (seed
    000's values); its reasons tell it apart, so the K advice counts only the drafts the
    token budget cut."""
    out_of_time = entry(3, None, stop="n_max", outcome="spilled_over")
    out_of_time["reasons"] = ["hedged", "first_token_budget"]
    lines = [entry(4, 4, stop="n_max")] * 6 + [entry(4, 4)] * 6 + [out_of_time] * 6
    report = analyze(write_log(tmp_path / "spec.jsonl", lines))
    assert report["stop_reasons"] == {"n_max": 6, "complete": 6, "first_token_budget": 6}
    advice = "\n".join(a["advice"] for a in report["tuning"]["advice"])
    assert "50.00% of drafts stopped at the budget (n_max)" in advice  # of those run through


# -- command line ---------------------------------------------------------------


def test_cli_text(hand_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(hand_log)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("SPECULATIVE DECODING LOG ANALYSIS\n")


def test_cli_json(hand_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(hand_log), "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert set(report) == {
        "source",
        "overall",
        "speculation",
        "positions",
        "by_context_type",
        "by_outcome",
        "stop_reasons",
        "spill_over",
        "latency_ms",
        "server_spec",
        "bad_lines",
        "tuning",
        "cost",
        "sources",
    }
    assert report["speculation"]["per_position_acceptance_rate"] == [
        0.6667,
        0.3333,
        0.3333,
        0.3333,
    ]


def test_cli_plot(hand_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "positions.png"
    assert main([str(hand_log), "--plot", str(out)]) == 0
    assert f"plot written to {out}" in capsys.readouterr().err
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (900, 700)
    assert len(data) > 20_000  # two panels of curves, not a blank canvas


def test_cli_plot_without_rounds_still_draws(tmp_path: Path) -> None:
    log = write_log(tmp_path / "spec.jsonl", [entry(3, None)])
    out = tmp_path / "empty.png"
    assert main([str(log), "--plot", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.jsonl", "cannot read"),
        (lambda d: d, "cannot read"),  # a directory
        (lambda d: write_log(d / "empty.jsonl", []), "holds no log line"),
        (lambda d: write_log(d / "junk.jsonl", ["x", "[]"]), "none of its 2 lines"),
    ],
)
def test_cli_unusable_file_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, message: str
) -> None:
    assert main([str(make(tmp_path))]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
    assert "Traceback" not in captured.err


def test_cli_unwritable_plot_exits_1(hand_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = hand_log.parent / "no" / "such" / "dir" / "p.png"
    assert main([str(hand_log), "--plot", str(out)]) == 1
    assert "cannot write the plot" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv", [[], ["--json"], ["--bogus", "x"], ["x", "--plot"], ["x", "--html"]]
)
def test_cli_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage: spec_log_analyze" in capsys.readouterr().err


@pytest.mark.process
def test_script_runs_from_anywhere(hand_log: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "spec_log_analyze.py"), str(hand_log)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("SPECULATIVE DECODING LOG ANALYSIS")


@pytest.mark.parametrize(
    "make",
    [
        lambda d: [str(write_log(d / "spec.jsonl", entries_of(HAND)))],
        lambda d: [str(write_log(d / "spec.jsonl", entries_of(HAND))), "--json"],
        lambda d: [str(write_log(d / "mixed.jsonl", [*entries_of(HAND), "x", "[]"]))],
        lambda d: [str(write_log(d / "junk.jsonl", ["x"]))],
        lambda d: [str(d / "missing.jsonl")],
        lambda d: [],
    ],
    ids=["text", "json", "bad-lines", "no-valid-line", "missing", "usage"],
)
def test_specproxy_analyze_matches_the_old_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any
) -> None:
    argv = make(tmp_path)
    old_code = main(argv)
    old = capsys.readouterr()
    new_code = specproxy(["analyze", *argv])
    new = capsys.readouterr()
    assert new_code == old_code
    assert new.out == old.out
    # Only the command's name differs, in usage and error messages (and so where argparse
    # wraps the usage line).
    assert new.err.split() == old.err.replace("spec_log_analyze", "specproxy analyze").split()
    if old_code:
        assert new.err.startswith(("specproxy analyze: ", "usage: specproxy analyze"))


@pytest.mark.process
def test_module_entry_point_matches(hand_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m app.tools.spec_log_analyze`` (bench/seed_scenario.py runs it) prints the same."""
    assert main([str(hand_log)]) == 0
    done = subprocess.run(
        [sys.executable, "-m", "app.tools.spec_log_analyze", str(hand_log)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == capsys.readouterr().out


@pytest.mark.process
def test_matplotlib_is_imported_only_for_plots() -> None:
    code = "import sys, app.tools.spec_log_analyze; print('matplotlib' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "False", done.stderr


# -- streaming ------------------------------------------------------------------


def test_iter_entries_is_lazy(tmp_path: Path) -> None:
    path = write_log(tmp_path / "spec.jsonl", [entry(1, 1), "oops", entry(2, 1)])
    items = iter_entries(path)
    first = next(items)
    assert isinstance(first, tuple)
    assert first[0] == 1
    # Lines appended after reading began are still seen: nothing was read ahead in bulk.
    with path.open("a") as out:
        out.write(orjson.dumps(entry(3, 3)).decode() + "\n")
    bad, *good = list(items)
    assert isinstance(bad, BadLine)
    assert bad.line_no == 2
    assert [item[0] for item in good if isinstance(item, tuple)] == [3, 4]


def big_log(path: Path, lines: int) -> Path:
    """``lines`` lines of the real writer's schema, 4 drafted tokens each, n_accepted = i % 5."""
    base = spec_log_entry(
        record([(0.9, 0.2), (0.7, 0.5), (0.4, 0.9), (0.3, 1.2)], 2, context="code"), 1, ts_ms=0
    )
    with path.open("w") as out:
        for i in range(lines):
            base["round_id"] = i
            base["verify"]["n_accepted"] = i % 5
            base["timing"] = {"t_draft_us": 1000 + i % 977, "t_verify_us": 5000 + i % 9973}
            out.write(orjson.dumps(base).decode() + "\n")
    return path


@pytest.fixture(scope="module")
def log_100k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return big_log(tmp_path_factory.mktemp("big") / "spec.jsonl", 100_000)


def test_100k_lines_in_reasonable_time(log_100k: Path) -> None:
    started = time.perf_counter()
    report = analyze(log_100k)
    elapsed = time.perf_counter() - started
    print(f"100k lines, {log_100k.stat().st_size / 1e6:.1f} MB: {elapsed:.2f} s")
    assert report["overall"]["rounds"] == 100_000
    assert report["overall"]["accepted"] == 20_000 * (0 + 1 + 2 + 3 + 4)
    assert report["latency_ms"]["verify"]["n"] == 100_000
    assert elapsed < 30  # about 2 s on 2 cores


HIGH_WATER = """
import re, sys
from pathlib import Path
from app.tools.spec_log_analyze import analyze

def high_water():  # peak RSS of this process image (ru_maxrss would include the parent's)
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text())[1])

before = high_water()
analyze(sys.argv[1])
print(before * 1024, high_water() * 1024)
"""


@pytest.mark.process
def test_memory_does_not_grow_with_the_file(log_100k: Path) -> None:
    """Analysing 100k lines (63 MB) raises the peak RSS by a few MB: the file is streamed."""
    done = subprocess.run(
        [sys.executable, "-c", HIGH_WATER, str(log_100k)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    before, after = map(int, done.stdout.split())
    size = log_100k.stat().st_size
    print(f"peak RSS {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB for a {size / 1e6:.0f} MB log")
    # 2 x 8 bytes of timing samples per line, plus their transient sort; reading the file
    # whole would add its 63 MB and more.
    assert after - before < 12_000_000 < size


# -- properties -----------------------------------------------------------------


@st.composite
def entries(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 12))
    tokens = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "p": st.floats(0, 1),
                    "entropy": st.floats(0, 5),
                }
            ),
            min_size=0,
            max_size=n,
        )
    )
    verified = draw(st.booleans())
    return {
        "draft": {"n": n, "tokens": tokens},
        "verify": {"n_accepted": draw(st.integers(0, n))} if verified else None,
        "context_type": draw(st.sampled_from(["code", "prose", "qa"])),
        "outcome": draw(st.sampled_from(["spilled_over", "verified_draft_used"])),
        "timing": {"t_draft_us": draw(st.integers(0, 10**6)), "t_verify_us": None},
    }


@settings(max_examples=200, deadline=None)
@given(st.lists(entries(), max_size=40))
def test_properties(lines: list[dict[str, Any]]) -> None:
    analysis = Analysis()
    for line in lines:
        assert entry_problem(line) is None
        analysis.add(line)
    report = analysis.report()
    overall, positions = report["overall"], report["positions"]
    rounds = [line for line in lines if line["verify"] is not None]
    assert overall["rounds"] == len(rounds)
    assert overall["unverified_drafts"] == len(lines) - len(rounds)
    assert 0 <= overall["accepted"] <= overall["drafted"]
    if rounds:
        longest = max(line["draft"]["n"] for line in rounds)
        assert 1 <= overall["mean_acceptance_length"] <= 1 + longest
    else:
        assert overall["mean_acceptance_length"] is None
    for row in positions:
        assert 0 <= row["accepted"] <= row["drafted"] <= len(rounds)
    assert [r["drafted"] for r in positions] == sorted(
        (r["drafted"] for r in positions), reverse=True
    )
    with_tokens = sum(line["draft"]["n"] >= 1 for line in rounds)
    assert (positions[0]["drafted"] if positions else 0) == with_tokens
    assert sum(r["drafted"] for r in positions) == overall["drafted"]
    assert sum(r["accepted"] for r in positions) == overall["accepted"]
    assert sum(g["lines"] for g in report["by_context_type"].values()) == len(lines)
    assert report["spill_over"]["lines"] == sum(line["outcome"] == "spilled_over" for line in lines)
