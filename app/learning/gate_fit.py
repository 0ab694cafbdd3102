"""The gate's fit: a request-only scorer and its lane thresholds, from the learner's labels.

At each refit (and once at start when labels are stored but no gate is), the leading
process fits the gate (``app.routing.gate``) on the stored labels: a logistic regression
over the request's shape (``req_*``) and hashed n-grams only, nothing of the draft
(``app.learning.fit``). Its thresholds are chosen from out-of-fold scores, folds drawn by
question (``app.learning.folds``), so a label is never scored by a fit that saw it or its
question asked again: in-sample scores would make the labels look more separable than new
requests are.

The gate is kept in ``gate.json`` under the learner's ``state_dir`` (written beside, then
renamed); every process reloads it when it changes, as it does the learned scorer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.learning.fit import fit_scorer
from app.learning.folds import cross_fit, question_folds
from app.learning.labels import Label
from app.routing.gate import Gate, Lane, fit_thresholds, lane_of
from app.routing.request_features import SHAPE_FEATURES, RequestFeatures
from app.routing.scorer import Scorer

log = logging.getLogger("specproxy.learning")


def fit_gate(
    labels: Sequence[Label], *, target: float, cloud_max_agreement: float, l2: float = 1.0
) -> Gate | None:
    """The gate these labels give (None with fewer than four, or one question: nothing to
    score out of fold)."""
    folds = question_folds(labels)
    if len(labels) < 4 or len(folds) < 2:
        return None
    scores = cross_fit(labels, lambda train: _fit(train, l2), folds)
    local_at, cloud_from = fit_thresholds(
        scores,
        [lab.agreed for lab in labels],
        target=target,
        cloud_max_agreement=cloud_max_agreement,
        weights=[lab.weight for lab in labels],
    )
    return Gate(_fit(labels, l2), local_at, cloud_from, len(labels), target)


def _fit(labels: Sequence[Label], l2: float) -> Scorer:
    return fit_scorer(labels, name="gate", l2=l2, features=SHAPE_FEATURES, threshold=0.5)


class GateKeeper:
    """The learner's gate: fitted by the leader, reloaded by every process."""

    def __init__(
        self,
        state_dir: str | Path,
        *,
        target: float,
        cloud_max_agreement: float,
        explore: float = 0.0,
    ) -> None:
        self.path = Path(state_dir) / "gate.json"
        self.target = target
        self.cloud_max_agreement = cloud_max_agreement
        self.explore = explore  # the share of cloud-lane requests drafted for a label
        self.gate: Gate | None = None
        self.tried = False  # a fit was tried since start (a due one is not tried again)
        self._stamp: int | None = None

    def lane(self, request: RequestFeatures | None, *, cold: bool) -> tuple[Lane, float | None]:
        """The request's lane and P(wrong): ``uncertain`` while the learner is cold."""
        return lane_of(None if cold else self.gate, request)

    @property
    def due(self) -> bool:
        """No gate yet and none tried since start: fit one from the stored labels."""
        return self.gate is None and not self.tried

    def refit(self, labels: Sequence[Label]) -> None:
        """Fit the gate on ``labels`` and keep it (in a worker thread, by the leader)."""
        self.tried = True
        try:
            gate = fit_gate(
                labels, target=self.target, cloud_max_agreement=self.cloud_max_agreement
            )
        except Exception:  # the gate must never cost the learner its refit
            log.exception("learning: the gate could not be fitted")
            return
        if gate is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(gate.as_mapping()), encoding="utf-8")
        os.replace(temporary, self.path)
        log.info(
            "learning: gate fitted on %d labels: local at P(wrong) <= %s, cloud at >= %s",
            gate.labels,
            _fmt(gate.local_at),
            _fmt(gate.cloud_from),
        )
        self.reload()

    def reload(self) -> None:
        """Read ``gate.json`` again if it changed (a missing or unreadable one: kept as is).
        A gate fitted for another ``target_agreement`` (the config changed) is not used: its
        local lane holds the old target; the next refit fits one for this target."""
        try:
            stamp = self.path.stat().st_mtime_ns
        except OSError:
            return
        if stamp == self._stamp:
            return
        with contextlib.suppress(OSError, ValueError, TypeError):
            gate = Gate.from_mapping(json.loads(self.path.read_text(encoding="utf-8")))
            self._stamp = stamp
            self.gate = gate if gate.target in (None, self.target) else None
            if self.gate is None:
                log.info("learning: the gate in %s holds another target: not used", self.path)

    def status(self) -> dict[str, Any]:
        """``/stats`` → ``learning.gate``."""
        gate = self.gate
        return {
            "fitted": gate is not None,
            "labels": gate.labels if gate else 0,
            "local_at": gate.local_at if gate else None,
            "cloud_from": gate.cloud_from if gate else None,
            "target_agreement": self.target,
            "cloud_max_agreement": self.cloud_max_agreement,
            "explore": self.explore,
        }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
