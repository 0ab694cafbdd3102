"""The analyzer's command line: ``spec_log_analyze FILE...`` and ``specproxy analyze FILE...``.

Both commands run ``main``; only the name in usage and error messages differs (``prog``).
Several files (rotated logs: ``spec.log spec.log.1``) are analysed as one log.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from app.tools import parse_or_exit_code, write_stdout
from app.tools.spec_log_analyze.analysis import analyze
from app.tools.spec_log_analyze.html import PLOT_EXTRA, plot_png, render_html
from app.tools.spec_log_analyze.plot import plot
from app.tools.spec_log_analyze.render import render_text

PROG = "spec_log_analyze"
NO_MATPLOTLIB = f"--plot needs matplotlib: pip install '{PLOT_EXTRA}'"


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Analyse specproxy's speculation log (JSON lines): acceptance overall, "
        "by draft position, context type and outcome, latency, cost and quality, and "
        "tuning advice. Several files (rotated logs) are analysed as one log.",
    )
    parser.add_argument(
        "files",
        metavar="FILE",
        nargs="+",
        help="the log (logging.spec_log_file); several, e.g. spec.log spec.log.1, as one",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--plot", metavar="OUT.png", help="also draw acceptance and confidence by position"
    )
    parser.add_argument(
        "--html",
        metavar="OUT.html",
        help="also write the report as one self-contained HTML page (tables, cost, "
        "advice and, with matplotlib, the plots)",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = PROG) -> int:
    """Run the command line; 0 on success, 1 for an unreadable or useless log, 2 for usage.

    ``prog`` is the command's name as the user typed it, for usage and error messages.
    """
    args = parse_or_exit_code(_parser(prog), argv)
    if isinstance(args, int):
        return args
    files: list[str] = args.files
    named = ", ".join(files)
    try:
        report = analyze(files)
    except OSError as exc:
        which = files[0] if len(files) == 1 or exc.filename is None else exc.filename
        return _fail(prog, f"cannot read {which}: {exc.strerror or exc}")
    overall = report["overall"]
    if not overall["valid_lines"]:
        if not overall["bad_lines"]:
            if len(files) == 1:
                return _fail(prog, f"{named} holds no log line (empty file?)")
            return _fail(prog, f"{named} hold no log line (empty files?)")
        first = report["bad_lines"]["first"][0]
        if len(files) == 1:
            return _fail(
                prog,
                f"{named}: none of its {overall['bad_lines']} lines is a valid spec-log "
                f"entry (line {first['line']}: {first['reason']})",
            )
        return _fail(
            prog,
            f"{named}: none of their {overall['bad_lines']} lines is a valid spec-log "
            f"entry ({first['file']} line {first['line']}: {first['reason']})",
        )
    if args.json:
        text = orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n"
    else:
        text = render_text(report)
    write_stdout(text)
    if args.html:
        try:
            png: bytes | None = plot_png(report)
        except ImportError:
            png = None
        try:
            Path(args.html).write_text(render_html(report, png), encoding="utf-8")
        except OSError as exc:
            return _fail(prog, f"cannot write the HTML report {args.html}: {exc.strerror or exc}")
        plots = "" if png is not None else f" (no plots: pip install '{PLOT_EXTRA}')"
        print(f"HTML report written to {args.html}{plots}", file=sys.stderr)
    if args.plot:
        try:
            plot(report, args.plot)
        except ImportError:
            return _fail(prog, NO_MATPLOTLIB)
        except OSError as exc:
            return _fail(prog, f"cannot write the plot {args.plot}: {exc.strerror or exc}")
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _fail(prog: str, message: str) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return 1
