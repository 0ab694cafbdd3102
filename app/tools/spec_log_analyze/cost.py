"""The cost and quality summary of a speculation log (``report()["cost"]``): spend, by
purpose, the all-cloud baseline and its estimated part, savings as ``/stats`` computes
them, the verified drafts that disagreed and the audits, over the lines that carry a
``cost`` object (an older log's lines have none)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from app.evaluation.metrics import wilson
from app.pricing import shown_usd
from app.telemetry.tallies import ratio


@dataclass(slots=True)
class Cost:
    """Spend, baseline and quality over the lines that carry a ``cost`` object."""

    lines: int = 0
    spend: float = 0.0
    by_purpose: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    baseline: float = 0.0
    baseline_estimated: float = 0.0
    baseline_from: Counter[str] = field(default_factory=Counter)
    spend_estimated_lines: int = 0
    judged: int = 0  # verified drafts with an agreement verdict, audits aside
    disagreed: int = 0
    audits: int = 0
    audits_judged: int = 0
    audits_agreed: int = 0

    def add(self, cost: dict[str, Any], agreement: object, audit: object) -> None:
        """Count one line's ``cost``, ``agreement`` and ``audit`` fields."""
        self.lines += 1
        self.spend += _usd_of(cost.get("spend_usd"))
        by_purpose = cost.get("by_purpose")
        if isinstance(by_purpose, dict):
            for purpose, usd in by_purpose.items():
                self.by_purpose[str(purpose)] += _usd_of(usd)
        baseline = _usd_of(cost.get("baseline_usd"))
        source = cost.get("baseline_from")
        source = source if isinstance(source, str) else "none"
        self.baseline += baseline
        self.baseline_from[source] += 1
        if source == "estimated":
            self.baseline_estimated += baseline
        self.spend_estimated_lines += cost.get("estimated") is True
        if not isinstance(agreement, bool):
            agreement = None
        if audit is True:
            self.audits += 1
            if agreement is not None:
                self.audits_judged += 1
                self.audits_agreed += agreement
        elif agreement is not None:
            self.judged += 1
            self.disagreed += not agreement

    def summary(self) -> dict[str, Any]:
        """The figures as plain data (USD rounded like ``/stats``, savings in percent)."""
        savings = self.baseline - self.spend
        return {
            "lines": self.lines,
            "spend_usd": {
                "total": shown_usd(self.spend),
                "by_purpose": {p: shown_usd(v) for p, v in sorted(self.by_purpose.items())},
            },
            "baseline_usd": shown_usd(self.baseline),
            "baseline_estimated_usd": shown_usd(self.baseline_estimated),
            "baseline_estimated_share": ratio(self.baseline_estimated, self.baseline),
            "baseline_from": {
                source: self.baseline_from[source] for source in ("verified", "estimated", "none")
            }
            | dict(self.baseline_from),
            "spend_estimated_lines": self.spend_estimated_lines,
            "savings_usd": shown_usd(savings),
            "savings_pct": round(100 * savings / self.baseline, 2) if self.baseline else None,
            "quality": {
                "verified_drafts": self.judged,
                "verified_disagreed": self.disagreed,
                "verified_disagreed_rate": ratio(self.disagreed, self.judged),
                "audits": {
                    "n": self.audits,
                    "judged": self.audits_judged,
                    "agreed": self.audits_agreed,
                    "agree_rate": ratio(self.audits_agreed, self.audits_judged),
                    "ci95": wilson(self.audits_agreed, self.audits_judged),
                },
            },
        }


def _usd_of(value: object) -> float:
    """A logged USD amount (anything else counts as nothing)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
