"""The learner's labels and scorer in Redis, so replicas on any host learn as one.

Same calls as ``LearningStore`` (the learner runs them in a worker thread, so the
blocking client is the right one), over these keys (``state.key_prefix`` first):

* ``labels``: a list of JSON labels, trimmed to the newest ``max_labels``;
  ``labels:added`` counts every label ever pushed (new labels since a cursor);
* ``scorer``: the current learned scorer with its ``version`` (the leader's refit);
* ``learner:lead``: the replica that refits, a lease renewed on every look.

Everything is also kept in the local store under ``state_dir``: while Redis is down
this replica learns from its own labels, leads its own refits and serves its own
scorer. Labels pushed nowhere wait (at most ``max_labels``) and a scorer refitted
meanwhile is published when Redis answers again, unless the fleet has a newer one.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from app.learning.labels import Label
from app.learning.store import LearningStore
from app.learning.stored import skipped, stored_scorer
from app.routing.scorer import Scorer
from app.state.health import RedisHealth

LEASE_S = 10  # a leader that stops renewing (it died) is replaced after this long


class SharedLearningStore:
    """``LearningStore``'s calls over Redis, with the local store as the fallback."""

    def __init__(
        self,
        local: LearningStore,
        client: Any,
        prefix: str,
        replica: str,
        health: RedisHealth,
    ) -> None:
        self.local = local
        self.dir = local.dir
        self.scorer_path = local.scorer_path
        self.max_labels = local.max_labels
        self.client = client
        self.prefix = prefix
        self.replica = replica
        self.health = health
        self._pending: list[str] = []  # labels Redis has not taken yet
        self._unpublished: tuple[Scorer, int] | None = None
        self._cursor: int | None = None  # labels:added when last looked

    def _key(self, name: str) -> str:
        return f"{self.prefix}:{name}"

    def _shared(self, call: Any, fallback: Any) -> Any:
        """``call(client)``, or ``fallback()`` when Redis fails (noted in the health)."""
        try:
            result = call(self.client)
        except Exception as exc:  # down, slow or odd: this replica learns alone
            self.health.failed(exc)
            return fallback()
        self.health.ok()
        return result

    def append(self, labels: Sequence[Label]) -> None:
        """Add labels locally and to the fleet's list (or keep them until Redis answers)."""
        self.local.append(labels)
        self._pending += [json.dumps(lab.as_mapping()) for lab in labels]
        self._pending = self._pending[-self.max_labels :]
        self._push()

    def _push(self) -> None:
        if not self._pending:
            return
        lines = self._pending

        def push(client: Any) -> None:
            pipe = client.pipeline(transaction=True)
            pipe.rpush(self._key("labels"), *lines)
            pipe.ltrim(self._key("labels"), -self.max_labels, -1)
            pipe.incrby(self._key("labels:added"), len(lines))
            pipe.execute()
            self._pending = []

        self._shared(push, lambda: None)

    def read(self) -> list[Label]:
        """The fleet's newest ``max_labels`` labels, oldest first (Redis down: this one's)."""
        raw = self._shared(
            lambda c: c.lrange(self._key("labels"), -self.max_labels, -1), lambda: None
        )
        if raw is None:
            return self.local.read()
        labels = []
        for line in raw:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                labels.append(Label.from_mapping(json.loads(line)))
        return labels

    def count(self) -> int:
        return int(
            self._shared(
                lambda c: min(c.llen(self._key("labels")), self.max_labels), self.local.count
            )
        )

    def added(self) -> int:
        """Labels the fleet added since the last call (Redis down: this replica's own);
        the first call only takes the position."""
        local_added = self.local.added()
        self._push()  # catch up first: what waited counts once Redis holds it
        self._publish_unpublished()
        total = self._shared(lambda c: int(c.get(self._key("labels:added")) or 0), lambda: None)
        if total is None:
            return local_added
        before, self._cursor = self._cursor, total
        if before is None:
            return 0
        return total - before if total >= before else total  # Redis restarted empty

    def write_scorer(self, scorer: Scorer, version: int) -> None:
        """Store the scorer locally and for the fleet (later, if Redis is down now)."""
        self.local.write_scorer(scorer, version)
        self._unpublished = (scorer, version)
        self._publish_unpublished()

    def _publish_unpublished(self) -> None:
        if self._unpublished is None:
            return
        scorer, version = self._unpublished
        data = json.dumps({**scorer.as_mapping(), "version": version})

        def publish(client: Any) -> None:
            found = client.get(self._key("scorer"))
            theirs = int(json.loads(found).get("version", 0)) if found else -1
            if version > theirs:  # a newer one the fleet learned meanwhile stays
                client.set(self._key("scorer"), data)
            self._unpublished = None

        self._shared(publish, lambda: None)

    def read_scorer(self) -> tuple[Scorer, int] | None:
        """The fleet's scorer and its version (Redis down: this replica's own file)."""
        raw = self._shared(lambda c: c.get(self._key("scorer")), lambda: False)
        if raw is False:
            return self.local.read_scorer()
        if raw is None:
            return None
        try:
            return stored_scorer(json.loads(raw))
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            skipped(f"redis ({self._key('scorer')})", exc)
            return None

    def scorer_stamp(self) -> int | None:
        """What changes when the scorer does: a hash of the fleet's (Redis down: the file's
        modification time)."""
        raw = self._shared(lambda c: c.get(self._key("scorer")), lambda: False)
        if raw is False:
            return self.local.scorer_stamp()
        return None if raw is None else hash(raw)

    def try_lead(self) -> bool:
        """Whether this replica refits now: it holds (or renews) the fleet's lease (Redis
        down: the local lock, as one host's workers do)."""

        def lead(client: Any) -> bool:
            key = self._key("learner:lead")
            if client.set(key, self.replica, nx=True, ex=LEASE_S):
                return True
            holder = client.get(key)
            if holder is not None and holder.decode() == self.replica:
                client.expire(key, LEASE_S)
                return True
            return False

        return bool(self._shared(lead, self.local.try_lead))

    def status(self) -> dict[str, Any]:
        """/stats → learning.store."""
        return {"backend": "redis", "redis": self.health.status(), "waiting": len(self._pending)}

    def close(self) -> None:
        """Give up the lease (best effort) and the local lock."""

        def release(client: Any) -> None:
            key = self._key("learner:lead")
            holder = client.get(key)
            if holder is not None and holder.decode() == self.replica:
                client.delete(key)

        with contextlib.suppress(Exception):
            release(self.client)
        with contextlib.suppress(Exception):
            self.client.close()
        self.local.close()
