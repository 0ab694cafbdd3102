#!/usr/bin/env python3
"""End-to-end latency of the routing flows: sequential, early abort, hedging.

    .venv/bin/python -m bench.routing_latency [--limit 60] [--data bench/data/routing_eval.jsonl]
        [--json bench/results/routing_latency.json] [--config config.yaml]

The real proxy (in this process, on a loopback port) drafts on a real llama-server (the
config's launch section, started by this script on a free port) and spills to a stand-in
for Cerebras (tests/fakes/cerebras.py, the same one the test suite uses) that answers every
prompt with the item's reference answer after Cerebras-like latency: 0.2 s to the first
token, then 2,000 tokens/s. Every item is sent once per arm, non-streaming, one request at
a time, temperature 0, no max_tokens (the draft budget is the config's); arms take turns
item by item, in rotated order, and ``cache_prompt: false`` keeps llama-server's prompt
cache from favouring whichever arm comes second.

Arms (same draft budget; the scored arms use the config's scored policy, default combined):

* ``seed``: the seed's rules, draft then verify (the sequential seed flow);
* ``scored``: the scored policy, draft then verify;
* ``scored+abort``: the draft streamed and stopped at a token under ``abort_min_token_prob``;
* ``scored+abort+hedge``: also calls the cloud at once when the request's kind spills at
  least ``hedge_min_prior`` of the time (the scorer's fitted rates), and cancels the loser;
* ``scored+abort+hedge+budget``: also the adaptive draft budget per context type
  (``adaptive_depth.draft_budget`` with its defaults, starting at the config's budget).

Reported per arm: mean, p50 and p95 latency, the share of answers served by the cloud, the
share of requests that called the cloud at all (a cancelled hedge still costs a call), and
quality (the item's judge on the served answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
from starlette.requests import Request
from starlette.responses import Response

from app import create_app
from app.config import LaunchConfig, load_settings, settings_from_mapping
from app.evaluation.judges import EvalItem, load_items
from app.local_server import LocalServerError, ManagedLlamaServer
from app.vocabulary import PolicyName
from bench.host import host_facts
from bench.routing_eval import round_robin
from tests.fakes.cerebras import FakeCerebras
from tests.fakes.script import JSON, Reply, tokenize
from tests.fakes.server import serve

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")

CLOUD_KEY = "csk-bench-0123456789abcdef"
FIRST_TOKEN_S = 0.2
TOKENS_PER_S = 2000.0
ARMS: dict[str, dict[str, Any]] = {
    "seed": {"policy": "seed"},
    "scored": {},
    "scored+abort": {"early_abort": True},
    "scored+abort+hedge": {"early_abort": True, "hedge": "auto"},
    "scored+abort+hedge+budget": {
        "early_abort": True,
        "hedge": "auto",
        "adaptive_depth": {"draft_budget": {"enabled": True}},
    },
}


class ReferenceCloud(FakeCerebras):
    """The Cerebras stand-in, answering each prompt with its reference at Cerebras' pace."""

    def __init__(self, references: dict[str, str]) -> None:
        super().__init__(api_key=CLOUD_KEY)
        self.references = references
        self.calls = 0

    async def play(self, request: Request, body: JSON, limit: int | None) -> Response:
        prompt = body["messages"][-1]["content"]
        text = self.references.get(prompt, "I do not know.")
        # Playing happens on one event loop with no await before next_reply: no interleaving.
        self.enqueue(Reply(text=text, delay=FIRST_TOKEN_S + len(tokenize(text)) / TOKENS_PER_S))
        self.calls += 1
        return await super().play(request, body, limit)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=ROOT / "bench/data/routing_eval.jsonl")
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--limit", type=int, default=60, help="items, round-robin over kinds")
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/routing_latency.json")
    parser.add_argument("--abort-min-score", type=float, help="override the config's")
    parser.add_argument("--hedge-min-prior", type=float, help="override the config's")
    parser.add_argument("--abort-check-tokens", type=int, help="override the config's")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated (seed first)")
    args = parser.parse_args(argv)
    if args.limit < 1:
        parser.error("--limit must be at least 1")
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := set(args.arms) - set(ARMS):
        parser.error(f"unknown arms {sorted(unknown)}; choose from {', '.join(ARMS)}")
    if args.arms[0] != "seed":
        parser.error("the seed arm comes first: the table compares every arm with it")
    return args


