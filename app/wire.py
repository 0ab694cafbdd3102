"""What the proxy puts on the wire: the draft request, the proxy's own fields and
headers on an answer, and answers shaped as JSON or as a replayed stream.

Pure functions over plain data: the ``speculative_decoding`` report is told from the
request's story (``SpeculationReport.of``, over ``app.story``'s events), the rest from
bodies and the report. The pipeline's steps build their replies with them;
``bench/routing_eval.py`` builds its drafts with ``draft_body`` so it measures exactly
what the proxy sends.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from app.errors import UpstreamError
from app.protocol import ChatCompletionRequest
from app.routing.plan import Plan, Step
from app.routing.signals import ABORTED
from app.sse import DONE, completion_to_chunks, event
from app.story import (
    Answered,
    Compared,
    Drafted,
    Event,
    Laned,
    Opened,
    Planned,
    RelayOutcome,
    Stopped,
)
from app.vocabulary import Outcome

if TYPE_CHECKING:
    from app.pipeline.answer import LiveRelay

_TOKEN_LIMITS = ("max_tokens", "max_completion_tokens", "n_predict")
_TOP_KEYS = ("top_logprobs", "top_probs")  # top_probs: llama-server's post_sampling_probs
# the cloud's answer, unmerged
_SPILLS = (Step.SERVE_HEDGE, Step.CLOUD_INSTEAD, Step.VERIFY_LIVE, Step.SERVE_CLOUD)


@dataclass(slots=True)
class SpeculationReport:
    """The ``speculative_decoding`` object added to responses (seed 004 fields + reasons)."""

    draft_tokens: int = 0
    verified_tokens: int = 0
    accepted: bool = False
    spilled_over: bool = False
    similarity: float | None = None
    agreement: bool | None = None  # the draft agreed with the verified answer; None: not judged
    reasons: list[str] = field(default_factory=list)
    degraded: bool = False
    lane: str | None = None  # the gate's lane before the draft: cloud, local, uncertain

    @classmethod
    def of(cls, events: Iterable[Event]) -> SpeculationReport:
        """The report as the request's story tells it so far: each plan step starts a fresh
        one (the draft's tokens, accepted, spilled over, degraded, its reasons), the answers
        and relays that follow add their tokens and the verifier they fell over to, a live
        comparison its similarity; a merge writes its own."""
        report, drafted = cls(), 0
        lane: str | None = None
        plan: Plan | None = None  # the last step told
        for told in events:
            match told:
                case Laned(lane=told_lane):
                    lane = told_lane
                case Drafted(signals=signals) | Stopped(signals=signals) if signals is not None:
                    drafted = signals.n_tokens
                case Planned(plan=planned):
                    plan = planned
                    report = cls(
                        draft_tokens=drafted,
                        accepted=planned.outcome is Outcome.ACCEPTED,
                        spilled_over=planned.step in _SPILLS,
                        reasons=list(planned.reasons),
                        degraded=planned.degraded,
                    )
                case Opened(upstream=upstream, fell_over=failures):
                    report.reasons += fell_over_to(upstream, failures)
                case Answered(upstream, n_tokens, local, failures):
                    report.count(n_tokens, local=local)
                    report.reasons += fell_over_to(upstream, failures)
                case RelayOutcome(error=None) as relayed:
                    report.count(relayed.n_tokens, local=relayed.local)
                    for part in relayed.continued:  # the rest of the same answer
                        report.count(part.n_tokens, local=relayed.local, more=True)
                        report.reasons.append(part.reason)
                    if (live := relayed.compared) is not None:
                        report.similarity, report.agreement = live.similarity, live.agreement
                case Compared(use_draft=bool(use_draft)) as merged if plan is not None:
                    fell_over = fell_over_to(merged.upstream, merged.fell_over)
                    reasons = [*plan.reasons, merged.reason or "", *fell_over]
                    report = cls(
                        draft_tokens=drafted,
                        verified_tokens=merged.n_tokens,
                        similarity=merged.similarity,
                        agreement=merged.agreement,
                        # a broken contract is the plan's reason and the merge's: once
                        reasons=list(dict.fromkeys(reasons)),
                        spilled_over=not use_draft,
                    )
        report.lane = lane
        return report

    def count(self, n_tokens: int, *, local: bool, more: bool = False) -> None:
        """An answer's tokens: the local model's (a continuation) or the cloud's (``more``:
        added, the rest of a stream that broke and was continued)."""
        if local:
            self.draft_tokens = n_tokens + more * self.draft_tokens
        else:
            self.verified_tokens = n_tokens + more * self.verified_tokens

    def as_dict(self) -> dict[str, Any]:
        """The JSON object, similarity rounded to four places."""
        data = asdict(self)
        if self.similarity is not None:
            data["similarity"] = round(self.similarity, 4)
        return data


@dataclass(slots=True)
class JSONReply:
    """A whole answer: its JSON object's bytes and the proxy's headers."""

    content: bytes
    headers: dict[str, str]


@dataclass(slots=True)
class StreamReply:
    """A streamed answer: its server-sent-event bytes and the proxy's headers; ``relay``
    tells what a relayed stream did once its chunks end (None: a replay, told at once)."""

    chunks: AsyncGenerator[bytes]
    headers: dict[str, str]
    relay: LiveRelay | None = None


Reply = JSONReply | StreamReply


def fell_over_to(answered: str, failures: Sequence[UpstreamError]) -> list[str]:
    """The reason naming the verifier that answered after others failed (none otherwise)."""
    return [f"fell_over_to:{answered}"] if failures else []


def draft_body(raw: dict[str, Any], budget: int, top_logprobs: int) -> dict[str, Any]:
    """The local draft request for a client body: its token limits replaced by ``budget``.

    Logprobs are always asked for because the decision reads per-token confidence.
    """
    body = {k: v for k, v in raw.items() if k not in _TOKEN_LIMITS and k != "stream_options"}
    body["max_tokens"] = budget
    body["logprobs"] = True
    body["top_logprobs"] = top_logprobs
    return body


def headers(model_used: str, report: SpeculationReport | None) -> dict[str, str]:
    """The proxy's response headers (``X-Model-Used``; the report's flags when speculating)."""
    out = {"X-Model-Used": model_used}
    if report is not None:
        out |= {
            "X-Draft-Accepted": str(report.accepted).lower(),
            "X-Spilled-Over": str(report.spilled_over).lower(),
            "X-Degraded": str(report.degraded).lower(),
            "X-Draft-Tokens": str(report.draft_tokens),
        }
        if report.similarity is not None:
            out["X-Similarity"] = f"{report.similarity:.4f}"
    return out


def proxy_fields(model_used: str, report: SpeculationReport | None) -> dict[str, Any]:
    """The proxy's fields on a response body (``report`` is None outside speculation)."""
    if report is None:
        return {"model_used": model_used}
    return {"model_used": model_used, "speculative_decoding": report.as_dict()}


