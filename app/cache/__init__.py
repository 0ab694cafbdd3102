"""The cache of verified answers (docs/cache.md): looked up before any upstream work,
filled once a request's record says its answer was a verified one.

The pipeline calls three things: ``look`` before the strategy runs (a hit is the reply,
``CacheLooked`` its event), ``Looked.catch`` on a fresh reply (``X-Cache``, and its
content kept as it goes out) and ``settle`` once the record is written (the answer kept
when ``entry.storable`` says so; a hit perhaps audited). The pure parts are
``key`` (the canonical form, scoped and hashed) and ``guard`` (near hits' fact guard);
``backends`` holds the memory and Redis stores behind one protocol.

The client steers it with ``Cache-Control``: ``no-cache`` skips the look-up but the
answer may be kept; ``no-store`` does neither. Both are ``X-Cache: bypass``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.cache.audit import HitAudits
from app.cache.backends import Backend, MemoryBackend, RedisBackend, keep, through_near
from app.cache.entry import Entry, cloud_usage, decode, encode, storable
from app.cache.guard import near_match
from app.cache.key import ANONYMOUS, Keys, keys_of, scope_of
from app.cache.replay import HIT_REASONS, Caught, replayed
from app.config import CacheConfig, StateConfig
from app.record import Usage
from app.story import CacheLooked, Event, Finished, Served
from app.vocabulary import Outcome, Purpose, Strategy
from app.wire import Reply

if TYPE_CHECKING:
    from app.call import Call
    from app.pricing import Pricing
    from app.telemetry import Telemetry
    from app.upstreams import Upstream

__all__ = ["AnswerCache", "CacheAsk", "Looked", "MemoryBackend", "RedisBackend", "cache_ask"]
log = logging.getLogger("specproxy.cache")
CACHED_STRATEGIES = frozenset({Strategy.SPECULATIVE, Strategy.CEREBRAS_ONLY})


@dataclass(frozen=True, slots=True)
class CacheAsk:
    """What the client's headers ask of the cache: its scope (hashed key) and control."""

    scope: str = ANONYMOUS
    read: bool = True  # Cache-Control: no-cache / no-store turn it off
    store: bool = True  # Cache-Control: no-store turns it off

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> CacheAsk:
        """From ``Authorization`` and ``Cache-Control``."""
        control = {d.strip().lower() for d in headers.get("cache-control", "").split(",")}
        no_store = "no-store" in control
        return cls(
            scope_of(headers.get("authorization")),
            read=not (no_store or "no-cache" in control),
            store=not no_store,
        )


# The request's ask, set where its headers are read (``app.api.deps.chat_call``), as the
# request id is: the pipeline's ``chat`` is called with the body alone.
cache_ask: ContextVar[CacheAsk | None] = ContextVar("cache_ask", default=None)


@dataclass(slots=True, eq=False)
class Looked:
    """The look-up's result: the events to add, a hit's reply, what a fresh answer may
    keep (``caught``: None, nothing)."""

    events: tuple[Event, ...] = ()
    reply: Reply | None = None
    keys: Keys | None = None
    entry: Entry | None = None
    result: str | None = None
    caught: Caught | None = None

    def catch(self, out: Reply) -> Reply:
        """A fresh reply with its ``X-Cache`` header, kept as it goes when it may be."""
        if self.result is None:
            return out
        if self.caught is None:
            out.headers["X-Cache"] = self.result
            return out
        return self.caught.catch(out, self.result)


