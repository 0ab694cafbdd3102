#!/usr/bin/env python3
"""Streamed time to first token: cloud only, local only and the speculative flow.

    .venv/bin/python -m bench.stream_latency [--limit N] [--max-tokens 256]
        [--data bench/data/routing_eval.jsonl] [--json bench/results/stream_latency.json]
        [--first-token-s S] [--trust-score P] [--trust-s S]

The real proxy (in this process, on a loopback port) with the config's speculative
section drafts on a real llama-server (the config's launch section, on a free port) and
spills to the Cerebras stand-in of ``bench.routing_latency``, paced like Cerebras for a
stream: the first chunk after 0.2 s, then 2,000 tokens/s, each prompt answered with its
item's reference. Every item is sent streamed (``stream: true``), one request at a time,
temperature 0, ``max_tokens`` as given, once per arm, the arms rotated item by item:

* ``cloud_only``: ``X-Routing-Strategy: cerebras_only``;
* ``local_only``: ``X-Routing-Strategy: local_only``;
* ``speculative_before``: the flow before issue 20 (``BEFORE_ISSUE_20``: no first-token
  budget, so the draft is judged whole before the first byte, and the early abort of
  then, every 16 tokens at P(wrong) 0.6; the rest, ``hedge`` included, is the config's,
  as it was then);
* ``speculative``: the config's flow (draft, judge, then serve or spill), its
  ``stream_first_token_s`` and ``stream_trust_score`` (or the flags) in force.

Per arm: time to the first content byte (TTFT) p50 and p90, the whole stream's mean time,
the share of answers served by the cloud, the share of requests that called the cloud at
all (a cancelled hedge counts), the cloud tokens per request (each call's whole answer: a
stream stopped early is counted as if the cloud had generated all of it, an upper bound),
and quality (the item's judge on the streamed text). Speed bought by calling the cloud for
every stream shows in the last three columns.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml
from starlette.requests import Request
from starlette.responses import Response

from app import create_app
from app.config import load_settings
from app.evaluation.judges import EvalItem, load_items
from bench.routing_eval import round_robin
from bench.routing_latency import (
    FIRST_TOKEN_S,
    TOKENS_PER_S,
    ReferenceCloud,
    percentile,
    publish,
    stand_in_settings,
    timed_on_local_model,
)
from tests.fakes.script import JSON, Reply, tokenize
from tests.fakes.server import serve

ROOT = Path(__file__).resolve().parent.parent
# What the flow before issue 20 changes of the config's speculative section.
BEFORE_ISSUE_20 = {
    "stream_first_token_s": None,
    "stream_trust_score": None,
    "abort_check_tokens": 16,
    "abort_min_score": 0.6,
}
# arm -> (which proxy: the budget's or the one before it, X-Routing-Strategy)
ARMS = {
    "cloud_only": ("after", "cerebras_only"),
    "local_only": ("after", "local_only"),
    "speculative_before": ("before", None),
    "speculative": ("after", None),
}


class PacedCloud(ReferenceCloud):
    """The reference stand-in, streaming at Cerebras' pace; counts the tokens asked of it."""

    def __init__(self, references: dict[str, str]) -> None:
        super().__init__(references)
        self.tokens = 0

    async def play(self, request: Request, body: JSON, limit: int | None) -> Response:
        text = self.references.get(body["messages"][-1]["content"], "I do not know.")
        n = len(tokenize(text))
        self.tokens += n if limit is None or limit < 0 else min(n, limit)
        if not body.get("stream"):
            return await super().play(request, body, limit)
        self.enqueue(Reply(text=text, delay=FIRST_TOKEN_S, chunk_delay=1 / TOKENS_PER_S))
        self.calls += 1
        return await super(ReferenceCloud, self).play(request, body, limit)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=ROOT / "bench/data/routing_eval.jsonl")
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument(
        "--limit", type=int, help="the first N items, round-robin over kinds (default: all)"
    )
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/stream_latency.json")
    parser.add_argument(
        "--first-token-s", type=float, help="the speculative arm's budget instead of the config's"
    )
    parser.add_argument(
        "--trust-score", type=float, help="the speculative arm's stream_trust_score instead"
    )
    parser.add_argument("--trust-s", type=float, help="the speculative arm's stream_trust_s")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        type=variant,
        metavar="NAME:KNOB=VALUE,...",
        help="one more arm, speculative:NAME, with these speculative settings changed "
        "(values in YAML, e.g. 'noTrust:stream_trust_score=null'); repeatable",
    )
    args = parser.parse_args(argv)
    if (args.limit is not None and args.limit < 1) or args.max_tokens < 1:
        parser.error("--limit and --max-tokens must be at least 1")
    return args


def variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME:KNOB=VALUE,...`` as (NAME, {KNOB: VALUE}); values read as YAML scalars."""
    name, _, knobs = text.partition(":")
    pairs = [pair.partition("=") for pair in knobs.split(",") if pair]
    if not name or not pairs or any(not sep for _, sep, _ in pairs):
        raise argparse.ArgumentTypeError(f"expected NAME:KNOB=VALUE,... not {text!r}")
    return name, {knob.strip(): yaml.safe_load(value) for knob, _, value in pairs}


def ask(
    http: httpx.Client,
    urls: dict[str, str],
    cloud: PacedCloud,
    item: EvalItem,
    arm: str,
    max_tokens: int,
) -> dict[str, Any]:
    """One streamed request: the time to its first content byte and to its end."""
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": item.prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "cache_prompt": False,
    }
    proxy, strategy = ARMS.get(arm, (arm, None))
    url = urls[proxy]
    headers = {"X-Routing-Strategy": strategy} if strategy else {}
    calls, tokens = cloud.calls, cloud.tokens
    text: list[str] = []
    first: float | None = None
    model_used = None
    started = time.perf_counter()
    with http.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[len("data: ") :])
            model_used = chunk.get("model_used", model_used)
            for choice in chunk.get("choices") or []:
                if content := (choice.get("delta") or {}).get("content"):
                    first = first or time.perf_counter() - started
                    text.append(content)
    total = time.perf_counter() - started
    return {
        "id": item.id,
        "kind": item.kind,
        "ttft_s": first if first is not None else total,
        "total_s": total,
        "cloud_served": model_used not in (None, "local"),
        "cloud_called": cloud.calls > calls,
        "cloud_tokens": cloud.tokens - tokens,
        "correct": item.passes("".join(text)),
    }


def run(
    items: list[EvalItem],
    spec: dict[str, Any],
    local_url: str,
    max_tokens: int,
    variants: Sequence[tuple[str, dict[str, Any]]] = (),
) -> dict[str, list[dict[str, Any]]]:
    """Every item through every arm (each variant one more), the arms rotated per item."""
    cloud = PacedCloud({i.prompt: i.reference for i in items})
    specs = {
        "after": spec,
        "before": {**spec, **BEFORE_ISSUE_20},
        **{f"speculative:{name}": {**spec, **knobs} for name, knobs in variants},
    }
    order = [*ARMS, *(f"speculative:{name}" for name, _ in variants)]
    rows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in order}
    with contextlib.ExitStack() as stack:
        cloud_url = stack.enter_context(serve(cloud.app))
        apps = {
            proxy: create_app(stand_in_settings(local_url, cloud_url, s))
            for proxy, s in specs.items()
        }
        urls = {proxy: stack.enter_context(serve(app)) for proxy, app in apps.items()}
        http = stack.enter_context(httpx.Client(timeout=120))
        for number, item in enumerate(items):
            for arm in order[number % len(order) :] + order[: number % len(order)]:
                rows[arm].append(ask(http, urls, cloud, item, arm, max_tokens))
            if (number + 1) % 8 == 0:
                print(f"  {number + 1}/{len(items)} items", file=sys.stderr, flush=True)
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    ttft = [r["ttft_s"] for r in rows]
    return {
        "n": len(rows),
        "ttft_p50_s": percentile(ttft, 0.5),
        "ttft_p90_s": percentile(ttft, 0.9),
        "total_mean_s": statistics.fmean(r["total_s"] for r in rows),
        "cloud_served": statistics.fmean(r["cloud_served"] for r in rows),
        "cloud_called": statistics.fmean(r["cloud_called"] for r in rows),
        "cloud_tokens": statistics.fmean(r["cloud_tokens"] for r in rows),
        "quality": statistics.fmean(r["correct"] for r in rows),
    }


def markdown(summary: dict[str, dict[str, float]]) -> str:
    lines = [
        "| arm | TTFT p50 | TTFT p90 | total mean | cloud-served | cloud called "
        "| cloud tokens / request | quality |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, s in summary.items():
        lines.append(
            f"| {arm} | {s['ttft_p50_s']:.3f} s | {s['ttft_p90_s']:.3f} s "
            f"| {s['total_mean_s']:.3f} s | {100 * s['cloud_served']:.1f}% "
            f"| {100 * s['cloud_called']:.1f}% | {s['cloud_tokens']:.1f} "
            f"| {100 * s['quality']:.1f}% |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "bench.stream_latency", *sys.argv[1:]])
    settings = load_settings(args.config, env={})
    spec = settings.speculative_decoding
    local = settings.models[spec.draft_model]
    if local.launch is None:
        print("error: the draft model needs a launch section", file=sys.stderr)
        return 2
    base = spec.model_dump(mode="json", exclude={"enabled", "draft_model", "verify_model"})
    flags = {
        "stream_first_token_s": args.first_token_s,
        "stream_trust_score": args.trust_score,
        "stream_trust_s": args.trust_s,
    }
    base |= {knob: value for knob, value in flags.items() if value is not None}
    items = round_robin(load_items(args.data.read_text(encoding="utf-8").splitlines()), args.limit)
    done = timed_on_local_model(
        local.launch, lambda url: run(items, base, url, args.max_tokens, args.variant)
    )
    if done is None:
        return 1
    rows, runtime = done
    summary = {arm: summarise(arm_rows) for arm, arm_rows in rows.items()}
    setup = (
        f"{len(items)} streamed items of {args.data.name}, max_tokens {args.max_tokens}, the "
        f"config's speculative flow (policy {base['policy']}, early abort {base['early_abort']}, "
        f"hedge {base['hedge']}, stream_first_token_s {base['stream_first_token_s']}, "
        f"stream_trust_score {base['stream_trust_score']} to {base['stream_trust_s']} s); "
        f"cloud stand-in {FIRST_TOKEN_S} s + {TOKENS_PER_S:g} tok/s; "
        f"runtime {runtime:.0f} s"
    )
    publish(args.json, command, setup, markdown(summary), base, summary, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
