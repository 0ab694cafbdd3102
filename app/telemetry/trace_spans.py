"""What a finished request's trace holds, worked out from its story. Pure.

The steps tell what they did as events (``app.story``); with tracing on, each event is
stamped when it is added (``Trace.mark``). So the spans are built after the request from
the record and the stamped story: ``request_attributes`` (the GenAI conventions', then
the proxy's own) and ``steps``, the children (cache, gate, draft, judge, then the plan's
steps), each timed on the request's ``perf_counter`` clock. ``app.telemetry.tracing``
turns them into OpenTelemetry spans; nothing here imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app import story
from app.record import RequestRecord
from app.routing.plan import Step
from app.story import Event
from app.telemetry.stats import SERVED_LOCALLY
from app.vocabulary import Purpose

Attributes = dict[str, Any]

# The plan's steps as the spans name them: what the request did after the draft.
STEP_SPANS = {
    Step.VERIFY_WHOLE: "verify",
    Step.VERIFY_LIVE: "verify",
    Step.SERVE_HEDGE: "spill",
    Step.CLOUD_INSTEAD: "spill",
    Step.SERVE_CLOUD: "spill",
    Step.FAIL: "spill",
    Step.CONTINUE_LOCALLY: "continue",
    Step.SERVE_DRAFT: "serve",
    Step.REFUSE: "refuse",
}


@dataclass(frozen=True, slots=True)
class StepSpan:
    """One child span: its name, start and end (``perf_counter`` seconds), attributes, a
    failure's kind (its status), and whether it calls an upstream (kind CLIENT)."""

    name: str
    start: float
    end: float
    attributes: Attributes = field(default_factory=dict)
    error: str | None = None
    client: bool = False


def plain(attributes: Mapping[str, Any]) -> Attributes:
    """The attributes OpenTelemetry takes: no None (nor empty lists), sequences as lists of
    strings, floats rounded."""
    out: Attributes = {}
    for key, value in attributes.items():
        if value is None or value in ((), []):
            continue
        if isinstance(value, tuple | list):
            value = [str(v) for v in value]
        elif isinstance(value, float):
            value = round(value, 6)
        out[key] = value
    return out


def response_model(rec: RequestRecord, events: Sequence[Event]) -> str | None:
    """The model (its name under ``models:``) whose answer was served, as X-Model-Used."""
    if rec.outcome in SERVED_LOCALLY:
        return rec.draft_model
    served = None
    for event in events:
        match event:
            case story.Answered(upstream) | story.Opened(upstream) | story.RelayOutcome(upstream):
                served = upstream
            case story.Compared(upstream=up, use_draft=use_draft) if up and not use_draft:
                served = up
            case story.CacheLooked("hit", model_used):
                served = model_used
            case story.Counted(model, Purpose.PASS_THROUGH):  # a pass-through's whole answer
                served = model
    return served


def request_attributes(
    rec: RequestRecord,
    events: Sequence[Event],
    requested: str | None,
    providers: Mapping[str, str],
) -> Attributes:
    """The request span's: the GenAI conventions' (chat, the models, the served answer's
    tokens), then the proxy's (strategy, outcome, lane, score, reasons, agreement, cost,
    the caller's key by name: never the key)."""
    model = response_model(rec, events)
    served = [u for u in rec.usage if u.model == model and u.purpose != "audit"]
    prompt = max((u.prompt_tokens for u in served), default=0) or rec.prompt_tokens
    bill = rec.bill
    return plain(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "specproxy",
            "gen_ai.request.model": requested,
            "gen_ai.response.model": model,
            "gen_ai.usage.input_tokens": prompt or None,
            "gen_ai.usage.output_tokens": sum(u.completion_tokens for u in served) or None,
            "specproxy.request_id": rec.request_id,
            "specproxy.strategy": rec.strategy.value,
            "specproxy.stream": rec.stream,
            "specproxy.outcome": rec.outcome.value,
            "specproxy.served_by": providers.get(model or ""),
            "specproxy.context_type": rec.context_type,
            "specproxy.lane": rec.lane,
            "specproxy.score": rec.spill_score,
            "specproxy.threshold": rec.spill_threshold,
            "specproxy.reasons": tuple(rec.reasons),
            "specproxy.decision_reasons": rec.decision_reasons,
            "specproxy.similarity": rec.similarity,
            "specproxy.agreement": rec.agreement,
            "specproxy.hedged": rec.hedged,
            "specproxy.cache": rec.cache,
            "specproxy.first_token_s": rec.first_token_s,
            "specproxy.cost_usd": bill.spend_usd if bill is not None else None,
            "specproxy.baseline_usd": bill.baseline_usd if bill is not None else None,
            "specproxy.key.name": rec.key,
            "specproxy.key.team": rec.team,
            "specproxy.upstream_errors": tuple(f"{u}:{k}" for u, k in rec.upstream_errors),
        }
    )


