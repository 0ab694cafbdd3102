"""Labels that teach the gate two kinds of request: drafts of one always agree with the
cloud, drafts of the other never do (only the request's words tell them apart).

Each label is a question of its own (the kind's wording around a made-up name), as on real
traffic: the gate scores its labels out of fold by question, so one question asked 120
times would leave nothing to learn from."""

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


def names(n: int) -> list[str]:
    """``n`` made-up names, each its own word ("Bababa", "Babako", ...; at most 1,728)."""
    syllables = ("ba", "ko", "du", "fa", "mi", "te", "lu", "ro", "si", "ne", "pa", "gu")
    assert n <= len(syllables) ** 3
    return [(a + b + c).capitalize() for a in syllables for b in syllables for c in syllables][:n]


def kind(template: str, n: int) -> list[str]:
    """``n`` questions of one kind: ``template`` around ``n`` made-up names."""
    return [template.format(name) for name in names(n)]


def two_kinds(n_each: int = 120) -> list[Label]:
    """``n_each`` agreeing labels of ``RIGHT``'s kind and disagreeing ones of ``WRONG``'s,
    alternating, every one a question of its own."""
    right = kind("What is the capital of {}?", n_each)
    wrong = kind("How many letters are in the word {}?", n_each)
    pairs = zip(right, wrong, strict=True)
    return [lab for r, w in pairs for lab in (label(r, agreed=True), label(w, agreed=False))]


def store_labels(state_dir: Path, labels: list[Label]) -> None:
    """The labels written where the learner keeps them, as it appends them."""
    LearningStore(state_dir, max_labels=5000).append(labels)


def fit_gate_into(state_dir: Path, labels: list[Label]) -> GateKeeper:
    """The labels stored and the gate fitted on them (as the leading learner does)."""
    store_labels(state_dir, labels)
    keeper = GateKeeper(state_dir, target=0.95, cloud_max_agreement=0.2)
    keeper.refit(labels)
    return keeper
