"""Fitting a scorer from labels: a weighted, L2-regularised logistic regression. Pure.

The same code fits online (``app.learning.learner``, in a worker thread) and offline
(``specproxy fit``). The draft's features and the request's shape are standardised
(weighted mean and scale, stored in the scorer so the proxy needs no numpy to score); the
hashed n-grams are 0/1 columns with a weight each. The target is "the draft disagreed
with the cloud" (the scorer's P(wrong)); each label counts by its ``weight``.

Gradient descent (Adam, full batch, a fixed number of steps) keeps it dependency-light
and its time bounded: a few hundred milliseconds at the store's 5,000 labels.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.learning.labels import Label
from app.routing.features import FEATURES
from app.routing.request_features import BUCKETS, SHAPE_FEATURES
from app.routing.scorer import Scorer

DENSE = (*FEATURES, *SHAPE_FEATURES)
_STEPS = 300
_LEARNING_RATE = 0.05


def fit_scorer(
    labels: Sequence[Label],
    *,
    name: str = "learned",
    l2: float = 1.0,
    buckets: int = BUCKETS,
    threshold: float = 0.5,
    fitted_on: dict[str, Any] | None = None,
    prior: Scorer | None = None,
    features: Sequence[str] = DENSE,
) -> Scorer:
    """A scorer fitted on ``labels`` (at least one agreed and one not); ``l2`` is the
    penalty's strength per label of weight 1 (sklearn's ``1 / C``).

    With a ``prior`` (the shipped scorer) the fit starts from the prior's weights and the
    penalty pulls toward them, not toward zero: a few labels move it a little from the
    prior, many move it further (a Gaussian prior centred on the shipped scorer).
    ``features``: the dense features read (the gate's: the request's shape only)."""
    if not labels:
        raise ValueError("no labels to fit on")
    dense = np.array([[lab.features.get(f, 0.0) for f in features] for lab in labels])
    weights = np.array([lab.weight for lab in labels])
    y = np.array([0.0 if lab.agreed else 1.0 for lab in labels])
    total = weights.sum()
    mean = (weights @ dense) / total
    scale = np.sqrt((weights @ (dense - mean) ** 2) / total)
    scale[scale < 1e-9] = 1.0  # a constant feature: no information, no division by zero
    hashed = np.zeros((len(labels), buckets))
    for row, lab in enumerate(labels):
        hashed[row, [i for i in lab.ngrams if i < buckets]] = 1.0
    x = np.hstack([(dense - mean) / scale, hashed])
    centre = np.zeros(x.shape[1] + 1)
    centre[-1] = _logit(float(weights @ y / total))  # the base rate
    if prior is not None:
        assert tuple(features) == DENSE, "a prior is the draft scorer's"
        centre[: len(DENSE)], centre[-1] = _prior_weights(prior, mean, scale)
    beta, bias = _logistic(x, y, weights / total, l2 / total, centre)
    return Scorer(
        name=name,
        features=tuple(features),
        mean=tuple(mean.tolist()),
        scale=tuple(scale.tolist()),
        weights=tuple(beta[: len(features)].tolist()),
        bias=bias,
        threshold=threshold,
        spill_prior=spill_rates(labels),
        fitted_on=fitted_on or {},
        hashed=tuple(beta[len(features) :].tolist()),
    )


def _prior_weights(prior: Scorer, mean: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, float]:
    """The prior's weights and bias in this fit's standardisation (features it does not
    read weigh 0): the same function of the raw features."""
    beta = np.zeros(len(DENSE))
    bias = prior.bias
    for name, p_mean, p_scale, weight in zip(
        prior.features, prior.mean, prior.scale, prior.weights, strict=True
    ):
        if name not in DENSE:
            continue
        i = DENSE.index(name)
        beta[i] = weight * scale[i] / p_scale
        bias += weight * (mean[i] - p_mean) / p_scale
    return beta, float(bias)


def _logistic(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float, centre: np.ndarray
) -> tuple[np.ndarray, float]:
    """Minimise sum(w * logloss) + l2 / 2 * |beta - centre|^2 by Adam, from ``centre``
    (its last entry: the bias, not penalised)."""
    params = centre.copy()
    m = np.zeros_like(params)
    v = np.zeros_like(params)
    for step in range(1, _STEPS + 1):
        z = x @ params[:-1] + params[-1]
        p = 0.5 * (1.0 + np.tanh(0.5 * z))  # the logistic, without overflow
        residual = w * (p - y)
        grad = np.empty_like(params)
        grad[:-1] = x.T @ residual + l2 * (params[:-1] - centre[:-1])
        grad[-1] = residual.sum()
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        params -= _LEARNING_RATE * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
    return params[:-1], float(params[-1])


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return float(np.log(p / (1 - p)))


def spill_rates(labels: Sequence[Label]) -> dict[str, float]:
    """The weighted share of drafts that disagreed, per context type (the hedging prior)."""
    wrong: dict[str, float] = defaultdict(float)
    total: dict[str, float] = defaultdict(float)
    for lab in labels:
        total[lab.context_type] += lab.weight
        if not lab.agreed:
            wrong[lab.context_type] += lab.weight
    return {c: round(wrong[c] / total[c], 4) for c in sorted(total) if total[c] > 0}
