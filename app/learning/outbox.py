"""Labels on their way to the store.

The request path only appends (``put``); a worker thread writes them (``flush``), one
flush at a time: a look the loop stopped waiting for may still be writing when the
learner closes and flushes. A store that fails keeps its labels here (the newest
``max_labels``) for the next look, and says so once, not once a second; ``/stats`` →
``learning.store`` shows the error and how many looks failed.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from app.learning.labels import Label

if TYPE_CHECKING:
    from app.learning.shared_store import SharedLearningStore
    from app.learning.store import LearningStore

log = logging.getLogger("specproxy.learning")


class Outbox:
    """The labels not yet in ``store``, and how writing them went."""

    def __init__(self, store: LearningStore | SharedLearningStore, max_labels: int) -> None:
        self.store, self.max_labels = store, max_labels
        self.queued: list[Label] = []
        self.error: str | None = None  # the store's last failure, until it works again
        self.failures = 0
        # Held by a flush and by what the learner counts with it (re-entrant for that).
        # Reads elsewhere (a reload, a refit) need no turn: the file and Redis stores take
        # them beside a write.
        self.lock = threading.RLock()

    def put(self, label: Label) -> None:
        """Queue a label (on the loop: no disk, no network)."""
        self.queued.append(label)

    def flush(self) -> None:
        """Write what is queued (in a thread); on failure keep it and raise."""
        with self.lock:
            queued, self.queued = self.queued, []
            if queued:
                try:
                    self.store.append(queued)
                except Exception:
                    self.queued = [*queued, *self.queued][-self.max_labels :]
                    raise

    def failed(self, exc: Exception) -> None:
        """A look at the store failed: counted, and warned of when the failure is new."""
        text = f"{type(exc).__name__}: {exc}"
        self.failures += 1
        if text != self.error:
            log.warning(
                "learning: could not read or write %s (%s); labels wait in memory",
                self.store.dir,
                text,
            )
        self.error = text

    def worked(self) -> None:
        """A look at the store succeeded: a failure before it is over, said once."""
        if self.error is not None:
            log.warning("learning: %s is usable again", self.store.dir)
            self.error = None

    def status(self) -> dict[str, Any]:
        """``/stats`` → ``learning.store``."""
        return {**self.store.status(), "error": self.error, "failures": self.failures}
