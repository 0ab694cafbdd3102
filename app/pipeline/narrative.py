"""The speculative path's log lines, in one place: seed 004 documents them as the way
to follow a request ("Look for these log patterns"), so their wording is a contract.
"""

from __future__ import annotations

import logging

from app.errors import UpstreamError
from app.routing.policy import Decision, Policy

log = logging.getLogger("specproxy.pipeline")


class Narrator:
    """Writes the seed's log lines for one pipeline; ``cloud`` is how the verifier is named."""

    def __init__(self, cloud: str, cloud_name: str) -> None:
        self.cloud = cloud  # as the seed names it ("Cerebras")
        self.cloud_name = cloud_name  # its key under models:

    def start(self, budget: int) -> None:
        log.info("=== SPECULATIVE DECODING START ===")
        log.info("Step 1: Generating draft from local model (max %d tokens)", budget)

    def hedging(self) -> None:
        log.info("Hedging: calling %s alongside the draft", self.cloud)

    def draft_failed(self, exc: UpstreamError) -> None:
        log.warning("Draft failed (%s); going straight to %s", exc.message, self.cloud)

    def cloud_first(self) -> None:
        log.info("Hedged cloud answer came first; draft cancelled")

    def out_of_time(self) -> None:
        log.info("First-token budget spent: streaming %s live; draft cancelled", self.cloud)

    def trusted(self, max_score: float | None) -> None:
        log.info(
            "First-token budget spent: draft trusted so far (P(wrong) <= %s), waited for", max_score
        )

    def drafted(self, n_tokens: int, n_chars: int) -> None:
        log.info("Draft generated: %d tokens, %d chars", n_tokens, n_chars)

    def accepted(self, decision: Decision, policy: Policy) -> None:
        if decision.score is None:
            why = "passed the seed's checks"
        else:
            why = f"{policy.name} score {decision.score:.2f} <= {policy.threshold:.2f}"
        log.info("Draft accepted without verification (%s)", why)

    def unusable(self, violation: str) -> None:
        log.info("Draft needs verification: it breaks what the request asks for (%s)", violation)

    def doubted(self, decision: Decision) -> None:
        log.info("Draft needs verification: %s", "; ".join(decision.details))

    def not_verifying(self, reason: str, detail: str) -> None:
        if reason == "cloud_budget_low":
            log.warning("Not verifying: %s rate limit nearly spent: %s", self.cloud_name, detail)
        else:
            log.warning("Verification is off: %s: %s", self.cloud_name, detail)

    def verifying(self) -> None:
        log.info("Step 2: Verifying draft with %s model", self.cloud)

    def verify_failed(self, exc: UpstreamError) -> None:
        log.warning("Verification failed (%s)", exc.message)  # what follows says what is served

    def serving_degraded(self, reasons: tuple[str, ...]) -> None:
        log.info("Serving the local answer, degraded (%s)", ", ".join(reasons))

    def refusing(self, violation: str, why: str) -> None:
        log.warning(
            "No valid answer: the draft breaks the request (%s) and the verifier cannot "
            "answer (%s)",
            violation,
            why,
        )

    def verified(self, n_tokens: int, n_chars: int, similarity: float | None = None) -> None:
        if similarity is None:
            log.info("Verification response: %d tokens, %d chars", n_tokens, n_chars)
        else:
            log.info(
                "Verification response: %d tokens, %d chars (similarity %.2f)",
                n_tokens,
                n_chars,
                similarity,
            )

    def merged(self, use_draft: bool, similarity: float) -> None:
        if use_draft:
            log.info("Responses similar (%.2f), using draft", similarity)
            log.info("Spilled over: False")
        else:
            log.info("Responses differ (%.2f), using verified response", similarity)
            log.info("Spilled over: True")

    def live(self) -> None:
        log.info("Spilled over: True (streaming the verified answer live)")

    def continuing(self) -> None:
        log.info("Continuing on the local model to the client's budget (degraded)")

    def continuation_failed(self, exc: UpstreamError) -> None:
        log.warning("Local continuation failed too (%s); serving the truncated draft", exc.message)

    def stream_broke(self, exc: UpstreamError) -> None:
        log.warning("Stream from %s broke: %s", exc.upstream, exc.message)
