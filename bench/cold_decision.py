#!/usr/bin/env python3
"""Cold, on every one of the project's sets: is the shipped decision at least as good as random
routing and as mean token probability alone, at the same cloud share? (issue 31)

    .venv/bin/python -m bench.cold_decision [--sets eval,tune,transfer,speculative]
        [--config config.yaml] [--scorer NAME|FILE] [--threshold T]
        [--drafts-dir bench/results/drafts] [--redraft] [--by-kind]
        [--json bench/results/cold_decision.json]

Each set on its own (``bench/data``: ``routing_eval``, ``routing_tune``, ``transfer``,
``speculative_prompts``), drafted whole by the real llama-server with the shipped SmolLM2
through the proxy's own code (``bench.routing_eval.draft_items``: one user message,
temperature 0, the config's budget and ``top_logprobs``), one set after another. The
drafts, with every token's probability and top-k, are kept in ``--drafts-dir`` (one JSON
per set, reused while the data file, budget, top_logprobs and model are the same;
``--redraft`` drafts again), so comparing scorers costs no drafting.

The decision is the config's (``speculative_decoding``: policy, its scorer, or ``--scorer``,
the threshold, or ``--threshold``, and early abort), replayed on each draft as the proxy
takes it with no labels; the table and the rule are bench/cold_decision_report.py's.
``speculative_prompts`` has no judges: only its cloud share is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from app.composition import build_policy
from app.config import ModelConfig, load_settings
from app.evaluation.judges import load_items
from app.local_server import LocalServerError
from app.routing.classify import classify
from app.routing.policy import Policy
from app.routing.scorer import load_scorer
from app.routing.signals import DraftSignals, TokenSignal
from bench.cold_decision_report import Abort, Judged, evaluate, markdown
from bench.host import host_facts
from bench.routing_eval import draft_items

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench/data"
SETS = {
    "eval": "routing_eval.jsonl",
    "tune": "routing_tune.jsonl",
    "transfer": "transfer.jsonl",
    "speculative": "speculative_prompts.jsonl",
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated: " + ",".join(SETS))
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--scorer", help="a scorer name or JSON instead of the config's policy")
    parser.add_argument("--threshold", type=float, help="instead of the config's / scorer's")
    parser.add_argument("--drafts-dir", type=Path, default=ROOT / "bench/results/drafts")
    parser.add_argument("--redraft", action="store_true", help="draft again, ignoring the cache")
    parser.add_argument("--by-kind", action="store_true", help="also a row per kind of item")
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/cold_decision.json")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sets.split(",") if s not in SETS]
    if unknown:
        parser.error(f"unknown set(s) {unknown}; choose from {', '.join(SETS)}")
    return args


class Prompt:
    """An item to draft: what ``draft_items`` reads (its id and prompt), with its judge."""

    def __init__(self, raw: dict[str, Any], judge: Any = None) -> None:
        self.id: str = raw["id"]
        self.prompt: str = raw["prompt"]
        self.kind: str = raw.get("kind") or raw.get("context_type") or ""
        self.judge = judge  # an EvalItem, or None for a set without judges

    def correct(self, signals: DraftSignals) -> bool | None:
        if self.judge is None:
            return None
        return bool(self.judge.passes(signals.text)) and not signals.truncated


def load_set(path: Path) -> list[Prompt]:
    """The set's items; judged (``load_items``) when its lines carry judges."""
    lines = path.read_text(encoding="utf-8").splitlines()
    raws = [json.loads(line) for line in lines if line.strip()]
    if raws and all("judge" in r for r in raws):
        return [Prompt(r, item) for r, item in zip(raws, load_items(lines), strict=True)]
    return [Prompt(r) for r in raws]


def _signals(raw: dict[str, Any]) -> DraftSignals:
    tokens = tuple(
        TokenSignal(t["text"], t["p"], t["entropy"], t["token_id"], tuple(map(tuple, t["top_k"])))
        for t in raw["tokens"]
    )
    return DraftSignals(raw["text"], raw["n_tokens"], raw["budget"], raw["finish_reason"], tokens)


