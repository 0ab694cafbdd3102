"""The learner's state on disk: its labels and its current scorer, under ``state_dir``.

* ``labels.jsonl``: one label per line, appended under an exclusive ``flock`` so the
  workers of one proxy (and replicas sharing the directory) never interleave; kept to
  the newest ``max_labels`` by rewriting it in place, under the same lock.
* ``scorer.json``: the current learned scorer with its ``version``, replaced atomically
  (written beside, then renamed): a reader sees the old file or the new, never half.
* ``learner.lock``: held by the one process that refits (``try_lead``).

Every call blocks on the file system: the learner runs them in a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from app.learning.labels import Label
from app.learning.stored import skipped, stored_scorer
from app.routing.scorer import Scorer


class LearningStore:
    """Labels and the learned scorer under one directory (made on first use)."""

    def __init__(self, state_dir: str | Path, max_labels: int) -> None:
        self.dir = Path(state_dir)
        self.max_labels = max_labels
        self.labels_path = self.dir / "labels.jsonl"
        self.scorer_path = self.dir / "scorer.json"
        self._lead: IO[bytes] | None = None
        self._offset: int | None = None  # bytes of labels.jsonl seen by ``added``

    def append(self, labels: Sequence[Label]) -> None:
        """Add labels at the end; the oldest go when there are twice ``max_labels``."""
        lines = "".join(json.dumps(lab.as_mapping()) + "\n" for lab in labels).encode()
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._locked("a+b") as file:
            if _ends_mid_line(file):
                lines = b"\n" + lines  # a half-written line (a full disk) is ended first
            file.write(lines)
            file.flush()
            if file.tell() > 0 and self._over(file):
                self._compact()

    def read(self) -> list[Label]:
        """The newest ``max_labels`` labels, oldest first (a malformed line is skipped)."""
        if not self.labels_path.exists():
            return []
        with self._locked("rb") as file:
            raw = file.read().decode("utf-8", errors="replace").splitlines()
        labels = []
        for line in raw[-self.max_labels :]:
            with contextlib.suppress(ValueError):
                labels.append(Label.from_mapping(json.loads(line)))
        return labels

    def count(self) -> int:
        """Labels stored (at most ``2 * max_labels`` before a compaction)."""
        if not self.labels_path.exists():
            return 0
        with self._locked("rb") as file:
            return min(file.read().count(b"\n"), self.max_labels)

    def added(self) -> int:
        """Labels appended (by any process) since the last call; the first call only takes
        the position."""
        added, offset = new_lines(self.labels_path, self._offset or 0)
        first, self._offset = self._offset is None, offset
        return 0 if first else added

    def write_scorer(self, scorer: Scorer, version: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        temporary = self.scorer_path.with_suffix(f".{os.getpid()}.tmp")
        data = {**scorer.as_mapping(), "version": version}
        temporary.write_text(json.dumps(data), encoding="utf-8")
        os.replace(temporary, self.scorer_path)

    def read_scorer(self) -> tuple[Scorer, int] | None:
        """The stored scorer and its version; None when there is none (or it is unreadable)."""
        try:
            text = self.scorer_path.read_text(encoding="utf-8")
        except OSError:
            return None
        try:
            return stored_scorer(json.loads(text))
        except (ValueError, TypeError, RecursionError) as exc:
            skipped(self.scorer_path, exc)
            return None

    def scorer_stamp(self) -> int | None:
        """The scorer file's modification time (ns); None when there is none."""
        try:
            return self.scorer_path.stat().st_mtime_ns
        except OSError:
            return None

    def try_lead(self) -> bool:
        """Whether this process is (now) the one that refits: it holds ``learner.lock``."""
        if self._lead is not None:
            return True
        self.dir.mkdir(parents=True, exist_ok=True)
        file = (self.dir / "learner.lock").open("ab")
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            file.close()
            return False
        self._lead = file
        return True

    def status(self) -> dict[str, Any]:
        """/stats → learning.store."""
        return {"backend": "files", "dir": str(self.dir)}

    def close(self) -> None:
        if self._lead is not None:
            self._lead.close()  # releases the lock: another process may lead
            self._lead = None

    @contextlib.contextmanager
    def _locked(self, mode: str) -> Iterator[IO[bytes]]:
        with self.labels_path.open(mode) as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            try:
                yield file
            finally:
                fcntl.flock(file, fcntl.LOCK_UN)

    def _over(self, file: IO[bytes]) -> bool:
        # Cheap: only read the file when it is big enough to hold 2 * max_labels short lines.
        return file.tell() > 2 * self.max_labels * 200 and self._lines() > 2 * self.max_labels

    def _lines(self) -> int:
        with self.labels_path.open("rb") as file:
            return file.read().count(b"\n")

    def _compact(self) -> None:
        """Keep the newest ``max_labels`` lines (called with the lock held)."""
        with self.labels_path.open("r+b") as file:
            lines = file.read().splitlines(keepends=True)[-self.max_labels :]
            file.seek(0)
            file.write(b"".join(lines))
            file.truncate()


def _ends_mid_line(file: IO[bytes]) -> bool:
    """Whether the file's last line has no newline (its writer stopped mid-line)."""
    end = file.seek(0, os.SEEK_END)
    if not end:
        return False
    file.seek(end - 1)
    return file.read(1) != b"\n"


def new_lines(path: Path, offset: int) -> tuple[int, int]:
    """Lines appended to ``path`` since byte ``offset``, and the new offset (a file that
    shrank, compacted, is read from its start)."""
    try:
        size = path.stat().st_size
    except OSError:
        return 0, 0
    if size < offset:
        offset = 0
    if size == offset:
        return 0, offset
    with path.open("rb") as file:
        file.seek(offset)
        return file.read(size - offset).count(b"\n"), size
