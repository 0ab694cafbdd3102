#!/usr/bin/env python3
"""How well each agreement mode tells a right draft from a wrong one, once the cloud has
answered: the merge's decision, judged against the items' judges.

    .venv/bin/python -m bench.agreement_eval bench/results/routing_eval.json \
        [--data bench/data/routing_eval.jsonl] [--split eval]
        [--json bench/results/agreement_eval.json]

Reads the drafts ``bench.routing_eval`` wrote (real SmolLM2 drafts at temperature 0), and
for every draft not cut at the budget asks ``app.routing.merge.merge`` (the proxy's own
merge) whether it would be served next to a cloud that answered the item's reference. A
draft the merge keeps and its judge marks wrong is a **wrong draft served after
verification**; one it throws away that the judge marks right is a right draft lost
(harmless to quality: the verified answer is served, but a wrong label to learn from).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.evaluation.judges import load_items
from app.routing.merge import merge
from app.vocabulary import AgreementMode

ROOT = Path(__file__).resolve().parent.parent
MIN_CONFIDENCE = 0.8  # the seed's and the shipped config's


def evaluate(records: Sequence[dict[str, Any]], items: dict[str, Any]) -> dict[str, Any]:
    """Per mode: accuracy against the judges, wrong drafts kept, right drafts lost (and the
    errors per kind of question)."""
    judged = [r for r in records if not r["truncated"] and r["id"] in items]
    report: dict[str, Any] = {
        "drafts": len(judged),
        "right": sum(r["judged_correct"] for r in judged),
    }
    for mode in AgreementMode:
        kept_wrong: list[str] = []
        lost_right: list[str] = []
        for record in judged:
            item = items[record["id"]]
            result = merge(
                record["draft"],
                item.reference,
                draft_complete=True,
                min_confidence=MIN_CONFIDENCE,
                mode=mode,
                prompt=item.prompt,
            )
            if result.use_draft and not record["judged_correct"]:
                kept_wrong.append(record["id"])
            elif not result.use_draft and record["judged_correct"]:
                lost_right.append(record["id"])
        errors = len(kept_wrong) + len(lost_right)
        by_kind: dict[str, int] = {}
        for item_id in (*kept_wrong, *lost_right):
            by_kind[items[item_id].kind] = by_kind.get(items[item_id].kind, 0) + 1
        report[mode.value] = {
            "errors_by_kind": by_kind,
            "accuracy": 1 - errors / len(judged) if judged else None,
            "wrong_kept": len(kept_wrong),
            "right_lost": len(lost_right),
            "wrong_kept_ids": kept_wrong,
            "right_lost_ids": lost_right,
        }
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("drafts", type=Path, help="a JSON written by bench.routing_eval")
    parser.add_argument("--data", type=Path, default=None, help="default: the drafts' own")
    parser.add_argument("--split", default=None, help="only the items of this split")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    document = json.loads(args.drafts.read_text(encoding="utf-8"))
    data = args.data or Path(document["setup"]["data"])
    items = {
        i.id: i
        for i in load_items(data.read_text(encoding="utf-8").splitlines())
        if args.split is None or i.split == args.split
    }
    report = evaluate(document["records"], items)
    print(f"$ {shlex.join(['python', '-m', 'bench.agreement_eval', *(argv or sys.argv[1:])])}")
    split = f" ({args.split} split)" if args.split else ""
    print(
        f"drafts: {data.name}{split}, {report['drafts']} not cut at the budget, "
        f"{report['right']} right"
    )
    print()
    print(
        "| agreement | accuracy vs judges | wrong drafts kept | right drafts lost "
        "| errors by kind |"
    )
    print("|---|---:|---:|---:|---|")
    for mode in AgreementMode:
        row = report[mode.value]
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(row["errors_by_kind"].items()))
        print(
            f"| {mode.value} | {row['accuracy']:.1%} | {row['wrong_kept']} | "
            f"{row['right_lost']} | {kinds} |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