def reply(
    body: dict[str, Any],
    request: ChatCompletionRequest,
    model_used: str,
    report: SpeculationReport | None,
    *,
    from_draft: bool,
) -> Reply:
    """A finished answer as the client asked for it: JSON, or replayed as a stream."""
    if from_draft:
        body = client_finish(client_logprobs(body, request))
    extra = proxy_fields(model_used, report)
    out_headers = headers(model_used, report)
    if not request.stream:
        return JSONReply(orjson.dumps({**body, **extra}), out_headers)
    chunks = completion_to_chunks(
        body,
        with_logprobs=bool(request.logprobs),
        include_usage=request.include_usage,
        extra=extra,
    )
    return StreamReply(_replay(chunks), out_headers)


def passed_reply(content: bytes, model_used: str, report: SpeculationReport | None) -> JSONReply:
    """An upstream's whole answer as it came (``app.upstreams.passthrough``), the proxy's
    fields added at the end of its object."""
    extra = proxy_fields(model_used, report)
    return JSONReply(with_fields(content, extra), headers(model_used, report))


def with_fields(content: bytes, extra: dict[str, Any]) -> bytes:
    """A JSON object's bytes with ``extra``'s members added after its own (the object has
    members of its own; none of them is named as one of ``extra``'s)."""
    head = content.rstrip()
    assert head.endswith(b"}"), "not a JSON object"
    return head[:-1] + b"," + orjson.dumps(extra)[1:]


def client_finish(body: dict[str, Any]) -> dict[str, Any]:
    """A draft's body with an OpenAI ``finish_reason``: one the proxy stopped early (served
    only as the last resort) says ``length``, as any answer cut short does."""
    choices = body["choices"]
    if not any(c.get("finish_reason") == ABORTED for c in choices):
        return body
    cut = [
        {**c, "finish_reason": "length"} if c.get("finish_reason") == ABORTED else c
        for c in choices
    ]
    return {**body, "choices": cut}


def client_logprobs(body: dict[str, Any], request: ChatCompletionRequest) -> dict[str, Any]:
    """A draft's body with the logprobs the client asked for: none unless it asked, and
    then its own ``top_logprobs`` count (the draft asked for the proxy's sake)."""
    if not request.logprobs:
        return {**body, "choices": [{**c, "logprobs": None} for c in body["choices"]]}
    n_top = request.top_logprobs or 0

    def trimmed(logprobs: Any) -> Any:
        entries = logprobs.get("content") if isinstance(logprobs, dict) else None
        if not isinstance(entries, list):
            return logprobs
        content = [
            {**e, **{k: e[k][:n_top] for k in _TOP_KEYS if isinstance(e.get(k), list)}}
            if isinstance(e, dict)
            else e
            for e in entries
        ]
        return {**logprobs, "content": content}

    choices = [{**c, "logprobs": trimmed(c.get("logprobs"))} for c in body["choices"]]
    return {**body, "choices": choices}


async def _replay(chunks: list[dict[str, Any]]) -> AsyncGenerator[bytes]:
    """A finished answer's stream, in one write: it is all there already."""
    yield b"".join([*map(event, chunks), DONE])
