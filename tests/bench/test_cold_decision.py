"""bench/cold_decision_report.py: the cold decision replayed, and its PGR against random's and
mean token probability's at the same cloud share."""

from __future__ import annotations

import json

import pytest

from app.routing.policy import Policy
from app.routing.scorer import Scorer
from app.routing.signals import DraftSignals, TokenSignal
from bench.cold_decision_report import Abort, Judged, aborted, evaluate, markdown, to_cloud

# P(wrong) grows with the number of tokens: 0.5 at 4, 0.85 at 8, above 0.9 from 10 on.
LONG_IS_WRONG = Scorer("long", ("log_tokens",), (0.0,), (1.0,), (3.0,), -3 * 1.6094, 0.5)
POLICY = Policy(scorer=LONG_IS_WRONG, threshold=0.5)
OFF = Abort(enabled=False)


def draft(n: int, p: float = 0.9, finish: str = "stop", ok: bool | None = True) -> Judged:
    tokens = tuple(TokenSignal(f" w{i}", p, 0.1) for i in range(n))
    signals = DraftSignals("".join(t.text for t in tokens), n, 64, finish, tokens)
    return Judged(f"d{n}-{p}", "prose", signals, ok)


def test_a_cut_draft_goes_to_the_cloud_whatever_its_score() -> None:
    assert to_cloud(draft(2, finish="length", ok=False), POLICY, OFF)
    assert not to_cloud(draft(2), POLICY, OFF)  # short: P(wrong) 0.2
    assert to_cloud(draft(6), POLICY, OFF)  # P(wrong) 0.7 > 0.5


def test_early_abort_sends_a_draft_the_whole_score_would_keep() -> None:
    lenient = Policy(scorer=LONG_IS_WRONG, threshold=0.99)
    every4 = Abort(check_tokens=4, min_score=0.8)
    assert aborted(draft(12).signals, lenient, "prose", every4)  # 0.85 at 8
    assert to_cloud(draft(12), lenient, every4)
    assert not to_cloud(draft(12), lenient, OFF)
    assert not aborted(draft(7).signals, lenient, "prose", every4)  # 0.5 at 4: under 0.8
    # a token under the floor stops any draft, even under the seed's rules
    assert aborted(draft(2, p=0.005).signals, Policy(), "prose", Abort())


def test_pgr_against_random_and_mean_p_at_the_same_share() -> None:
    # Long drafts are wrong, short ones right; mean p is backwards (wrong drafts sure).
    drafts = [draft(2, 0.4), draft(3, 0.5), draft(12, 0.99, ok=False), draft(14, 0.95, ok=False)]
    drafts.append(draft(30, finish="length", ok=False))  # cut: left out of the comparison
    row = evaluate(drafts, POLICY, OFF)
    assert (row["items"], row["cut"], row["uncut"]) == (5, 1, 4)
    assert row["share"] == 0.5 and row["cloud_share_all"] == 0.6
    assert row["pgr"] == 1.0 and row["random_pgr"] == 0.5
    assert row["mean_p_pgr"] == 0.0  # mean p sends the two right drafts first
    assert row["auroc"] == 1.0 and row["mean_p_auroc"] == 0.0
    assert row["beats_random"] and row["beats_mean_p"]
    assert "**pass**" in markdown({"toy": row})

    # The same drafts under a scorer that keeps the long ones: it fails both tests.
    backwards = Scorer("short", ("log_tokens",), (0.0,), (1.0,), (-3.0,), 3 * 1.6094, 0.5)
    row = evaluate(drafts, Policy(scorer=backwards, threshold=0.5), OFF)
    assert row["share"] == 0.5 and row["pgr"] == 0.0
    assert row["beats_random"] is False and row["beats_mean_p"] is True
    assert "FAIL" in markdown({"toy": row})


def test_a_set_without_judges_gives_its_share_only() -> None:
    row = evaluate([draft(2, ok=None), draft(12, ok=None)], POLICY, OFF)
    assert row["share"] == 0.5 and not row["judged"] and "pgr" not in row
    assert "n/a (no judge)" in markdown({"speculative": row})


def test_no_drafts_is_an_error() -> None:
    with pytest.raises(ValueError):
        evaluate([], POLICY, OFF)


def test_cached_drafts_read_back_as_they_were_written() -> None:
    from dataclasses import asdict

    from bench.cold_decision import _signals

    tokens = (TokenSignal(" Paris", 0.9, 0.3, 7, ((7, 0.9), ("x", 0.05))),)
    signals = DraftSignals(" Paris", 1, 128, "stop", tokens)
    assert _signals(json.loads(json.dumps(asdict(signals)))) == signals


def test_the_sets_load_with_and_without_judges() -> None:
    from bench.cold_decision import DATA, SETS, load_set

    transfer = load_set(DATA / SETS["transfer"])
    assert len(transfer) == 240 and all(i.judge is not None for i in transfer)
    speculative = load_set(DATA / SETS["speculative"])
    assert len(speculative) == 60 and all(i.judge is None for i in speculative)
    assert {i.kind for i in speculative} == {"code", "prose", "math", "json", "list"}
    cut = DraftSignals("x" * 10, 128, 128, "length")
    assert transfer[0].correct(cut) is False and speculative[0].correct(cut) is None
