"""Labels with nothing to learn and much to memorise: the trap of in-sample scores."""

from __future__ import annotations

import random

from app.learning.labels import Label
from app.routing.features import FEATURES
from app.routing.request_features import BUCKETS, SHAPE_FEATURES


def memorable(n: int, *, agree: float = 0.5, seed: int = 11) -> list[Label]:
    """Drafts alike in every feature, each asked with words of its own (its n-gram
    buckets), agreeing by a coin's toss (``agree`` of the time)."""
    rng = random.Random(seed)
    flat = dict.fromkeys((*FEATURES, *SHAPE_FEATURES), 0.0)
    return [
        Label(flat, tuple(rng.sample(range(BUCKETS), 6)), "prose", rng.random() < agree)
        for _ in range(n)
    ]
