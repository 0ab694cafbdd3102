"""The draft checked against the cloud's answer: merged with a whole one, compared with
one streamed live, or audited in the background after it was served.

``merged`` and ``compare_live`` return the comparison as a ``Compared`` event (similarity,
agreement, token-level acceptance; the verified text when the spec log keeps content);
the speculator adds it to the story. Audits: with learning on, ``learner.audit_now()``
picks some served drafts to send to the cloud in the background, after the answer has
gone out, never delaying or changing it: an unbiased label (the drafts the scorer trusts
are otherwise never checked), counted as audit spend, feeding ``/stats`` →
``learning.audits``; the request's spec-log line waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from app.background import Background
from app.call import Call
from app.config import SpeculativeConfig
from app.errors import UpstreamError
from app.learning.learner import Learner
from app.pipeline.drafting import FirstToken
from app.pipeline.hedge import Hedge, retrieve
from app.record import Usage
from app.routing.acceptance import token_acceptance
from app.routing.merge import MergeResult, merge, similarity
from app.routing.plan import EXPLORED, GATED, UNHELD, Plan
from app.routing.policy import Judge
from app.routing.signals import DraftSignals, draft_signals
from app.routing.tool_calls import ToolCall, tool_calls_of
from app.sse import CompletionAssembler
from app.story import Audited, Compared, Counted, Event, LateDraft, cloud_counted
from app.upstreams import Completion, Upstream
from app.upstreams.relay import StreamRelay
from app.vocabulary import CloudState, Purpose
from app.wire import draft_body

log = logging.getLogger("specproxy.learning")
_STREAM_KEYS = ("stream", "stream_options")
_WORD_PIECES = re.compile(r"\s*\S+")


@dataclass(frozen=True, slots=True)
class LiveCheck:
    """A draft whose verification is being streamed live: compared once it has all come."""

    draft: DraftSignals
    started: float
    spec: SpeculativeConfig


def compare_live(check: LiveCheck, relay: StreamRelay, call: Call, keeps_content: bool) -> Compared:
    """A draft compared with the verification that was streamed live, once it has all come."""
    text = relay.text
    score = similarity(check.draft.text, text, draft_complete=False)
    calls = tool_calls_of({"tool_calls": relay.tool_calls.calls()})
    judged = merge_draft(call, check.spec, check.draft, text, calls)
    return compare(
        check.draft,
        text,
        keeps_content=keeps_content,
        similarity=score,
        agreement=judged.agreement,
        verify_s=time.perf_counter() - check.started,
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


def merged(
    call: Call,
    spec: SpeculativeConfig,
    draft: DraftSignals,
    verified: Completion,
    violation: str | None,
    keeps_content: bool,
    *,
    hedged: bool,
) -> tuple[Compared, list[Event]]:
    """A whole draft merged with the cloud's whole answer: the comparison (``use_draft``:
    the draft is served) and the cloud's tokens (the hedge's, or spent on verifying or
    spilling)."""
    calls = tool_calls_of(verified.choice.get("message"))
    result = merge_draft(call, spec, draft, verified.text, calls, violation)
    compared = compare(
        draft,
        verified.text,
        keeps_content=keeps_content,
        similarity=result.similarity,
        agreement=result.agreement,
        n_tokens=verified.completion_tokens,
        use_draft=result.use_draft,
        reason=result.reason,
        upstream=verified.upstream,
        fell_over=verified.fell_over,
    )
    served = Purpose.VERIFICATION if result.use_draft else Purpose.SPILL
    return compared, cloud_counted(verified, Purpose.HEDGE if hedged else served)


class Audits:
    """Starts audits and keeps them until they end (``close`` cancels the rest)."""

    def __init__(self, cloud: Upstream, spec: SpeculativeConfig, learner: Learner) -> None:
        self.cloud, self.spec, self.learner = cloud, spec, learner
        self.running: Background[Audited | None] = Background()

    def maybe(
        self, call: Call, draft: DraftSignals, cloud: CloudState
    ) -> tuple[asyncio.Task[Audited | None] | None, float]:
        """Audit this accepted draft, if the learner picks it and the cloud may be called:
        the audit's task (its result is what it found; None if it failed) and the rate it
        was picked at (no task, rate 0: not audited)."""
        if cloud.blocked is not None or not self.learner.audit_now():
            return None, 0.0
        return self.running.start(self._audit(call, draft), name="audit"), self.learner.audit_rate

    async def _audit(self, call: Call, draft: DraftSignals) -> Audited | None:
        body = {k: v for k, v in call.raw.items() if k not in _STREAM_KEYS}
        try:
            verified = await self.cloud.complete(body)
        except UpstreamError as exc:
            self.learner.audited(0, failed=True)
            log.info("Audit of request %s failed: %s", call.record.request_id, exc.message)
            return None
        calls = tool_calls_of(verified.choice.get("message"))
        result = merge_draft(call, self.spec, draft, verified.text, calls)
        n, prompt = verified.completion_tokens, verified.prompt_tokens
        self.learner.audited(n)
        return Audited(result.agreement, Usage(verified.upstream, Purpose.AUDIT, prompt, n))

    async def close(self) -> None:
        """Cancel the audits still running (shutdown); their requests are logged anyway."""
        await self.running.close()


class LateDrafts:
    """Drafts whose stream was relayed from the cloud (first-token budget spent), left
    running, and drafts made beside the cloud's answer (``explore``: the gate's cloud lane
    for ``gate.explore``, and every unheld request while no threshold holds the target):
    each judged against the cloud's served answer as a verification would, a label for the
    learner (never served). At most ``learning.late_drafts`` at once (none without a
    learner); bounded by the draft's budget; ``close`` cancels the rest. The client's
    answer never waits for one: it is the cloud's, as it comes."""

    def __init__(
        self, local: Upstream, cloud: Upstream, spec: SpeculativeConfig, learner: Learner | None
    ) -> None:
        self.upstream, self.cloud, self.local = local, cloud, local.name
        self.spec, self.learner = spec, learner
        self.cap = learner.config.late_drafts if learner is not None else 0
        self.running: Background[LateDraft | None] = Background()

    @property
    def room(self) -> bool:
        """Whether one more draft may finish late (else it is cancelled, as before)."""
        return len(self.running) < self.cap

    def adopt(
        self,
        call: Call,
        first_token: FirstToken | None,
        judge: Judge,
        budget: int,
        hedge: Hedge,
        progress: CompletionAssembler,
    ) -> asyncio.Task[LateDraft | None] | None:
        """Finish the draft the race left running (``first_token.late``) in the background:
        its task (the record takes its ``LateDraft`` if it ended first: ``told``); its tokens
        so far (``progress``) were counted when it was stopped."""
        if first_token is None or (draft := first_token.late) is None:
            return None
        if not self.room:  # taken meanwhile: cancelled, as without late drafts
            draft.cancel()
            return None
        counted = len(progress.logprobs) or progress.token_chunks  # as ``Drafter.stopped``
        limits = (budget, call.request.token_limit)  # read now: let go once answered
        return self.running.start(self._label(call, draft, judge, limits, hedge, counted))

    def explore(
        self, call: Call, judge: Judge, budget: int, hedge: Hedge, *, unheld: bool = False
    ) -> tuple[Plan, Hedge]:
        """``GATED`` (a fresh cloud call), or for the ``explore`` share ``EXPLORED``: the one
        call made as a hedge (served) and a draft beside it, for a label (``call.late``).
        ``unheld`` (no threshold holds): ``UNHELD``, that for every request while a slot is
        free, the label weighing 1."""
        if self.learner is None or not self.room or not (unheld or self.learner.explore_now()):
            return GATED, hedge
        hedge = (Hedge.stream if call.request.stream else Hedge.start)(self.cloud, call.raw)
        top = max(call.request.top_logprobs or 0, self.spec.top_logprobs)
        draft = asyncio.ensure_future(self.upstream.complete(draft_body(call.raw, budget, top)))
        draft.add_done_callback(retrieve)
        limits = (budget, call.request.token_limit)
        explored = not unheld  # drawn at the explore share: weighs 1 / explore
        call.late = self.running.start(self._label(call, draft, judge, limits, hedge, 0, explored))
        return UNHELD if unheld else EXPLORED, hedge

    async def _label(
        self,
        call: Call,
        draft_task: asyncio.Future[Completion],
        judge: Judge,
        limits: tuple[int, int | None],
        hedge: Hedge,
        counted: int,
        explored: bool = False,
    ) -> LateDraft | None:
        """The draft (``limits``: its budget, the client's own) judged against the cloud's
        whole answer: a label when it can be judged, and its tokens whatever it made; None:
        either failed (the draft cancelled: nothing known of it)."""
        assert self.learner is not None
        try:
            verified = await hedge.ended()
            if verified is None:  # the cloud's stream broke, or the client left
                return None
            draft = await draft_task
        except UpstreamError:
            return None
        finally:
            draft_task.cancel()  # nothing to label it against, or shutdown (ended: no-op)
        signals = draft_signals(draft.body, *limits)
        # its prompt too: no count of it was taken (a stopped draft's tokens so far were
        # estimated, with no prompt)
        more = max(signals.n_tokens - counted, 0)
        tokens = Counted(self.local, Purpose.DRAFT, more, draft.prompt_tokens or 0)
        decision = judge.decide(signals)
        violation = call.contract().violation(signals.text, signals.tool_calls)
        calls = tool_calls_of(verified.choice.get("message"))
        result = merge_draft(call, self.spec, signals, verified.text, calls, violation)
        # not scored (cut at the budget) or not judged: no label, as a verification's
        if decision.features is not None and (agreed := result.agreement) is not None:
            ngrams = judge.request.ngrams if judge.request is not None else ()
            context = judge.context.value
            self.learner.observe_late(decision.features, ngrams, context, agreed, explored)
        return LateDraft(result.agreement, tokens)

    @staticmethod
    def told(task: asyncio.Task[LateDraft | None] | None) -> list[Event]:
        """A late draft's story if it has ended (its label is the learner's either way)."""
        if task is None or not task.done() or task.cancelled() or task.exception():
            return []
        return [late] if (late := task.result()) is not None else []

    async def close(self) -> None:
        """Cancel the drafts still finishing (shutdown): no label from them."""
        await self.running.close()
