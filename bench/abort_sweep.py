#!/usr/bin/env python3
"""Choose the early-abort knobs on the tune set: what each setting saves and what it costs.

    .venv/bin/python -m bench.abort_sweep [--data bench/data/routing_tune.jsonl]

Drafts every tune item whole (as bench/routing_eval.py does: the proxy's draft code on a
managed llama-server, temperature 0, the config's budget), then replays each draft token by
token the way the pipeline's early abort reads a stream: every ``abort_check_tokens`` tokens
the config's scorer scores the draft so far (``app.routing.policy.doomed_prefix``). For each
(check interval, ``abort_min_score``) it reports how many drafts would be stopped, how many
of those the policy would have accepted whole (each one an extra cloud call), and the share
of generated tokens saved. Run it on the tune set, never on the evaluation set.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from app.composition import build_policy
from app.config import load_settings
from app.evaluation.judges import load_items
from app.local_server import LocalServerError
from app.routing.classify import classify
from app.routing.policy import Policy, decide, doomed_prefix
from app.routing.signals import DraftSignals
from app.vocabulary import ContextType
from bench.routing_eval import draft_items

ROOT = Path(__file__).resolve().parent.parent

INTERVALS = (8, 16)
MIN_SCORES = (0.6, 0.7, 0.8, 0.9)


def stop_at(
    draft: DraftSignals, policy: Policy, context: ContextType, every: int, min_score: float
) -> int | None:
    """The token count at which early abort would stop this draft, or None."""
    for k in range(every, len(draft.tokens) + 1, every):
        tokens = draft.tokens[:k]
        prefix = DraftSignals("".join(t.text for t in tokens), k, draft.budget, None, tokens)
        if doomed_prefix(prefix, policy, context, min_score) is not None:
            return k
    return None


def sweep(drafts: Sequence[tuple[DraftSignals, ContextType]], policy: Policy) -> list[str]:
    """One markdown row per (interval, min_score)."""
    accepted = [decide(d, policy, c).accept for d, c in drafts]
    total = sum(d.n_tokens for d, _ in drafts)
    rows = [
        "| check every | abort_min_score | drafts stopped | of them accepted whole "
        "| tokens saved |",
        "|---:|---:|---:|---:|---:|",
    ]
    for every in INTERVALS:
        for min_score in MIN_SCORES:
            stopped = lost = saved = 0
            for (draft, context), ok in zip(drafts, accepted, strict=True):
                if (k := stop_at(draft, policy, context, every, min_score)) is not None:
                    stopped, lost, saved = stopped + 1, lost + ok, saved + draft.n_tokens - k
            rows.append(
                f"| {every} | {min_score} | {stopped}/{len(drafts)} | {lost}/{sum(accepted)} "
                f"| {saved / total:.0%} |"
            )
    return rows


def draft_all(data: Path, config: Path) -> tuple[list[tuple[DraftSignals, ContextType]], Policy]:
    """Every tune item drafted whole (bench/routing_eval.py's ``draft_items``), with its
    context type, and the config's policy."""
    settings = load_settings(config, env={})
    spec = settings.speculative_decoding
    local = settings.models[spec.draft_model]
    assert local.launch is not None, "the draft model needs a launch section"
    items = load_items(data.read_text(encoding="utf-8").splitlines())
    drafts, _ = asyncio.run(draft_items(items, local, spec, spec.max_draft_tokens))
    contexts = [classify(item.prompt) for item in items]
    return list(zip(drafts, contexts, strict=True)), build_policy(spec)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=ROOT / "bench/data/routing_tune.jsonl")
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    args = parser.parse_args(argv)
    if "routing_eval" in args.data.name:
        print("error: choose knobs on the tune set, never on the evaluation set", file=sys.stderr)
        return 2
    try:
        drafts, policy = draft_all(args.data, args.config)
    except LocalServerError as exc:
        print(f"error: cannot run the local model: {exc}", file=sys.stderr)
        return 1
    if policy.scorer is None:
        print("error: early abort by score needs a scored policy in the config", file=sys.stderr)
        return 2
    print(f"$ .venv/bin/python -m bench.abort_sweep --data {args.data.name}")
    print(f"{len(drafts)} drafts, policy {policy.name} at threshold {policy.threshold}\n")
    print("\n".join(sweep(drafts, policy)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
