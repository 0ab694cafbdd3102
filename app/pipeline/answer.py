"""An upstream's own answer on its way to the client: served whole, replayed, or
relayed live, with the proxy's fields, its tokens counted in the call's record.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from app.config import SpeculativeConfig
from app.depth_control import N_MAX_KEY, DepthControl
from app.pipeline.call import Call
from app.pipeline.narrative import Narrator
from app.pipeline.relay import StreamRelay
from app.pipeline.wire import (
    Reply,
    SpeculationReport,
    StreamReply,
    add_counts,
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
from app.vocabulary import ContextType, Outcome, Purpose

_WORD_PIECES = re.compile(r"\s*\S+")


@dataclass(frozen=True, slots=True)
class LiveCheck:
    """A draft whose verification is being streamed live: compared once it has all come."""

    draft: DraftSignals
    started: float
    spec: SpeculativeConfig


class Answers:
    """Serves answers for the pipeline: the local model's, the cloud's, a draft's."""

    def __init__(
        self, local: Upstream, depth: DepthControl, narrator: Narrator, keeps_content: bool
    ) -> None:
        self.local = local
        self.depth = depth
        self.narrator = narrator
        self.keeps_content = keeps_content

    def steer(self, body: dict[str, Any], call: Call, context: ContextType) -> dict[str, Any]:
        """``body`` with adaptive K as ``speculative.n_max``; a client's own value is kept."""
        depth = self.depth.server_depth(context)
        if depth is None or N_MAX_KEY in body:
            return body
        call.record.server_depth = depth
        return {**body, N_MAX_KEY: depth}

    def serve(
        self,
        call: Call,
        body: dict[str, Any],
        model_used: str,
        report: SpeculationReport | None,
        *,
        from_draft: bool,
    ) -> Reply:
        """A finished answer, as the client asked for it."""
        _note_served(call, report, len(tool_calls_of(body["choices"][0].get("message"))))
        if call.request.stream:  # replayed in one write, now
            call.record.first_token_s = time.perf_counter() - call.started
        return reply(body, call.request, model_used, report, from_draft=from_draft)

    async def answer_with(
        self,
        upstream: Upstream,
        call: Call,
        report: SpeculationReport | None,
        purpose: Purpose = Purpose.PASS_THROUGH,
    ) -> Reply:
        """``upstream``'s own answer to the client's request, streamed or not, with the
        proxy's fields (``report`` is None outside the speculative strategy)."""
        is_local = upstream.name == self.local.name
        body = call.raw
        if is_local and self.depth.steers_server:
            body = self.steer(body, call, call.context())
        if call.request.stream:
            # The text is not needed here, and the usage chunk gives the count.
            opened = await upstream.open_stream(body, unread=upstream.streams_usage)
            call.fell_over(opened.fell_over)
            relay = StreamRelay(opened, keep_usage=call.request.include_usage)
            chunks = self.relay_out(call, relay, report, purpose)
            return StreamReply(chunks, headers(relay.upstream.name, report))
        answer = await upstream.pass_on(body)  # sent on as it came: read, not parsed
        call.fell_over(answer.fell_over)
        _count_in_report(report, answer.completion_tokens, local=is_local)
        if is_local:
            call.record.server_spec = add_counts(
                call.record.server_spec, draft_counters(answer.timings)
            )
        n, prompt = answer.completion_tokens, answer.prompt_tokens
        call.count(answer.upstream, purpose, n, prompt, latency_s=answer.latency_s)
        _note_served(call, report, answer.tool_calls)
        return passed_reply(answer.content, answer.upstream, report)

    async def relay_out(
        self,
        call: Call,
        relay: StreamRelay,
        report: SpeculationReport | None,
        purpose: Purpose,
        check: LiveCheck | None = None,
    ) -> AsyncGenerator[bytes]:
        """The relayed stream, its finishing chunk carrying the proxy's fields; a stream
        that breaks ends with an error event and counts the request as an error."""
        is_local = relay.upstream.name == self.local.name
        chunks = relay.chunks()
        try:
            async for data in chunks:
                yield data
        finally:
            await chunks.aclose()
            n, prompt = relay.n_tokens, relay.prompt_tokens
            call.count(relay.upstream.name, purpose, n, prompt, estimated=relay.estimated)
            call.record.tool_calls = len(relay.tool_calls.calls())
            if relay.first_token_at is not None:
                call.record.first_token_s = relay.first_token_at - call.started
            if report is not None:  # a stream that breaks or is left has its reasons too
                call.record.reasons = report.reasons
            if is_local:
                spec = call.record.server_spec
                call.record.server_spec = add_counts(spec, relay.speculation)
        if relay.error is not None:
            call.fail(relay.error)
            call.finish(Outcome.ERROR)
            self.narrator.stream_broke(relay.error)
            yield event(relay.error.envelope()) + DONE
            return
        _count_in_report(report, relay.n_tokens, local=is_local)
        if check is not None and report is not None:
            self._compare_live(call, relay, report, check)
        yield relay.ending(proxy_fields(relay.upstream.name, report))

    def _compare_live(
        self, call: Call, relay: StreamRelay, report: SpeculationReport, check: LiveCheck
    ) -> None:
        text = relay.text
        score = similarity(check.draft.text, text, draft_complete=False)
        call.record.similarity, call.record.verify_s = score, time.perf_counter() - check.started
        report.similarity = score
        calls = tool_calls_of({"tool_calls": relay.tool_calls.calls()})
        judged = merge_draft(call, check.spec, check.draft, text, calls)
        call.record.agreement = report.agreement = judged.agreement
        self.note_verified(call, check.draft, text)
        self.narrator.verified(relay.n_tokens, len(text), score)

    def note_verified(self, call: Call, draft: DraftSignals, verified: str) -> None:
        """Token-level acceptance of the draft against the verified text."""
        pieces = [t.text for t in draft.tokens] or _WORD_PIECES.findall(draft.text)
        call.record.acceptance = token_acceptance(pieces, verified)
        if self.keeps_content:
            call.record.verified_text = verified


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


def _note_served(call: Call, report: SpeculationReport | None, tool_calls: int) -> None:
    """What the record keeps of an answer on its way: its tool calls, the report's reasons."""
    if report is not None:
        call.record.reasons = report.reasons
    call.record.tool_calls = tool_calls


def _count_in_report(report: SpeculationReport | None, n_tokens: int, *, local: bool) -> None:
    if report is not None:
        if local:
            report.draft_tokens = n_tokens
        else:
            report.verified_tokens = n_tokens
