"""What a learner has counted since its start: its labels by path, and its audits.

``/stats`` → ``learning.labels`` and ``learning.audits`` (one worker's; the stats sum
the workers'). Pure counting: the learner calls ``label`` for every label it queues and
``audited`` when an audit's cloud call ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.evaluation.metrics import wilson


@dataclass(slots=True)
class Tally:
    labels: int = 0
    agreed: int = 0
    late: int = 0  # of labels: drafts finished after a relayed stream
    explored: int = 0  # of labels: cloud-lane drafts made for one (gate.explore)
    audits: int = 0  # of labels: accepted drafts verified in the background
    audits_agreed: int = 0
    audit_failures: int = 0  # audits whose cloud call failed (no label)
    audit_tokens: int = 0  # the audits' cloud tokens

    def label(
        self, agreed: bool, *, audit: bool = False, late: bool = False, explored: bool = False
    ) -> None:
        self.labels += 1
        self.agreed += agreed
        self.late += late
        self.explored += explored
        if audit:
            self.audits += 1
            self.audits_agreed += agreed

    def audited(self, tokens: int, *, failed: bool = False) -> None:
        self.audit_tokens += tokens
        self.audit_failures += failed

    def labels_status(self, stored: int) -> dict[str, int]:
        """``/stats`` → ``learning.labels`` (``stored``: in the store, every worker's)."""
        return {
            "total": self.labels,
            "agreed": self.agreed,
            "stored": stored,
            "late": self.late,
            "explored": self.explored,
        }

    def audits_status(self, rate: float) -> dict[str, Any]:
        """``/stats`` → ``learning.audits`` (``rate``: the audit rate now)."""
        n, agreed = self.audits, self.audits_agreed
        return {
            "n": n,
            "agreed": agreed,
            "agree_rate": round(agreed / n, 4) if n else None,
            "ci95": wilson(agreed, n),
            "failed": self.audit_failures,
            "cloud_tokens": self.audit_tokens,
            "rate": rate,
        }
