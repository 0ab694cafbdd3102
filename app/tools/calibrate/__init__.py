"""``specproxy calibrate``: the spill threshold that sends a target share of drafts to the cloud.

    specproxy calibrate --target-cloud-rate 0.3 [--config config.yaml] [--dry-run] [--json]
                        LOG [LOG ...]
    specproxy calibrate --target-agreement 0.95 [--audit-rate R] [...] LOG [LOG ...]

``--target-agreement`` applies the online learner's quality-target rule to the logs'
labelled lines instead (``target``; docs/target.md). The rest of this doc is about
``--target-cloud-rate``:

RouteLLM's ``calibrate_threshold`` on the user's own traffic: every speculation-log line
(``app.telemetry.spec_log``) with ``features`` is rescored by the config's current scorer
(not its logged ``spill_score``, so a new policy or scorer file can be calibrated on old
traffic); drafts cut at their token budget (``n_max``) or aborted (``p_min``) score
``inf``, as the proxy sends them to the cloud whatever the threshold. The threshold is
``app.evaluation.metrics.threshold_for_cloud_share`` of those scores: the target is a
budget, never exceeded on the log. It is written, rounded up to 6 decimals (rounding down
could push the share past the target), as ``speculative_decoding.spill_threshold`` into
the config, every other byte of which is kept.

Lines without ``features`` (logged before they were) are skipped and counted. Exit codes:
0 done; 1 the config was not rewritten: the target is unreachable (the forced share alone
exceeds it; the report says what would help) or the file could not be rewritten (left as
it was); 2 a usage, config or log error.

Pure core, thin edges: ``core`` chooses the threshold (``effective_score``, ``calibrate``)
and reads the logs (``read_log``); ``yaml_edit`` sets the value in the config
(``set_spill_threshold`` pure, ``write_config`` the verified atomic write); ``report``
lays out the result; ``cli`` is the command line.
"""

from __future__ import annotations

from app.tools.calibrate.cli import main
from app.tools.calibrate.core import (
    CalibrateError,
    Calibration,
    calibrate,
    effective_score,
    read_log,
    round_up,
)
from app.tools.calibrate.yaml_edit import (
    edit_is_exact,
    format_threshold,
    set_spill_threshold,
    write_config,
)

__all__ = [
    "CalibrateError",
    "Calibration",
    "calibrate",
    "edit_is_exact",
    "effective_score",
    "format_threshold",
    "main",
    "read_log",
    "round_up",
    "set_spill_threshold",
    "write_config",
]
