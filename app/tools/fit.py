"""``specproxy fit LOG... [--out scorer.json]``: a scorer fitted offline on speculation logs.

Every log line whose draft was judged against the cloud (``agreement`` true or false, with
its ``features``; ``ngrams`` when learning was on) is a label, weighted as the online
learner weights it (an audit by ``1 / --audit-rate``). The fit is the online learner's
own (``app.learning.fit.fit_scorer``); point ``speculative_decoding.scorer_file`` at the
result, and ``specproxy calibrate`` rescoring the same logs picks its threshold.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from app.evaluation.metrics import auroc
from app.learning.fit import fit_scorer
from app.learning.labels import Label, label_from_log
from app.routing.scorer import load_scorer
from app.telemetry.spec_log.reader import BadLine, iter_entries


def read_labels(paths: Sequence[str], audit_rate: float | None) -> tuple[list[Label], int]:
    """The labels in the logs and the count of lines that carry none."""
    labels: list[Label] = []
    skipped = 0
    for path in paths:
        for item in iter_entries(path):
            if isinstance(item, BadLine) and item.truncated:
                skipped += 1  # a last line cut off, as analyze skips it
                continue
            if isinstance(item, BadLine):
                raise ValueError(f"{path}:{item.line_no}: {item.reason}")
            label = label_from_log(item[1], audit_rate)
            if label is None:
                skipped += 1
            else:
                labels.append(label)
    return labels, skipped


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specproxy fit", description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", help="speculation log files (logging.spec_log_file)")
    parser.add_argument("--out", type=Path, default=Path("scorer.json"))
    parser.add_argument(
        "--audit-rate", type=float, default=None, help="learning.audit_rate the logs were made at"
    )
    parser.add_argument(
        "--prior",
        default=None,
        help="a scorer (name or JSON) to start from and hold to, as the online learner does",
    )
    parser.add_argument(
        "--prior-strength", type=float, default=10.0, help="learning.prior_strength"
    )
    args = parser.parse_args(argv)
    try:
        prior = load_scorer(args.prior) if args.prior else None
        labels, skipped = read_labels(args.logs, args.audit_rate)
    except (OSError, ValueError) as exc:
        print(f"specproxy fit: {exc}", file=sys.stderr)
        return 2
    wrong = [not lab.agreed for lab in labels]
    if len(set(wrong)) < 2:
        print(
            f"specproxy fit: {len(labels)} labels ({skipped} lines without one): need drafts "
            "that agreed and drafts that did not (verified with learning or logging on)",
            file=sys.stderr,
        )
        return 1
    scorer = fit_scorer(
        labels,
        fitted_on={"labels": len(labels), "logs": list(args.logs)},
        prior=prior,
        l2=args.prior_strength if prior else 1.0,
    )
    fitted = auroc([scorer.score(lab.features, lab.ngrams) for lab in labels], wrong)
    args.out.write_text(json.dumps(scorer.as_mapping(), indent=1), encoding="utf-8")
    print(
        f"fitted on {len(labels)} labels ({sum(wrong)} disagreed; {skipped} lines without a "
        f"label); AUROC on the same labels {fitted:.3f} (not a held-out figure)"
    )
    print(f"wrote {args.out}: set speculative_decoding.scorer_file to it")
    return 0
