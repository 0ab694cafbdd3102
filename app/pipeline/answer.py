"""An upstream's own answer on its way to the client: served whole, replayed, or
relayed live, with the proxy's fields. Each returns what it did as events
(``app.pipeline.call``); a relayed stream tells its ``RelayOutcome`` when it ends.
The proxy's fields and headers come from the request's story so far
(``SpeculationReport.of``).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from app.config import SpeculativeConfig
from app.depth_control import N_MAX_KEY, DepthControl
from app.pipeline.call import (
    Answered,
    Call,
    Compared,
    Counted,
    Event,
    FellOver,
    LocalCounters,
    RelayOutcome,
    Served,
    Steered,
)
from app.pipeline.narrative import Narrator
from app.pipeline.relay import StreamRelay
from app.pipeline.wire import (
    Reply,
    SpeculationReport,
    StreamReply,
    draft_counters,
    headers,
    passed_reply,
    proxy_fields,
    reply,
)
from app.routing.acceptance import token_acceptance
from app.routing.merge import MergeResult, merge, similarity
from app.routing.signals import DraftSignals
from app.routing.tool_calls import ToolCall, tool_calls_of
from app.sse import DONE, event
from app.upstreams import Upstream
from app.vocabulary import ContextType, Purpose

_WORD_PIECES = re.compile(r"\s*\S+")


@dataclass(frozen=True, slots=True)
class LiveCheck:
    """A draft whose verification is being streamed live: compared once it has all come."""

    draft: DraftSignals
    started: float
    spec: SpeculativeConfig


class Answer(Struct, frozen=True):
    """A reply on its way and what getting it did (a stream's relay tells the rest at its
    end: ``StreamReply.relay``)."""

    reply: Reply
    events: tuple[Event, ...] = ()


class Answers:
    """Serves answers for the pipeline: the local model's, the cloud's, a draft's."""

    def __init__(
        self, local: Upstream, depth: DepthControl, narrator: Narrator, keeps_content: bool
    ) -> None:
        self.local = local
        self.depth = depth
        self.narrator = narrator
        self.keeps_content = keeps_content

    def steer(
        self, body: dict[str, Any], context: ContextType
    ) -> tuple[dict[str, Any], Steered | None]:
        """``body`` with adaptive K as ``speculative.n_max``; a client's own value is kept."""
        depth = self.depth.server_depth(context)
        if depth is None or N_MAX_KEY in body:
            return body, None
        return {**body, N_MAX_KEY: depth}, Steered(depth)

    def serve(
        self, call: Call, body: dict[str, Any], model_used: str, *, from_draft: bool
    ) -> Answer:
        """A finished answer, as the client asked for it, with the story's report."""
        report = SpeculationReport.of(call.events)
        calls = len(tool_calls_of(body["choices"][0].get("message")))
        first = time.perf_counter() - call.started if call.request.stream else None
        served = Served(tuple(report.reasons), calls, first)  # a stream is replayed now
        out = reply(body, call.request, model_used, report, from_draft=from_draft)
        return Answer(out, (served,))

    async def answer_with(
        self,
        upstream: Upstream,
        call: Call,
        purpose: Purpose = Purpose.PASS_THROUGH,
        *,
        speculative: bool = True,
    ) -> Answer:
        """``upstream``'s own answer to the client's request, streamed or not, with the
        proxy's fields (the speculative report only for the speculative strategy)."""
        is_local = upstream.name == self.local.name
        body = call.raw
        steered: tuple[Event, ...] = ()
        if is_local and self.depth.steers_server:
            body, step = self.steer(body, call.context())
            steered = (step,) if step is not None else ()
        if call.request.stream:
            # The text is not needed here, and the usage chunk gives the count.
            opened = await upstream.open_stream(body, unread=upstream.streams_usage)
            relay = StreamRelay(opened, keep_usage=call.request.include_usage)
            out = self.relay(call, relay, purpose, speculative=speculative)
            return Answer(out, (*steered, FellOver(opened.fell_over)))
        answer = await upstream.pass_on(body)  # sent on as it came: read, not parsed
        n, prompt = answer.completion_tokens, answer.prompt_tokens
        events: list[Event] = [*steered, FellOver(answer.fell_over)]
        if is_local:
            events.append(LocalCounters(draft_counters(answer.timings)))
        events.append(Counted(answer.upstream, purpose, n, prompt, latency_s=answer.latency_s))
        report = None
        if speculative:
            events.append(Answered(answer.upstream, n, is_local))
            report = SpeculationReport.of([*call.events, *events])
        events.append(Served(_reasons(report), answer.tool_calls))
        return Answer(passed_reply(answer.content, answer.upstream, report), tuple(events))

    def relay(
        self,
        call: Call,
        relay: StreamRelay,
        purpose: Purpose,
        check: LiveCheck | None = None,
        *,
        speculative: bool = True,
    ) -> StreamReply:
        """A stream on its way to the client (its outcome told when it ends)."""
        is_local = relay.upstream.name == self.local.name
        live = LiveRelay(
            call,
            relay,
            purpose,
            self.narrator,
            local=is_local,
            check=check,
            keeps_content=self.keeps_content,
            speculative=speculative,
        )
        report = SpeculationReport.of(call.events) if speculative else None
        return StreamReply(live.chunks(), headers(relay.upstream.name, report), live)


