"""A label: one draft whose agreement with the cloud is known, with what the scorer read.

Every verified draft is one (``agreed`` or not); so is every audit, an accepted draft
verified in the background after it was served. Drafts the scorer accepted are verified
only by audits, at ``audit_rate``: an audit's ``weight`` is ``1 / audit_rate`` (inverse
propensity), so a fit sees the traffic as it is, not the doubtful part of it.

A label is one JSON object in the learner's store (``as_mapping``); a speculation-log
line carries the same fields (``features``, ``ngrams``, ``audit``, with ``agreement`` for
``agreed``), which ``label_from_log`` reads for ``specproxy fit`` and ``calibrate``. The
labels of drafts finished beside the cloud's answer (late, explored, unheld) are in
the store only: their request's line was written before they ended.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# An audit's weight is 1 / audit_rate; far beyond any such weight is not a label's.
MAX_WEIGHT = 1e6


@dataclass(frozen=True, slots=True)
class Label:
    features: dict[str, float]  # the draft's and the request's shape (by name)
    ngrams: tuple[int, ...]  # the request's n-gram buckets
    context_type: str
    agreed: bool
    audit: bool = False
    weight: float = 1.0
    ts: float = 0.0

    def as_mapping(self) -> dict[str, Any]:
        return {
            "ts": round(self.ts, 3),
            "context_type": self.context_type,
            "agreed": self.agreed,
            "audit": self.audit,
            "weight": self.weight,
            "features": self.features,
            "ngrams": list(self.ngrams),
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Label:
        """A label from its JSON form; ValueError when it is not one."""
        try:
            ngrams = tuple(int(i) for i in data.get("ngrams") or ())
            if any(i < 0 for i in ngrams):
                raise ValueError("a negative n-gram bucket")
            label = cls(
                features={str(k): float(v) for k, v in data["features"].items()},
                ngrams=ngrams,
                context_type=str(data.get("context_type", "prose")),
                agreed=bool(data["agreed"]),
                audit=bool(data.get("audit", False)),
                weight=float(data.get("weight", 1.0)),
                ts=float(data.get("ts", 0.0)),
            )
            numbers = [*label.features.values(), label.weight, label.ts]
            if not all(math.isfinite(x) for x in numbers):
                raise ValueError("NaN or infinity: every refit would fail on it")
            if not 0 < label.weight <= MAX_WEIGHT:
                raise ValueError(f"weight {label.weight!r} outside (0, {MAX_WEIGHT:g}]")
            return label
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a label: {exc}") from exc


def label_from_log(entry: Mapping[str, Any], audit_rate: float | None = None) -> Label | None:
    """The label a speculation-log line carries, or None (not verified, or no features).

    ``audit_rate``: the rate audits were taken at, for their weight (None: weight 1).
    """
    agreement = entry.get("agreement")
    features = entry.get("features")
    if not isinstance(agreement, bool) or not isinstance(features, Mapping):
        return None
    audit = bool(entry.get("audit"))
    weight = 1.0 / audit_rate if audit and audit_rate else 1.0
    return Label.from_mapping(
        {
            "features": features,
            "ngrams": entry.get("ngrams") or (),
            "context_type": entry.get("context_type", "prose"),
            "agreed": agreement,
            "audit": audit,
            "weight": weight,
            "ts": (entry.get("ts_ms") or 0) / 1000,
        }
    )
