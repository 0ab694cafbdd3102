"""The request's story: the client's report and the seed's log lines, derived from events.

``SpeculationReport.of`` folds a story into the ``speculative_decoding`` object (and the
headers built from it); ``Narrator.tell`` turns each event into seed 004's log lines.
Both are checked here on stories written by hand, without a server.
"""

from __future__ import annotations

import logging

import pytest

from app.errors import UpstreamError
from app.pipeline.call import (
    Answered,
    Compared,
    Drafted,
    Event,
    Failed,
    Judged,
    Opened,
    Planned,
    RelayOutcome,
    Started,
    Stopped,
)
from app.pipeline.narrative import Narrator
from app.pipeline.plan import CloudState, Plan, Step
from app.pipeline.wire import SpeculationReport, headers
from app.routing.signals import DraftSignals
from app.vocabulary import Outcome, Purpose

WHOLE = DraftSignals(text="x" * 45, n_tokens=8, budget=10, finish_reason="stop")
CUT = DraftSignals(text="y" * 60, n_tokens=10, budget=10, finish_reason="length")
FREE = CloudState()
DOWN = UpstreamError("cerebras", "connection refused")


def planned(step: Step, outcome: Outcome | None, *reasons: str, degraded: bool = False) -> Planned:
    return Planned(Plan(step, outcome, reasons, degraded=degraded), FREE)


def relayed(n_tokens: int, *, local: bool = False, **more: object) -> RelayOutcome:
    return RelayOutcome(
        upstream="local" if local else "cerebras",
        purpose=Purpose.SPILL,
        local=local,
        n_tokens=n_tokens,
        prompt_tokens=12,
        estimated=False,
        tool_calls=0,
        first_token_at=None,
        reasons=None,
        **more,
    )


def merged(use_draft: bool, similarity: float, reason: str, **more: object) -> Compared:
    return Compared(
        similarity,
        use_draft,
        None,
        n_tokens=156,
        n_chars=890,
        use_draft=use_draft,
        reason=reason,
        upstream="cerebras",
        **more,
    )


STORIES: dict[str, tuple[list[Event], SpeculationReport]] = {
    "nothing told yet": ([], SpeculationReport()),
    "accepted": (
        [Drafted(WHOLE, 12), planned(Step.SERVE_DRAFT, Outcome.ACCEPTED, "passed_checks")],
        SpeculationReport(draft_tokens=8, accepted=True, reasons=["passed_checks"]),
    ),
    "merged, draft kept": (
        [
            Drafted(WHOLE, 12),
            planned(Step.VERIFY_WHOLE, None, "low_confidence"),
            merged(True, 0.85, "similar"),
        ],
        SpeculationReport(
            draft_tokens=8,
            verified_tokens=156,
            similarity=0.85,
            agreement=True,
            reasons=["low_confidence", "similar"],
        ),
    ),
    "merged, the cloud's answer after a fall-over; a reason told twice is told once": (
        [
            Drafted(WHOLE, 12),
            planned(Step.VERIFY_WHOLE, None, "unknown_function", "hedged"),
            merged(False, 0.45, "unknown_function", fell_over=(DOWN,)),
        ],
        SpeculationReport(
            draft_tokens=8,
            verified_tokens=156,
            similarity=0.45,
            agreement=False,
            spilled_over=True,
            reasons=["unknown_function", "hedged", "fell_over_to:cerebras"],
        ),
    ),
    "verified live": (
        [
            Drafted(CUT, 12),
            planned(Step.VERIFY_LIVE, Outcome.SPILLED_OVER, "incomplete", "draft_truncated"),
            Opened("cerebras-b", (DOWN,), live=True),
            relayed(40, compared=Compared(0.3, False, None)),
        ],
        SpeculationReport(
            draft_tokens=10,
            verified_tokens=40,
            spilled_over=True,
            similarity=0.3,
            agreement=False,
            reasons=["incomplete", "draft_truncated", "fell_over_to:cerebras-b"],
        ),
    ),
    "a broken stream counts nothing": (
        [
            Drafted(CUT, 12),
            planned(Step.VERIFY_LIVE, Outcome.SPILLED_OVER, "incomplete"),
            relayed(40, error=DOWN),
        ],
        SpeculationReport(draft_tokens=10, spilled_over=True, reasons=["incomplete"]),
    ),
    "the hedge came first": (
        [
            Stopped(None, out_of_time=False),
            planned(Step.SERVE_HEDGE, Outcome.SPILLED_OVER, "hedged", "cloud_first"),
            Answered("cerebras", 30, local=False, fell_over=(DOWN,)),
        ],
        SpeculationReport(
            verified_tokens=30,
            spilled_over=True,
            reasons=["hedged", "cloud_first", "fell_over_to:cerebras"],
        ),
    ),
    "out of time: the streamed draft so far is counted": (
        [
            Stopped(CUT, out_of_time=True),
            planned(Step.SERVE_HEDGE, Outcome.SPILLED_OVER, "hedged", "first_token_budget"),
        ],
        SpeculationReport(
            draft_tokens=10, spilled_over=True, reasons=["hedged", "first_token_budget"]
        ),
    ),
    "continued locally: the continuation's tokens": (
        [
            Drafted(CUT, 12),
            planned(Step.VERIFY_WHOLE, None, "incomplete"),
            Failed(DOWN, "verify"),
            planned(
                Step.CONTINUE_LOCALLY,
                Outcome.DEGRADED,
                "incomplete",
                "verifier_failed",
                "local_continuation",
                degraded=True,
            ),
            relayed(50, local=True),
        ],
        SpeculationReport(
            draft_tokens=50,
            degraded=True,
            reasons=["incomplete", "verifier_failed", "local_continuation"],
        ),
    ),
}


