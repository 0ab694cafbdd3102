"""A request's spans worked out from its stamped story (``app.telemetry.trace_spans``).

Pure: the events are the ones the steps return, stamped by hand on a made-up clock.
The end-to-end trace, at a real OTLP receiver, is ``test_tracing.py``'s.
"""

from __future__ import annotations

from app import story
from app.errors import UpstreamTimeout, UpstreamTransportError
from app.record import RequestRecord, Usage
from app.routing.acceptance import Acceptance
from app.routing.plan import Plan, Step
from app.routing.signals import DraftSignals
from app.story import Event
from app.telemetry.trace_spans import plain, request_attributes, steps
from app.vocabulary import CloudState, Outcome, Purpose, Strategy

PROVIDERS = {"local": "llama_server", "cerebras": "cerebras"}
SIGNALS = DraftSignals("Maybe four.", 4, 32, "stop")


def record(**fields: object) -> RequestRecord:
    rec = RequestRecord(Strategy.SPECULATIVE, draft_model="local", verify_model="cerebras")
    for name, value in fields.items():
        setattr(rec, name, value)
    return rec


def stamped(*timeline: tuple[float | None, Event]) -> tuple[list[Event], list[tuple[Event, float]]]:
    """The story and its stamps (None: an event added without one, as a relay's outcome)."""
    events = [event for _, event in timeline]
    return events, [(event, t) for t, event in timeline if t is not None]


def planned(step: Step, outcome: Outcome | None = None) -> story.Planned:
    return story.Planned(Plan(step, outcome), CloudState())


def drafted(t0: float) -> list[tuple[float | None, Event]]:
    """The gate, a 0.2 s draft and its judgment from ``t0``."""
    return [
        (t0, story.Laned("uncertain", 0.3)),
        (t0, story.Started(32)),
        (t0 + 0.2, story.Counted("local", Purpose.DRAFT, 4, 12, latency_s=0.2)),
        (t0 + 0.2, story.Drafted(SIGNALS, 12)),
        (t0 + 0.2001, story.Judged(("uncertainty_marker",), 0.7, None, threshold=0.5)),
    ]


def test_a_live_verification_ends_with_the_stream() -> None:
    compared = story.Compared(0.4, False, Acceptance(4, 1, 1, "x"), upstream="cerebras")
    relay = story.RelayOutcome(
        "cerebras", Purpose.SPILL, False, 20, 12, False, 0, None, None, compared=compared
    )
    events, marks = stamped(
        *drafted(1.0),
        (1.21, planned(Step.VERIFY_LIVE)),
        (1.3, story.Opened("cerebras", (), live=True)),
        (None, relay),
    )
    spans = steps(record(), events, marks, started=0.9, ended=2.5, providers=PROVIDERS)

    assert [s.name for s in spans] == ["gate", "draft", "judge", "verify"]
    gate, draft, judge, verify = spans
    assert (gate.start, gate.end) == (0.9, 1.0)  # from the call's start to the lane
    assert (draft.start, draft.end) == (1.0, 1.2) and draft.client
    assert draft.attributes["gen_ai.usage.output_tokens"] == 4
    assert draft.attributes["gen_ai.provider.name"] == "llama_server"
    assert (judge.start, judge.end) == (1.2, 1.2001) and not judge.client
    assert judge.attributes["specproxy.score"] == 0.7
    assert judge.attributes["specproxy.threshold"] == 0.5
    assert (verify.start, verify.end) == (1.21, 2.5)  # the stream ended with the request
    assert verify.attributes["gen_ai.usage.output_tokens"] == 20
    assert verify.attributes["specproxy.similarity"] == 0.4
    assert verify.attributes["specproxy.accepted_tokens"] == 1
    assert verify.attributes["gen_ai.provider.name"] == "cerebras"


