"""Bills added up for ``/stats``: spend by model and purpose, the all-cloud baseline (the
part measured and the part estimated), the calibration's pairs and the cloud calls by
purpose. A ``Spend`` is kept for the whole run and for each second of the recent
windows, and travels between workers as JSON (``state`` / ``from_state``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import astuple, dataclass, field
from typing import Any

from app.baseline import Calibration, Estimates
from app.pricing import Bill, Charge, shown_usd


@dataclass(slots=True)
class Spend:
    """Spend by model and purpose, and the all-cloud baseline, added up over requests."""

    usd: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> purpose -> USD
    baseline_usd: float = 0.0
    baseline_estimated_usd: float = 0.0  # the part of the baseline that is an estimate
    requests: int = 0  # bills counted
    calls: dict[str, int] = field(default_factory=dict)  # cloud calls by purpose
    estimates: Estimates = field(default_factory=Estimates)  # from the local model's counts
    calibration: Calibration = field(default_factory=Calibration)  # the pairs seen

    def add(self, bill: Bill) -> None:
        """Count one request's bill."""
        self.requests += 1
        for charge in bill.charges:
            self.add_charge(charge)
        self.baseline_usd += bill.baseline_usd
        if bill.baseline_from == "estimated":
            self.baseline_estimated_usd += bill.baseline_usd
            if bill.estimate is not None:
                self.estimates.add(bill.estimate)
        if bill.pair is not None:
            self.calibration.add(bill.pair)

    def add_charge(self, charge: Charge) -> None:
        """Count one call's cost (an audit's comes after its request was counted)."""
        by_purpose = self.usd.setdefault(charge.model, {})
        by_purpose[charge.purpose] = by_purpose.get(charge.purpose, 0.0) + charge.usd
        if charge.cloud:
            self.calls[charge.purpose] = self.calls.get(charge.purpose, 0) + 1

    def merge(self, other: Spend) -> None:
        """Add another ``Spend`` (a second, a worker) to this one."""
        for model, by_purpose in other.usd.items():
            for purpose, usd in by_purpose.items():
                self.add_charge(Charge(model, purpose, usd))
        self.baseline_usd += other.baseline_usd
        self.baseline_estimated_usd += other.baseline_estimated_usd
        self.requests += other.requests
        for purpose, n in other.calls.items():
            self.calls[purpose] = self.calls.get(purpose, 0) + n
        self.estimates.merge(other.estimates)
        self.calibration.merge(other.calibration)

    def state(self) -> list[Any]:
        """As JSON data, for ``Spend.from_state`` in another process."""
        return [
            self.usd,
            self.baseline_usd,
            self.baseline_estimated_usd,
            self.requests,
            self.calls,
            astuple(self.estimates),
            self.calibration.state(),
        ]

    @classmethod
    def from_state(cls, state: list[Any]) -> Spend:
        usd, baseline, estimated, requests, calls, estimates, calibration = state
        return cls(
            {m: dict(p) for m, p in usd.items()},
            baseline,
            estimated,
            requests,
            dict(calls),
            Estimates(*estimates),
            Calibration(*calibration),
        )

    def cloud_calls(self) -> dict[str, Any]:
        """``/stats`` → ``cost.cloud_calls``: calls to a cloud model, per request and by
        purpose (an audit's counted when it ends)."""
        total = sum(self.calls.values())
        return {
            "total": total,
            "per_request": round(total / self.requests, 4) if self.requests else None,
            "by_purpose": dict(sorted(self.calls.items())),
        }

    def summary(self, calibration: Calibration | None = None) -> dict[str, Any]:
        """``/stats`` → ``cost`` (and each of its windows, calibrated on every pair seen:
        ``calibration``); the baseline's estimated part calibrated (``app.baseline``)."""
        calibration = self.calibration if calibration is None else calibration
        calibrated = calibration.estimate(self.estimates)
        estimated = self.baseline_estimated_usd - self.estimates.usd + calibrated
        measured = self.baseline_usd - self.baseline_estimated_usd
        by_model = {model: sum(p.values()) for model, p in sorted(self.usd.items())}
        by_purpose: defaultdict[str, float] = defaultdict(float)
        for purposes in self.usd.values():
            for purpose, usd in purposes.items():
                by_purpose[purpose] += usd
        total = sum(by_model.values())
        baseline = measured + estimated
        savings = baseline - total
        return {
            "spend_usd": {
                "total": shown_usd(total),
                "by_model": {m: shown_usd(v) for m, v in by_model.items()},
                "by_purpose": {p: shown_usd(v) for p, v in sorted(by_purpose.items())},
            },
            "baseline_usd": shown_usd(baseline),
            "baseline_estimated_usd": shown_usd(estimated),
            "savings_usd": shown_usd(savings),
            "savings_pct": round(100 * savings / baseline, 2) if baseline else None,
            "baseline": {
                "measured_usd": shown_usd(measured),
                "estimated_usd": shown_usd(estimated),
                "uncalibrated_estimated_usd": shown_usd(self.baseline_estimated_usd),
                "estimated_requests": self.estimates.n,
                **calibration.summary(),
            },
            "cloud_calls": self.cloud_calls(),
        }