@pytest.mark.parametrize(("story", "expected"), STORIES.values(), ids=STORIES.keys())
def test_the_report_is_the_story_folded(story: list[Event], expected: SpeculationReport) -> None:
    assert SpeculationReport.of(story) == expected


def test_each_step_starts_a_fresh_report_and_the_headers_follow_it() -> None:
    story: list[Event] = [
        Drafted(WHOLE, 12),
        planned(Step.VERIFY_WHOLE, None, "low_confidence"),
        Failed(DOWN, "verify"),
        planned(
            Step.SERVE_DRAFT, Outcome.DEGRADED, "low_confidence", "verifier_failed", degraded=True
        ),
    ]
    report = SpeculationReport.of(story)
    assert report.reasons == ["low_confidence", "verifier_failed"] and report.degraded
    assert headers("local", report) == {
        "X-Model-Used": "local",
        "X-Draft-Accepted": "false",
        "X-Spilled-Over": "false",
        "X-Degraded": "true",
        "X-Draft-Tokens": "8",
    }


SEED_LINES: dict[str, tuple[list[Event], list[str]]] = {
    "draft generation": (
        [Started(10), Drafted(WHOLE, 12)],
        [
            "=== SPECULATIVE DECODING START ===",
            "Step 1: Generating draft from local model (max 10 tokens)",
            "Draft generated: 8 tokens, 45 chars",
        ],
    ),
    "verification performed, draft used": (
        [planned(Step.VERIFY_WHOLE, None, "low_confidence"), merged(True, 0.85, "similar")],
        [
            "Step 2: Verifying draft with Cerebras model",
            "Verification response: 156 tokens, 890 chars",
            "Responses similar (0.85), using draft",
            "Spilled over: False",
        ],
    ),
    "spill over occurred": (
        [merged(False, 0.45, "dissimilar")],
        [
            "Verification response: 156 tokens, 890 chars",
            "Responses differ (0.45), using verified response",
            "Spilled over: True",
        ],
    ),
    "accepted by the seed's checks": (
        [Judged(("passed_checks",), None, None, accepted=True)],
        ["Draft accepted without verification (passed the seed's checks)"],
    ),
    "events the log does not tell": (
        [Answered("cerebras", 3, local=False), Failed(DOWN)],
        [],
    ),
}


@pytest.mark.parametrize(("story", "lines"), SEED_LINES.values(), ids=SEED_LINES.keys())
def test_the_log_lines_are_told_from_the_events(
    story: list[Event], lines: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    narrator = Narrator("Cerebras", "cerebras")
    with caplog.at_level(logging.INFO, logger="specproxy.pipeline"):
        for event in story:
            narrator.tell(event)
    assert [r.getMessage() for r in caplog.records] == lines
