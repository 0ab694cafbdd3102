"""What a request cost, and what it would have cost sent to the cloud alone.

Every upstream call leaves a ``Usage`` on the request's record (model, purpose, tokens).
``Pricing`` prices them with ``models.NAME.price`` and works out the **all-cloud
baseline**: the same request answered by the verify model alone. When the verify model
answered this request in full (a verification, a spill, a hedge, a pass-through), its
own counts are the baseline (``verified``); otherwise the request's prompt and the
longest local answer stand in at the cloud's prices (``estimated``: the local
tokenizer's counts), calibrated in ``/stats`` on the requests both answered
(``app.baseline``). ``Late`` carries what a request spent after it was counted;
``app.spend.Spend`` adds bills up for ``/stats``. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.baseline import Estimate, Pair
from app.config import Price, Settings
from app.record import RequestRecord, Usage
from app.vocabulary import Purpose, Strategy

# The verify model's answer to the whole request: its counts are the baseline's.
_FULL_ANSWERS = frozenset(
    {Purpose.VERIFICATION, Purpose.SPILL, Purpose.HEDGE, Purpose.PASS_THROUGH}
)
# The cloud's whole answer to a speculative request: the calibration's (app.baseline).
_PAIRED = frozenset({Purpose.VERIFICATION, Purpose.SPILL, Purpose.HEDGE, Purpose.AUDIT})
_DIGITS = 10  # USD rounded to 1e-10 in what the proxy shows: a token costs ~1e-7


@dataclass(frozen=True, slots=True)
class Charge:
    """One upstream call's cost."""

    model: str
    purpose: str
    usd: float
    estimated: bool = False
    cloud: bool = False  # a call to a cloud model (not a local llama-server)


@dataclass(slots=True)
class Bill:
    """One request's charges and its all-cloud baseline."""

    charges: list[Charge]
    baseline_usd: float
    baseline_from: Literal["verified", "estimated", "none"]
    estimate: Estimate | None = None  # an estimated baseline from the local model's counts
    pair: Pair | None = None  # both models answered in full: the calibration's material

    @property
    def spend_usd(self) -> float:
        """What the request cost, every call included."""
        return sum(c.usd for c in self.charges)

    def add_late(self, charges: Iterable[Charge], pair: Pair | None) -> Pair | None:
        """Calls made after the bill was counted (an audit, a draft beside the cloud's
        answer), and the pair they make: the pair if it is new, for the calibration (None if
        the bill had one; a request whose draft was still running was billed unpaired)."""
        self.charges.extend(charges)
        if self.pair is not None or pair is None:
            return None
        self.pair = pair
        return pair

    def log_entry(self) -> dict[str, Any]:
        """The spec log's ``cost`` field."""
        by_purpose: defaultdict[str, float] = defaultdict(float)
        for charge in self.charges:
            by_purpose[charge.purpose] += charge.usd
        return {
            "spend_usd": shown_usd(self.spend_usd),
            "by_purpose": {purpose: shown_usd(usd) for purpose, usd in by_purpose.items()},
            "baseline_usd": shown_usd(self.baseline_usd),
            "baseline_from": self.baseline_from,
            "estimated": any(c.estimated for c in self.charges),
            "cloud_calls": self.cloud_calls(),
        }

    def cloud_calls(self) -> dict[str, Any]:
        """The request's calls to a cloud model: how many, and by purpose."""
        by_purpose: defaultdict[str, int] = defaultdict(int)
        for charge in self.charges:
            by_purpose[charge.purpose] += charge.cloud
        return {
            "total": sum(by_purpose.values()),
            "by_purpose": {p: n for p, n in sorted(by_purpose.items()) if n},
        }


@dataclass(frozen=True, slots=True)
class Late:
    """What a request spent after it was counted (its audit, a draft beside the cloud's
    answer): each call's tokens and cost, the draft model (its tokens are the local
    side's, as in the record) and the pair of counts they completed, if new."""

    usages: tuple[Usage, ...] = ()
    charges: tuple[Charge, ...] = ()
    draft_model: str | None = None
    pair: Pair | None = None


_FREE = Price()  # a model without a price (built once: a pydantic model per call is not free)


