"""Adaptive depth at work: the two knobs of seed 001, fed from finished requests.

- ``server_n_max``: llama-server's own speculation depth, sent per request as
  ``speculative.n_max`` and fed back from the response's ``timings.draft_n`` /
  ``draft_n_accepted``. It steers only a llama-server that takes the key per request
  (``/props`` lists it); builds that do not are left alone, and ``/stats`` says why.
- ``draft_budget``: the proxy's own ``max_draft_tokens`` per context type, fed back from
  what became of each draft: served (every token counts as accepted) or spilled (the
  token-level acceptance against the verified answer).

The decisions are ``app.routing.depth``'s; this module feeds them, writes every change
of K as a ``SPEC_ADJUST`` JSON line (seed 001's ``log_adjustment`` fields) and reports
the current K per context type for ``/stats`` and ``/metrics``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from app.composition import depth_rule
from app.config import DepthConfig, Settings
from app.record import RequestRecord
from app.routing.depth import Adjustment, DepthController
from app.vocabulary import ContextType, Outcome

log = logging.getLogger("specproxy.depth")

SERVER_KNOB = "server_n_max"
BUDGET_KNOB = "draft_budget"
N_MAX_KEY = "speculative.n_max"
CONTEXTS = tuple(c.value for c in ContextType)


class NotProbed:
    """No probe of llama-server's ``/props`` was made (``DepthControl`` notes it)."""


NOT_PROBED = NotProbed()


def budget_observation(rec: RequestRecord) -> tuple[int, int] | None:
    """(accepted, drafted) tokens for the draft-budget knob, or None (nothing to learn).

    A served draft counts whole; a spilled one by its token-level acceptance.
    """
    if rec.draft is None:
        return None
    if rec.outcome in (Outcome.ACCEPTED, Outcome.VERIFIED_DRAFT_USED):
        return rec.draft.n_tokens, rec.draft.n_tokens
    if rec.outcome is Outcome.SPILLED_OVER and rec.acceptance is not None:
        return rec.acceptance.n_accepted, rec.acceptance.n_drafted
    return None


def audit_entry(knob: str, change: Adjustment, now: datetime) -> dict[str, Any]:
    """Seed 001's ``log_adjustment`` line, plus the same facts as fields of their own."""
    return {
        "ts": now.isoformat(),
        "session": "adaptive_spec",
        "level": "INFO",
        "cat": "SPEC_ADJUST",
        "msg": f"K: {change.old} -> {change.new}",
        "details": f"acceptance={change.acceptance:.2f}, reason={change.reason}",
        "knob": knob,
        "context_type": change.context,
        "k_old": change.old,
        "k_new": change.new,
        "acceptance": round(change.acceptance, 4),
    }


