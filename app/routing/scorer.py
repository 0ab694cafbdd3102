"""A fitted spill scorer: the probability that a draft is wrong, from its features. Pure.

A scorer is a logistic regression over standardised features, stored as a small JSON file
(``app/routing/scorers/<name>.json``, written by ``bench/fit_router.py``; a learned one by
``app.learning``) so the proxy needs no numerical library at run time: one dot product per
request. The file::

    {"name", "features": [...], "mean": [...], "scale": [...], "weights": [...],
     "bias", "threshold", "spill_prior": {context_type: share}, "fitted_on": {...},
     "hashed": [weight per n-gram bucket]   (learned scorers: app.routing.request_features)}

A learned scorer may read the request's shape features (``SHAPE_FEATURES``) beside the
draft's, and its ``hashed`` weights add one weight per n-gram bucket the request has.

``threshold`` is the default decision point: a draft goes to the cloud when its score is
above it. ``specproxy calibrate`` replaces it with the one that meets a target cloud share.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.routing.features import FEATURES
from app.routing.request_features import SHAPE_FEATURES

KNOWN_FEATURES = frozenset(FEATURES) | frozenset(SHAPE_FEATURES)

SHIPPED = Path(__file__).with_name("scorers")


@dataclass(frozen=True, slots=True)
class Scorer:
    """Logistic regression over named, standardised features."""

    name: str
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float = 0.5
    # Share of drafts of each context type the policy sent to the cloud when fitted: the
    # prior that lets the proxy hedge (call the cloud at once) before any draft exists.
    spill_prior: dict[str, float] = field(default_factory=dict)
    fitted_on: dict[str, Any] = field(default_factory=dict, compare=False)
    hashed: tuple[float, ...] = ()  # a weight per n-gram bucket; () reads no n-grams

    @property
    def reads_request(self) -> bool:
        """Whether it reads the request's own features (shape or n-grams), not just the draft."""
        return bool(self.hashed) or any(f in SHAPE_FEATURES for f in self.features)

    def __post_init__(self) -> None:
        n = len(self.features)
        if not n or not len(self.mean) == len(self.scale) == len(self.weights) == n:
            raise ValueError(f"scorer {self.name!r}: features, mean, scale, weights differ")
        unknown = sorted(set(self.features) - KNOWN_FEATURES)
        if unknown:
            raise ValueError(f"scorer {self.name!r}: unknown feature(s) {unknown}")
        if any(s <= 0 for s in self.scale):
            raise ValueError(f"scorer {self.name!r}: every scale must be positive")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"scorer {self.name!r}: threshold must be in [0, 1]")

    def score(self, features: Mapping[str, float], ngrams: Sequence[int] = ()) -> float:
        """P(draft is wrong) in [0, 1]; higher = send to the cloud. ``ngrams``: the request's
        n-gram buckets (read only by a scorer with ``hashed`` weights)."""
        z = self.bias
        for name, mean, scale, weight in zip(
            self.features, self.mean, self.scale, self.weights, strict=True
        ):
            z += weight * (features[name] - mean) / scale
        if self.hashed and ngrams:
            hashed = self.hashed
            try:
                z += sum(map(hashed.__getitem__, ngrams))
            except IndexError:  # hashed into more buckets than this scorer has: those count 0
                z += sum(hashed[i] for i in ngrams if 0 <= i < len(hashed))
        # Two branches keep exp() from overflowing for large |z|.
        if z >= 0:
            return 1.0 / (1.0 + math.exp(-z))
        e = math.exp(z)
        return e / (1.0 + e)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Scorer:
        """A scorer from its JSON form; ValueError naming what is missing or wrong."""
        try:
            return cls(
                name=str(data["name"]),
                features=tuple(data["features"]),
                mean=tuple(map(float, data["mean"])),
                scale=tuple(map(float, data["scale"])),
                weights=tuple(map(float, data["weights"])),
                bias=float(data["bias"]),
                threshold=float(data.get("threshold", 0.5)),
                spill_prior={str(k): float(v) for k, v in (data.get("spill_prior") or {}).items()},
                fitted_on=dict(data.get("fitted_on") or {}),
                hashed=tuple(map(float, data.get("hashed") or ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a scorer file: missing or malformed {exc}") from exc

    def as_mapping(self) -> dict[str, Any]:
        """The JSON form (``from_mapping``'s inverse)."""
        return {
            "name": self.name,
            "features": list(self.features),
            "mean": list(self.mean),
            "scale": list(self.scale),
            "weights": list(self.weights),
            "bias": self.bias,
            "threshold": self.threshold,
            "spill_prior": self.spill_prior,
            "fitted_on": self.fitted_on,
            **({"hashed": list(self.hashed)} if self.hashed else {}),
        }


def load_scorer(source: str | Path) -> Scorer:
    """A shipped scorer by name (``confidence``, ``combined``) or a scorer JSON file."""
    path = Path(source)
    if path.suffix.lower() != ".json" and len(path.parts) == 1:
        path = SHIPPED / f"{source}.json"  # a bare name: one of the shipped scorers
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read scorer {source!r}: {exc.strerror}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"scorer {source!r} is not valid JSON: {exc}") from exc
    return Scorer.from_mapping(data)
