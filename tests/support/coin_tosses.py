"""Labels with nothing to learn and much to memorise: the trap of in-sample scores."""

from __future__ import annotations

import random

from app.learning.labels import Label
from app.routing.features import FEATURES
from app.routing.request_features import BUCKETS, SHAPE_FEATURES


def memorable(n: int, *, seed: int = 11) -> list[Label]:
    """Drafts alike in every feature, each asked with words of its own (its n-gram
    buckets), agreeing by a fair coin's toss."""
    rng = random.Random(seed)
    flat = dict.fromkeys((*FEATURES, *SHAPE_FEATURES), 0.0)
    return [
        Label(flat, tuple(rng.sample(range(BUCKETS), 6)), "prose", rng.random() < 0.5)
        for _ in range(n)
    ]