def steps(
    rec: RequestRecord,
    events: Sequence[Event],
    marks: Iterable[tuple[Event, float]],
    started: float,
    ended: float,
    providers: Mapping[str, str],
) -> list[StepSpan]:
    """The request's steps as child spans, in order, from its stamped story: an event's
    stamp is when the step that returned it ended (unstamped events are skipped)."""
    at = {id(event): t for event, t in marks}
    stamped = [(event, at[id(event)]) for event in events if id(event) in at]
    out: list[StepSpan] = []
    before = started  # when the step now looked at began: the previous one's end
    drafting: tuple[story.Started, float] | None = None
    drafted_at: float | None = None
    planned: list[tuple[story.Planned, float, int]] = []
    for i, (event, t) in enumerate(stamped):
        match event:
            case story.CacheLooked(result):
                out.append(StepSpan("cache", started, t, {"specproxy.cache.result": result}))
            case story.Laned(lane, p_wrong):
                gate = {"specproxy.lane": lane, "specproxy.gate.p_wrong": p_wrong}
                out.append(StepSpan("gate", before, t, plain(gate)))
            case story.Started():
                drafting = (event, t)
            case story.Drafted() | story.Stopped() if drafting is not None:
                out.append(_draft(rec, events, drafting, event, t, providers))
                drafting, drafted_at = None, t
            case story.Failed(exc, "draft") if drafting is not None:
                span = _draft(rec, events, drafting, None, t, providers)
                out.append(StepSpan(span.name, span.start, t, span.attributes, exc.kind, True))
                drafting = None
            case story.Judged() if drafted_at is not None:
                out.append(StepSpan("judge", drafted_at, t, _judged(event)))
            case story.Planned():
                planned.append((event, t, i))
        before = t
    out += _plan_steps(planned, stamped, events, ended, providers)
    return out


def _draft(
    rec: RequestRecord,
    events: Sequence[Event],
    drafting: tuple[story.Started, float],
    result: Event | None,
    t: float,
    providers: Mapping[str, str],
) -> StepSpan:
    """The draft: the local model asked for at most the budget; its tokens and signals."""
    started, start = drafting
    model = rec.draft_model or ""
    counted = [e for e in events if isinstance(e, story.Counted) and e.purpose == "draft"]
    signals = getattr(result, "signals", None)
    attributes = {
        **_inference(model, providers),
        "gen_ai.request.max_tokens": started.budget,
        "gen_ai.usage.input_tokens": counted[0].prompt_tokens or None if counted else None,
        "gen_ai.usage.output_tokens": counted[0].completion_tokens if counted else None,
        "specproxy.draft.stopped": isinstance(result, story.Stopped),
        "specproxy.draft.tokens": getattr(signals, "n_tokens", None),
        "specproxy.draft.finish_reason": getattr(signals, "finish_reason", None),
        "specproxy.draft.mean_prob": getattr(signals, "mean_prob", None),
        "specproxy.server_depth": rec.server_depth,
        "specproxy.hedged": rec.hedged,
        "specproxy.trusted": rec.trusted,
    }
    return StepSpan("draft", start, t, plain(attributes), client=True)


