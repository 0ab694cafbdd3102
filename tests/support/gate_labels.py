"""Labels that teach the gate two kinds of request: drafts of one always agree with the
cloud, drafts of the other never do (only the request's words tell them apart)."""

from __future__ import annotations

from pathlib import Path

from app.learning.gate_fit import GateKeeper
from app.learning.labels import Label
from app.learning.store import LearningStore
from app.routing.request_features import request_features

RIGHT = "What is the capital of France?"  # its drafts agree: the local lane
WRONG = "How many letters are in the word strawberry?"  # its drafts never do: the cloud lane


def label(prompt: str, *, agreed: bool) -> Label:
    """A verified draft's label for ``prompt``, with what the gate reads of the request."""
    features = request_features({"messages": [{"role": "user", "content": prompt}]})
    return Label(dict(features.shape), features.ngrams, "prose", agreed, ts=1.0)


def two_kinds(n_each: int = 120) -> list[Label]:
    """``n_each`` agreeing labels of ``RIGHT`` and disagreeing ones of ``WRONG``, alternating."""
    pairs = [(label(RIGHT, agreed=True), label(WRONG, agreed=False)) for _ in range(n_each)]
    return [lab for pair in pairs for lab in pair]


def store_labels(state_dir: Path, labels: list[Label]) -> None:
    """The labels written where the learner keeps them, as it appends them."""
    LearningStore(state_dir, max_labels=5000).append(labels)


def fit_gate_into(state_dir: Path, labels: list[Label]) -> GateKeeper:
    """The labels stored and the gate fitted on them (as the leading learner does)."""
    store_labels(state_dir, labels)
    keeper = GateKeeper(state_dir, target=0.95, cloud_max_agreement=0.2)
    keeper.refit(labels)
    return keeper
