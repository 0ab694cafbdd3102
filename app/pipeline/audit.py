"""Audits: a share of the drafts served without verification is verified afterwards.

An accepted draft is served at once; with learning on, ``learner.audit_now()`` picks some
of them to be sent to the cloud in the background, after the answer has gone out. The
audit never delays or changes what the client got; its agreement is an unbiased label
(the drafts the scorer trusts are otherwise never checked) and feeds the estimate of
how often served drafts agree with the cloud (``/stats`` → ``learning.audits``). Its
cloud tokens are counted as audit spend. The request's spec-log line waits for it.
"""

from __future__ import annotations

import asyncio
import logging

from app.config import SpeculativeConfig
from app.errors import UpstreamError
from app.learning.learner import Learner
from app.pipeline.answer import merge_draft
from app.pipeline.call import Audited, Call
from app.pipeline.plan import CloudState
from app.record import Usage
from app.routing.signals import DraftSignals
from app.routing.tool_calls import tool_calls_of
from app.upstreams import Upstream
from app.vocabulary import Purpose

log = logging.getLogger("specproxy.learning")
_STREAM_KEYS = ("stream", "stream_options")


class Audits:
    """Starts audits and keeps them until they end (``close`` cancels the rest)."""

    def __init__(self, cloud: Upstream, spec: SpeculativeConfig, learner: Learner) -> None:
        self.cloud = cloud
        self.spec = spec
        self.learner = learner
        self.running: set[asyncio.Task[Audited | None]] = set()

    def maybe(
        self, call: Call, draft: DraftSignals, cloud: CloudState
    ) -> tuple[asyncio.Task[Audited | None] | None, float]:
        """Audit this accepted draft, if the learner picks it and the cloud may be called:
        the audit's task (its result is what it found; None if it failed) and the rate it
        was picked at (no task, rate 0: not audited)."""
        if cloud.blocked is not None or not self.learner.audit_now():
            return None, 0.0
        task = asyncio.create_task(self._audit(call, draft), name="audit")
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        return task, self.learner.audit_rate

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
        for task in list(self.running):
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