def _judged(judged: story.Judged) -> Attributes:
    """The judge's decision on the draft: accepted or not, its score against the
    threshold, the policy and its reasons."""
    return plain(
        {
            "specproxy.accepted": judged.accepted,
            "specproxy.score": judged.spill_score,
            "specproxy.threshold": judged.threshold if judged.spill_score is not None else None,
            "specproxy.policy": judged.policy,
            "specproxy.decision_reasons": judged.reasons,
            "specproxy.violation": judged.violation,
        }
    )


def _plan_steps(
    planned: list[tuple[story.Planned, float, int]],
    stamped: list[tuple[Event, float]],
    events: Sequence[Event],
    ended: float,
    providers: Mapping[str, str],
) -> list[StepSpan]:
    """One span per step the plan chose, from its choice to the next one (or to the end
    of its answer: a stream's ends with the request)."""
    out = []
    relayed = next((e for e in events if isinstance(e, story.RelayOutcome)), None)
    for n, (chosen, start, i) in enumerate(planned):
        last = n == len(planned) - 1
        window = stamped[i + 1 : planned[n + 1][2] if not last else len(stamped)]
        end = max((t for _, t in window), default=start)
        if last and relayed is not None:
            end, window = ended, [*window, (relayed, ended)]
        out.append(_plan_step(chosen, start, end, [e for e, _ in window], providers))
    return out


def _plan_step(
    chosen: story.Planned,
    start: float,
    end: float,
    window: list[Event],
    providers: Mapping[str, str],
) -> StepSpan:
    """A step's span: what the plan chose and why; for a verification, the comparison."""
    plan = chosen.plan
    attributes: Attributes = {
        "specproxy.step": plan.step.value,
        "specproxy.outcome": plan.outcome.value if plan.outcome is not None else None,
        "specproxy.reasons": plan.reasons,
        "specproxy.use_hedge": plan.use_hedge,
    }
    error, upstream = None, None
    for event in window:
        match event:
            case story.Compared() as compared:
                attributes |= _compared(compared)
                upstream = compared.upstream or upstream
            case story.RelayOutcome(up, compared=compared, error=failure):
                upstream = up
                attributes |= {
                    "gen_ai.usage.input_tokens": event.prompt_tokens or None,
                    "gen_ai.usage.output_tokens": event.n_tokens,
                }
                if compared is not None:
                    attributes |= _compared(compared)
                if failure is not None:
                    error = failure.kind
            case story.Answered(up) | story.Opened(up):
                upstream = up
            case story.Failed(exc):
                error = exc.kind
    counted = [e for e in window if isinstance(e, story.Counted) and e.model == upstream]
    if counted:
        attributes["gen_ai.usage.input_tokens"] = counted[-1].prompt_tokens or None
        attributes["gen_ai.usage.output_tokens"] = counted[-1].completion_tokens
    client = plan.step not in (Step.SERVE_DRAFT, Step.REFUSE)
    if client and upstream is not None:
        attributes = {**_inference(upstream, providers), **attributes}
    return StepSpan(STEP_SPANS[plan.step], start, end, plain(attributes), error, client)


def _compared(compared: story.Compared) -> Attributes:
    """A draft compared with the cloud's answer: similarity, agreement, accepted prefix."""
    prefix = compared.acceptance
    return {
        "specproxy.similarity": compared.similarity,
        "specproxy.agreement": compared.agreement,
        "specproxy.use_draft": compared.use_draft,
        **({"specproxy.accepted_tokens": prefix.n_accepted} if prefix is not None else {}),
    }


def _inference(model: str, providers: Mapping[str, str]) -> Attributes:
    """The GenAI conventions' attributes of a chat call to ``model`` (its name)."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": providers.get(model),
        "gen_ai.request.model": model,
    }
