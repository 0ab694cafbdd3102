"""``specproxy calibrate --target-agreement``: the learner's quality-target rule, offline.

Every speculation-log line whose draft was judged against the cloud (``agreement`` true
or false, with its ``features``: ``app.learning.labels.label_from_log``) is a label, an
audit weighing ``1 / audit_rate`` as the online learner weighs it. Each is rescored by the
config's scorer (with the logged ``ngrams``) and the threshold is
``app.routing.target.threshold_for`` of them: the loosest of a fixed sequence of P(wrong)
thresholds whose labels agree at least the target share of the time with 95% confidence
(``app.learning.threshold``, the rule the learner applies live). When none holds, the
config is left as it is (exit 1): more labels, or a lower target, would help. A scorer
fitted on the same logs (``specproxy fit``) would score them in sample, too kindly (the
learner scores them out of fold, ``app.learning.refit``): calibrate it on other logs.

Pure apart from ``read_labels``, which streams the logs as ``core.read_log`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.learning.labels import label_from_log
from app.learning.threshold import CONFIDENCE
from app.routing.scorer import Scorer
from app.routing.target import Bound, threshold_for
from app.telemetry.spec_log.reader import BadLine, iter_entries
from app.tools import pct
from app.tools.calibrate.core import CalibrateError, features_problem, round_up
from app.tools.calibrate.yaml_edit import KEY, SECTION, format_threshold

PROG = "specproxy calibrate"


@dataclass(slots=True)
class Labelled:
    """The logs' labels, scored by the config's scorer, and how the lines were counted."""

    scores: list[float] = field(default_factory=list)
    agreed: list[bool] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    audits: int = 0
    lines: int = 0
    unlabelled: int = 0  # not judged against the cloud (or logged without features)


def read_labels(paths: Sequence[str], scorer: Scorer, audit_rate: float | None) -> Labelled:
    """The labelled lines of the logs; CalibrateError naming ``FILE:LINE`` on a bad one."""
    found = Labelled()
    for path in paths:
        try:
            for item in iter_entries(path):
                found.lines += 1
                if isinstance(item, BadLine):
                    raise CalibrateError(f"{path}:{item.line_no}: {item.reason}")
                line_no, entry = item
                try:
                    label = label_from_log(entry, audit_rate)
                except ValueError as exc:
                    raise CalibrateError(f"{path}:{line_no}: {exc}") from exc
                if label is None:
                    found.unlabelled += 1
                    continue
                problem = features_problem(entry["features"], scorer)
                if problem is not None:
                    raise CalibrateError(f"{path}:{line_no}: {problem}")
                found.scores.append(scorer.score(label.features, label.ngrams))
                found.agreed.append(label.agreed)
                found.weights.append(label.weight)
                found.audits += label.audit
        except OSError as exc:
            raise CalibrateError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return found


def hold(labelled: Labelled, target: float) -> tuple[Bound, float | None]:
    """The target's bound on the labels, and the threshold to write (None: none holds),
    rounded up to the config's 6 decimals (a label within 1e-6 above may join)."""
    bound = threshold_for(
        labelled.scores,
        labelled.agreed,
        target,
        weights=labelled.weights,
        confidence=CONFIDENCE,
    )
    if bound.threshold is None:
        return bound, None
    return bound, min(1.0, round_up(max(0.0, bound.threshold)))


def report(
    *,
    paths: Sequence[str],
    labelled: Labelled,
    bound: Bound,
    threshold: float | None,
    audit_rate: float | None,
    old_threshold: float,
    old_source: str,
    config: str,
    written: bool,
) -> dict[str, Any]:
    """Every figure of a ``--target-agreement`` run as plain JSON data (shares in 0..1)."""
    return {
        "files": list(paths),
        "lines": labelled.lines,
        "labels": len(labelled.scores),
        "agreed": sum(labelled.agreed),
        "audits": labelled.audits,
        "audit_rate": audit_rate,
        "unlabelled": labelled.unlabelled,
        "target_agreement": bound.target,
        "bound": bound.as_mapping(),
        "unreachable": threshold is None,
        "old_threshold": old_threshold,
        "old_threshold_source": old_source,
        "new_threshold": threshold,
        "config": config,
        "written": written,
    }


def render_text(data: dict[str, Any]) -> str:
    """The report for a person."""
    bound = data["bound"]
    rate = data["audit_rate"]
    weighing = f", weighing 1/{rate:g} each" if rate and data["audits"] else ""
    out = [
        f"{PROG}: {KEY} for {pct(data['target_agreement'])} agreement of what is served locally",
        f"  logs:             {', '.join(data['files'])}",
        f"  lines read:       {data['lines']}",
        f"  labels:           {data['labels']} ({data['agreed']} agreed; {data['audits']} "
        f"audits{weighing})",
        f"  unlabelled:       {data['unlabelled']} (not judged against the cloud)",
    ]
    if data["new_threshold"] is None:
        out += ["", f"no threshold holds the target: {data['config']} left as it was"]
        return "\n".join(out) + "\n"
    value = format_threshold(data["new_threshold"])
    out += [
        f"  served locally:   {bound['served_labels']} of {bound['labels']} labels",
        f"  their agreement:  {pct(bound['estimate'])}, one-sided "
        f"{pct(bound['confidence'])} lower bound {pct(bound['lower_bound'])}",
        f"  threshold:        {format_threshold(data['old_threshold'])} "
        f"({data['old_threshold_source']}) -> {value}",
        "",
    ]
    if data["written"]:
        out.append(f"wrote {SECTION}.{KEY}: {value} to {data['config']}")
    else:
        out.append(f"dry run: {data['config']} left as it was ({KEY} would be {value})")
    return "\n".join(out) + "\n"


def unreachable_warning(data: dict[str, Any]) -> str:
    """Why no threshold holds the target, and what would help."""
    return (
        f"no threshold holds {pct(data['target_agreement'])} agreement with "
        f"{pct(data['bound']['confidence'])} confidence on {data['labels']} labels "
        f"({data['agreed']} agreed); {KEY} left as it was; more labels (learning on, or "
        "logs of longer running) or a lower --target-agreement would help"
    )
