"""Cross-fitting (app.learning.folds): folds by question, each scored by a fit on the others."""

from __future__ import annotations

import math

from app.learning.folds import FOLDS, cross_fit, question_folds
from app.learning.labels import Label
from app.routing.scorer import Scorer
from tests.support.coin_tosses import memorable


def test_a_question_asked_again_falls_in_its_first_copys_fold() -> None:
    once = memorable(40)
    asked = once + once[:10]
    folds = question_folds(asked)
    assert len(folds) == FOLDS
    assert sorted(i for fold in folds for i in fold) == list(range(len(asked)))
    for copy in range(10):
        assert any({copy, 40 + copy} <= fold for fold in folds)
    assert folds == question_folds(asked)  # the same labels, the same folds


def test_fewer_questions_than_folds_give_a_fold_each() -> None:
    assert len(question_folds(memorable(3) * 4)) == 3
    no_words = [Label({}, (), "prose", True)] * 2  # no n-grams: each label its own question
    assert len(question_folds(no_words)) == 2


def test_each_label_is_scored_by_a_fit_that_never_saw_its_question() -> None:
    asked = memorable(30) * 2
    trained_on: list[list[Label]] = []

    def fit(train: list[Label]) -> Scorer:
        """A scorer that says which fold it was fitted for: its bias."""
        trained_on.append(train)
        bias = float(len(trained_on))
        return Scorer("fold", ("req_tools",), (0.0,), (1.0,), (0.0,), bias)

    scores = cross_fit(asked, fit)
    folds = question_folds(asked)
    assert len(trained_on) == len(folds) == FOLDS
    for k, (held, train) in enumerate(zip(folds, trained_on, strict=True)):
        assert not {asked[i].ngrams for i in held} & {lab.ngrams for lab in train}
        assert len(held) + len(train) == len(asked)
        assert all(scores[i] == 1 / (1 + math.exp(-(k + 1))) for i in held)
