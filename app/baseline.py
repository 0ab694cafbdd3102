"""The all-cloud baseline of the requests the cloud never answered, calibrated on this
proxy's own measured pairs.

A request the verify model answered in full has its baseline measured: the cloud's own
token counts. A request served locally has none: what the cloud would have billed must
be estimated from the local model's counts. Counting the local prompt and the local
answer as if they were the cloud's overstated savings threefold on the bench
(docs/value.md): the local tokenizer counts differently, and a small model writes longer
answers than the cloud. So the proxy learns the correction from the requests where both
models worked (the cloud's whole answer to a speculative request: a verification, a
spill, a hedge, an audit): the running ratio of the cloud's prompt tokens to the local
prompt tokens where the local model counted the prompt; for the completion, the cloud's
mean completion per answer, or, where it predicted the pairs with a whole draft better
(each predicted before it is counted), the ratio of the cloud's completion tokens to the
local ones. With no pair yet the local counts stand in
as they are (``local_tokens``). Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Any, Literal

Method = Literal["local_tokens", "ratios", "prompt_ratio_mean_completion"]


@dataclass(frozen=True, slots=True)
class Pair:
    """One speculative request the cloud answered in full: its prompt and completion
    tokens, and the local model's counts where they are known."""

    local_prompt: int  # 0: no count of it (the draft stopped before the server said)
    local_completion: int  # 0: the draft was not a whole answer (cut, aborted, out of time)
    cloud_prompt: int
    cloud_completion: int

    @property
    def whole(self) -> bool:
        """The draft was a whole answer: its length says something of the cloud's."""
        return self.local_completion > 0


@dataclass(frozen=True, slots=True)
class Estimate:
    """One request's baseline from the local model's counts, at the verify model's prices
    (the price it started with), split so a calibration can scale each part."""

    prompt_usd: float  # the local prompt tokens at the verify model's input price
    completion_usd: float  # the local answer's tokens at its output price
    token_usd: float  # one completion token at its output price

    @property
    def usd(self) -> float:
        """The uncalibrated estimate: the local counts as if they were the cloud's."""
        return self.prompt_usd + self.completion_usd


@dataclass(slots=True)
class Estimates:
    """``Estimate`` added up over requests."""

    n: int = 0
    prompt_usd: float = 0.0
    completion_usd: float = 0.0
    token_usd: float = 0.0

    def add(self, estimate: Estimate) -> None:
        """Count one request's estimate."""
        self.n += 1
        self.prompt_usd += estimate.prompt_usd
        self.completion_usd += estimate.completion_usd
        self.token_usd += estimate.token_usd

    def merge(self, other: Estimates) -> None:
        """Add another's (a second, a worker)."""
        self.n += other.n
        self.prompt_usd += other.prompt_usd
        self.completion_usd += other.completion_usd
        self.token_usd += other.token_usd

    @property
    def usd(self) -> float:
        """The uncalibrated estimate of them all."""
        return self.prompt_usd + self.completion_usd


@dataclass(slots=True)
class Calibration:
    """Running sums over the measured pairs, and each completion rule's error on them."""

    answers: int = 0  # the cloud's whole answers to speculative requests: the mean rule's
    cloud_completion: int = 0
    pairs: int = 0  # those with the local prompt's count: the prompt ratio's
    local_prompt: int = 0
    cloud_prompt: int = 0
    whole: int = 0  # pairs whose draft was a whole answer: the ratio rule's
    whole_local_completion: int = 0
    whole_cloud_completion: int = 0
    ratio_error: float = 0.0  # |ratio x local - cloud| completion tokens, each pair ahead
    mean_error: float = 0.0  # |mean cloud completion - cloud|, on the same pairs

    def add(self, pair: Pair) -> None:
        """Count one pair, after scoring both completion rules on it (a whole draft's, once
        both rules can predict)."""
        if pair.whole and self.whole:
            ratio = self.whole_cloud_completion / self.whole_local_completion
            self.ratio_error += abs(ratio * pair.local_completion - pair.cloud_completion)
            self.mean_error += abs(self.mean_completion - pair.cloud_completion)
        self.answers += 1
        self.cloud_completion += pair.cloud_completion
        if pair.local_prompt:
            self.pairs += 1
            self.local_prompt += pair.local_prompt
            self.cloud_prompt += pair.cloud_prompt
        if pair.whole:
            self.whole += 1
            self.whole_local_completion += pair.local_completion
            self.whole_cloud_completion += pair.cloud_completion

    def merge(self, other: Calibration) -> None:
        """Add another's sums (each worker scored its own pairs)."""
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def state(self) -> list[float]:
        """As JSON data, for ``Calibration(*state)`` in another process."""
        return list(astuple(self))

    @property
    def prompt_ratio(self) -> float | None:
        """The cloud's prompt tokens per local prompt token."""
        return self.cloud_prompt / self.local_prompt if self.local_prompt else None

    @property
    def completion_ratio(self) -> float | None:
        """The cloud's completion tokens per local completion token, over whole drafts."""
        if not self.whole_local_completion:
            return None
        return self.whole_cloud_completion / self.whole_local_completion

    @property
    def mean_completion(self) -> float:
        """The cloud's mean completion tokens per whole answer to a speculative request."""
        return self.cloud_completion / self.answers if self.answers else 0.0

    @property
    def method(self) -> Method:
        """How a locally served request's baseline is estimated now."""
        if not self.pairs or self.prompt_ratio is None:
            return "local_tokens"
        # the ratio only where it predicted better: a small model's rambling, scaled,
        # overstates the cloud's answer more than a mean does (the bench: docs/value.md)
        if self.completion_ratio is not None and self.ratio_error < self.mean_error:
            return "ratios"
        return "prompt_ratio_mean_completion"

    def estimate(self, estimates: Estimates) -> float:
        """The baseline, in USD, of the requests ``estimates`` counts."""
        method = self.method
        if method == "local_tokens":
            return estimates.usd
        prompt = estimates.prompt_usd * (self.prompt_ratio or 1.0)
        if method == "ratios":
            return prompt + estimates.completion_usd * (self.completion_ratio or 0.0)
        return prompt + estimates.token_usd * self.mean_completion

    def summary(self) -> dict[str, Any]:
        """``/stats`` → ``cost.baseline``'s account of the calibration."""
        scored = max(self.whole - 1, 1)  # the first whole pair is counted, not predicted
        return {
            "cloud_answers": self.answers,
            "pairs": self.pairs,
            "whole_pairs": self.whole,
            "method": self.method,
            "prompt_ratio": _round(self.prompt_ratio),
            "completion_ratio": _round(self.completion_ratio),
            "mean_cloud_completion": _round(self.mean_completion) if self.answers else None,
            "completion_error_per_pair": {
                "ratio": round(self.ratio_error / scored, 2) if self.whole > 1 else None,
                "mean": round(self.mean_error / scored, 2) if self.whole > 1 else None,
            },
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
