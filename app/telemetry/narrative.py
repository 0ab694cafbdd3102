"""The speculative path's log lines, told from its events: seed 004 documents them as the
way to follow a request ("Look for these log patterns"), so their wording is a contract.

``Narrator.tell`` is given each event as the request's story is written
(``app.story``) and logs the lines it stands for; no step logs its own.
"""

from __future__ import annotations

import logging

from app.routing.plan import Step
from app.story import (
    Compared,
    Drafted,
    Event,
    Failed,
    Hedged,
    Judged,
    Laned,
    Opened,
    Planned,
    RelayOutcome,
    Started,
    Stopped,
    Trusted,
)

log = logging.getLogger("specproxy.pipeline")


class Narrator:
    """Writes the seed's log lines for one pipeline; ``cloud`` is how the verifier is named."""

    def __init__(self, cloud: str, cloud_name: str) -> None:
        self.cloud = cloud  # as the seed names it ("Cerebras")
        self.cloud_name = cloud_name  # its key under models:

    def tell(self, event: Event) -> None:
        """The log lines ``event`` stands for (most events have none)."""
        match event:
            case Started(budget):
                log.info("=== SPECULATIVE DECODING START ===")
                log.info("Step 1: Generating draft from local model (max %d tokens)", budget)
            case Hedged():
                log.info("Hedging: calling %s alongside the draft", self.cloud)
            case Laned(lane, p_wrong) if p_wrong is not None:
                log.info("Gate: %s lane (P(wrong) %.2f from the request)", lane, p_wrong)
            case Failed(exc, "cloud"):
                log.warning("Cloud answer failed (%s); drafting locally instead", exc.message)
            case Trusted(max_score):
                log.info(
                    "First-token budget spent: draft trusted so far (P(wrong) <= %s), waited for",
                    max_score,
                )
            case Stopped(out_of_time=True):
                log.info("First-token budget spent: streaming %s live; draft cancelled", self.cloud)
            case Stopped():
                log.info("Hedged cloud answer came first; draft cancelled")
            case Drafted(signals):
                log.info(
                    "Draft generated: %d tokens, %d chars", signals.n_tokens, len(signals.text)
                )
            case Judged():
                self._judged(event)
            case Planned():
                self._planned(event)
            case Failed(exc, "draft"):
                log.warning("Draft failed (%s); going straight to %s", exc.message, self.cloud)
            case Failed(exc, "verify"):
                log.warning("Verification failed (%s)", exc.message)  # the next line says more
            case Failed(exc, "continue"):
                log.warning(
                    "Local continuation failed too (%s); serving the truncated draft", exc.message
                )
            case Opened(live=True):
                log.info("Spilled over: True (streaming the verified answer live)")
            case Compared():
                self._compared(event)
            case RelayOutcome(error=exc, compared=compared, continued=continued):
                for part in continued:
                    log.warning(
                        "Stream from %s broke (%s); continued by %s",
                        part.broken.upstream,
                        part.broken.message,
                        part.upstream,
                    )
                if exc is not None:
                    log.warning("Stream from %s broke: %s", exc.upstream, exc.message)
                elif compared is not None:
                    self._compared(compared)

    def _judged(self, judged: Judged) -> None:
        if judged.violation:
            log.info(
                "Draft needs verification: it breaks what the request asks for (%s)",
                judged.violation,
            )
        elif judged.accepted:
            if judged.spill_score is None:
                why = "passed the seed's checks"
            else:
                why = f"{judged.policy} score {judged.spill_score:.2f} <= {judged.threshold:.2f}"
            log.info("Draft accepted without verification (%s)", why)
        else:
            log.info("Draft needs verification: %s", "; ".join(judged.details))

    def _planned(self, planned: Planned) -> None:
        plan, cloud = planned.plan, planned.cloud
        if planned.first and (blocked := cloud.blocked) and blocked in plan.reasons:
            if blocked == "cloud_budget_low":
                log.warning(
                    "Not verifying: %s rate limit nearly spent: %s", self.cloud_name, cloud.detail
                )
            else:
                log.warning("Verification is off: %s: %s", self.cloud_name, cloud.detail)
        match plan.step:
            case Step.SERVE_DRAFT if plan.degraded:
                log.info("Serving the local answer, degraded (%s)", ", ".join(plan.reasons))
            case Step.CONTINUE_LOCALLY:
                log.info("Continuing on the local model to the client's budget (degraded)")
            case Step.REFUSE:
                log.warning(
                    "No valid answer: the draft breaks the request (%s) and the verifier "
                    "cannot answer (%s)",
                    planned.violation,
                    planned.why,
                )
            case Step.VERIFY_WHOLE | Step.VERIFY_LIVE:
                log.info("Step 2: Verifying draft with %s model", self.cloud)

    def _compared(self, compared: Compared) -> None:
        n, chars, similarity = compared.n_tokens, compared.n_chars, compared.similarity
        if compared.use_draft is None:  # live: told with the similarity it was judged by
            log.info(
                "Verification response: %d tokens, %d chars (similarity %.2f)", n, chars, similarity
            )
            return
        log.info("Verification response: %d tokens, %d chars", n, chars)
        if compared.use_draft:
            log.info("Responses similar (%.2f), using draft", similarity)
            log.info("Spilled over: False")
        else:
            log.info("Responses differ (%.2f), using verified response", similarity)
            log.info("Spilled over: True")
