"""``python -m bench.value``: the arguments, the run, what it prints and writes."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

import bench.value
from app.config import LaunchConfig, settings_from_mapping
from app.evaluation.judges import load_items
from bench.host import host_facts
from bench.routing_eval import round_robin
from bench.routing_latency import timed_on_local_model
from bench.value.arms import (
    BEFORE_ISSUE_31,
    PROXY_ARMS,
    SEED,
    target_arm,
    unknown_overrides,
)
from bench.value.checks import done_when, done_when_text, target_checks
from bench.value.cloud import FIRST_TOKEN_S, TOKENS_PER_S
from bench.value.labels import label_yield, read_lines, yield_markdown
from bench.value.report import calls_markdown, evaluate, markdown, targets_markdown
from bench.value.run import run
from bench.value.standin import known_kinds, standin_local
from bench.value.trace import ROOT, SETS, build_trace
from tests.fakes.script import JSON


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    doc = bench.value.__doc__ or ""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--set", choices=sorted(SETS), default="eval", help="the item set")
    which.add_argument("--data", type=Path, help="another items file (the sets' format)")
    parser.add_argument("--limit", type=int, help="the first N items, one kind at a time")
    parser.add_argument("--seed", type=int, default=0, help="of the trace and the random arm")
    parser.add_argument("--max-tokens", type=int, default=128, help="each request's max_tokens")
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--arms", default=",".join(PROXY_ARMS), help="proxy arms, comma-separated")
    parser.add_argument(
        "--targets",
        default="",
        help="target_agreement values (e.g. 0.9,0.95,0.98): the shipped arm once per target",
    )
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/value.json")
    parser.add_argument(
        "--local-standin",
        action="store_true",
        help="the llama-server stand-in drafts (right on a seeded half of the kinds), not "
        "the real model: the proxy's mechanics on a long trace, not SmolLM2's figures",
    )
    parser.add_argument(
        "--state-from",
        type=Path,
        help="a learner's state directory (labels.jsonl, scorer.json, gate.json) each arm "
        "starts from: a learner warmed on other traffic",
    )
    parser.add_argument(
        "--state-to",
        type=Path,
        help="copy the last speculative arm's learner state here at the end (for --state-from)",
    )
    parser.add_argument(
        "--spec-logs",
        type=Path,
        help="a directory: each speculative arm's speculation log (<arm>.jsonl) and, from "
        "them, each arm's label yield by path",
    )
    args = parser.parse_args(argv)
    if (args.limit is not None and args.limit < 1) or args.max_tokens < 1:
        parser.error("--limit and --max-tokens must be at least 1")
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := set(args.arms) - set(PROXY_ARMS):
        parser.error(f"unknown arms {sorted(unknown)}; choose from {', '.join(PROXY_ARMS)}")
    try:
        args.targets = [float(t) for t in args.targets.split(",") if t.strip()]
    except ValueError:
        parser.error(f"--targets takes numbers between 0 and 1, comma-separated: {args.targets}")
    if any(not 0 < t < 1 for t in args.targets):
        parser.error("--targets takes numbers between 0 and 1 (exclusive)")
    args.data = args.data or SETS[args.set]
    return args


def cloud_prices(shipped: JSON) -> tuple[float, float]:
    """The first verifier's prices in the config (USD per million input, output tokens)."""
    spec = shipped.get("speculative_decoding", {})
    verifiers = spec.get("verify_model", ["cerebras"])
    name = verifiers if isinstance(verifiers, str) else verifiers[0]
    price = shipped["models"][name].get("price", {})
    return float(price.get("input_per_mtok", 0)), float(price.get("output_per_mtok", 0))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "bench.value", *sys.argv[1:]])
    shipped = yaml.safe_load(args.config.read_text(encoding="utf-8"))
    settings = settings_from_mapping(shipped, env={"CEREBRAS_API_KEY": "unused"})
    launch: LaunchConfig | None = settings.models[settings.speculative_decoding.draft_model].launch
    if launch is None:
        print("error: the draft model needs a launch section", file=sys.stderr)
        return 2
    items = round_robin(load_items(args.data.read_text(encoding="utf-8").splitlines()), args.limit)
    trace = build_trace(items, args.seed)
    arms = [*args.arms, *(target_arm(t) for t in args.targets)]
    for arm in arms:
        if dropped := unknown_overrides(arm):
            print(f"warning: {arm}: this proxy has no {', '.join(dropped)}", file=sys.stderr)
    if args.spec_logs is not None:
        args.spec_logs.mkdir(parents=True, exist_ok=True)
        for old in args.spec_logs.glob("*.jsonl*"):
            old.unlink()  # a log is appended to: a run's own lines only

    def measure(url: str) -> JSON:
        return run(
            trace,
            shipped,
            url,
            args.max_tokens,
            arms,
            args.spec_logs,
            args.state_from,
            args.state_to,
        )

    if args.local_standin:
        started = time.perf_counter()
        with standin_local(trace, args.seed) as url:
            done = measure(url), time.perf_counter() - started
    else:
        done = timed_on_local_model(launch, measure)
    if done is None:
        return 1
    measured, runtime = done
    prices = cloud_prices(shipped)
    summary = evaluate(measured, prices, args.seed)
    per_100 = {arm: 100 * s / len(trace) for arm, s in measured["answer_s"].items()}
    if measured["unknown_prompts"]:
        print(
            f"warning: {measured['unknown_prompts']} cloud calls asked no item's prompt",
            file=sys.stderr,
        )
    machine = host_facts()
    repeats = sum(r.repeat for r in trace)
    setup = (
        f"{len(trace)} requests on {len(items)} items of {args.data.name} ({repeats} repeats, "
        f"{sum(r.stream for r in trace)} streamed, seed {args.seed}), max_tokens "
        f"{args.max_tokens}; cloud stand-in {FIRST_TOKEN_S} s + {TOKENS_PER_S:g} tok/s at "
        f"${prices[0]:g} / ${prices[1]:g} per M tokens; runtime {runtime:.0f} s"
    )
    if args.local_standin:
        known = ", ".join(sorted(known_kinds(trace, args.seed)))
        print(f"the local model is the stand-in, right on: {known}")
    print(f"$ {command}")
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores, specproxy "
        f"{machine['specproxy_commit']}; {setup}"
    )
    print(
        "time answering per 100 requests: "
        + ", ".join(f"{arm} {s:.0f} s" for arm, s in per_100.items())
    )
    print()
    print(markdown(summary))
    print("\ncloud calls per request by purpose (the proxies' own count):\n")
    print(calls_markdown(summary))
    checks = done_when(summary)
    print(f"\nDone when (issue 31), shipped on {args.data.name}:")
    print(done_when_text(checks))
    if args.targets:
        print("\ntarget_agreement (the shipped arm at each target):\n")
        print(targets_markdown(summary))
        print("\nDone when (issue 31), target_agreement:")
        print(done_when_text(target_checks(summary)))
    yields = {}
    if args.spec_logs is not None:
        learning = measured.get("stats_learning") or {}
        for arm in arms:
            lines = read_lines(args.spec_logs / f"{arm}.jsonl")
            if not lines:
                continue
            yields[arm] = label_yield(measured["rows"][arm], lines)
            total = ((learning.get(arm) or {}).get("labels") or {}).get("total")
            print(f"\nlabel yield of {arm} by path (its speculation log):\n")
            print(yield_markdown(yields[arm], total))
    document = {
        "command": command,
        "machine": machine,
        "setup": {
            "data": str(args.data),
            "items": len(items),
            "requests": len(trace),
            "repeats": repeats,
            "seed": args.seed,
            "max_tokens": args.max_tokens,
            "prices": prices,
            "runtime_s": runtime,
            "answer_s_per_100": per_100,
            "before": BEFORE_ISSUE_31,
            "seed_arm": SEED,
            "targets": args.targets,
        },
        "summary": summary,
        "bills": measured["bills"],
        "stats_cost": measured["stats_cost"],
        "stats_quality": measured["stats_quality"],
        "stats_learning": measured.get("stats_learning"),
        "label_yield": yields,
        "done_when": [{"check": c, "passed": ok, "numbers": n} for c, ok, n in checks],
        "target_checks": [
            {"check": c, "passed": ok, "numbers": n} for c, ok, n in target_checks(summary)
        ],
        "trace": [r.describe() for r in trace],
        "rows": measured["rows"],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {args.json}")
    return 0
