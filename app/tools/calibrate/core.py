"""Choosing the spill threshold: rescore the logged drafts, then meet the cloud-share budget.

Pure except ``read_log``, which streams the logs through ``app.telemetry.spec_log.reader``
(the analyzer's reader, so both tools agree on which lines are valid).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from app.evaluation.metrics import cloud_share_at, threshold_for_cloud_share
from app.routing.scorer import Scorer
from app.routing.signals import OUT_OF_TIME
from app.telemetry.spec_log.reader import BadLine, iter_entries, stop_of

PROG = "specproxy calibrate"
# the proxy sends these drafts to the cloud (``stop_of``: cut at the token budget, aborted,
# or a stream's stopped at its first-token budget)
FORCED_STOPS = frozenset({"n_max", "p_min", OUT_OF_TIME})
DIGITS = 6
UNSET = "(unset)"  # context type of lines without one


class CalibrateError(Exception):
    """A problem that stops the command; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def effective_score(
    stop_reason: object,
    features: Mapping[str, float],
    scorer: Scorer,
    ngrams: Sequence[int] = (),
) -> float:
    """The score the proxy acts on: ``inf`` for a cut or aborted draft, else the scorer's
    (a learned scorer also reads the request's logged ``ngrams``)."""
    if stop_reason in FORCED_STOPS:
        return math.inf
    return scorer.score(features, ngrams)


def round_up(value: float, digits: int = DIGITS) -> float:
    """The smallest number with ``digits`` decimals that is >= ``value``."""
    rounded = round(value, digits)
    if rounded < value:
        rounded = round(rounded + 10.0**-digits, digits)
    return rounded


@dataclass(frozen=True, slots=True)
class Calibration:
    """The chosen threshold and what it does on the log."""

    threshold: float  # in [0, 1], DIGITS decimals: what goes into the config
    achieved: float  # cloud share on the log at ``threshold``
    forced_share: float  # share cut or aborted: cloud whatever the threshold
    unreachable: bool  # the forced share alone exceeds the target


def calibrate(scores: Sequence[float], target: float) -> Calibration:
    """The threshold sending the largest share <= ``target`` of ``scores`` to the cloud.

    Forced drafts score ``inf``. When they alone exceed the target it cannot be met: the
    threshold is 1.0 (every scored draft local). Otherwise the unrounded threshold is the
    highest score kept local, and rounding it up keeps the same split unless two scores lie
    within 1e-6 of each other (then a few more stay local, never more go to the cloud).
    """
    raw = threshold_for_cloud_share(scores, target)
    forced_share = sum(s == math.inf for s in scores) / len(scores)
    unreachable = raw == math.inf  # only an inf group can be what first overflows here
    # Scores are probabilities: clamping to the config's range [0, 1] changes no split,
    # except that -inf ("all fits") becomes 0.0, which keeps a score of exactly 0.0 local.
    threshold = 1.0 if unreachable else min(1.0, round_up(max(0.0, raw)))
    return Calibration(threshold, cloud_share_at(scores, threshold), forced_share, unreachable)


@dataclass(slots=True)
class Samples:
    """The effective scores of the usable log lines and how the lines were counted."""

    scores: list[float] = field(default_factory=list)
    contexts: list[str] = field(default_factory=list)
    lines: int = 0
    skipped: int = 0
    stop_reasons: Counter[str] = field(default_factory=Counter)


def read_log(paths: Sequence[str], scorer: Scorer) -> Samples:
    """Rescore every usable line of the logs; CalibrateError naming ``FILE:LINE`` on a bad one."""
    samples = Samples()
    for path in paths:
        try:
            for item in iter_entries(path):
                samples.lines += 1
                if isinstance(item, BadLine) and item.truncated:
                    samples.skipped += 1  # a last line cut off, as analyze skips it
                    continue
                if isinstance(item, BadLine):
                    raise CalibrateError(f"{path}:{item.line_no}: {item.reason}")
                line_no, entry = item
                features = entry.get("features")
                if features is None:
                    samples.skipped += 1
                    continue
                problem = features_problem(features, scorer)
                if problem is not None:
                    raise CalibrateError(f"{path}:{line_no}: {problem}")
                stop = stop_of(entry)
                ngrams = entry.get("ngrams") or ()
                samples.scores.append(effective_score(stop, features, scorer, ngrams))
                samples.contexts.append(entry.get("context_type") or UNSET)
                if stop in FORCED_STOPS:
                    samples.stop_reasons[stop] += 1
        except OSError as exc:
            raise CalibrateError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return samples


def features_problem(features: object, scorer: Scorer) -> str | None:
    if not isinstance(features, dict):
        return f"field 'features' should be an object or null, got {orjson.dumps(features)!r}"
    for name in scorer.features:
        value = features.get(name)
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            return (
                f"features.{name} (read by scorer {scorer.name!r}) is missing or not a "
                "number: the line comes from another version of specproxy"
            )
    return None
