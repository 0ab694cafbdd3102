"""What a request cost, and what it would have cost sent to the cloud alone.

Every upstream call leaves a ``Usage`` on the request's record (model, purpose, tokens).
``Pricing`` prices them with ``models.NAME.price`` and works out the **all-cloud
baseline**: the same request answered by the verify model alone. When the verify model
answered this request in full (a verification, a spill, a hedge, a pass-through), its
own counts are the baseline (``verified``); otherwise the request's prompt and the
longest local answer stand in at the cloud's prices (``estimated``: the local
tokenizer's counts). ``Spend`` adds bills up for ``/stats``. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from app.config import Price, Settings
from app.record import RequestRecord, Usage
from app.vocabulary import Purpose

# The verify model's answer to the whole request: its counts are the baseline's.
_FULL_ANSWERS = frozenset(
    {Purpose.VERIFICATION, Purpose.SPILL, Purpose.HEDGE, Purpose.PASS_THROUGH}
)
_DIGITS = 10  # USD rounded to 1e-10 in what the proxy shows: a token costs ~1e-7


@dataclass(frozen=True, slots=True)
class Charge:
    """One upstream call's cost."""

    model: str
    purpose: str
    usd: float
    estimated: bool = False


@dataclass(slots=True)
class Bill:
    """One request's charges and its all-cloud baseline."""

    charges: list[Charge]
    baseline_usd: float
    baseline_from: Literal["verified", "estimated", "none"]

    @property
    def spend_usd(self) -> float:
        """What the request cost, every call included."""
        return sum(c.usd for c in self.charges)

    def log_entry(self) -> dict[str, Any]:
        """The spec log's ``cost`` field."""
        by_purpose: defaultdict[str, float] = defaultdict(float)
        for charge in self.charges:
            by_purpose[charge.purpose] += charge.usd
        return {
            "spend_usd": _usd(self.spend_usd),
            "by_purpose": {purpose: _usd(usd) for purpose, usd in by_purpose.items()},
            "baseline_usd": _usd(self.baseline_usd),
            "baseline_from": self.baseline_from,
            "estimated": any(c.estimated for c in self.charges),
        }


_FREE = Price()  # a model without a price (built once: a pydantic model per call is not free)


class Pricing:
    """Prices every call of a request, and the request sent to ``baseline_model`` alone."""

    def __init__(self, prices: Mapping[str, Price], baseline_model: str) -> None:
        self.prices = dict(prices)
        self.baseline_model = baseline_model

    @classmethod
    def of(cls, settings: Settings) -> Pricing:
        """The configured models' prices; the baseline is the verify model."""
        prices = {name: model.price for name, model in settings.models.items()}
        return cls(prices, settings.speculative_decoding.verifier)

    def charge(self, usage: Usage) -> Charge:
        """One call's cost (a model without a price costs nothing)."""
        price = self.prices.get(usage.model, _FREE)
        usd = price.of(usage.prompt_tokens, usage.completion_tokens)
        return Charge(usage.model, usage.purpose.value, usd, usage.estimated)

    def bill(self, rec: RequestRecord) -> Bill:
        """The request's charges and its all-cloud baseline."""
        charges = [self.charge(u) for u in rec.usage]
        price = self.prices.get(self.baseline_model, _FREE)
        if (kept := rec.cached) is not None:  # a cache hit: the stored answer's cloud counts
            baseline = price.of(kept.prompt_tokens, kept.completion_tokens)
            return Bill(charges, baseline, "estimated" if kept.estimated else "verified")
        for usage in rec.usage:
            if (
                usage.model == self.baseline_model
                and usage.purpose in _FULL_ANSWERS
                and not usage.estimated
            ):
                baseline = price.of(usage.prompt_tokens, usage.completion_tokens)
                return Bill(charges, baseline, "verified")
        prompt = max([rec.prompt_tokens, *(u.prompt_tokens for u in rec.usage)])
        completion = max((u.completion_tokens for u in rec.usage), default=0)
        if prompt == completion == 0:
            return Bill(charges, 0.0, "none")
        return Bill(charges, price.of(prompt, completion), "estimated")


@dataclass(slots=True)
class Spend:
    """Spend by model and purpose, and the all-cloud baseline, added up over requests."""

    usd: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> purpose -> USD
    baseline_usd: float = 0.0
    baseline_estimated_usd: float = 0.0  # the part of the baseline that is an estimate

    def add(self, bill: Bill) -> None:
        """Count one request's bill."""
        for charge in bill.charges:
            self.add_charge(charge)
        self.baseline_usd += bill.baseline_usd
        if bill.baseline_from == "estimated":
            self.baseline_estimated_usd += bill.baseline_usd

    def add_charge(self, charge: Charge) -> None:
        """Count one call's cost (an audit's comes after its request was counted)."""
        by_purpose = self.usd.setdefault(charge.model, {})
        by_purpose[charge.purpose] = by_purpose.get(charge.purpose, 0.0) + charge.usd

    def merge(self, other: Spend) -> None:
        """Add another ``Spend`` (a second, a worker) to this one."""
        for model, by_purpose in other.usd.items():
            for purpose, usd in by_purpose.items():
                self.add_charge(Charge(model, purpose, usd))
        self.baseline_usd += other.baseline_usd
        self.baseline_estimated_usd += other.baseline_estimated_usd

    def state(self) -> list[Any]:
        """As JSON data, for ``Spend.from_state`` in another process."""
        return [self.usd, self.baseline_usd, self.baseline_estimated_usd]

    @classmethod
    def from_state(cls, state: list[Any]) -> Spend:
        usd, baseline, estimated = state
        return cls({m: dict(p) for m, p in usd.items()}, baseline, estimated)

    def summary(self) -> dict[str, Any]:
        """``/stats`` → ``cost`` (and each of its windows)."""
        by_model = {model: sum(p.values()) for model, p in sorted(self.usd.items())}
        by_purpose: defaultdict[str, float] = defaultdict(float)
        for purposes in self.usd.values():
            for purpose, usd in purposes.items():
                by_purpose[purpose] += usd
        total = sum(by_model.values())
        savings, baseline = self.baseline_usd - total, self.baseline_usd
        return {
            "spend_usd": {
                "total": _usd(total),
                "by_model": {m: _usd(v) for m, v in by_model.items()},
                "by_purpose": {p: _usd(v) for p, v in sorted(by_purpose.items())},
            },
            "baseline_usd": _usd(self.baseline_usd),
            "baseline_estimated_usd": _usd(self.baseline_estimated_usd),
            "savings_usd": _usd(savings),
            "savings_pct": round(100 * savings / baseline, 2) if baseline else None,
        }


def _usd(value: float) -> float:
    return round(value, _DIGITS)
