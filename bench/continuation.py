#!/usr/bin/env python3
"""Quality of answers whose cloud stream broke and the local model continued.

    .venv/bin/python -m bench.continuation [--limit N] [--max-tokens 128]
        [--data bench/data/routing_eval.jsonl] [--json bench/results/continuation.json]

The real proxy (in this process, on a loopback port), strategy ``cerebras_only`` with the
config's local model as the continuer: the real SmolLM2 llama-server of the config's
launch section (started on a free port), continuing by assistant prefill. The cloud is
the Cerebras stand-in answering each prompt with its item's reference, streamed, its
stream dropped after K content chunks (``app.upstreams.continuation`` then asks the
local model for the rest). Every item is sent streamed, one request at a time,
temperature 0, once per arm, the arms rotated item by item:

* ``unbroken``: the reference streamed whole (what the cut arms are held against);
* ``cut_1``, ``cut_10``: dropped after 1 and 10 content chunks;
* ``cut_half``: dropped after half of the reference's tokens (rounded down, at least 1);
* ``local_alone``: the local model's own answer from scratch (``local_only``), for scale.

Per arm, over the items its cut actually broke (a reference no longer than the cut is
sent whole, and left out of that arm): the items, the share continued (``continued_by``
on the last chunk), the item's judge on the streamed text for the arm, for ``unbroken``
and for ``local_alone`` on the same items, and the continued answers' mean characters.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from app import create_app
from app.config import load_settings
from app.evaluation.judges import EvalItem, load_items
from bench.routing_eval import round_robin
from bench.routing_latency import (
    ReferenceCloud,
    publish,
    stand_in_settings,
    timed_on_local_model,
)
from tests.fakes.script import JSON, Reply, tokenize
from tests.fakes.server import serve

ROOT = Path(__file__).resolve().parent.parent
CUTS: dict[str, int | None] = {"unbroken": None, "cut_1": 1, "cut_10": 10, "cut_half": -1}
ARMS = [*CUTS, "local_alone"]


class CuttingCloud(ReferenceCloud):
    """The reference stand-in, its stream dropped after ``cut`` content chunks (None: whole;
    -1: half the reference's tokens). Requests come one at a time: the cut is set per request."""

    cut: int | None = None

    async def play(self, request: Request, body: JSON, limit: int | None) -> Response:
        text = self.references.get(body["messages"][-1]["content"], "I do not know.")
        n = len(tokenize(text))
        cut = max(1, n // 2) if self.cut == -1 else self.cut
        self.enqueue(
            Reply(text=text, fail_after_chunks=cut if cut is not None and cut < n else None)
        )
        self.calls += 1
        return await super(ReferenceCloud, self).play(request, body, limit)


def cut_of(arm: str, reference: str) -> int | None:
    """Where ``arm`` drops the reference's stream (None: it is sent whole)."""
    n = len(tokenize(reference))
    cut = CUTS.get(arm)
    cut = max(1, n // 2) if cut == -1 else cut
    return cut if cut is not None and cut < n else None


def ask(
    http: httpx.Client, url: str, cloud: CuttingCloud, item: EvalItem, arm: str, max_tokens: int
) -> dict[str, Any]:
    """One streamed request for ``arm``: its text, judged, and who continued it."""
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": item.prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "cache_prompt": False,
    }
    strategy = "local_only" if arm == "local_alone" else "cerebras_only"
    cloud.cut = CUTS.get(arm)
    text: list[str] = []
    continued_by = None
    headers = {"X-Routing-Strategy": strategy}
    with http.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[len("data: ") :])
            continued_by = chunk.get("continued_by", continued_by)
            for choice in chunk.get("choices") or []:
                if content := (choice.get("delta") or {}).get("content"):
                    text.append(content)
    answer = "".join(text)
    return {
        "id": item.id,
        "kind": item.kind,
        "cut": cut_of(arm, item.reference) if arm in CUTS else None,
        "continued_by": continued_by,
        "chars": len(answer),
        "correct": item.passes(answer),
        "text": answer,
    }


def run(items: list[EvalItem], local_url: str, max_tokens: int) -> dict[str, list[dict[str, Any]]]:
    """Every item through every arm, the arms rotated per item."""
    cloud = CuttingCloud({i.prompt: i.reference for i in items})
    rows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    with contextlib.ExitStack() as stack:
        cloud_url = stack.enter_context(serve(cloud.app))
        settings = stand_in_settings(local_url, cloud_url, {}, cache={"enabled": False})
        url = stack.enter_context(serve(create_app(settings)))
        http = stack.enter_context(httpx.Client(timeout=300))
        for number, item in enumerate(items):
            for arm in ARMS[number % len(ARMS) :] + ARMS[: number % len(ARMS)]:
                rows[arm].append(ask(http, url, cloud, item, arm, max_tokens))
            if (number + 1) % 10 == 0:
                print(f"  {number + 1}/{len(items)} items", file=sys.stderr, flush=True)
    return rows


def summarise(rows: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per cut arm, over the items it broke: its quality, unbroken's and local_alone's."""
    by_id = {arm: {r["id"]: r for r in arm_rows} for arm, arm_rows in rows.items()}
    summary = {}
    for arm in ("cut_1", "cut_10", "cut_half"):
        broken = [r for r in rows[arm] if r["cut"] is not None]
        if not broken:
            continue
        ids = [r["id"] for r in broken]
        summary[arm] = {
            "n": len(broken),
            "continued": statistics.fmean(r["continued_by"] is not None for r in broken),
            "quality": statistics.fmean(r["correct"] for r in broken),
            "unbroken_quality": statistics.fmean(by_id["unbroken"][i]["correct"] for i in ids),
            "local_alone_quality": statistics.fmean(
                by_id["local_alone"][i]["correct"] for i in ids
            ),
            "chars": statistics.fmean(r["chars"] for r in broken),
            "unbroken_chars": statistics.fmean(by_id["unbroken"][i]["chars"] for i in ids),
        }
    return summary


def markdown(summary: dict[str, dict[str, float]]) -> str:
    lines = [
        "| cut | items cut | continued | quality continued | quality unbroken "
        "| quality local alone | mean chars continued / unbroken |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, s in summary.items():
        lines.append(
            f"| {arm} | {s['n']:.0f} | {100 * s['continued']:.1f}% | {100 * s['quality']:.1f}% "
            f"| {100 * s['unbroken_quality']:.1f}% | {100 * s['local_alone_quality']:.1f}% "
            f"| {s['chars']:.0f} / {s['unbroken_chars']:.0f} |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=ROOT / "bench/data/routing_eval.jsonl")
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--limit", type=int, default=None, help="items, round-robin over kinds")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/continuation.json")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "bench.continuation", *sys.argv[1:]])
    settings = load_settings(args.config, env={})
    local = settings.models[settings.speculative_decoding.draft_model]
    if local.launch is None:
        print("error: the draft model needs a launch section", file=sys.stderr)
        return 2
    items = round_robin(load_items(args.data.read_text(encoding="utf-8").splitlines()), args.limit)
    done = timed_on_local_model(local.launch, lambda url: run(items, url, args.max_tokens))
    if done is None:
        return 1
    rows, runtime = done
    summary = summarise(rows)
    setup = (
        f"{len(items)} streamed items of {args.data.name}, max_tokens {args.max_tokens}, "
        f"cerebras_only: the reference stand-in cut, the real local model continuing by "
        f"prefill; runtime {runtime:.0f} s"
    )
    publish(args.json, command, setup, markdown(summary), {}, summary, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