def test_a_failed_verification_then_the_local_continuation_are_two_steps() -> None:
    failure = UpstreamTimeout("cerebras", "no answer within 10 s")
    events, marks = stamped(
        *drafted(1.0),
        (1.21, planned(Step.VERIFY_WHOLE)),
        (3.0, story.Failed(failure, "verify")),
        (3.0, planned(Step.CONTINUE_LOCALLY, Outcome.DEGRADED)),
        (3.5, story.Counted("local", Purpose.DRAFT, 30, 12)),
        (3.5, story.Answered("local", 30, local=True)),
    )
    spans = steps(record(), events, marks, started=0.9, ended=3.6, providers=PROVIDERS)

    verify, carry_on = spans[-2:]
    assert (verify.name, verify.start, verify.end, verify.error) == ("verify", 1.21, 3.0, "timeout")
    assert carry_on.name == "continue" and (carry_on.start, carry_on.end) == (3.0, 3.5)
    assert carry_on.attributes["specproxy.outcome"] == "degraded"
    assert carry_on.attributes["gen_ai.usage.output_tokens"] == 30
    assert carry_on.error is None


def test_a_failed_draft_is_an_error_span_and_the_cloud_answers_instead() -> None:
    failure = UpstreamTransportError("local", "connection refused")
    events, marks = stamped(
        (1.0, story.Laned("uncertain")),
        (1.0, story.Started(32)),
        (1.05, story.Failed(failure, "draft")),
        (1.05, planned(Step.CLOUD_INSTEAD, Outcome.LOCAL_DOWN_CLOUD_USED)),
        (1.8, story.Answered("cerebras", 25, local=False)),
    )
    spans = steps(record(), events, marks, started=0.9, ended=1.9, providers=PROVIDERS)

    assert [s.name for s in spans] == ["gate", "draft", "spill"]
    assert spans[1].error == "transport" and spans[1].end == 1.05
    assert spans[2].attributes["gen_ai.request.model"] == "cerebras"


def test_a_cache_hit_is_a_step_and_unstamped_events_are_none() -> None:
    hit = story.CacheLooked("hit", "cerebras")
    events, marks = stamped((1.001, hit), (None, story.Finished(Outcome.CACHED)))
    spans = steps(record(), events, marks, started=1.0, ended=1.002, providers=PROVIDERS)
    assert [(s.name, s.start, s.end) for s in spans] == [("cache", 1.0, 1.001)]
    assert spans[0].attributes == {"specproxy.cache.result": "hit"}
    pass_through, _ = stamped((None, story.Answered("local", 3, local=True)))
    assert steps(record(), pass_through, [], 1.0, 2.0, PROVIDERS) == []


def test_the_request_span_follows_the_genai_conventions_and_names_the_key_only() -> None:
    rec = record(
        outcome=Outcome.SPILLED_OVER,
        key="team-a-bot",
        team="a",
        prompt_tokens=12,
        usage=[
            Usage("local", Purpose.DRAFT, 12, 4),
            Usage("cerebras", Purpose.SPILL, 13, 20),
            Usage("cerebras", Purpose.AUDIT, 13, 20),  # not the answer served
        ],
        reasons=["uncertainty_marker", "differs_from_verified"],
    )
    events = [story.Answered("cerebras", 20, local=False)]
    attrs = request_attributes(rec, events, "auto", PROVIDERS)

    assert attrs["gen_ai.operation.name"] == "chat"
    assert (attrs["gen_ai.request.model"], attrs["gen_ai.response.model"]) == ("auto", "cerebras")
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (13, 20)
    assert attrs["specproxy.reasons"] == ["uncertainty_marker", "differs_from_verified"]
    assert attrs["specproxy.key.name"] == "team-a-bot"
    assert "specproxy.score" not in attrs  # None is left out, as OpenTelemetry requires
    # a draft served: the local model is the response's
    served = request_attributes(record(outcome=Outcome.ACCEPTED), [], None, PROVIDERS)
    assert served["gen_ai.response.model"] == "local" and "gen_ai.request.model" not in served


def test_plain_attributes() -> None:
    assert plain({"a": None, "b": ("x", 1), "c": 0.1234567891, "d": True}) == {
        "b": ["x", "1"],
        "c": 0.123457,
        "d": True,
    }