class LiveRelay:
    """A ``StreamRelay`` passed on to the client; ``outcome`` once its chunks have ended
    (told to the log then; the pipeline applies it to the record)."""

    def __init__(
        self,
        call: Call,
        relay: StreamRelay,
        purpose: Purpose,
        narrator: Narrator,
        *,
        local: bool,
        check: LiveCheck | None,
        keeps_content: bool,
        speculative: bool,
    ) -> None:
        self.call = call
        self.relay = relay
        self.purpose = purpose
        self.narrator = narrator
        self.local = local
        self.check = check
        self.keeps_content = keeps_content
        self.speculative = speculative
        self.outcome: RelayOutcome | None = None

    async def chunks(self) -> AsyncGenerator[bytes]:
        """The relayed stream, its finishing chunk carrying the proxy's fields; a stream
        that breaks ends with an error event (and its outcome names the error)."""
        relay = self.relay
        chunks = relay.chunks()
        try:
            async for data in chunks:
                yield data
        finally:
            await chunks.aclose()
            self.outcome = RelayOutcome(
                upstream=relay.upstream.name,
                purpose=self.purpose,
                local=self.local,
                n_tokens=relay.n_tokens,
                prompt_tokens=relay.prompt_tokens,
                estimated=relay.estimated,
                tool_calls=len(relay.tool_calls.calls()),
                first_token_at=relay.first_token_at,
                reasons=_reasons(self._report(())),  # a stream broken or left has them too
                counters=LocalCounters(relay.speculation) if self.local else None,
            )
        if relay.error is not None:
            self.outcome = replace(self.outcome, error=relay.error)
            self.narrator.tell(self.outcome)
            yield event(relay.error.envelope()) + DONE
            return
        if self.check is not None and self.speculative:
            self.outcome = replace(self.outcome, compared=self._compare_live(self.check))
        self.narrator.tell(self.outcome)
        fields = proxy_fields(relay.upstream.name, self._report((self.outcome,)))
        yield relay.ending(fields)

    def _report(self, more: Iterable[Event]) -> SpeculationReport | None:
        """The story's report with ``more`` told (None outside the speculative strategy)."""
        return SpeculationReport.of([*self.call.events, *more]) if self.speculative else None

    def _compare_live(self, check: LiveCheck) -> Compared:
        relay, call = self.relay, self.call
        text = relay.text
        score = similarity(check.draft.text, text, draft_complete=False)
        verify_s = time.perf_counter() - check.started
        calls = tool_calls_of({"tool_calls": relay.tool_calls.calls()})
        judged = merge_draft(call, check.spec, check.draft, text, calls)
        return compare(
            check.draft,
            text,
            keeps_content=self.keeps_content,
            similarity=score,
            agreement=judged.agreement,
            verify_s=verify_s,
            n_tokens=relay.n_tokens,
        )


def compare(
    draft: DraftSignals,
    verified: str,
    *,
    keeps_content: bool,
    similarity: float | None,
    agreement: bool | None,
    **more: Any,
) -> Compared:
    """A draft compared with the verified text: token-level acceptance, and the verified
    text itself when the spec log keeps content; ``more``: the rest of ``Compared``."""
    pieces = [t.text for t in draft.tokens] or _WORD_PIECES.findall(draft.text)
    return Compared(
        similarity,
        agreement,
        token_acceptance(pieces, verified),
        verified if keeps_content else None,
        n_chars=len(verified),
        **more,
    )


def merge_draft(
    call: Call,
    spec: SpeculativeConfig,
    draft: DraftSignals,
    verified: str,
    verified_calls: tuple[ToolCall, ...],
    violation: str | None = None,
) -> MergeResult:
    """The merge of a draft against a verified answer, by the configured agreement."""
    return merge(
        draft.text,
        verified,
        draft_complete=not draft.partial,
        min_confidence=spec.min_confidence,
        mode=spec.agreement,
        prompt=call.prompt(),
        draft_calls=draft.tool_calls,
        verified_calls=verified_calls,
        violation=violation,
        json_output=call.contract().json_output,
    )


def _reasons(report: SpeculationReport | None) -> tuple[str, ...] | None:
    """The reasons the client is told (None outside the speculative strategy)."""
    return tuple(report.reasons) if report is not None else None
