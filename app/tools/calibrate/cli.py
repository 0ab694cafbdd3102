"""The calibrate command line: arguments, the config's scorer, then core, edit and report.

The only module of the command that prints or exits; every error it meets is a
``CalibrateError`` whose ``code`` is the exit status.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from app.config import ConfigError, load_settings
from app.routing.scorer import Scorer, load_scorer
from app.tools import parse_or_exit_code, write_stdout
from app.tools.calibrate import target
from app.tools.calibrate.core import PROG, CalibrateError, calibrate, read_log
from app.tools.calibrate.report import render_text, report, unreachable_warning
from app.tools.calibrate.yaml_edit import COMMENT_TAG, SECTION, write_config
from app.vocabulary import PolicyName


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a share in [0, 1], not {text}")
    return value


def _target(text: str) -> float:
    value = _share(text)
    if value == 0.0:
        raise argparse.ArgumentTypeError("must be a share in (0, 1], not 0")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Set speculative_decoding.spill_threshold so that the target share of the "
        "logged drafts goes to the cloud (RouteLLM's calibrate_threshold on your traffic), "
        "or so that what is served locally agrees with the cloud often enough.",
    )
    targets = parser.add_mutually_exclusive_group(required=True)
    targets.add_argument(
        "--target-cloud-rate",
        type=_share,
        metavar="SHARE",
        help="share of drafts to send to the cloud, in [0, 1] (e.g. 0.3)",
    )
    targets.add_argument(
        "--target-agreement",
        type=_target,
        metavar="SHARE",
        help="share of locally served answers that must agree with the cloud, with 95%% "
        "confidence on the logs' labels (e.g. 0.95; docs/target.md)",
    )
    parser.add_argument(
        "--audit-rate",
        type=_target,
        default=None,
        metavar="SHARE",
        help="--target-agreement: learning.audit_rate the logs were made at (an audit "
        "weighs 1/rate); default: the config's",
    )
    parser.add_argument("--config", default="config.yaml", help="config to read and update")
    parser.add_argument("--dry-run", action="store_true", help="report only; leave the config")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "logs", nargs="+", metavar="LOG", help="speculation log(s) (logging.spec_log_file, ...)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; 0 done, 1 config not rewritten, 2 usage, config or log error."""
    args = parse_or_exit_code(_parser(), argv)
    if isinstance(args, int):
        return args
    try:
        return _run(args)
    except CalibrateError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.code


def _run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config, env=dict(os.environ))
    except ConfigError as exc:
        raise CalibrateError(f"config error: {exc}") from exc
    spec = settings.speculative_decoding
    if spec.policy is PolicyName.SEED:
        raise CalibrateError(
            f"{args.config}: policy is seed, which has no score to threshold; set "
            f"{SECTION}.policy: combined (or confidence) first"
        )
    scorer_source = spec.scorer_file or spec.policy.value
    try:
        scorer = load_scorer(scorer_source)
    except ValueError as exc:
        raise CalibrateError(str(exc)) from exc
    previous = (
        (spec.spill_threshold, "config")
        if spec.spill_threshold is not None
        else (scorer.threshold, f"scorer {scorer.name!r} default")
    )
    if args.target_agreement is not None:
        audit_rate = args.audit_rate or settings.learning.audit_rate or None
        return _run_target(args, scorer, audit_rate, previous)

    samples = read_log(args.logs, scorer)
    if not samples.scores:
        why = (
            f"all {samples.lines} lines lack features (logged by an older version)"
            if samples.lines
            else "no log lines (empty files?)"
        )
        raise CalibrateError(f"nothing to calibrate on: {why}")
    target = args.target_cloud_rate
    result = calibrate(samples.scores, target)

    # An unreachable target leaves the config alone: 1.0 would change every answer and
    # still miss the target.
    written = not args.dry_run and not result.unreachable
    if written:
        comment = f"{COMMENT_TAG} target {target:g} on {len(samples.scores)} requests"
        write_config(Path(args.config), result.threshold, comment)
    old, source = previous
    data = report(
        paths=args.logs,
        samples=samples,
        target=target,
        result=result,
        old_threshold=old,
        old_source=source,
        config=args.config,
        written=written,
    )
    if result.unreachable:
        print(f"{PROG}: {unreachable_warning(data)}", file=sys.stderr)
    if args.json:
        write_stdout(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        write_stdout(render_text(data))
    return 1 if result.unreachable else 0


def _run_target(
    args: argparse.Namespace, scorer: Scorer, audit_rate: float | None, old: tuple[float, str]
) -> int:
    """``--target-agreement``: the learner's rule on the logs' labels (``target``)."""
    labelled = target.read_labels(args.logs, scorer, audit_rate)
    if not labelled.scores:
        raise CalibrateError(
            f"nothing to calibrate on: none of the {labelled.lines} lines is a label (a draft "
            "judged against the cloud, with its features)"
        )
    bound, threshold = target.hold(labelled, args.target_agreement)
    written = not args.dry_run and threshold is not None
    if written:
        assert threshold is not None
        comment = (
            f"{COMMENT_TAG} target agreement {args.target_agreement:g} on "
            f"{len(labelled.scores)} labels"
        )
        write_config(Path(args.config), threshold, comment)
    data = target.report(
        paths=args.logs,
        labelled=labelled,
        bound=bound,
        threshold=threshold,
        audit_rate=audit_rate,
        old_threshold=old[0],
        old_source=old[1],
        config=args.config,
        written=written,
    )
    if threshold is None:
        print(f"{PROG}: {target.unreachable_warning(data)}", file=sys.stderr)
    if args.json:
        write_stdout(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        write_stdout(target.render_text(data))
    return 1 if threshold is None else 0