def arm_settings(base: dict[str, Any], local_url: str, cloud_url: str, arm: str) -> Any:
    """The proxy's settings for one arm: the config's speculative section plus the arm's."""
    spec = {**base, "early_abort": False, "hedge": "off", **ARMS[arm]}
    depth = spec.pop("adaptive_depth", {})
    if spec.get("policy", "seed") == "seed" and arm != "seed":
        spec["policy"] = PolicyName.COMBINED.value
    return stand_in_settings(local_url, cloud_url, spec, adaptive_depth=depth)


def stand_in_settings(
    local_url: str, cloud_url: str, speculative: dict[str, Any], **sections: Any
) -> Any:
    """A proxy between the bench's llama-server and its cloud stand-in: ``speculative`` is
    its speculative section (the models filled in), ``sections`` the other sections."""
    tree = {
        "models": {
            "local": {"provider": "llama_server", "base_url": local_url, "model": "local"},
            "cloud": {
                "provider": "cerebras",
                "base_url": f"{cloud_url}/v1",
                "model": "gpt-oss-120b",
                "api_key": "${BENCH_CLOUD_KEY}",
                "max_retries": 0,
            },
        },
        "speculative_decoding": {**speculative, "draft_model": "local", "verify_model": "cloud"},
        "logging": {"level": "WARNING"},
        **sections,
    }
    return settings_from_mapping(tree, env={"BENCH_CLOUD_KEY": CLOUD_KEY})


