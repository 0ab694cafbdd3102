"""The online learner: labels from verifications and audits, a guarded refit, the live policy.

* **Labels.** ``observe`` takes every finished request whose draft was judged against the
  cloud (``rec.agreement`` is true or false) and queues its label; a worker thread
  writes them to the store (``app.learning.outbox``, ``app.learning.store``). Nothing on
  the request path waits for the disk or for numpy.
* **Audits.** ``audit_now`` says whether an accepted draft is also verified in the
  background (``audit_rate``; ``cold_audit_rate`` until ``min_labels`` labels exist).
* **Refits.** One process leads (it holds the store's lock): every ``refit_every`` new
  labels (from any worker) it fits a candidate on all but the newest ``holdout`` share in
  a worker thread, starting from the configured scorer and held to it by
  ``prior_strength`` (few labels move it little); the candidate replaces the current
  scorer only when its AUROC on that held-back slice is at least the current one's
  (``app.learning.refit``). Every swap (or refusal) is logged.
* **One scorer everywhere.** The current scorer is ``scorer.json`` in the store: every
  process (workers, and this one after a restart) reloads it when it changes, so workers
  serve with the same scorer and a restart keeps what was learned.

Until a scorer has been learned, the configured one (the shipped prior) decides.

* **The threshold from the target.** At start, at every refit and every ``refit_every``
  new labels (in every process, from the same store), the judge's threshold becomes the
  one that holds ``target_agreement`` on the stored labels (``app.learning.threshold``);
  none holds: every draft is verified, but in the gate's local lane (held by its own
  bound). An explicit ``spill_threshold`` wins.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.config import LearningConfig
from app.learning.labels import Label
from app.learning.outbox import Outbox
from app.learning.refit import held_out_scores, refit
from app.learning.store import LearningStore
from app.learning.tally import Tally
from app.learning.threshold import TargetHold
from app.record import RequestRecord
from app.routing.gate import Lane, explored_weight, explores
from app.routing.policy import Policy
from app.routing.scorer import Scorer

if TYPE_CHECKING:
    from app.learning.gate_fit import GateKeeper
    from app.learning.shared_store import SharedLearningStore

log = logging.getLogger("specproxy.learning")
TEND_EVERY_S = 1.0  # how often the store is looked at (new labels, a new scorer)


class Learner:
    """Labels in, a better policy out; see the module doc."""

    def __init__(
        self,
        config: LearningConfig,
        prior: Policy,
        *,
        threshold: float | None = None,
        store: LearningStore | SharedLearningStore | None = None,
        target: float = 0.95,
        gate: GateKeeper | None = None,
    ) -> None:
        assert prior.scorer is not None, "learning needs a scored policy"
        self.config = config
        self.prior = prior
        self.threshold = threshold  # the configured spill_threshold, kept over a learned one
        # the threshold that holds target_agreement (cold: none, every draft verified)
        self.hold = TargetHold(target, threshold, config.refit_every)
        self.policy = replace(prior, threshold=self.hold.threshold)  # what decides now
        # the file store under state_dir, or Redis (state.backend: redis) over it
        self.store = store or LearningStore(config.state_dir, config.max_labels)
        self.outbox = Outbox(self.store, config.max_labels)  # labels not yet stored
        self.rng = random.Random()
        self.version = 0
        self.trained_on = 0
        self.auroc_holdout: float | None = None
        self.stored = 0  # labels in the store, as last counted
        self.tally = Tally()  # labels and audits counted since start
        self.refits = 0
        self.lead = False
        # A scorer adopted and the threshold worked out again: by _sync's thread or by a
        # _learn still running from the look before, one at a time.
        self._policy_lock = threading.RLock()
        self._stamp: int | None = None
        self._unfitted = 0
        self._task: asyncio.Task[None] | None = None
        self._refit: asyncio.Future[None] | None = None
        self.gate = gate  # the gate before the draft (app.learning.gate_fit), if on

    @property
    def cold(self) -> bool:
        return self.stored < self.config.min_labels

    @property
    def cloud_until_held(self) -> bool:
        """Whether the cloud answers now (``cloud_until_held`` on): no threshold holds the
        target, so every draft would be verified (outside the gate's local lane, which
        ``setup`` keeps), and the call is certain."""
        return self.config.cloud_until_held and self.hold.verifies_all

    def keeps_whole(self) -> bool:
        """Whether this draft must not be stopped early, to be judged whole for a label:
        cold, every one; while no threshold holds the target (every draft verified), the
        ``whole_drafts`` share: labels are the only way a threshold comes to hold."""
        if self.cold:
            return True
        share = self.config.whole_drafts  # drawn only when it is a share (audits share the rng)
        return self.hold.verifies_all and (share >= 1 or self.rng.random() < share)

    async def start(self) -> None:
        """Load what the store holds and start tending it."""
        await asyncio.to_thread(self._load)
        self._task = asyncio.create_task(self._tend(), name="learner")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._refit is not None:
            await asyncio.gather(self._refit, return_exceptions=True)
        try:
            await asyncio.to_thread(self.outbox.flush)
        except Exception as exc:  # the store is unusable: the labels left are lost, said once
            left = len(self.outbox.queued)
            log.warning("learning: %d labels not stored at exit (%s)", left, exc)
        await asyncio.to_thread(self.store.close)  # Redis' store talks to Redis: off the loop

    def audit_now(self) -> bool:
        """Whether this accepted draft is audited (cold: at the higher rate)."""
        return self.rng.random() < self.audit_rate

    @property
    def audit_rate(self) -> float:
        cfg = self.config
        return max(cfg.audit_rate, cfg.cold_audit_rate) if self.cold else cfg.audit_rate

    def observe(self, rec: RequestRecord, audit_rate: float | None = None) -> None:
        """Take a finished request's label, if it has one (an audit: its rate, for weight)."""
        if rec.agreement is None or rec.features is None:
            return
        weight = 1.0 / audit_rate if rec.audit and audit_rate else 1.0
        self.outbox.put(
            Label(
                features=rec.features,
                ngrams=rec.ngrams or (),
                context_type=rec.context_type,
                agreed=rec.agreement,
                audit=rec.audit,
                weight=weight,
                ts=time.time(),
            )
        )
        self.tally.label(rec.agreement, audit=rec.audit)

    def observe_late(
        self,
        features: dict[str, float],
        ngrams: tuple[int, ...],
        context_type: str,
        agreed: bool,
        explored: bool = False,
    ) -> None:
        """A label from a draft finished beside the cloud's answer (a stream relayed past
        its budget, an unheld request: ``app.pipeline.verify.LateDrafts``): judged whatever
        the judge made of it, so it weighs 1, as a verification does. ``explored``: a
        cloud-lane request's draft made for a label (``explore_now``), weighing
        ``1 / gate.explore``."""
        weight = explored_weight(self.gate.explore) if explored and self.gate else 1.0
        label = Label(features, ngrams, context_type, agreed, weight=weight, ts=time.time())
        self.outbox.put(label)
        self.tally.label(agreed, late=not explored, explored=explored)

    def explore_now(self) -> bool:
        """Whether this cloud-lane request's draft is made in the background for a label,
        at the gate's ``explore`` share (``app.routing.gate.explores``)."""
        share = self.gate.explore if self.gate is not None else 0.0
        return share > 0 and explores(Lane.CLOUD, share, self.rng.random())

    def audited(self, tokens: int, *, failed: bool = False) -> None:
        """An audit's cloud call ended (its tokens are audit spend)."""
        self.tally.audited(tokens, failed=failed)

    def status(self) -> dict[str, Any]:
        """``/stats`` → ``learning``."""
        return {
            "enabled": True,
            "labels": self.tally.labels_status(self.stored),
            "audits": self.tally.audits_status(self.audit_rate),
            "refits": self.refits,
            "target": self.hold.status(),
            **({"gate": self.gate.status()} if self.gate is not None else {}),
            "cold": self.cold,
            "lead": self.lead,
            "store": self.outbox.status(),
            "scorer": {
                "name": self.policy.name,
                "version": self.version,
                "trained_on": self.trained_on,
                "auroc_holdout": self.auroc_holdout,
            },
        }

    # -- in the background --------------------------------------------------

    async def _tend(self) -> None:
        while True:
            await asyncio.sleep(TEND_EVERY_S)
            try:
                due = await asyncio.to_thread(self._sync)
            except Exception as exc:  # the learner must never take the proxy down
                self.outbox.failed(exc)
                continue
            self.outbox.worked()
            if (due or self.hold.due) and (self._refit is None or self._refit.done()):
                self._refit = asyncio.ensure_future(asyncio.to_thread(self._learn, due))

    def _sync(self) -> bool:
        """Write queued labels, count new ones, reload a changed scorer (in a thread).
        Whether a refit is due (this process leads and enough new labels came)."""
        with self.outbox.lock:  # what is counted goes with the flush
            self.outbox.flush()
            added = self.store.added()
            if added:
                self.stored = self.store.count()
                self._unfitted += added
                self.hold.seen(added)
            self.lead = self.store.try_lead()  # a lease (Redis) may pass to another replica
            if self.gate is not None:
                self.gate.reload()
        self._reload()  # a new scorer is retargeted (five fits): not while flushes wait
        gate_due = self.gate is not None and self.gate.due
        return (
            self.lead
            and self.stored >= self.config.min_labels
            and (self._unfitted >= self.config.refit_every or gate_due)
        )

    def _load(self) -> None:
        self.stored = self.store.count()
        self.store.added()  # labels from before the start are not new
        self._reload()
        if self.gate is not None:
            self.gate.reload()  # the gate fitted before a restart serves at once
        if not self.version:
            self._retarget()  # the labels kept, under the prior (a loaded scorer's: done)
        else:
            log.info(
                "learning: scorer v%d (trained on %d labels) loaded from %s",
                self.version,
                self.trained_on,
                self.store.scorer_path,
            )

    def _reload(self) -> None:
        with self._policy_lock:
            stamp = self.store.scorer_stamp()
            if stamp is None or stamp == self._stamp:
                return
            found = self.store.read_scorer()
            self._stamp = stamp  # an unreadable one is read (and logged) again once changed
            if found is not None:
                self._adopt(*found)

    def _adopt(self, scorer: Scorer, version: int) -> None:
        self._retarget(scorer)  # the old scorer's threshold means nothing on its scores
        self.version = version
        self.trained_on = int(scorer.fitted_on.get("labels", 0))
        self.auroc_holdout = scorer.fitted_on.get("auroc_holdout")

    def _learn(self, refit: bool) -> None:
        """A refit when one is due, then the threshold from the target (in a thread)."""
        version = self.version
        if refit:
            self._refit_now()
        if self.version == version:  # a new scorer was retargeted as it was adopted
            self._retarget()

    def _retarget(self, scorer: Scorer | None = None) -> None:
        """The policy of ``scorer`` (None: the one in force) with the threshold that holds
        the target on the stored labels it scores (``app.learning.threshold``)."""
        with self._policy_lock:
            scorer = scorer or self.policy.scorer
            assert scorer is not None and self.prior.scorer is not None
            labels = self.store.read()
            scores = held_out_scores(labels, scorer, self.prior.scorer, self.config)
            self.hold.refresh(labels, scores)
            self.policy = replace(self.prior, scorer=scorer, threshold=self.hold.threshold)

    def _refit_now(self) -> None:
        """Fit a candidate and swap it in if it is not worse on the held-back labels."""
        started = time.perf_counter()
        labels = self.store.read()
        gate_only = self._unfitted < self.config.refit_every  # labels from before the start
        self._unfitted = 0
        if self.gate is not None:
            self.gate.refit(labels)
            if gate_only:
                return
        current = self.policy.scorer
        assert current is not None and self.prior.scorer is not None
        found = refit(labels, current, self.prior.scorer, self.config)
        if found is None:
            return
        self.refits += 1
        took = time.perf_counter() - started
        report = found.report(self.refits, self.version, len(labels), took)
        if not found.better:
            log.info("learning: %s", report)
            return
        self.store.write_scorer(found.candidate, self.version + 1)
        log.info("learning: %s", report)  # once written
        self._reload()
