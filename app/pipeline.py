"""The request pipeline: draft, decide, verify, merge, answer, record.

This is the only module that calls upstreams and telemetry. Decisions are
made by the pure functions in ``app.routing``; this module does the I/O
around them and writes the log lines the seed documents.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from app.composition import build_policy
from app.config import Settings
from app.depth_control import N_MAX_KEY, DepthControl
from app.errors import AllUpstreamsFailed, InvalidRequest, ProxyError, UpstreamError
from app.protocol import ChatCompletionRequest
from app.record import RequestRecord
from app.routing.acceptance import token_acceptance
from app.routing.classify import classify, prompt_text
from app.routing.features import draft_features
from app.routing.merge import merge, similarity
from app.routing.policy import decide, doomed_prefix, likely_spill
from app.routing.signals import ABORTED, DraftSignals, draft_signals
from app.sse import DONE, CompletionAssembler, completion_to_chunks, event
from app.telemetry import Telemetry
from app.telemetry.logs import request_id
from app.upstreams import ChatUpstream, Completion
from app.upstreams.base import Chunk
from app.vocabulary import ContextType, Outcome, Strategy

log = logging.getLogger("specproxy.pipeline")

_TOKEN_LIMITS = ("max_tokens", "max_completion_tokens", "n_predict")
_WORD_PIECES = re.compile(r"\s*\S+")
_CHUNK_FIELDS = frozenset(
    {"id", "object", "created", "model", "system_fingerprint", "choices", "usage"}
)


@dataclass(slots=True)
class SpeculationReport:
    """The ``speculative_decoding`` object added to responses (seed 004 fields + reasons)."""

    draft_tokens: int = 0
    verified_tokens: int = 0
    accepted: bool = False
    spilled_over: bool = False
    similarity: float | None = None
    reasons: list[str] = field(default_factory=list)
    degraded: bool = False

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.similarity is not None:
            data["similarity"] = round(self.similarity, 4)
        return data


@dataclass(slots=True)
class JSONReply:
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass(slots=True)
class StreamReply:
    chunks: AsyncIterator[bytes]
    headers: dict[str, str]


Reply = JSONReply | StreamReply


@dataclass(slots=True)
class OpenStream:
    """An upstream stream whose first batch of chunks has arrived."""

    upstream: ChatUpstream
    first: list[Chunk]
    rest: AsyncGenerator[list[Chunk]]


def _headers(model_used: str, report: SpeculationReport | None) -> dict[str, str]:
    headers = {"X-Model-Used": model_used}
    if report is not None:
        headers |= {
            "X-Draft-Accepted": str(report.accepted).lower(),
            "X-Spilled-Over": str(report.spilled_over).lower(),
            "X-Degraded": str(report.degraded).lower(),
            "X-Draft-Tokens": str(report.draft_tokens),
        }
        if report.similarity is not None:
            headers["X-Similarity"] = f"{report.similarity:.4f}"
    return headers


def draft_body(raw: dict[str, Any], budget: int, top_logprobs: int) -> dict[str, Any]:
    """The local draft request for a client body: its token limits replaced by ``budget``.

    Logprobs are always asked for because the decision reads per-token confidence.
    """
    body = {k: v for k, v in raw.items() if k not in _TOKEN_LIMITS and k != "stream_options"}
    body["max_tokens"] = budget
    body["logprobs"] = True
    body["top_logprobs"] = top_logprobs
    return body


class Pipeline:
    """Serves chat requests with one of the three strategies."""

    def __init__(
        self, settings: Settings, upstreams: dict[str, ChatUpstream], telemetry: Telemetry
    ) -> None:
        self.spec = settings.speculative_decoding
        self.policy = build_policy(self.spec)
        self.depth = DepthControl(settings, settings.logging.spec_adjust_log_file)
        # The context type is worked out before the decision only when the scorer reads it
        # (hedge: auto needs a scorer too) or adaptive depth is kept per context type.
        self._scorer_reads_context = self.policy.scorer is not None
        self.upstreams = upstreams
        self.local = upstreams[self.spec.draft_model]
        self.cloud = upstreams[self.spec.verify_model]
        self.telemetry = telemetry
        self.in_flight = 0  # requests started and not yet recorded (streams until their end)
        self._cloud_label = (
            "Cerebras" if self.cloud.config.provider == "cerebras" else self.cloud.name
        )

    # -- entry ---------------------------------------------------------------

    async def chat(
        self, raw: dict[str, Any], request: ChatCompletionRequest, strategy: Strategy
    ) -> Reply:
        """Answer one validated request; counts it in ``stats`` however it ends."""
        started = time.perf_counter()
        self.in_flight += 1
        rec = RequestRecord(
            strategy=strategy,
            stream=request.stream,
            request_id=request_id.get(),
            draft_model=self.local.name,
            verify_model=self.cloud.name,
        )
        try:
            if strategy is Strategy.SPECULATIVE:
                reply = await self._speculative(raw, request, rec)
            else:
                target = self.local if strategy is Strategy.LOCAL_ONLY else self.cloud
                reply = await self._direct(target, raw, request, rec)
        except BaseException as exc:
            rec.outcome = _failure_outcome(exc)
            self._finish(rec, started, raw)
            raise
        if isinstance(reply, StreamReply):
            reply.chunks = self._finish_after(reply.chunks, rec, started, raw)
        else:
            self._finish(rec, started, raw)
        return reply

    def _finish(self, rec: RequestRecord, started: float, raw: dict[str, Any]) -> None:
        rec.total_s = time.perf_counter() - started
        self.in_flight -= 1
        # Counted as soon as the answer is on its way, not before: call_soon runs it
        # ahead of anything the loop reads next (a /stats call included).
        asyncio.get_running_loop().call_soon(self._record, rec, raw)

    def _record(self, rec: RequestRecord, raw: dict[str, Any]) -> None:
        """Classify the request (unless the decision did) and count it."""
        if not rec.classified:
            self._classify(rec, raw)
        if rec.draft is not None and rec.features is None and self.telemetry.spec_log:
            rec.features = draft_features(
                rec.draft,
                markers=self.policy.uncertainty_markers,
                context_type=rec.context_type,
            )
        if self.telemetry.keeps_content:
            rec.prompt = prompt_text(raw["messages"])
        self.telemetry.record(rec)
        try:
            self.depth.observe(rec)
        except Exception:  # adaptive depth must never cost a request its record
            log.exception("adaptive depth failed to take a finished request")

    @staticmethod
    def _classify(rec: RequestRecord, raw: dict[str, Any]) -> ContextType:
        response_format = raw.get("response_format")
        json_mode = isinstance(response_format, dict) and response_format.get("type") != "text"
        context = classify(prompt_text(raw["messages"]), json_mode=json_mode)
        rec.context_type, rec.classified = context.value, True
        return context

    async def _finish_after(
        self, chunks: AsyncIterator[bytes], rec: RequestRecord, started: float, raw: dict[str, Any]
    ) -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            rec.outcome = Outcome.CLIENT_DISCONNECTED
            raise
        finally:
            self._finish(rec, started, raw)

    # -- local_only / cerebras_only -------------------------------------------

    async def _direct(
        self,
        upstream: ChatUpstream,
        raw: dict[str, Any],
        request: ChatCompletionRequest,
        rec: RequestRecord,
    ) -> Reply:
        try:
            reply = await self._answer_with(upstream, raw, request, rec, None)
        except UpstreamError as exc:
            self._note_failure(rec, exc)
            raise
        rec.outcome = Outcome.PASSED_THROUGH
        return reply

    # -- speculative_decoding ------------------------------------------------

    async def _speculative(
        self, raw: dict[str, Any], request: ChatCompletionRequest, rec: RequestRecord
    ) -> Reply:
        if (request.n or 1) > 1:
            raise InvalidRequest(
                "n > 1 is not supported by the speculative_decoding strategy; "
                "use X-Routing-Strategy: local_only or cerebras_only",
                param="n",
            )
        reads_context = self._scorer_reads_context or self.depth.reads_context
        context = self._classify(rec, raw) if reads_context else ContextType.PROSE
        budget = self.depth.draft_budget(context)
        if limit := request.token_limit:
            budget = min(budget, limit)
        hedge = self._hedge(raw, request, rec, context)
        try:
            return await self._speculate(raw, request, rec, budget, context, hedge)
        finally:
            if hedge is not None and not hedge.done():
                hedge.cancel()  # the draft won: the cloud call is the loser

    def _hedge(
        self,
        raw: dict[str, Any],
        request: ChatCompletionRequest,
        rec: RequestRecord,
        context: ContextType,
    ) -> asyncio.Task[Completion] | None:
        """The cloud call started alongside the draft, when a spill is likely (``hedge``)."""
        mode = self.spec.hedge
        if mode == "off" or (
            mode == "auto" and not likely_spill(self.policy, context, self.spec.hedge_min_prior)
        ):
            return None
        if not self._cloud_can_take_over():
            return None  # the verify step says why, if the draft needs the cloud
        log.info("Hedging: calling %s alongside the draft", self._cloud_label)
        rec.hedged = True
        task = asyncio.ensure_future(self.cloud.complete(raw))
        task.add_done_callback(_retrieve)
        return task

    def _cloud_can_take_over(self) -> bool:
        """Whether a cloud call could go out now: a key, the circuit not open, budget left.

        Side-effect free (no probe is taken, nothing is logged).
        """
        if self.cloud.unavailable_reason or self.cloud.breaker.retry_in() > 0:
            return False
        reserve = self.cloud.config.rate_limit_reserve
        return self.cloud.budget.low(reserve.tokens, reserve.requests, 0) is None

    def _cloud_blocked(self, rec: RequestRecord, request: ChatCompletionRequest) -> str | None:
        """Why the cloud must not be called now (no key, rate budget low), or None; logged."""
        if reason := self.cloud.unavailable_reason:
            log.warning("Verification is off: %s: %s", self.cloud.name, reason)
            return "verifier_unavailable"
        reserve = self.cloud.config.rate_limit_reserve
        need = rec.prompt_tokens + (request.token_limit or 0)
        if reason := self.cloud.budget.low(reserve.tokens, reserve.requests, need):
            log.warning("Not verifying: %s rate limit nearly spent: %s", self.cloud.name, reason)
            return "cloud_budget_low"
        return None

    async def _speculate(
        self,
        raw: dict[str, Any],
        request: ChatCompletionRequest,
        rec: RequestRecord,
        budget: int,
        context: ContextType,
        hedge: asyncio.Task[Completion] | None,
    ) -> Reply:
        log.info("=== SPECULATIVE DECODING START ===")
        log.info("Step 1: Generating draft from local model (max %d tokens)", budget)
        body = self._steer(self._draft_body(raw, request, budget), rec, context)
        try:
            draft = await self._draft_unless_cloud_first(body, context, hedge)
        except UpstreamError as exc:
            self._note_failure(rec, exc)
            log.warning("Draft failed (%s); going straight to %s", exc.message, self._cloud_label)
            return await self._cloud_instead(raw, request, rec, exc, hedge)
        if draft is None:
            assert hedge is not None
            log.info("Hedged cloud answer came first; draft cancelled")
            return self._serve_verified(hedge.result(), request, rec, ["hedged", "cloud_first"])

        signals = draft_signals(draft.body, budget)
        rec.draft, rec.draft_s = signals, draft.latency_s
        rec.local_tokens += signals.n_tokens
        rec.prompt_tokens = int((draft.body.get("usage") or {}).get("prompt_tokens") or 0)
        rec.server_spec = _server_speculation(draft.body)
        log.info("Draft generated: %d tokens, %d chars", signals.n_tokens, len(signals.text))
        decision = decide(signals, self.policy, context)
        rec.decision_reasons = tuple(map(str, decision.reasons))
        rec.spill_score, rec.features = decision.score, decision.features
        if decision.accept:
            log.info("Draft within acceptable range, skipping verification")
            log.info("Draft accepted without verification (short/simple response)")
            rec.outcome = Outcome.ACCEPTED
            report = SpeculationReport(
                draft_tokens=signals.n_tokens, accepted=True, reasons=["passed_checks"]
            )
            return self._serve(draft.body, request, self.local.name, report, rec, from_draft=True)

        log.info("Draft needs verification: %s", "; ".join(decision.details))
        if hedge is not None and hedge.done() and (hedge.cancelled() or hedge.exception()):
            failure = None if hedge.cancelled() else hedge.exception()
            if isinstance(failure, UpstreamError):
                self._note_failure(rec, failure)
            hedge = None  # it failed: verify as without hedging (a fresh call, if allowed)
        reasons = [str(r) for r in decision.reasons] + (["hedged"] if hedge else [])
        if hedge is None and (blocked := self._cloud_blocked(rec, request)):
            return await self._degrade(raw, request, rec, draft, signals, [*reasons, blocked])
        log.info("Step 2: Verifying draft with %s model", self._cloud_label)
        if request.stream and signals.partial and hedge is None:
            # A partial draft can never be served, so nothing is gained by
            # waiting for the whole verified answer: pass it through live.
            return await self._verify_live(raw, request, rec, signals, reasons)
        try:
            verified = await (hedge if hedge is not None else self.cloud.complete(raw))
        except UpstreamError as exc:
            self._note_failure(rec, exc)
            log.warning("Verification failed (%s); serving the local answer", exc.message)
            return await self._degrade(
                raw, request, rec, draft, signals, [*reasons, "verifier_failed"]
            )

        rec.verify_s = verified.latency_s
        rec.cloud_tokens += verified.completion_tokens
        self._note_verified(rec, signals, verified.text)
        log.info(
            "Verification response: %d tokens, %d chars",
            verified.completion_tokens,
            len(verified.text),
        )
        result = merge(
            signals.text,
            verified.text,
            draft_complete=not signals.partial,
            min_confidence=self.spec.min_confidence,
        )
        rec.similarity = result.similarity
        report = SpeculationReport(
            draft_tokens=signals.n_tokens,
            verified_tokens=verified.completion_tokens,
            similarity=result.similarity,
            reasons=[*reasons, result.reason],
        )
        if result.use_draft:
            log.info("Responses similar (%.2f), using draft", result.similarity)
            rec.outcome = Outcome.VERIFIED_DRAFT_USED
            log.info("Spilled over: False")
            return self._serve(draft.body, request, self.local.name, report, rec, from_draft=True)
        log.info("Responses differ (%.2f), using verified response", result.similarity)
        log.info("Spilled over: True")
        rec.outcome = Outcome.SPILLED_OVER
        report.spilled_over = True
        return self._serve(verified.body, request, self.cloud.name, report, rec, from_draft=False)

    async def _draft_unless_cloud_first(
        self, body: dict[str, Any], context: ContextType, hedge: asyncio.Task[Completion] | None
    ) -> Completion | None:
        """The draft; None when the hedged cloud answer came first (the draft is cancelled).

        A hedge that fails first changes nothing: the draft decides, as without hedging.
        """
        if hedge is None:
            return await self._draft(body, context)
        drafting = asyncio.ensure_future(self._draft(body, context))
        drafting.add_done_callback(_retrieve)
        try:
            await asyncio.wait((drafting, hedge), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            drafting.cancel()  # we were cancelled ourselves (client gone)
            raise
        if not drafting.done() and not hedge.cancelled() and hedge.exception() is None:
            drafting.cancel()  # the cloud answered first: the draft lost
            await asyncio.wait((drafting,))  # let it close its stream; our own cancel still raises
            return None
        return await drafting

    async def _draft(self, body: dict[str, Any], context: ContextType) -> Completion:
        """The local draft, whole; with ``early_abort`` (and a cloud to go to), streamed and
        stopped (finish_reason ``p_min``) at the first token under ``abort_min_token_prob``
        or, with ``abort_min_score``, when the scorer already doubts the draft so far that
        much."""
        if not self.spec.early_abort or not self._cloud_can_take_over():
            # Stopping a draft only helps when the cloud can take over.
            return await self.local.complete(body)
        started = time.perf_counter()
        floor = math.log(p) if (p := self.spec.abort_min_token_prob) > 0 else -math.inf
        every, min_score = self.spec.abort_check_tokens, self.spec.abort_min_score
        next_check = every
        assembler = CompletionAssembler()
        finish: str | None = None
        chunks = self.local.stream(body)
        try:
            async for batch in chunks:
                for chunk in batch:
                    assert isinstance(chunk, dict)  # streamed without ``unread``
                    entries = assembler.add(chunk)
                    if any(e.get("token") and e["logprob"] < floor for e in entries):
                        finish = ABORTED
                    elif min_score is not None and len(assembler.logprobs) >= next_check:
                        next_check = len(assembler.logprobs) + every
                        prefix = draft_signals(assembler.completion(), body["max_tokens"])
                        if doomed_prefix(prefix, self.policy, context, min_score) is not None:
                            finish = ABORTED
                    if finish:
                        break
                if finish:
                    break
        finally:
            await chunks.aclose()  # an aborted draft's connection closes: llama-server stops
        if finish is None and assembler.finish_reason is None:
            raise UpstreamError(self.local.name, "draft stream ended before finish_reason")
        return Completion(assembler.completion(finish), {}, time.perf_counter() - started)

    def _serve_verified(
        self,
        verified: Completion,
        request: ChatCompletionRequest,
        rec: RequestRecord,
        reasons: list[str],
    ) -> Reply:
        """Serve the cloud's answer when no draft is there to compare (hedge came first)."""
        rec.verify_s = verified.latency_s
        rec.cloud_tokens += verified.completion_tokens
        rec.outcome = Outcome.SPILLED_OVER
        report = SpeculationReport(
            verified_tokens=verified.completion_tokens, spilled_over=True, reasons=reasons
        )
        return self._serve(verified.body, request, self.cloud.name, report, rec, from_draft=False)

    async def _verify_live(
        self,
        raw: dict[str, Any],
        request: ChatCompletionRequest,
        rec: RequestRecord,
        signals: DraftSignals,
        doubts: list[str],
    ) -> Reply:
        reasons = [*doubts, "draft_truncated" if signals.truncated else "draft_aborted"]
        started = time.perf_counter()
        try:
            opened = await self._open_stream(self.cloud, raw)
        except UpstreamError as exc:
            self._note_failure(rec, exc)
            log.warning("Verification failed (%s); continuing on the local model", exc.message)
            failed = [*doubts, "verifier_failed"]
            return await self._continue_locally(raw, request, rec, signals, failed)
        log.info("Spilled over: True (streaming the verified answer live)")
        rec.outcome = Outcome.SPILLED_OVER

        def final_fields(text: str, n_tokens: int) -> dict[str, Any]:
            score = similarity(signals.text, text, draft_complete=False)
            rec.similarity, rec.verify_s = score, time.perf_counter() - started
            self._note_verified(rec, signals, text)
            log.info(
                "Verification response: %d tokens, %d chars (similarity %.2f)",
                n_tokens,
                len(text),
                score,
            )
            report = SpeculationReport(
                draft_tokens=signals.n_tokens,
                verified_tokens=n_tokens,
                spilled_over=True,
                similarity=score,
                reasons=reasons,
            )
            return self._fields(self.cloud.name, report, rec)

        headers = _headers(
            self.cloud.name,
            SpeculationReport(draft_tokens=signals.n_tokens, spilled_over=True, reasons=reasons),
        )
        return StreamReply(
            self._relay(opened, rec, final_fields, keep_usage=request.include_usage), headers
        )

    async def _cloud_instead(
        self,
        raw: dict[str, Any],
        request: ChatCompletionRequest,
        rec: RequestRecord,
        local_failure: UpstreamError,
        hedge: asyncio.Task[Completion] | None = None,
    ) -> Reply:
        """The local model failed: the verifier answers alone, or both failures are reported."""
        reasons = ["local_unavailable"]
        try:
            if hedge is not None:  # already asked: its answer is the one to serve
                reply = self._serve_verified(await hedge, request, rec, [*reasons, "hedged"])
            else:
                report = SpeculationReport(spilled_over=True, reasons=reasons)
                reply = await self._answer_with(self.cloud, raw, request, rec, report)
        except UpstreamError as exc:
            self._note_failure(rec, exc)
            raise AllUpstreamsFailed([local_failure, exc]) from exc
        rec.outcome = Outcome.LOCAL_DOWN_CLOUD_USED
        return reply

    async def _degrade(
        self,
        raw: dict[str, Any],
        request: ChatCompletionRequest,
        rec: RequestRecord,
        draft: Completion,
        signals: DraftSignals,
        reasons: list[str],
    ) -> Reply:
        """The verifier cannot answer: serve the draft if it is whole, else continue locally."""
        limit = request.token_limit
        whole_for_client = signals.truncated and limit is not None and limit <= signals.budget
        if not signals.partial or whole_for_client:
            rec.outcome = Outcome.DEGRADED
            report = SpeculationReport(
                draft_tokens=signals.n_tokens, reasons=reasons, degraded=True
            )
            return self._serve(draft.body, request, self.local.name, report, rec, from_draft=True)
        return await self._continue_locally(raw, request, rec, signals, reasons, draft)

    async def _continue_locally(
        self,
        raw: dict[str, Any],
        request: ChatCompletionRequest,
        rec: RequestRecord,
        signals: DraftSignals,
        reasons: list[str],
        draft: Completion | None = None,
    ) -> Reply:
        """Generate the local answer to the client's own budget, marked degraded."""
        log.info("Continuing on the local model to the client's budget (degraded)")
        rec.outcome = Outcome.DEGRADED
        report = SpeculationReport(
            draft_tokens=signals.n_tokens, reasons=[*reasons, "local_continuation"], degraded=True
        )
        try:
            return await self._answer_with(self.local, raw, request, rec, report)
        except UpstreamError as exc:
            self._note_failure(rec, exc)
            if draft is None:
                raise
            # Both failed after a draft was made: a truncated answer beats none.
            log.warning(
                "Local continuation failed too (%s); serving the truncated draft", exc.message
            )
            report.reasons[-1] = "truncated_draft_served"
            return self._serve(draft.body, request, self.local.name, report, rec, from_draft=True)

    # -- answering -----------------------------------------------------------

    async def _answer_with(
        self,
        upstream: ChatUpstream,
        raw: dict[str, Any],
        request: ChatCompletionRequest,
        rec: RequestRecord,
        report: SpeculationReport | None,
    ) -> Reply:
        """``upstream``'s own answer to the client's request, streamed or not, with the
        proxy's fields (``report`` is None outside the speculative strategy)."""
        is_local = upstream is self.local
        if is_local and self.depth.steers_server:
            context = rec.context_type if rec.classified else self._classify(rec, raw)
            raw = self._steer(raw, rec, ContextType(context))

        def count(n_tokens: int) -> None:
            if report is not None:
                if is_local:
                    report.draft_tokens = n_tokens
                else:
                    report.verified_tokens = n_tokens

        if request.stream:
            # The text is not needed here, and the usage chunk gives the count.
            opened = await self._open_stream(upstream, raw, unread=upstream.streams_usage)

            def final_fields(text: str, n_tokens: int) -> dict[str, Any]:
                count(n_tokens)
                return self._fields(upstream.name, report, rec)

            return StreamReply(
                self._relay(opened, rec, final_fields, keep_usage=request.include_usage),
                _headers(upstream.name, report),
            )
        completion = await upstream.complete(raw)
        count(completion.completion_tokens)
        if is_local:
            rec.server_spec = add_speculation(rec.server_spec, completion.body)
        self._count_tokens(rec, completion.completion_tokens, is_local, completion.latency_s)
        return self._serve(completion.body, request, upstream.name, report, rec, from_draft=False)

    @staticmethod
    def _fields(
        model_used: str, report: SpeculationReport | None, rec: RequestRecord
    ) -> dict[str, Any]:
        """The proxy's fields on a response (and the reasons it records)."""
        if report is None:
            return {"model_used": model_used}
        rec.reasons = report.reasons
        return {"model_used": model_used, "speculative_decoding": report.as_dict()}

    def _steer(
        self, body: dict[str, Any], rec: RequestRecord, context: ContextType
    ) -> dict[str, Any]:
        """``body`` with adaptive K as ``speculative.n_max``; a client's own value is kept."""
        depth = self.depth.server_depth(context)
        if depth is None or N_MAX_KEY in body:
            return body
        rec.server_depth = depth
        return {**body, N_MAX_KEY: depth}

    def _draft_body(
        self, raw: dict[str, Any], request: ChatCompletionRequest, budget: int
    ) -> dict[str, Any]:
        return draft_body(raw, budget, max(request.top_logprobs or 0, self.spec.top_logprobs))

    def _serve(
        self,
        body: dict[str, Any],
        request: ChatCompletionRequest,
        model_used: str,
        report: SpeculationReport | None,
        rec: RequestRecord,
        *,
        from_draft: bool,
    ) -> Reply:
        if from_draft and not request.logprobs:
            # The draft asked for logprobs for the proxy's sake, not the client's.
            body = {**body, "choices": [{**c, "logprobs": None} for c in body["choices"]]}
        extra = self._fields(model_used, report, rec)
        headers = _headers(model_used, report)
        if not request.stream:
            return JSONReply({**body, **extra}, headers)
        chunks = completion_to_chunks(
            body,
            with_logprobs=bool(request.logprobs),
            include_usage=request.include_usage,
            extra=extra,
        )
        return StreamReply(_replay(chunks), headers)

    async def _open_stream(
        self, upstream: ChatUpstream, raw: dict[str, Any], *, unread: bool = False
    ) -> OpenStream:
        """Start a stream and wait for its first chunk, so failures are still HTTP errors."""
        chunks = upstream.stream(raw, unread=unread)
        try:
            return OpenStream(upstream, await anext(chunks), chunks)
        except StopAsyncIteration:
            raise UpstreamError(upstream.name, "stream ended before any chunk") from None
        except BaseException:
            await chunks.aclose()
            raise

    async def _relay(
        self,
        stream: OpenStream,
        rec: RequestRecord,
        final_fields: Callable[[str, int], dict[str, Any]],
        *,
        keep_usage: bool,
    ) -> AsyncIterator[bytes]:
        """Pass an upstream stream on, adding the proxy's fields to the finishing chunk.

        The chunk with ``finish_reason`` is held until the stream ends: llama-server
        sends ``usage`` in a later ``choices: []`` chunk, and the counts belong in
        the proxy's fields. Only that last stretch is delayed, never content.
        Chunks that came unread (bytes) are passed on as they came; they count as
        one token each only if the stream breaks before its usage.
        """
        text: list[str] = []
        n_content = 0
        reported: int | None = None
        held: dict[str, Any] | None = None
        tail: list[bytes] = []
        try:
            batch: list[Chunk] | None = stream.first
            while batch is not None:
                out: list[bytes] = []  # one write per network read
                for chunk in batch:
                    if isinstance(chunk, bytes):
                        n_content += 1
                        (out if held is None else tail).append(b"data: " + chunk + b"\n\n")
                        continue
                    if usage := chunk.get("usage"):
                        reported = usage.get("completion_tokens", reported)
                    if stream.upstream is self.local and "timings" in chunk:
                        rec.server_spec = add_speculation(rec.server_spec, chunk)
                    choices = chunk.get("choices") or []
                    if held is not None:
                        if choices or keep_usage:
                            tail.append(event(chunk))
                        else:  # a usage chunk only the proxy asked for: keep its extras
                            extras = {k: v for k, v in chunk.items() if k not in _CHUNK_FIELDS}
                            held = {**held, **extras}
                    else:
                        if choices and (piece := (choices[0].get("delta") or {}).get("content")):
                            text.append(piece)
                            n_content += 1
                        if choices and choices[0].get("finish_reason"):
                            held = chunk
                        else:
                            out.append(event(chunk))
                if out:
                    yield b"".join(out)
                batch = await anext(stream.rest, None)
            if held is None:
                # [DONE] is optional (Cerebras), so only a missing finish_reason shows a cut.
                raise UpstreamError(stream.upstream.name, "stream ended before finish_reason")
            last = {**held, **final_fields("".join(text), reported or n_content)}
            yield b"".join([event(last), *tail, DONE])
        except UpstreamError as exc:
            self._note_failure(rec, exc)
            rec.outcome = Outcome.ERROR
            log.warning("Stream from %s broke: %s", exc.upstream, exc.message)
            yield event(exc.envelope()) + DONE
        finally:
            await stream.rest.aclose()
            self._count_tokens(rec, reported or n_content, stream.upstream is self.local, None)

    # -- bookkeeping ---------------------------------------------------------

    @staticmethod
    def _count_tokens(rec: RequestRecord, n: int, local: bool, latency_s: float | None) -> None:
        if local:
            rec.local_tokens += n
            rec.draft_s = rec.draft_s or latency_s
        else:
            rec.cloud_tokens += n
            rec.verify_s = rec.verify_s or latency_s

    def _note_verified(self, rec: RequestRecord, signals: DraftSignals, verified: str) -> None:
        """Token-level acceptance of the draft against the verified text."""
        pieces = [t.text for t in signals.tokens] or _WORD_PIECES.findall(signals.text)
        rec.acceptance = token_acceptance(pieces, verified)
        if self.telemetry.keeps_content:
            rec.verified_text = verified

    @staticmethod
    def _note_failure(rec: RequestRecord, exc: UpstreamError) -> None:
        rec.upstream_errors.append((exc.upstream, exc.kind))