@contextmanager
def local_model(launch: LaunchConfig) -> Iterator[str]:
    """The configured llama-server on a free port (its URL), on an event loop thread of its
    own (the proxies' loops are uvicorn's); stopped on exit. LocalServerError if it
    cannot start."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = ManagedLlamaServer(launch.model_copy(update={"port": 0}), "local")
    try:
        yield asyncio.run_coroutine_threadsafe(_start(server), loop).result()
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result()
        loop.call_soon_threadsafe(loop.stop)


def timed_on_local_model(launch: LaunchConfig, work: Callable[[str], T]) -> tuple[T, float] | None:
    """``work(local_url)`` against the configured llama-server, and how long it took; None
    (the reason printed) when the local model cannot start."""
    try:
        with local_model(launch) as local_url:
            started = time.perf_counter()
            result = work(local_url)
            return result, time.perf_counter() - started
    except LocalServerError as exc:
        print(f"error: cannot run the local model: {exc}", file=sys.stderr)
        return None


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile by the nearest-rank method."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    latencies = [r["latency_s"] for r in rows]
    return {
        "n": len(rows),
        "mean_s": statistics.fmean(latencies),
        "p50_s": percentile(latencies, 0.5),
        "p95_s": percentile(latencies, 0.95),
        "cloud_served": statistics.fmean(r["cloud_served"] for r in rows),
        "cloud_called": statistics.fmean(r["cloud_called"] for r in rows),
        "quality": statistics.fmean(r["correct"] for r in rows),
    }


def run(
    items: list[EvalItem], base_spec: dict[str, Any], local_url: str, arms: Sequence[str] = ()
) -> dict[str, Any]:
    """Every item through every arm, arms rotated per item; returns per-request rows."""
    cloud = ReferenceCloud({i.prompt: i.reference for i in items})
    arms = arms or list(ARMS)
    rows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    with serve(cloud.app) as cloud_url:
        proxies = {}
        stack = []
        try:
            for arm in arms:
                server = serve(create_app(arm_settings(base_spec, local_url, cloud_url, arm)))
                proxies[arm] = server.__enter__()
                stack.append(server)
            with httpx.Client(timeout=120) as http:
                order = list(arms)
                for number, item in enumerate(items):
                    for arm in order[number % len(order) :] + order[: number % len(order)]:
                        rows[arm].append(ask(http, proxies[arm], cloud, item))
                    if (number + 1) % 10 == 0:
                        print(f"  {number + 1}/{len(items)} items", file=sys.stderr, flush=True)
        finally:
            for server in reversed(stack):
                server.__exit__(None, None, None)
    return rows


def ask(http: httpx.Client, url: str, cloud: ReferenceCloud, item: EvalItem) -> dict[str, Any]:
    """One request; latency measured around the whole HTTP exchange."""
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": item.prompt}],
        "temperature": 0,
        "cache_prompt": False,
    }
    calls = cloud.calls
    started = time.perf_counter()
    response = http.post(f"{url}/v1/chat/completions", json=body)
    latency = time.perf_counter() - started
    response.raise_for_status()
    data = response.json()
    text = data["choices"][0]["message"]["content"] or ""
    return {
        "id": item.id,
        "kind": item.kind,
        "latency_s": latency,
        "cloud_served": data["model_used"] != "local",
        "cloud_called": cloud.calls > calls,
        "correct": item.passes(text),
        "reasons": data.get("speculative_decoding", {}).get("reasons", []),
    }


def markdown(summary: dict[str, dict[str, float]]) -> str:
    base = summary["seed"]["mean_s"]
    lines = [
        "| arm | mean | p50 | p95 | mean vs seed | cloud-served | cloud called | quality |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, s in summary.items():
        lines.append(
            f"| {arm} | {s['mean_s']:.3f} s | {s['p50_s']:.3f} s | {s['p95_s']:.3f} s "
            f"| {100 * (s['mean_s'] / base - 1):+.1f}% | {100 * s['cloud_served']:.1f}% "
            f"| {100 * s['cloud_called']:.1f}% | {100 * s['quality']:.1f}% |"
        )
    return "\n".join(lines)


async def _start(server: ManagedLlamaServer) -> str:
    return await server.start()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "bench.routing_latency", *sys.argv[1:]])
    settings = load_settings(args.config, env={})
    spec = settings.speculative_decoding
    local = settings.models[spec.draft_model]
    if local.launch is None:
        print("error: the draft model needs a launch section", file=sys.stderr)
        return 2
    base_spec = spec.model_dump(
        mode="json", exclude={"enabled", "draft_model", "verify_model", "early_abort", "hedge"}
    )
    for key in ("abort_min_score", "hedge_min_prior", "abort_check_tokens"):
        if (value := getattr(args, key)) is not None:
            base_spec[key] = value
    items = round_robin(load_items(args.data.read_text(encoding="utf-8").splitlines()), args.limit)
    done = timed_on_local_model(local.launch, lambda url: run(items, base_spec, url, args.arms))
    if done is None:
        return 1
    rows, runtime = done
    summary = {arm: summarise(arm_rows) for arm, arm_rows in rows.items()}
    setup = (
        f"{len(items)} items of {args.data.name}, budget {spec.max_draft_tokens} tokens, policy "
        f"{base_spec['policy']}, abort floor p {base_spec['abort_min_token_prob']} / score "
        f"{base_spec['abort_min_score']} every {base_spec['abort_check_tokens']} tokens, hedge "
        f"prior {base_spec['hedge_min_prior']}; "
        f"cloud stand-in {FIRST_TOKEN_S} s + {TOKENS_PER_S:g} tok/s; runtime {runtime:.0f} s"
    )
    publish(args.json, command, setup, markdown(summary), base_spec, summary, rows)
    return 0


def publish(
    path: Path,
    command: str,
    setup: str,
    table: str,
    speculative: dict[str, Any],
    summary: dict[str, Any],
    rows: dict[str, Any],
) -> None:
    """Print the command, the machine and ``setup`` and the table; write it all as JSON."""
    machine = host_facts()
    print(f"$ {command}")
    print(f"machine: {machine['cpu']}, {machine['cores']} cores; {setup}")
    print()
    print(table)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "command": command,
        "machine": machine,
        "speculative_decoding": speculative,
        "summary": summary,
        "rows": rows,
    }
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    sys.exit(main())
