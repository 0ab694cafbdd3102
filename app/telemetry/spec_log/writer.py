"""The speculation log's writer: one JSON line per speculative request, seed 000's schema.

    {"ts_ms", "slot_id", "prompt_pos", "round_id",
     "draft":  {"n", "stop_reason": "complete"|"n_max"|"p_min",
                "tokens": [{"pos", "id", "p", "entropy", "top_k": [[id, p], ...]}]},
     "verify": {"n_accepted", "rej_pos", "target_id"} | null   (null: not verified),
     "timing": {"t_draft_us", "t_verify_us"},
     # the proxy's own fields
     "request_id", "context_type", "decision": "accept"|"verify"|null (never judged: a
     stream's draft stopped at its first-token budget), "reasons", "similarity",
     "agreement": bool | null (a verified draft agreed with the cloud; null: not judged),
     "audit": bool (an accepted draft verified in the background after it was served),
     "outcome", "draft_model", "verify_model", "stream",
     "server_spec": {"draft_n", "draft_n_accepted"} | null   (llama-server's own speculation),
     "hedged": bool (the cloud was called alongside the draft),
     "trusted": bool (a streamed draft waited for past the first-token budget),
     "lane": "local"|"uncertain" | null, "gate_p_wrong": P(wrong) | null   (the gate's,
                                             before the draft; docs/gate.md),
     "spill_score": P(draft wrong) | null   (scored policies), "features": {name: value}
     "spill_threshold": the threshold it was judged by | null (not scored, or learning's
                        target holds at no threshold yet: every draft verified; 1.0 in
                        the gate's local lane then, held by the gate's own bound),
                                             (app.routing.features; what calibrate rescores),
     "ngrams": [bucket, ...] | null   (the request's hashed n-grams, with learning on),
     "cost": {"spend_usd", "by_purpose": {purpose: USD}, "baseline_usd",
              "baseline_from": "verified"|"estimated"|"none", "estimated": bool,
              "cloud_calls": {"total", "by_purpose": {purpose: n}}}
                                             (app.pricing; an audit's spend included),
     "cache": "hit"|"miss"|"bypass" | null   (app.cache; null: not asked),
     "continued_by": the upstream that continued a stream broken mid-answer | null
                                             (app.upstreams.continuation),
     "key": the caller's key by name | null, "team": its team | null   (app.keys; never
                                             the key itself; null: no key asked for),
     "tokens": {"prompt": {"local", "cloud"}, "completion": {"local", "cloud"}},
     "cloud_usd": the part of cost.spend_usd paid to cloud models
                                             (app.telemetry.by_key; `specproxy usage`),
     "content": {"prompt", "draft", "verified"}              (only with spec_log_content)}

``target_id`` is the verifier's text at the rejection point: token ids differ
across tokenizers; ``draft.budget`` is the draft's token budget. Records go on
a queue to one writer thread (stdlib ``QueueListener`` + ``RotatingFileHandler``),
which builds and writes each line: the event loop only enqueues, lines never
interleave, files rotate by size, and ``close()`` drains the queue so no line
is lost on a normal shutdown.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import sys
import time
from collections.abc import Callable
from logging.handlers import QueueListener, RotatingFileHandler
from pathlib import Path
from typing import Any

import orjson

from app.record import RequestRecord
from app.routing.signals import DraftSignals
from app.telemetry.by_key import cloud_usd, token_counts

log = logging.getLogger("specproxy.telemetry")


def stop_reason(draft: DraftSignals) -> str:
    """Why drafting stopped: a budget reached (``n_max``: the draft's token budget short of
    the client's own ``max_tokens``, or a stream's first-token budget, whose line's
    ``reasons`` then name ``first_token_budget``), a token under the abort floor (``p_min``)
    or a whole answer (``complete``: the model finished, or filled the client's limit)."""
    if draft.aborted:
        return "p_min"
    return "n_max" if draft.cut or draft.out_of_time else "complete"


def spec_log_entry(
    rec: RequestRecord, round_id: int, *, ts_ms: int | None = None, with_content: bool = False
) -> dict[str, Any]:
    """The log line of one speculative request that produced a draft."""
    draft = rec.draft
    assert draft is not None
    acceptance = rec.acceptance
    entry: dict[str, Any] = {
        "ts_ms": ts_ms if ts_ms is not None else int(time.time() * 1000),
        "slot_id": 0,
        "prompt_pos": rec.prompt_tokens,
        "round_id": round_id,
        "draft": {
            # the tokens judged: the acceptance's when verified, else the logged ones
            "n": acceptance.n_drafted if acceptance else len(draft.tokens) or draft.n_tokens,
            "stop_reason": stop_reason(draft),
            "budget": draft.budget,
            "tokens": [
                {
                    "pos": pos,
                    "id": t.token_id,
                    "p": round(t.p, 6),
                    "entropy": round(t.entropy, 6),
                    "top_k": [[k, round(p, 6)] for k, p in t.top_k],
                }
                for pos, t in enumerate(draft.tokens)
            ],
        },
        "verify": None
        if acceptance is None
        else {
            "n_accepted": acceptance.n_accepted,
            "rej_pos": acceptance.rej_pos,
            "target_id": acceptance.target,
        },
        "timing": {
            "t_draft_us": _us(rec.draft_s),
            "t_verify_us": _us(rec.verify_s),
        },
        "request_id": rec.request_id,
        "context_type": rec.context_type,
        "decision": None if draft.out_of_time else "verify" if rec.decision_reasons else "accept",
        "reasons": list(rec.reasons),
        "similarity": rec.similarity,
        "agreement": rec.agreement,
        "audit": rec.audit,
        "outcome": rec.outcome.value,
        "draft_model": rec.draft_model,
        "verify_model": rec.verify_model,
        "stream": rec.stream,
        "server_spec": rec.server_spec,
        "hedged": rec.hedged,
        "trusted": rec.trusted,
        "lane": rec.lane,
        "gate_p_wrong": None if rec.gate_p_wrong is None else round(rec.gate_p_wrong, 4),
        "tool_calls": rec.tool_calls,
        "spill_score": rec.spill_score,
        "spill_threshold": rec.spill_threshold,
        "features": rec.features,
        "ngrams": list(rec.ngrams) if rec.ngrams is not None else None,
        "cost": rec.bill.log_entry() if rec.bill is not None else None,
        "cache": rec.cache,
        "continued_by": rec.continued_by,
        "key": rec.key,
        "team": rec.team,
        "tokens": token_counts(rec),
        "cloud_usd": cloud_usd(rec),
    }
    if with_content:
        entry["content"] = {
            "prompt": rec.prompt,
            "draft": draft.text,
            "verified": rec.verified_text,
        }
    return entry


class _Line:
    """A log line built lazily, when the writer thread formats it (records are final)."""

    __slots__ = ("rec", "round_id", "ts_ms", "with_content")

    def __init__(self, rec: RequestRecord, round_id: int, with_content: bool, ts_ms: int) -> None:
        self.rec, self.round_id, self.with_content, self.ts_ms = rec, round_id, with_content, ts_ms

    def __str__(self) -> str:
        entry = spec_log_entry(
            self.rec, self.round_id, ts_ms=self.ts_ms, with_content=self.with_content
        )
        return orjson.dumps(entry).decode()


def _us(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1_000_000)


WARN_EVERY_S = 60.0  # a failing log is reported at most this often


class _RecoveringFile(RotatingFileHandler):
    """A rotating file that survives its directory or disk going away: a line that cannot
    be written is counted (``on_lost``) and reported at most once a minute, never as a
    traceback on stderr; the file is reopened (its directory made again) for the next."""

    def __init__(self, path: Path, on_lost: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(path, encoding="utf-8", delay=True, **kwargs)
        self.on_lost = on_lost
        self._warned_at = -WARN_EVERY_S

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is not None and not os.path.exists(self.baseFilename):
            self._drop_stream()  # deleted under us: writing on would go nowhere
        if self.stream is None:
            with contextlib.suppress(OSError):
                Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        self._drop_stream()
        self.on_lost()
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            error = sys.exc_info()[1]
            log.warning("speculation log %s: a line was lost: %s", self.baseFilename, error)

    def _drop_stream(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


class SpecLog:
    """Appends entries to a JSON-lines file from a background thread; a line that cannot
    be written is counted by ``on_lost`` and the file reopened for the next one."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_bytes: int,
        backups: int,
        with_content: bool = False,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.with_content = with_content
        self._rounds = itertools.count(1)  # next() is atomic: safe from any thread
        file_handler = _RecoveringFile(self.path, on_lost, maxBytes=max_bytes, backupCount=backups)
        file_handler.setFormatter(logging.Formatter("%(message)s"))
        self._queue: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        self._listener = QueueListener(self._queue, file_handler)
        self._listener.start()

    def write(self, rec: RequestRecord) -> None:
        """Queue one finished record; the writer thread turns it into its line."""
        line = _Line(rec, next(self._rounds), self.with_content, int(time.time() * 1000))
        self._queue.put_nowait(logging.makeLogRecord({"msg": line}))

    def close(self) -> None:
        """Write every queued line and close the file."""
        self._listener.stop()
        for handler in self._listener.handlers:
            handler.close()