class Pricing:
    """Prices every call of a request, and the request sent to ``baseline_model`` alone."""

    def __init__(
        self,
        prices: Mapping[str, Price],
        baseline_model: str,
        local_models: Iterable[str] = ("local",),
    ) -> None:
        self.prices = dict(prices)
        self.baseline_model = baseline_model
        self.local_models = frozenset(local_models)  # a call to any other is a cloud call

    @classmethod
    def of(cls, settings: Settings) -> Pricing:
        """The configured models' prices; the baseline is the verify model; the local
        models are the llama-servers."""
        prices = {name: model.price for name, model in settings.models.items()}
        local = [name for name, m in settings.models.items() if m.provider == "llama_server"]
        return cls(prices, settings.speculative_decoding.verifier, local)

    def charge(self, usage: Usage) -> Charge:
        """One call's cost (a model without a price costs nothing)."""
        price = self.prices.get(usage.model, _FREE)
        usd = price.of(usage.prompt_tokens, usage.completion_tokens)
        cloud = usage.model not in self.local_models
        return Charge(usage.model, usage.purpose.value, usd, usage.estimated, cloud)

    def bill(self, rec: RequestRecord, *, paired: bool = True) -> Bill:
        """The request's charges and its all-cloud baseline; with its pair unless not
        ``paired`` (a draft still running beside the cloud's answer pairs it when it ends:
        ``Bill.add_late``)."""
        charges = [self.charge(u) for u in rec.usage]
        price = self.prices.get(self.baseline_model, _FREE)
        if (kept := rec.cached) is not None:  # a cache hit: the stored answer's cloud counts
            baseline = price.of(kept.prompt_tokens, kept.completion_tokens)
            return Bill(charges, baseline, "estimated" if kept.estimated else "verified")
        pair = self.pair(rec) if paired else None
        for usage in rec.usage:
            if (
                usage.model == self.baseline_model
                and usage.purpose in _FULL_ANSWERS
                and not usage.estimated
            ):
                baseline = price.of(usage.prompt_tokens, usage.completion_tokens)
                return Bill(charges, baseline, "verified", pair=pair)
        local = [u for u in rec.usage if u.model in self.local_models]
        prompt = max([rec.prompt_tokens, *(u.prompt_tokens for u in local)])
        completion = max((u.completion_tokens for u in local), default=0)
        if local and (prompt or completion):  # the local counts, to be calibrated
            estimate = Estimate(price.of(prompt, 0), price.of(0, completion), price.of(0, 1))
            return Bill(charges, estimate.usd, "estimated", estimate, pair)
        prompt = max([rec.prompt_tokens, *(u.prompt_tokens for u in rec.usage)])
        completion = max((u.completion_tokens for u in rec.usage), default=0)
        if prompt == completion == 0:
            return Bill(charges, 0.0, "none")
        return Bill(charges, price.of(prompt, completion), "estimated")

    def bill_late(self, rec: RequestRecord) -> Late | None:
        """The calls on ``rec``'s record since its bill was made, added to the bill (None:
        the request was never billed)."""
        if (bill := rec.bill) is None:
            return None
        usages = tuple(rec.usage[len(bill.charges) :])
        charges = tuple(self.charge(u) for u in usages)
        return Late(usages, charges, rec.draft_model, bill.add_late(charges, self.pair(rec)))

    def pair(self, rec: RequestRecord) -> Pair | None:
        """A speculative request's cloud counts when the verify model answered it in full,
        with the local model's where known (its prompt count; its answer's length if the
        draft was a whole answer), else None."""
        if rec.strategy is not Strategy.SPECULATIVE:
            return None
        cloud = next(
            (
                u
                for u in rec.usage
                if u.model == self.baseline_model and u.purpose in _PAIRED and not u.estimated
            ),
            None,
        )
        if cloud is None or not cloud.prompt_tokens:
            return None
        drafts = [
            u
            for u in rec.usage
            if u.purpose is Purpose.DRAFT and u.model in self.local_models and not u.estimated
        ]
        draft = max(drafts, key=lambda u: u.completion_tokens, default=None)
        prompt = max([rec.prompt_tokens, *(u.prompt_tokens for u in drafts)])
        # a draft at the client's limit is whole, but as long as the cloud's by construction
        ended = rec.draft is not None and not rec.draft.partial and not rec.draft.truncated
        local = draft.completion_tokens if ended and draft is not None else 0
        return Pair(prompt, local, cloud.prompt_tokens, cloud.completion_tokens)


def shown_usd(value: float) -> float:
    """USD as the proxy shows it."""
    return round(value, _DIGITS)
