"""An answer on its way to the client: served whole, replayed, or relayed live, with
the proxy's fields: an upstream's own (the pass-through strategies, a local
continuation), a draft's, or the cloud's in the speculative steps that end with it (the
hedge's or a fresh call's, alone or verifying a draft live). Each returns what it did as
events (``app.story``) for the speculator or the pipeline to add to the story; a relayed
stream tells its ``RelayOutcome`` when it ends. The proxy's fields and headers come from
the request's story so far and the step's own events (``SpeculationReport.of``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from app.call import Call
from app.config import SpeculativeConfig
from app.depth_control import N_MAX_KEY, DepthControl
from app.errors import UpstreamError
from app.pipeline.hedge import Hedge
from app.pipeline.verify import LiveCheck, compare_live, merged
from app.protocol import JSONObject
from app.routing.plan import Facts, Plan, Step
from app.routing.signals import DraftSignals
from app.routing.tool_calls import tool_calls_of
from app.sse import DONE, event
from app.story import (
    Answered,
    Continued,
    Counted,
    Event,
    FellOver,
    Finished,
    LocalCounters,
    Opened,
    RelayOutcome,
    Served,
    Steered,
    cloud_counted,
)
from app.telemetry.narrative import Narrator
from app.upstreams import Completion, OpenStream, Upstream
from app.upstreams.continuation import Continuation, continuation, passes_unread
from app.upstreams.parsing import draft_counters
from app.upstreams.relay import StreamRelay
from app.vocabulary import ContextType, Outcome, Purpose
from app.wire import (
    Reply,
    SpeculationReport,
    StreamReply,
    headers,
    passed_reply,
    proxy_fields,
    reply,
)


class Answer(Struct, frozen=True):
    """A reply on its way and what getting it did (its relay tells the rest at its end)."""

    reply: Reply
    events: tuple[Event, ...] = ()


class Answers:
    """Serves answers for the pipeline: the local model's, the cloud's, a draft's."""

    def __init__(
        self,
        local: Upstream,
        cloud: Upstream,
        spec: SpeculativeConfig,
        depth: DepthControl,
        narrator: Narrator,
        keeps_content: bool,
    ) -> None:
        self.local, self.cloud, self.spec = local, cloud, spec
        self.depth, self.narrator, self.keeps_content = depth, narrator, keeps_content

    def steer(
        self, body: JSONObject, context: ContextType
    ) -> tuple[dict[str, Any], Steered | None]:
        """``body`` with adaptive K as ``speculative.n_max``; a client's own value is kept."""
        depth = self.depth.server_depth(context)
        if depth is None or N_MAX_KEY in body:
            return body, None
        return {**body, N_MAX_KEY: depth}, Steered(depth)

    def serve(
        self,
        call: Call,
        body: JSONObject,
        model_used: str,
        *,
        from_draft: bool,
        told: tuple[Event, ...] = (),
    ) -> Answer:
        """A finished answer, as the client asked for it, with the report of the story and
        what the step ``told`` before it (returned first among its events)."""
        report = SpeculationReport.of([*call.events, *told])
        calls = len(tool_calls_of(body["choices"][0].get("message")))
        first = time.perf_counter() - call.started if call.request.stream else None
        served = Served(tuple(report.reasons), calls, first)  # a stream is replayed now
        out = reply(body, call.request, model_used, report, from_draft=from_draft)
        return Answer(out, (*told, served))

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
            # its usage chunk counts; its text is read only where it may be continued
            opened = await upstream.open_stream(body, unread=passes_unread(upstream, self.local))
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
        told: tuple[Event, ...] = (),
    ) -> StreamReply:
        """A stream on its way to the client (its outcome told when it ends), its headers
        from the story and what the step ``told`` before it."""
        is_local = relay.upstream.name == self.local.name
        keeps = self.keeps_content
        then = continuation(self.cloud, self.local, relay)
        live = LiveRelay(call, purpose, self.narrator, is_local, check, keeps, speculative, then)
        report = SpeculationReport.of([*call.events, *told]) if speculative else None
        return StreamReply(live.chunks(), headers(relay.upstream.name, report), live)

    async def cloud_alone(self, call: Call, step: Plan, hedge: Hedge) -> Answer:
        """The cloud's answer with no draft to compare (the hedge came first, or the local
        model failed): the hedge's, whole or relayed live, or a fresh call's; raises the
        cloud's ``UpstreamError``."""
        if step.step is Step.FAIL:
            raise hedge.failure or UpstreamError(self.cloud.name, "the hedged call failed")
        if not step.use_hedge:  # the local model failed, or the gate's cloud lane
            answer = await self.answer_with(self.cloud, call, Purpose.SPILL)
            finished = Finished(step.outcome or Outcome.LOCAL_DOWN_CLOUD_USED)
            return Answer(answer.reply, (finished, *answer.events))
        finished = Finished(step.outcome or Outcome.SPILLED_OVER)
        if hedge.streams and call.request.stream:
            opened = await hedge.live()
            return self.relay_cloud(call, opened, step.hedge_as, told=(finished,))
        verified = await hedge.answer()
        n, fell_over = verified.completion_tokens, verified.fell_over
        answered = Answered(verified.upstream, n, False, fell_over)
        told = (*cloud_counted(verified, step.hedge_as), answered, finished)
        return self.serve(call, verified.body, verified.upstream, from_draft=False, told=told)

    async def verify_whole(
        self, call: Call, draft: Completion, facts: Facts, hedge: Hedge | None
    ) -> Answer:
        """The cloud's whole answer (the hedge's, or a fresh call's) merged with the draft:
        the draft served if they agree, else that answer; raises the cloud's error."""
        verified = await (hedge.answer() if hedge is not None else self.cloud.complete(call.raw))
        assert facts.draft is not None
        compared, counted = merged(
            call,
            self.spec,
            facts.draft,
            verified,
            facts.violation,
            self.keeps_content,
            hedged=hedge is not None,
        )
        if compared.use_draft:
            told = (compared, *counted, Finished(Outcome.VERIFIED_DRAFT_USED))
            return self.serve(call, draft.body, self.local.name, from_draft=True, told=told)
        told = (compared, *counted, Finished(Outcome.SPILLED_OVER))
        return self.serve(call, verified.body, verified.upstream, from_draft=False, told=told)

    async def verify_live(self, call: Call, draft: DraftSignals, hedge: Hedge | None) -> Answer:
        """The cloud's stream (the hedge's, or a fresh call's) relayed live; the draft is
        compared with it once it has all come."""
        check = LiveCheck(draft, time.perf_counter(), self.spec)
        opened = await (hedge.live() if hedge is not None else self.cloud.open_stream(call.raw))
        purpose = Purpose.SPILL if hedge is None else Purpose.HEDGE
        return self.relay_cloud(call, opened, purpose, check)

    def relay_cloud(
        self,
        call: Call,
        opened: OpenStream,
        purpose: Purpose,
        check: LiveCheck | None = None,
        told: tuple[Event, ...] = (),
    ) -> Answer:
        """A cloud stream on its way to the client, its fall-overs counted and named."""
        live = check is not None
        told += (Opened(opened.upstream.name, opened.fell_over, live),)
        if live:
            told += (Finished(Outcome.SPILLED_OVER),)
        told += (FellOver(opened.fell_over),)
        relay = StreamRelay(opened, keep_usage=call.request.include_usage)
        return Answer(self.relay(call, relay, purpose, check, told=told), told)


