"""Labels on their way to the store (``app.learning.outbox``): a store that cannot be
written keeps the newest labels waiting, says so once, and takes them when it can."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.learning.labels import Label
from app.learning.outbox import Outbox
from app.learning.store import LearningStore


def label(n: int) -> Label:
    return Label({"mean_logprob": -n / 10}, (n,), "chat", agreed=n % 2 == 0, ts=float(n))


def test_a_failing_store_keeps_the_newest_labels_and_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.write_text("a file where the directory should be")
    outbox = Outbox(LearningStore(state, max_labels=3), max_labels=3)
    with caplog.at_level(logging.WARNING, logger="specproxy.learning"):
        for n in range(5):
            outbox.put(label(n))
            with pytest.raises(OSError) as failure:
                outbox.flush()
            outbox.failed(failure.value)
    assert [lab.ts for lab in outbox.queued] == [2.0, 3.0, 4.0]  # the newest max_labels
    assert outbox.failures == 5 and str(state) in (outbox.error or "")
    assert outbox.status()["failures"] == 5
    warned = [r for r in caplog.records if "could not read or write" in r.getMessage()]
    assert len(warned) == 1  # the same failure again is not said again

    state.unlink()  # the directory can be made: what waited is written, in order
    outbox.flush()
    outbox.worked()
    assert outbox.error is None and outbox.queued == []
    assert [lab.ts for lab in LearningStore(state, max_labels=3).read()] == [2.0, 3.0, 4.0]