def cached_drafts(
    path: Path, items: list[Prompt], key: dict[str, Any], settings: Any, redraft: bool
) -> tuple[list[DraftSignals], bool]:
    """The set's drafts from the cache when its key matches, else drafted now (and kept)."""
    if not redraft and path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("key") == key:
            return [_signals(d) for d in saved["drafts"]], True
    spec = settings.speculative_decoding
    local = patient(settings.models[spec.draft_model])
    drafts, _run = asyncio.run(draft_items(items, local, spec, key["budget"]))  # type: ignore[arg-type]
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"key": key, "ids": [i.id for i in items], "drafts": [asdict(d) for d in drafts]}
    path.write_text(json.dumps(document) + "\n", encoding="utf-8")
    return drafts, False


def patient(local: ModelConfig) -> ModelConfig:
    """The local model with room for a shared, busy machine: a bench waits, the proxy would not."""
    slow = local.timeout.model_copy(update={"first_byte": 600.0, "read": 600.0, "total": 900.0})
    return local.model_copy(update={"timeout": slow})


def the_policy(settings: Any, scorer: str | None, threshold: float | None) -> Policy:
    """The config's policy, or it with another scorer (at that scorer's threshold)."""
    policy = build_policy(settings.speculative_decoding)
    if scorer is not None:
        loaded = load_scorer(scorer)
        policy = replace(policy, scorer=loaded, threshold=loaded.threshold)
    if threshold is not None:
        policy = replace(policy, threshold=threshold)
    return policy


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "bench.cold_decision", *sys.argv[1:]])
    settings = load_settings(args.config, env={})
    spec = settings.speculative_decoding
    local = settings.models[spec.draft_model]
    if local.provider != "llama_server" or local.launch is None:
        print(
            "error: the draft model must be a llama_server with a launch section", file=sys.stderr
        )
        return 2
    try:
        policy = the_policy(settings, args.scorer, args.threshold)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    abort = Abort(
        spec.early_abort, spec.abort_min_token_prob, spec.abort_check_tokens, spec.abort_min_score
    )
    rows: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for name in args.sets.split(","):
        data = DATA / SETS[name]
        items = load_set(data)
        key = {
            "data_sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
            "budget": spec.max_draft_tokens,
            "top_logprobs": spec.top_logprobs,
            "model": Path(local.launch.model or "").name,
        }
        cache = args.drafts_dir / f"{data.stem}.json"
        try:
            drafts, reused = cached_drafts(cache, items, key, settings, args.redraft)
        except LocalServerError as exc:
            print(f"error: cannot run the local model: {exc}", file=sys.stderr)
            return 1
        judged = [
            Judged(i.id, str(classify(i.prompt)), d, i.correct(d))
            for i, d in zip(items, drafts, strict=True)
        ]
        rows[name] = evaluate(judged, policy, abort) | {"drafts": "cached" if reused else "new"}
        kinds = {i.kind for i in items}
        if args.by_kind and len(kinds) > 1:
            for kind in sorted(kinds):
                subset = [j for i, j in zip(items, judged, strict=True) if i.kind == kind]
                rows[f"{name}/{kind}"] = evaluate(subset, policy, abort)
        print(f"  {name}: {'cached' if reused else 'drafted'} {len(items)}", file=sys.stderr)
    runtime = time.perf_counter() - started
    facts = host_facts()
    print(f"$ {command}")
    print(f"machine: {facts['cpu']}, {facts['cores']} cores; specproxy {facts['specproxy_commit']}")
    aborts = (
        f"every {abort.check_tokens} tokens above {abort.min_score}" if abort.enabled else "off"
    )
    print(
        f"decision: policy {policy.name}, threshold {policy.threshold}, early abort {aborts}; "
        f"budget {spec.max_draft_tokens} tokens, model {Path(local.launch.model or '').name}; "
        f"runtime {runtime:.0f} s"
    )
    print()
    print(markdown(rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    setup = {
        "command": command,
        "policy": policy.name,
        "threshold": policy.threshold,
        "abort": asdict(abort),
        "scorer_fitted_on": policy.scorer.fitted_on if policy.scorer else None,
    }
    args.json.write_text(
        json.dumps({"setup": setup, "sets": rows}, indent=1) + "\n", encoding="utf-8"
    )
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
