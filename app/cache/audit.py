"""Hits re-asked of the cloud now and then: an entry the cloud no longer agrees with goes.

A sampled share of hits (``cache.audit_rate``) is asked of the cloud again in the
background, the request as the client sent it, whole. The cloud's new answer is judged
against the kept one by the proxy's agreement judge (``app.routing.agreement.agree``);
when it disagrees, the new answer replaces the entry. What the audit cost is charged as
an ``audit`` (``/stats`` → ``cost``) once it ends.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.background import Background
from app.cache.backends import Backend, keep
from app.cache.entry import Entry, encode, keepable
from app.cache.key import Keys
from app.errors import UpstreamError
from app.pricing import Late, Pricing
from app.record import Usage
from app.routing.agreement import agree
from app.telemetry import Telemetry
from app.upstreams import Upstream
from app.vocabulary import Purpose

log = logging.getLogger("specproxy.cache")
_STREAM_KEYS = ("stream", "stream_options")


@dataclass(slots=True)
class AuditCounts:
    """Audits of hits run, and entries they replaced."""

    audits: int = 0
    replaced: int = 0
    failed: int = 0


class HitAudits:
    """Starts audits of hits at ``rate`` and keeps them until they end."""

    def __init__(
        self,
        cloud: Upstream,
        backend: Backend,
        rate: float,
        pricing: Pricing,
        telemetry: Telemetry,
        rng: random.Random | None = None,
    ) -> None:
        self.cloud, self.backend, self.rate = cloud, backend, rate
        self.pricing, self.telemetry = pricing, telemetry
        self.rng = rng or random.Random()
        self.counts = AuditCounts()
        self.running: Background[None] = Background()

    def maybe(self, raw: Mapping[str, Any], keys: Keys, entry: Entry) -> None:
        """Audit this hit if it is drawn and the cloud may be called now."""
        if self.rate <= 0 or self.rng.random() >= self.rate:
            return
        if self.cloud.availability(0).blocked is not None:
            return
        self.running.start(self._audit(dict(raw), keys, entry), name="cache-audit")

    async def _audit(self, raw: dict[str, Any], keys: Keys, entry: Entry) -> None:
        body = {k: v for k, v in raw.items() if k not in _STREAM_KEYS}
        try:
            fresh = await self.cloud.complete(body)
        except UpstreamError as exc:
            self.counts.failed += 1
            log.info("cache: an audit of a hit failed: %s", exc.message)
            return
        self.counts.audits += 1
        n, prompt = fresh.completion_tokens, fresh.prompt_tokens
        spent = Usage(fresh.upstream, Purpose.AUDIT, prompt, n)
        self.telemetry.charge(Late(usages=(spent,), charges=(self.pricing.charge(spent),)))
        if agree(entry.text, fresh.text, prompt=keys.question).agrees:
            return
        if not keepable(fresh.body):
            return
        self.counts.replaced += 1
        log.info("cache: an audited entry no longer agrees with the cloud: replaced")
        renewed = Entry(
            body=fresh.body,
            model_used=fresh.upstream,
            question=entry.question,
            cloud_model=fresh.upstream,
            prompt_tokens=prompt,
            completion_tokens=n,
            stored_at=time.time(),
            key=entry.key or keys.exact,
        )
        # where the entry was kept (a near hit's own exact key is another)
        await keep(self.backend, renewed.key, keys.near, encode(renewed))

    async def close(self) -> None:
        """Cancel the audits still running (shutdown)."""
        await self.running.close()
