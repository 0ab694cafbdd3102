"""User-facing tools that work on specproxy's outputs (logs, stats), not on live traffic."""

from __future__ import annotations

import argparse
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
