"""bench/abort_sweep.py: where early abort would stop a draft, and the sweep's counts."""

from __future__ import annotations

from app.routing.policy import Policy
from app.routing.scorer import Scorer
from app.routing.signals import DraftSignals, TokenSignal
from app.vocabulary import ContextType
from bench.abort_sweep import stop_at, sweep

# P(wrong) grows with the number of tokens: 0.5 at 4, 0.85 at 8, above 0.9 from 10 on.
LONG_IS_WRONG = Scorer("long", ("log_tokens",), (0.0,), (1.0,), (3.0,), -3 * 1.6094, 0.5)
POLICY = Policy(scorer=LONG_IS_WRONG, threshold=0.5)


def draft(n: int) -> DraftSignals:
    tokens = tuple(TokenSignal(f" w{i}", 0.9, 0.1) for i in range(n))
    return DraftSignals("".join(t.text for t in tokens), n, 64, "stop", tokens)


def test_stops_at_the_first_checkpoint_over_the_score() -> None:
    assert stop_at(draft(12), POLICY, ContextType.PROSE, 4, 0.9) == 12
    assert stop_at(draft(12), POLICY, ContextType.PROSE, 2, 0.9) == 10
    assert stop_at(draft(12), POLICY, ContextType.PROSE, 4, 0.8) == 8
    assert stop_at(draft(3), POLICY, ContextType.PROSE, 4, 0.9) is None  # no checkpoint
    assert stop_at(draft(12), Policy(), ContextType.PROSE, 4, 0.9) is None  # seed: never


def test_sweep_counts_stopped_lost_and_saved() -> None:
    drafts = [(draft(3), ContextType.PROSE), (draft(16), ContextType.PROSE)]
    rows = sweep(drafts, POLICY)
    # every 8 at 0.6: the 16-token draft stops at 8 (8 of 19 tokens saved); the 3-token
    # draft is accepted whole and never reaches a checkpoint.
    assert "| 8 | 0.6 | 1/2 | 0/1 | 42% |" in rows
