#!/usr/bin/env python3
"""Does agreement among sampled local drafts tell right greedy drafts from wrong ones?

    .venv/bin/python -m bench.self_consistency [--data bench/data/routing_eval.jsonl]
        [--samples 4] [--temperature 0.7] [--json bench/results/self_consistency.json]

A candidate signal for the judge, measured before it is built: each item is drafted as
``bench.routing_eval`` drafts it (greedy, the config's budget and ``top_logprobs``, on a
managed llama-server), then sampled ``--samples`` times more (seeds 1..N, at
``--temperature``, the same budget). A sample agrees when it asserts the greedy draft's
facts (``app.routing.agreement.agree``, the proxy's facts agreement). The score of
disagreement is the share of samples that do not; its AUROC for telling the items'
wrong greedy drafts (by the item's judge; a draft cut at the budget is wrong) is printed
beside the shipped scorer's (``combined``) and the mean token log probability's. Nothing
is fitted, so any set is a fair test. A sample that fails counts as disagreeing. Prints
the command, the machine and the tables; ``--json`` writes them and every item's record.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.config import load_settings
from app.errors import UpstreamError
from app.evaluation.judges import load_items
from app.evaluation.metrics import auroc
from app.routing.agreement import agree
from app.routing.classify import classify
from app.routing.features import draft_features
from app.routing.scorer import load_scorer
from app.routing.signals import draft_signals
from app.wire import draft_body
from bench.host import host_facts
from bench.routing_eval import local_upstream

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=ROOT / "bench/data/routing_eval.jsonl")
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One record per item: greedy right or not, its scores, and which samples agreed."""
    settings = load_settings(args.config, env={})
    spec = settings.speculative_decoding
    local = settings.models[spec.draft_model]
    prior = load_scorer("combined")
    items = load_items(args.data.read_text(encoding="utf-8").splitlines())
    budget = spec.max_draft_tokens
    records = []
    async with local_upstream(local) as (upstream, _):
        for number, item in enumerate(items, start=1):
            messages = [{"role": "user", "content": item.prompt}]
            raw = {"model": local.model, "messages": messages, "temperature": 0}
            completion = await upstream.complete(draft_body(raw, budget, spec.top_logprobs))
            greedy = draft_signals(completion.body, budget)
            features = draft_features(
                greedy, markers=spec.uncertainty_markers, context_type=classify(item.prompt)
            )
            agreed = []
            for seed in range(1, args.samples + 1):
                body = {**raw, "temperature": args.temperature, "seed": seed, "max_tokens": budget}
                try:
                    sample = (await upstream.complete(body)).text
                except UpstreamError:
                    sample = None
                agreed.append(
                    sample is not None and agree(sample, greedy.text, prompt=item.prompt).agrees
                )
            records.append(
                {
                    "id": item.id,
                    "kind": item.kind,
                    "right": item.passes(greedy.text) and not greedy.truncated,
                    "combined": prior.score(features),
                    "mean_logp": features["mean_logp"],
                    "samples_agreeing": sum(agreed),
                }
            )
            if number % 25 == 0:
                print(f"  {number}/{len(items)} items", file=sys.stderr, flush=True)
    return records


def report(records: Sequence[dict[str, Any]], samples: int) -> dict[str, Any]:
    """AUROC of each score for wrong greedy drafts, and accuracy by samples agreeing."""
    wrong = [not r["right"] for r in records]
    scores = {
        "combined (shipped scorer)": [r["combined"] for r in records],
        "-mean_logp": [-r["mean_logp"] for r in records],
        "samples disagreeing": [samples - r["samples_agreeing"] for r in records],
    }
    by_agreeing = {}
    for k in range(samples + 1):
        group = [r["right"] for r in records if r["samples_agreeing"] == k]
        by_agreeing[k] = (len(group), statistics.fmean(group) if group else None)
    return {
        "items": len(records),
        "right": sum(r["right"] for r in records),
        "auroc": {name: auroc(values, wrong) for name, values in scores.items()},
        "right_by_samples_agreeing": by_agreeing,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "bench.self_consistency", *sys.argv[1:]])
    records = asyncio.run(measure(args))
    found = report(records, args.samples)
    print(f"$ {command}")
    print("machine: " + ", ".join(f"{k} {v}" for k, v in host_facts().items()))
    print(f"{args.data.name}: {found['items']} items, {found['right']} greedy drafts right")
    print(f"{args.samples} samples at temperature {args.temperature}\n")
    print("| score | AUROC (wrong drafts) |\n|---|---:|")
    for name, value in found["auroc"].items():
        print(f"| {name} | {'-' if value is None else f'{value:.3f}'} |")
    print("\n| samples agreeing with the greedy draft | items | greedy right |\n|---:|---:|---:|")
    for k, (n, right) in found["right_by_samples_agreeing"].items():
        print(f"| {k} | {n} | {'-' if right is None else f'{right:.0%}'} |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        found = {"command": command, "machine": host_facts(), **found}
        args.json.write_text(json.dumps({"report": found, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