def _failure_outcome(exc: BaseException) -> Outcome:
    """How a request that raised is counted: the client's mistake, gone, or an error."""
    if isinstance(exc, asyncio.CancelledError):
        return Outcome.CLIENT_DISCONNECTED
    if isinstance(exc, ProxyError) and exc.status < 500 and exc.status != 429:
        return Outcome.CLIENT_ERROR
    return Outcome.ERROR


def _server_speculation(body: dict[str, Any]) -> dict[str, int] | None:
    """llama-server's own draft counters, when it speculates with a draft model."""
    timings = body.get("timings") or {}
    if "draft_n" not in timings:
        return None
    return {"draft_n": timings["draft_n"], "draft_n_accepted": timings.get("draft_n_accepted", 0)}


def add_speculation(seen: dict[str, int] | None, body: dict[str, Any]) -> dict[str, int] | None:
    """llama-server's draft counters of one more local answer (a continuation after the
    draft) added to those already seen."""
    more = _server_speculation(body)
    if seen is None or more is None:
        return more or seen
    return {key: seen[key] + more[key] for key in seen}


def _retrieve(task: asyncio.Future[Completion]) -> None:
    """Mark a race's failure as seen: a lost race's error is not worth a loop warning."""
    if not task.cancelled():
        task.exception()


async def _replay(chunks: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    """A finished answer's stream, in one write: it is all there already."""
    yield b"".join([*map(event, chunks), DONE])
