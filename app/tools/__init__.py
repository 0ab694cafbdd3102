"""User-facing tools that work on specproxy's outputs (logs, stats), not on live traffic."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def parse_or_exit_code(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace | int:
    """The parsed arguments, or the exit code argparse chose (2 usage error, 0 after --help),
    so that a tool's ``main`` returns it instead of raising SystemExit."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


def write_stdout(text: str) -> None:
    """Write a report to stdout; a reader that left early (``| head``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader left early (`| head`): not an error; keep Python's exit flush quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def pct(share: float) -> str:
    """A share in 0..1 as a percentage with two decimals: ``0.5`` -> ``50.00%``."""
    return f"{100 * share:.2f}%"
