#!/usr/bin/env python3
"""Routing quality on real drafts: how well each policy picks the drafts that need the cloud.

    .venv/bin/python -m bench.routing_eval [--data bench/data/routing_eval.jsonl]
        [--max-draft-tokens N] [--limit N] [--json bench/results/routing_eval.json]
        [--plot docs/routing/curves.png] [--config config.yaml] [--scorer NAME|FILE ...]
        [--cloud-url URL [--cloud-model NAME] [--cloud-key-env VAR] [--cloud-provider P]]

Starts its own llama-server (the proxy's ManagedLlamaServer on a free port, model and binary
from the config's ``models.local.launch``) and drafts every item through the proxy's own code
path: ``app.wire.draft_body`` builds the request (budget as ``max_tokens``, logprobs on,
``top_logprobs`` from the config), ``LlamaServer.complete`` sends it, ``draft_signals`` and the
seed's ``decide`` read it. Each prompt is one user message at temperature 0 (greedy), so a
rerun on the same binary and model gives the same drafts. The judge of each item marks the
draft right or wrong (a draft cut at the budget is wrong: the proxy cannot serve it). The
cloud is taken as perfect (its answer is the item's reference) unless ``--cloud-url`` names
a real OpenAI-compatible endpoint: then every item is also sent there as the proxy sends it
to the verifier (one user message, temperature 0, no max_tokens, through the proxy's own
upstream code; the key from the environment variable ``--cloud-key-env``, never printed or
written), the same judge marks the answer, and an error counts as a wrong answer (and in
``cloud_errors``). Besides the seed and the single signals, every shipped scorer
(app/routing/scorers/*.json, fitted by bench/fit_router.py on the tune set) is evaluated,
or the ones named by ``--scorer``.
The draft budget defaults to the config's ``max_draft_tokens``.

Prints the command, the machine and the tables of bench/routing_eval_report.py; writes the
records and the report as JSON, and the quality-vs-cloud-share curves as a PNG.
``--limit N`` takes the first N items round-robin over kinds, so a short run sees each kind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, replace
from itertools import chain, zip_longest
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.composition import build_policy
from app.config import ModelConfig, SpeculativeConfig, load_settings
from app.errors import UpstreamError
from app.evaluation.judges import EvalItem, load_items
from app.local_server import LocalServerError, ManagedLlamaServer
from app.local_server import llama_server_version as server_version
from app.routing.classify import classify
from app.routing.policy import Policy, decide
from app.routing.scorer import SHIPPED, load_scorer
from app.routing.signals import DraftSignals, draft_signals
from app.upstreams import Upstream, build_upstream, create_client
from app.wire import draft_body
from bench.host import host_facts
from bench.routing_eval_report import DraftRecord, evaluate, make_record, markdown

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=ROOT / "bench/data/routing_eval.jsonl")
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--max-draft-tokens", type=int, default=None, help="default: config's")
    parser.add_argument(
        "--scorer", action="append", default=None, help="scorer name or JSON (default: shipped)"
    )
    parser.add_argument("--limit", type=int, default=None, help="first N items, round-robin")
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/routing_eval.json")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs/routing/curves.png")
    parser.add_argument("--cloud-url", help="a real OpenAI-compatible cloud (default: perfect)")
    parser.add_argument("--cloud-model", help="the cloud's model (default: the config's verifier)")
    parser.add_argument(
        "--cloud-key-env", default="CEREBRAS_API_KEY", help="env var holding the cloud's key"
    )
    parser.add_argument("--cloud-provider", choices=("cerebras", "openai"), default="cerebras")
    args = parser.parse_args(argv)
    if args.cloud_model is not None and args.cloud_url is None:
        parser.error("--cloud-model needs --cloud-url")
    if args.max_draft_tokens is not None and args.max_draft_tokens < 1:
        parser.error("--max-draft-tokens must be at least 1")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    return args


def round_robin(items: Sequence[EvalItem], limit: int | None) -> list[EvalItem]:
    """All items (file order) or the first ``limit`` taken one kind at a time."""
    if limit is None:
        return list(items)
    kinds: dict[str, list[EvalItem]] = {}
    for item in items:
        kinds.setdefault(item.kind, []).append(item)
    mixed = [i for i in chain.from_iterable(zip_longest(*kinds.values())) if i is not None]
    return mixed[:limit]


@asynccontextmanager
async def local_upstream(local: ModelConfig) -> AsyncIterator[tuple[Upstream, dict[str, Any]]]:
    """The draft model on a managed llama-server of its own (a free port, never the
    proxy's), as the proxy's upstream, and the server's status; always stopped."""
    assert local.launch is not None
    server = ManagedLlamaServer(local.launch.model_copy(update={"port": 0}), "local")
    client = create_client(local)
    try:
        upstream = build_upstream("local", local, client)
        upstream.base_url = await server.start()
        yield upstream, server.status()
    finally:
        await client.close()
        await server.stop()


async def draft_items(
    items: Sequence[EvalItem], local: ModelConfig, spec: SpeculativeConfig, budget: int
) -> tuple[list[DraftSignals], dict[str, Any]]:
    """Draft every item as the proxy would, on a managed llama-server; always stop it.

    Each prompt is one user message at temperature 0; returns the drafts' signals and the
    server's status and drafting time.
    """
    drafts: list[DraftSignals] = []
    async with local_upstream(local) as (upstream, status):
        started = time.perf_counter()
        for number, item in enumerate(items, start=1):
            raw = {
                "model": local.model,
                "messages": [{"role": "user", "content": item.prompt}],
                "temperature": 0,
            }
            completion = await upstream.complete(draft_body(raw, budget, spec.top_logprobs))
            drafts.append(draft_signals(completion.body, budget))
            if number % 25 == 0:
                print(f"  drafted {number}/{len(items)}", file=sys.stderr, flush=True)
        drafting_s = time.perf_counter() - started
    return drafts, {"server": status, "drafting_s": drafting_s}


async def draft_all(
    items: Sequence[EvalItem], local: ModelConfig, spec: SpeculativeConfig, budget: int
) -> tuple[list[DraftRecord], dict[str, Any]]:
    """Draft, judge and describe every item (``draft_items``, then one record each)."""
    drafts, run = await draft_items(items, local, spec, budget)
    policy = seed_policy(spec)
    records = [
        make_record(
            item_id=item.id,
            kind=item.kind,
            context_type=classify(item.prompt),
            signals=signals,
            correct=item.passes(signals.text),
            decision=decide(signals, policy),
            hedging_markers=policy.uncertainty_markers,
        )
        for item, signals in zip(items, drafts, strict=True)
    ]
    return records, run


def cloud_config(url: str, model: str, provider: str, api_key: str) -> ModelConfig:
    """The real cloud as a ``models:`` entry; patient with rate limits, as a bench can be."""
    return ModelConfig.model_validate(
        {
            "provider": provider,
            "base_url": url,
            "model": model,
            "api_key": api_key,
            "max_retries": 3,
            "max_retry_wait_s": 30.0,
            "circuit_breaker": {"failures": 1000},  # every item is asked, whatever came before
        }
    )


async def ask_cloud(
    items: Sequence[EvalItem], config: ModelConfig
) -> list[tuple[bool, str | None]]:
    """Ask the cloud each item as the proxy asks its verifier; (judged correct, error or None)."""
    client = create_client(config)
    answers: list[tuple[bool, str | None]] = []
    try:
        upstream = build_upstream("cloud", config, client)
        for number, item in enumerate(items, start=1):
            raw = {
                "model": config.model,
                "messages": [{"role": "user", "content": item.prompt}],
                "temperature": 0,
            }
            try:
                completion = await upstream.complete(raw)
            except UpstreamError as exc:
                answers.append((False, exc.message))
            else:
                answers.append((item.passes(completion.text), None))
            if number % 25 == 0:
                print(f"  asked the cloud {number}/{len(items)}", file=sys.stderr, flush=True)
    finally:
        await client.close()
    return answers


def with_cloud(
    records: Sequence[DraftRecord], answers: Sequence[tuple[bool, str | None]]
) -> list[DraftRecord]:
    """The records with the real cloud's verdict (and error) on each item."""
    return [
        replace(r, cloud_correct=ok, cloud_error=error)
        for r, (ok, error) in zip(records, answers, strict=True)
    ]


def seed_policy(spec: SpeculativeConfig) -> Policy:
    """The seed's rules with the config's thresholds, whatever policy the config picks."""
    return replace(build_policy(spec), scorer=None)


def machine_facts(binary: str | None, model: str | None) -> dict[str, Any]:
    """The host's facts, the llama-server version and the model file."""
    return {
        **host_facts(),
        "llama_server": server_version(Path(binary)) if binary else "unknown",
        "model": Path(model).name if model else "unknown",
    }


def plot(report: dict[str, Any], path: Path, title: str) -> None:
    """Quality vs cloud share for every policy, the oracle and random."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    for name, row in report["policies"].items():
        shares, quality = zip(*row["curve"], strict=True)
        style = {"oracle": "k--", "random": "k:"}.get(name, "-")
        label = name if row["apgr"] is None else f"{name} (APGR {row['apgr']:.2f})"
        ax.plot(shares, quality, style, marker="." if name == "seed" else None, label=label)
    ax.set_xlabel("cloud share")
    ax.set_ylabel("quality (share of correct answers)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "bench.routing_eval", *sys.argv[1:]])
    settings = load_settings(args.config, env={})  # the cloud's key is not needed here
    local = settings.models[settings.speculative_decoding.draft_model]
    if local.provider != "llama_server" or local.launch is None:
        print(
            "error: the draft model must be a llama_server with a launch section", file=sys.stderr
        )
        return 2
    spec = settings.speculative_decoding
    cloud: ModelConfig | None = None
    if args.cloud_url is not None:
        key = os.environ.get(args.cloud_key_env, "")
        if not key:
            print(
                f"error: --cloud-url needs the cloud's API key in ${args.cloud_key_env} "
                "(set it, or name another variable with --cloud-key-env)",
                file=sys.stderr,
            )
            return 2
        model = args.cloud_model or settings.models[spec.verifier].model
        try:
            cloud = cloud_config(args.cloud_url, model, args.cloud_provider, key)
        except ValidationError as exc:  # the errors' messages only: inputs could hold the key
            problems = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())
            print(f"error: the cloud's settings: {problems}", file=sys.stderr)
            return 2
    items = round_robin(load_items(args.data.read_text(encoding="utf-8").splitlines()), args.limit)
    budget = args.max_draft_tokens or spec.max_draft_tokens
    names = args.scorer or sorted(p.stem for p in SHIPPED.glob("*.json"))
    try:
        scorers = [load_scorer(name) for name in names]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    started = time.perf_counter()
    try:
        records, run = asyncio.run(draft_all(items, local, spec, budget))
    except LocalServerError as exc:
        print(f"error: cannot run the local model: {exc}", file=sys.stderr)
        return 1
    if cloud is not None:
        records = with_cloud(records, asyncio.run(ask_cloud(items, cloud)))
    runtime_s = time.perf_counter() - started
    cloud_name = "perfect cloud" if cloud is None else f"{cloud.model} at {cloud.base_url}"
    report = evaluate(records, scorers, cloud=cloud_name)
    machine = machine_facts(run["server"]["binary"], run["server"]["model"])
    setup = {
        "command": command,
        "data": str(args.data),
        "items": len(items),
        "max_draft_tokens": budget,
        "scorers": {s.name: s.fitted_on for s in scorers},
        "top_logprobs": spec.top_logprobs,
        "temperature": 0,
        "cloud": "perfect"
        if cloud is None
        else {"url": cloud.base_url, "model": cloud.model, "provider": cloud.provider},
        "seed_policy": asdict(seed_policy(spec)),
        "runtime_s": runtime_s,
        "drafting_s": run["drafting_s"],
    }

    print(f"$ {command}")
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, "
        f"kernel {machine['kernel']}, llama-server {machine['llama_server']}, "
        f"model {machine['model']}, specproxy {machine['specproxy_commit']}"
    )
    print(
        f"setup: {len(items)} items from {args.data.name}, budget {budget} tokens, "
        f"top_logprobs {spec.top_logprobs}, temperature 0, one user message per prompt; "
        f"runtime {runtime_s:.1f} s (drafting {run['drafting_s']:.1f} s)"
    )
    if cloud is None:
        print("cloud: perfect (every item's reference answer)")
    else:
        print(f"cloud: {cloud_name} ({cloud.provider}), answers judged like the drafts")
    print()
    print(markdown(report))

    args.json.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "setup": setup,
        "machine": machine,
        "report": report,
        "records": [asdict(r) for r in records],
    }
    args.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    title = f"{machine['model']}, {len(items)} items, budget {budget} tokens, {cloud_name}"
    plot(report, args.plot, title)
    print(f"\nwrote {args.json} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