@dataclass(slots=True, eq=False)
class LiveRelay:
    """A ``StreamRelay`` passed on, continued if it breaks (``app.upstreams.continuation``);
    ``outcome`` once its chunks have ended (told to the log; the pipeline applies it)."""

    call: Call
    purpose: Purpose
    narrator: Narrator
    local: bool
    check: LiveCheck | None
    keeps_content: bool
    speculative: bool
    continuation: Continuation
    outcome: RelayOutcome | None = None

    async def chunks(self) -> AsyncGenerator[bytes]:
        """The relayed stream, then only what each continuation adds, its finishing chunk
        with the proxy's fields; one that breaks for good ends with an error event."""
        relay = self.continuation.first
        last: StreamRelay | None = relay
        try:
            while last is not None:
                relay, chunks = last, last.chunks()
                try:
                    async for data in chunks:
                        yield data
                finally:
                    await chunks.aclose()
                last = await self.continuation.after(relay, self.call.raw)
        finally:
            self.outcome = self._outcome(relay)
        if relay.error is not None:
            self.narrator.tell(self.outcome)
            yield event(relay.error.envelope()) + DONE
            return
        first = self.continuation.first  # its upstream is the answer's model_used
        if self.check is not None and self.speculative and relay is first:
            compared = compare_live(self.check, relay, self.call, self.keeps_content)
            self.outcome = replace(self.outcome, compared=compared)
        self.narrator.tell(self.outcome)
        fields = proxy_fields(first.upstream.name, self._report((self.outcome,)))
        if continued := self.outcome.continued:
            fields["continued_by"] = continued[-1].upstream
        yield relay.ending(fields)

    def _outcome(self, last: StreamRelay) -> RelayOutcome:
        """What the relay did: each part's tokens, the error that ended the last part."""
        relay, local = self.continuation.first, self.continuation.local
        continued = tuple(
            Continued(r.upstream.name, r.upstream.name == local, broken, failed, *r.counts)
            for r, broken, failed in self.continuation.parts
        )
        reasons = _reasons(self._report(()))  # a stream broken or left has them too
        reasons = None if reasons is None else (*reasons, *(c.reason for c in continued))
        calls = sum(len(r.tool_calls.calls()) for r in self.continuation.relays)
        first = relay.first_token_at or last.first_token_at
        counters = LocalCounters(relay.speculation) if self.local else None
        head = (relay.upstream.name, self.purpose, self.local, *relay.counts, calls, first)
        return RelayOutcome(*head, reasons, counters, last.error, continued=continued)

    def _report(self, more: Iterable[Event]) -> SpeculationReport | None:
        """The story's report with ``more`` told (None outside the speculative strategy)."""
        return SpeculationReport.of([*self.call.events, *more]) if self.speculative else None


def _reasons(report: SpeculationReport | None) -> tuple[str, ...] | None:
    """The reasons the client is told (None outside the speculative strategy)."""
    return tuple(report.reasons) if report is not None else None
