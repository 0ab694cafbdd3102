"""Health flags for ``/stats`` → ``alerts``, read from the windows (``app.telemetry.windows``).

Acceptance over five minutes below its floor (the drafts are not worth verifying), or the
spill-over rate of the last 30 s jumping above that of five minutes (the local model, or
the traffic, changed). Each flag is raised only on enough drafts or requests
(``alerts.min_drafts``) to mean something.
"""

from __future__ import annotations

from typing import Any

from app.config import AlertConfig


def alerts(config: AlertConfig, windows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The flags raised by the ``30s`` and ``5m`` windows."""
    slow, fast = windows["5m"], windows["30s"]
    found = []
    if slow["num_drafts"] >= config.min_drafts:
        rate, length = slow["acceptance_rate"], slow["mean_acceptance_length"]
        if rate < config.min_acceptance_rate:
            found.append(_alert("low_acceptance_rate", rate, config.min_acceptance_rate))
        if length < config.min_acceptance_length:
            found.append(_alert("speculation_not_paying", length, config.min_acceptance_length))
    if fast["requests"] >= config.min_drafts and None not in (
        fast["spill_over_rate"],
        slow["spill_over_rate"],
    ):
        jump = fast["spill_over_rate"] - slow["spill_over_rate"]
        if jump > config.spill_rate_jump:
            found.append(_alert("spill_over_rate_jump", round(jump, 4), config.spill_rate_jump))
    return found


def _alert(name: str, value: float, threshold: float) -> dict[str, Any]:
    return {"alert": name, "value": value, "threshold": threshold}
