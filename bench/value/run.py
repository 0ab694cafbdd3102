"""Asking: the trace through every proxy arm side by side, each request through the
official SDK, what each arm served, and each arm's bill and ``/stats``."""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import openai

from app import create_app
from app.config import settings_from_mapping
from bench.value.arms import PROXY_ARMS, arm_key, arm_tree
from bench.value.cloud import BillingCloud, settle
from bench.value.trace import TraceRequest
from tests.fakes.script import JSON
from tests.fakes.server import serve


def ask(client: openai.OpenAI, request: TraceRequest, max_tokens: int) -> JSON:
    """Send one request through the official SDK; the served text, who served it, TTFT,
    the cache's verdict (``X-Cache``), the gate's lane (``speculative_decoding.lane``) and
    whether the draft went out unverified (``speculative_decoding.accepted``) when the
    proxy tells them."""
    params: JSON = {
        "model": "bench",
        "messages": [{"role": "user", "content": request.prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "extra_body": {"cache_prompt": False},
    }
    started = time.perf_counter()
    first: float | None = None
    model_used: str | None = None
    spec: JSON = {}
    cache: str | None = None
    request_id: str | None = None
    parts: list[str] = []
    error = None
    try:
        if request.stream:
            raw = client.chat.completions.with_raw_response.create(**params, stream=True)
            cache, request_id = raw.headers.get("x-cache"), raw.headers.get("x-request-id")
            for chunk in raw.parse():
                extra = chunk.model_extra or {}
                model_used = extra.get("model_used", model_used)
                spec = extra.get("speculative_decoding") or spec
                for choice in chunk.choices:
                    if choice.delta.content:
                        first = first if first is not None else time.perf_counter() - started
                        parts.append(choice.delta.content)
        else:
            whole = client.chat.completions.with_raw_response.create(**params)
            cache, request_id = whole.headers.get("x-cache"), whole.headers.get("x-request-id")
            completion = whole.parse()
            extra = completion.model_extra or {}
            model_used = extra.get("model_used")
            spec = extra.get("speculative_decoding") or {}
            parts.append(completion.choices[0].message.content or "")
    except openai.APIError as exc:  # counted as a wrong answer; the run goes on
        error = f"{type(exc).__name__}: {exc}"
    total = time.perf_counter() - started
    return {
        "text": "".join(parts),
        "error": error,
        "model_used": model_used,
        "ttft_s": (first if first is not None else total) if request.stream else None,
        "total_s": total,
        "cache": cache,
        "request_id": request_id,
        "lane": spec.get("lane") if isinstance(spec, dict) else None,
        "accepted": spec.get("accepted") if isinstance(spec, dict) else None,
        # no threshold held: the cloud answered, the draft beside it a label
        "unheld": isinstance(spec, dict) and "verifies_all" in (spec.get("reasons") or ()),
    }


def run(
    trace: Sequence[TraceRequest],
    shipped: JSON,
    local_url: str,
    max_tokens: int,
    arms: Sequence[str] = PROXY_ARMS,
    spec_logs: Path | None = None,
    state_from: Path | None = None,
    state_to: Path | None = None,
) -> JSON:
    """The trace through every proxy arm, request by request, the arms' order rotated; each
    request's row per arm, each arm's bill and its ``/stats`` cost; with ``spec_logs`` each
    speculative arm writes its speculation log there (``<arm>.jsonl``); ``state_from``: a
    learner's state (labels, scorer, gate) every arm starts from; ``state_to``: where the
    last speculative arm's state is copied once its proxy has stopped."""
    references = {r.prompt: r.item.reference for r in trace}
    cloud = BillingCloud(references, [arm_key(arm) for arm in arms])
    rows: dict[str, list[JSON]] = {arm: [] for arm in arms}
    stats: dict[str, Any] = {}
    quality: dict[str, Any] = {}
    learning: dict[str, Any] = {}
    timing: dict[str, float] = dict.fromkeys(arms, 0.0)
    with contextlib.ExitStack() as stack:
        cloud_url = stack.enter_context(serve(cloud.app))
        urls = {}
        for arm in arms:
            state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"value-{arm}-")))
            if state_from is not None:
                shutil.copytree(state_from, state, dirs_exist_ok=True)
            if state_to is not None and arm not in ("cloud_only", "local_only"):
                # runs once the arm's proxy has stopped (its labels flushed), before cleanup
                stack.callback(shutil.copytree, state, state_to, dirs_exist_ok=True)
            log = spec_logs / f"{arm}.jsonl" if spec_logs is not None else None
            tree = arm_tree(arm, shipped, local_url, cloud_url, state, log)
            settings = settings_from_mapping(tree, env={"BENCH_CLOUD_KEY": arm_key(arm)})
            urls[arm] = stack.enter_context(serve(create_app(settings)))
        clients = {
            arm: stack.enter_context(
                openai.OpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0, timeout=120)
            )
            for arm, url in urls.items()
        }
        order = list(arms)
        for request in trace:
            shift = request.n % len(order)
            for arm in order[shift:] + order[:shift]:
                before = cloud.bill(arm_key(arm))
                answer = ask(clients[arm], request, max_tokens)
                timing[arm] += answer["total_s"]
                billed = cloud.bill(arm_key(arm)).minus(before)
                rows[arm].append(
                    {
                        "n": request.n,
                        "id": request.item.id,
                        "kind": request.item.kind,
                        "stream": request.stream,
                        "repeat": request.repeat,
                        **answer,
                        "cloud_served": answer["model_used"] not in (None, _draft_name(shipped)),
                        "correct": request.item.passes(answer["text"]),
                        "bill": asdict(billed),
                    }
                )
            if (request.n + 1) % 10 == 0:
                print(f"  {request.n + 1}/{len(trace)} requests", file=sys.stderr, flush=True)
        settle(cloud)
        with httpx.Client(timeout=30) as http:
            for arm, url in urls.items():
                whole = http.get(f"{url}/stats").json()
                stats[arm] = whole.get("cost")
                quality[arm] = whole.get("quality")
                learning[arm] = whole.get("learning")
    bills = {arm: asdict(cloud.bill(arm_key(arm))) for arm in arms}
    return {
        "rows": rows,
        "bills": bills,
        "stats_cost": stats,
        "stats_quality": quality,
        "stats_learning": learning,
        "answer_s": timing,
        "unknown_prompts": cloud.unknown_prompts,
    }


def _draft_name(shipped: JSON) -> str:
    return str(shipped.get("speculative_decoding", {}).get("draft_model", "local"))
