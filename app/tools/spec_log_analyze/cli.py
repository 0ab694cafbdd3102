"""The analyzer's command line: ``spec_log_analyze FILE`` and ``specproxy analyze FILE``.

Both commands run ``main``; only the name in usage and error messages differs (``prog``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import orjson

from app.tools import parse_or_exit_code, write_stdout
from app.tools.spec_log_analyze.analysis import analyze
from app.tools.spec_log_analyze.plot import plot
from app.tools.spec_log_analyze.render import render_text

PROG = "spec_log_analyze"


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Analyse specproxy's speculation log (JSON lines): acceptance overall, "
        "by draft position, context type and outcome, latency, and tuning advice.",
    )
    parser.add_argument("file", metavar="FILE", help="the log (logging.spec_log_file)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--plot", metavar="OUT.png", help="also draw acceptance and confidence by position"
    )
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = PROG) -> int:
    """Run the command line; 0 on success, 1 for an unreadable or useless log, 2 for usage.

    ``prog`` is the command's name as the user typed it, for usage and error messages.
    """
    args = parse_or_exit_code(_parser(prog), argv)
    if isinstance(args, int):
        return args
    try:
        report = analyze(args.file)
    except OSError as exc:
        return _fail(prog, f"cannot read {args.file}: {exc.strerror or exc}")
    overall = report["overall"]
    if not overall["valid_lines"]:
        if not overall["bad_lines"]:
            return _fail(prog, f"{args.file} holds no log line (empty file?)")
        first = report["bad_lines"]["first"][0]
        return _fail(
            prog,
            f"{args.file}: none of its {overall['bad_lines']} lines is a valid spec-log "
            f"entry (line {first['line']}: {first['reason']})",
        )
    if args.json:
        text = orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n"
    else:
        text = render_text(report)
    write_stdout(text)
    if args.plot:
        try:
            plot(report, args.plot)
        except ImportError:
            return _fail(prog, "--plot needs matplotlib: pip install 'specproxy[dev]'")
        except OSError as exc:
            return _fail(prog, f"cannot write the plot {args.plot}: {exc.strerror or exc}")
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _fail(prog: str, message: str) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return 1
