"""``specproxy check-pair TARGET.gguf DRAFT.gguf``: can DRAFT speculate for TARGET?

Prints the verdict with every reason (``--json`` for machines), the size ratio and starting
``n_max`` / ``p_min``. Exit 0 compatible, 1 incompatible, 2 a file that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from app.local_server.pair_check import PairVerdict, check_pair, read_facts
from app.tools import parse_or_exit_code

PROG = "specproxy check-pair"


def render(target: str, draft: str, verdict: PairVerdict) -> str:
    """The verdict as text: the answer first, then why."""
    lines = [
        f"target: {target}",
        f"draft:  {draft}",
        "verdict: " + ("compatible" if verdict.compatible else "INCOMPATIBLE"),
    ]
    lines += [f"  - {problem}" for problem in verdict.problems]
    lines += [f"note: {note}" for note in verdict.notes]
    lines.append(f"suggested: n_max {verdict.n_max}, p_min {verdict.p_min}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; 0 compatible, 1 incompatible, 2 an unreadable file or usage."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="the target model (.gguf)")
    parser.add_argument("draft", help="the draft model (.gguf)")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    args = parse_or_exit_code(parser, argv)
    if isinstance(args, int):
        return args
    try:
        target, draft = read_facts(args.target), read_facts(args.draft)
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    verdict = check_pair(target, draft)
    if args.json:
        print(json.dumps(verdict.as_dict(), indent=2))
    else:
        sys.stdout.write(render(args.target, args.draft, verdict))
    return 0 if verdict.compatible else 1