class DepthControl:
    """Both knobs for one worker; a knob that is off keeps its fixed K."""

    def __init__(
        self,
        settings: Settings,
        audit_path: str | Path | None = None,
        server_params: Mapping[str, Any] | NotProbed | None = NOT_PROBED,
    ) -> None:
        """``server_params``: what llama-server's ``/props`` lists as per-request
        parameters with their defaults, probed before this is built (None: no answer)."""
        depth = settings.adaptive_depth
        self._configs: dict[str, DepthConfig] = {
            SERVER_KNOB: depth.server_n_max,
            BUDGET_KNOB: depth.draft_budget,
        }
        self._fixed_budget = settings.speculative_decoding.max_draft_tokens
        self.controllers = {
            knob: DepthController(depth_rule(config, self._fixed_budget))
            for knob, config in self._configs.items()
            if config.enabled
        }
        local = settings.models[settings.speculative_decoding.draft_model]
        # Whether llama-server takes speculative.n_max per request: found out by a probe.
        self.steers_server = False
        self.server_note: str | None = None
        self.server_ceiling: int | None = None  # the server's own --spec-draft-n-max
        self._probe = False
        if SERVER_KNOB in self.controllers:
            if local.provider != "llama_server":
                self.server_note = "the local model is not a llama-server"
            elif local.launch is not None and local.launch.draft_model is None:
                self.server_note = "the managed llama-server runs without a draft model"
            else:
                self.server_note, self._probe = "not probed yet", True
        if self._probe and not isinstance(server_params, NotProbed):
            self._take_server_params(server_params)
        self.adjustments = dict.fromkeys(self.controllers, 0)
        self._audit = Path(audit_path) if audit_path else None
        if self._audit is not None:
            self._audit.parent.mkdir(parents=True, exist_ok=True)

    @property
    def reads_context(self) -> bool:
        """Whether requests must be classified before they are sent."""
        return self.steers_server or BUDGET_KNOB in self.controllers

    @property
    def wants_probe(self) -> bool:
        """Whether ``server_params`` are read: the server knob is on and the local model
        is a llama-server that may speculate (one we do not launch, or launch with a
        draft model)."""
        return self._probe

    def _take_server_params(self, params: Mapping[str, Any] | None) -> None:
        """Llama-server's default ``n_max`` (``--spec-draft-n-max``) caps K: it sizes its
        draft batch by it, and a deeper request would overflow it."""
        if params is not None and N_MAX_KEY in params:
            ceiling = params[N_MAX_KEY]
            self.server_ceiling = ceiling if isinstance(ceiling, int) and ceiling > 0 else None
            self.steers_server, self.server_note = True, None
            return
        self.server_note = (
            "llama-server did not answer /props at start-up"
            if params is None
            else f"this llama-server build takes no per-request {N_MAX_KEY}"
        )
        log.info("adaptive server_n_max is idle: %s", self.server_note)

    def draft_budget(self, context: str) -> int:
        """The proxy's draft budget for this context type."""
        controller = self.controllers.get(BUDGET_KNOB)
        return controller.k(context) if controller else self._fixed_budget

    def server_depth(self, context: str) -> int | None:
        """The depth to send to llama-server for this context type (None when idle)."""
        if not self.steers_server:
            return None
        k = self.controllers[SERVER_KNOB].k(context)
        return k if self.server_ceiling is None else min(k, self.server_ceiling)

    def observe(self, rec: RequestRecord) -> None:
        """Feed a finished request to both knobs; log and count any change of K.

        The server knob learns only from requests drafted at the depth it sent (not a
        client's own ``speculative.n_max``). A draft stopped early by the proxy brings no
        ``timings``, so only drafts that ran to their end are counted.
        """
        context = rec.context_type
        if rec.server_depth is not None and rec.server_spec:
            drafted, accepted = rec.server_spec["draft_n"], rec.server_spec["draft_n_accepted"]
            self._feed(SERVER_KNOB, context, accepted, drafted)
        if BUDGET_KNOB in self.controllers and (seen := budget_observation(rec)):
            self._feed(BUDGET_KNOB, context, *seen)

    def _feed(self, knob: str, context: str, accepted: int, drafted: int) -> None:
        change = self.controllers[knob].record(context, accepted, drafted)
        if change is None:
            return
        self.adjustments[knob] += 1
        entry = audit_entry(knob, change, datetime.now().astimezone()) | {"pid": os.getpid()}
        log.info("SPEC_ADJUST %s %s: %s (%s)", knob, context, entry["msg"], entry["details"])
        if self._audit is not None:
            try:
                with self._audit.open("ab") as f:
                    f.write(orjson.dumps(entry) + b"\n")
            except OSError as exc:
                log.error("cannot write the SPEC_ADJUST audit log %s: %s", self._audit, exc)

    def status(self) -> dict[str, Any]:
        """Per knob: on or off, whether it acts, K and rolling acceptance per context type."""
        out: dict[str, Any] = {}
        for knob, config in self._configs.items():
            controller = self.controllers.get(knob)
            active = controller is not None and (knob != SERVER_KNOB or self.steers_server)
            entry: dict[str, Any] = {"enabled": config.enabled, "active": active}
            if knob == SERVER_KNOB:
                if self.server_note:
                    entry["note"] = self.server_note
                if self.server_ceiling is not None:
                    entry["ceiling"] = self.server_ceiling
            if controller is not None:
                entry["k"] = {c: controller.k(c) for c in CONTEXTS}
                entry["acceptance"] = {
                    c: None if (a := controller.acceptance(c)) is None else round(a, 4)
                    for c in CONTEXTS
                }
                entry["adjustments"] = self.adjustments[knob]
            else:
                entry["k_fixed"] = self._fixed_budget if knob == BUDGET_KNOB else None
            out[knob] = entry
        return out
