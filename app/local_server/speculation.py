"""Speculative decoding for the managed llama-server: the pair check at start, the flags.

A draft model that cannot draft for the target (another tokenizer) would only slow the
server down, so the pair is checked before the server starts; what passes becomes a
``Speculation``, the parameters pinned on llama-server's command line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import LaunchConfig
from app.local_server.assets import ensure_model
from app.local_server.errors import LocalServerError
from app.local_server.pair_check import PairVerdict, check_pair, read_facts

# The managed server's logger, so the pair check's notes read as the server's own.
log = logging.getLogger("specproxy.llama_server")


@dataclass(frozen=True, slots=True)
class Speculation:
    """How the managed llama-server drafts: the draft model and the pinned parameters."""

    draft: Path
    type: str
    n_max: int
    n_min: int
    p_min: float

    def args(self) -> list[str]:
        """llama-server's flags; --spec-type is required (with only -md nothing is drafted)."""
        return [
            *("-md", str(self.draft), "--spec-type", self.type),
            *("--spec-draft-n-max", str(self.n_max), "--spec-draft-n-min", str(self.n_min)),
            # Pinned always: the default moved from 0.75 to 0.00 between llama.cpp versions.
            *("--spec-draft-p-min", str(self.p_min)),
        ]

    def status(self) -> dict[str, Any]:
        """The parameters in force, for ``status()["speculative"]``."""
        return {"type": self.type, "n_max": self.n_max, "n_min": self.n_min, "p_min": self.p_min}


def plan_speculation(launch: LaunchConfig, draft: Path, verdict: PairVerdict) -> Speculation:
    """The config's spec_* values, else the pair check's suggestions (n_max never under n_min)."""
    n_max = launch.spec_n_max or max(verdict.n_max, launch.spec_n_min)
    p_min = verdict.p_min if launch.spec_p_min is None else launch.spec_p_min
    return Speculation(draft, launch.spec_type, n_max, launch.spec_n_min, p_min)


def check_draft(launch: LaunchConfig, model: Path, name: str) -> Speculation | None:
    """The draft plan for ``model``, None without a draft; refuses an unfit draft, every reason."""
    if launch.draft_model is None:
        return None
    draft = ensure_model(launch.draft_model, key="launch.draft_model")
    try:
        verdict = check_pair(read_facts(model), read_facts(draft))
    except ValueError as exc:
        raise LocalServerError(f"{name}: cannot check the draft pair: {exc}") from exc
    if not verdict.compatible:
        raise LocalServerError(
            f"{name}: launch.draft_model {draft} cannot draft for launch.model "
            f"{model}: {'; '.join(verdict.problems)} (pick a draft with the target's "
            "tokenizer; `specproxy check-pair TARGET DRAFT` checks a pair)"
        )
    for note in verdict.notes:
        log.info("%s: draft %s for %s: %s", name, draft.name, model.name, note)
    return plan_speculation(launch, draft, verdict)