class AnswerCache:
    """Looks up, replays and keeps verified answers (``enabled`` false: asks nothing)."""

    def __init__(
        self,
        config: CacheConfig,
        backend: Backend,
        audits: HitAudits | None = None,
    ) -> None:
        self.config, self.backend, self.audits = config, backend, audits
        self.enabled = config.enabled
        self.storing: set[asyncio.Task[None]] = set()

    @classmethod
    def build(
        cls,
        config: CacheConfig,
        state: StateConfig,
        cloud: Upstream,
        pricing: Pricing,
        telemetry: Telemetry,
    ) -> AnswerCache:
        """The cache the settings ask for: in memory, or in Redis with ``state.backend``."""
        backend: Backend
        if state.backend == "redis" and config.enabled:
            bounds = (config.max_bytes, config.max_age_s)
            backend = RedisBackend.of(state, state.key_prefix, *bounds, "the answer cache")
        else:
            backend = MemoryBackend(config.max_bytes, config.max_age_s)
        audits = HitAudits(cloud, backend, config.audit_rate, pricing, telemetry)
        return cls(config, backend, audits)

    async def look(self, call: Call, strategy: Strategy) -> Looked:
        """A hit's reply and events, or what a miss may keep once answered (the client's
        scope and Cache-Control: ``cache_ask``)."""
        if not self.enabled or strategy not in CACHED_STRATEGIES:
            return Looked()
        ask = cache_ask.get() or CacheAsk()
        # the strategy is in the scope: a client that asked for the cloud alone never gets
        # a draft the cloud agreed with
        keys = keys_of(call.raw, f"{ask.scope}:{strategy.value}", near=self.config.near)
        if keys is None:
            return Looked()
        caught = Caught(self.config.max_bytes) if ask.store else None
        if not ask.read:
            return Looked((CacheLooked("bypass"),), keys=keys, result="bypass", caught=caught)
        entry = await self.find(keys)
        if entry is None:
            return Looked((CacheLooked("miss"),), keys=keys, result="miss", caught=caught)
        log.info("Cache hit: %s's answer served again", entry.model_used)
        baseline = Usage(
            entry.cloud_model,
            Purpose.SPILL,
            entry.prompt_tokens,
            entry.completion_tokens,
            entry.estimated,
        )
        out = replayed(entry, call.request, speculative=strategy is Strategy.SPECULATIVE)
        message = entry.body["choices"][0].get("message") or {}
        first = time.perf_counter() - call.started if call.request.stream else None
        events = (
            CacheLooked("hit", entry.model_used, baseline),
            Served(HIT_REASONS, len(message.get("tool_calls") or ()), first),
            Finished(Outcome.CACHED),
        )
        return Looked(events, out, keys, entry, "hit")

    async def find(self, keys: Keys) -> Entry | None:
        """The entry these keys find: the exact one, or a near one whose facts match."""
        data = await self.backend.get(keys.exact)
        if data is not None and (entry := decode(data)) is not None:
            return entry
        if keys.near is None or (found := await through_near(self.backend, keys.near)) is None:
            return None
        entry = decode(found[1])
        return entry if entry is not None and near_match(entry.question, keys.question) else None

    def settle(self, call: Call) -> None:
        """After the record is written: keep a verified answer, or audit a hit."""
        looked = call.looked
        if looked is None or looked.keys is None:
            return
        if looked.result == "hit" and looked.entry is not None and self.audits is not None:
            self.audits.maybe(call.raw, looked.keys, looked.entry)
            return
        rec = call.record
        if looked.caught is None or not storable(rec):
            return
        body = looked.caught.body()
        usage = cloud_usage(rec)
        if body is None or usage is None:
            return
        model_used = rec.draft_model if rec.outcome is Outcome.VERIFIED_DRAFT_USED else usage.model
        if body.get("usage") is None:
            served = [u for u in rec.usage if u.model == model_used] or [usage]
            n, prompt = served[-1].completion_tokens, served[-1].prompt_tokens
            body["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": n,
                "total_tokens": prompt + n,
            }
        entry = Entry(
            body=body,
            model_used=model_used or usage.model,  # a verified draft's: the local model
            question=looked.keys.question,
            cloud_model=usage.model,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            estimated=usage.estimated,
            stored_at=time.time(),
            key=looked.keys.exact,
        )
        value, near = encode(entry), looked.keys.near
        task = asyncio.create_task(keep(self.backend, entry.key, near, value), name="cache-store")
        self.storing.add(task)
        task.add_done_callback(self.storing.discard)

    def status(self) -> dict[str, Any]:
        """Entries, bytes and audits, for ``/stats`` (``shared``: one store for all)."""
        entries, size = self.backend.usage()
        counts = self.audits.counts if self.audits is not None else None
        return {
            "enabled": self.enabled,
            "shared": self.backend.shared,
            "entries": entries,
            "bytes": size,
            "audits": counts.audits if counts else 0,
            "audit_replaced": counts.replaced if counts else 0,
        }

    async def close(self) -> None:
        """Finish the stores under way, stop the audits, let go of the store."""
        await asyncio.gather(*self.storing, return_exceptions=True)
        if self.audits is not None:
            await self.audits.close()
        await self.backend.close()
