"""D24: a label line left half-written in ``labels.jsonl`` (the disk was full) does not
swallow the next label appended: the half line is skipped on reading, the new one kept
(a real file)."""

from __future__ import annotations

from pathlib import Path

from app.learning.store import LearningStore
from tests.support.gate_labels import store_labels, two_kinds


def test_a_half_written_line_does_not_swallow_the_next_label(tmp_path: Path) -> None:
    state = tmp_path / "state"
    labels = two_kinds(2)
    store_labels(state, labels[:3])
    with (state / "labels.jsonl").open("ab") as file:
        file.write(b'{"ts": 1.0, "context_type": "pro')  # the disk filled up here
    store = LearningStore(state, max_labels=100)
    store.append([labels[3]])
    assert store.read() == labels[:4]
