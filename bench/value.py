#!/usr/bin/env python3
"""What the proxy is worth on a trace: quality, cloud spend and latency, arm by arm (issue 31).

    .venv/bin/python -m bench.value [--set eval|tune|transfer | --data FILE] [--limit N]
        [--seed 0] [--max-tokens 128] [--arms cloud_only,local_only,seed,before,shipped]
        [--config config.yaml] [--json bench/results/value.json]

**The trace.** The items of one of the project's sets (``--set``: routing_eval, routing_tune
or transfer, each on its own; ``--data`` any file of the same format; ``--limit N`` the first
N items taken one kind at a time), each asked once, and besides them a third more requests
that repeat an item already asked: which one follows a Zipf law over a seeded popularity
order (a few items come back often), and a repeat is sent as it was, or in other case
(outside quotes), other spacing, or other final punctuation. Half the requests, seeded, are
streamed. One user message, temperature 0, ``max_tokens`` as given, ``cache_prompt: false``
(llama-server's prompt cache would favour whichever arm asks second). The same seed gives
the same trace.

**The upstreams.** A real llama-server (the config's ``launch`` section: the shipped
SmolLM2-135M-Instruct, on a free loopback port, always stopped) drafts for every arm. The
cloud is a stand-in paced like Cerebras (the first chunk 0.2 s after the request, then
2,000 tokens/s; a whole answer when all of it would have been generated) that answers each
prompt with its item's reference and **bills what it sent**: each call's prompt in full
once the call has reached it, and the completion tokens it sent (a stream stopped early
bills the chunks that went out; a whole answer whose caller hung up before it was ready
bills none), counted per API key, one key per arm, priced at the config's verifier prices.
That bill is the ground truth for spend; the stand-in's tokens are its own (the fakes'
word-piece tokenizer), the same for every arm.

**The arms.** Five proxies (this process, each on a loopback port, each with its own
state) take the trace side by side, request by request, in an order rotated per request:

* ``cloud_only``: the shipped config with ``routing.strategy: cerebras_only``;
* ``local_only``: the shipped config with ``routing.strategy: local_only``;
* ``seed``: the seed's flow (policy seed, ``max_draft_tokens`` 10, ``min_confidence`` 0.8,
  no early abort, no hedge, no first-token budget, no learning);
* ``before``: the config as it was before issue 31 (``config.yaml`` at 06ca9f8, copied
  below as ``BEFORE_ISSUE_31`` so it stays comparable);
* ``shipped``: ``config.yaml`` as it is now, every section of it.

and two are computed from the per-request answers of ``local_only`` and ``cloud_only``,
with no proxy run:

* ``random``: each request to the cloud at random (seeded) at the ``shipped`` arm's measured
  cloud-served share, else the local answer;
* ``oracle``: serves locally exactly the local answers the judges call right; every other
  request takes the cloud's answer, called once per item and cached after (a hit counted
  as costing nothing and taking no time).

(``--arms`` runs fewer proxies: ``oracle`` needs ``local_only`` and ``cloud_only``,
``random`` also ``shipped``, and the ratios need ``cloud_only``.)

**Per arm**: quality (the item's judge, ``app.evaluation``, on the served text), cloud spend
against cloud-only (the stand-in's bill), the share of the oracle's saving it recovers,
cloud calls per request (the stand-in's count), the cloud-served share (the answer's
``model_used``), TTFT p50/p90 of the streamed requests, the mean latency of the whole
(non-streamed) answers, and the proxy's own savings figure (``/stats`` → ``cost`` →
``savings_pct``) next to the bill's. Prints the command, the machine, the setup and the
table; ``--json`` writes the figures, the trace and every request's row.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import random
import re
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import yaml
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from app import create_app
from app.config import LaunchConfig, Settings, settings_from_mapping
from app.evaluation.judges import EvalItem, load_items
from bench.host import host_facts
from bench.routing_eval import round_robin
from bench.routing_latency import percentile, timed_on_local_model
from tests.fakes.by_prompt import last_message
from tests.fakes.cerebras import FakeCerebras
from tests.fakes.script import JSON, Generation, Reply, Stream, _pause, prompt_tokens
from tests.fakes.server import serve

ROOT = Path(__file__).resolve().parent.parent
SETS = {
    "eval": ROOT / "bench/data/routing_eval.jsonl",
    "tune": ROOT / "bench/data/routing_tune.jsonl",
    "transfer": ROOT / "bench/data/transfer.jsonl",
}
FIRST_TOKEN_S = 0.2
TOKENS_PER_S = 2000.0
CLOUD_MODEL = "gpt-oss-120b"
UNKNOWN_PROMPT = "I do not know."
ZIPF_S = 1.0
VARIANTS = ("exact", "case", "spacing", "punctuation")

PROXY_ARMS = ("cloud_only", "local_only", "seed", "before", "shipped")
OFFLINE_ARMS = ("random", "oracle")
# config.yaml at 06ca9f8, the commit issue 31 was filed on: its speculative and
# adaptive_depth sections, and learning as it was then (off), fixed here.
BEFORE_ISSUE_31: JSON = {
    "speculative_decoding": {
        "enabled": True,
        "model_name": "speculative",
        "max_draft_tokens": 128,
        "min_confidence": 0.8,
        "short_draft_chars": 50,
        "incomplete_ratio": 0.9,
        "uncertainty_markers": ["...", "I think", "maybe"],
        "min_mean_token_prob": 0.5,
        "min_token_prob": 0.05,
        "top_logprobs": 5,
        "policy": "combined",
        "spill_threshold": None,
        "early_abort": True,
        "abort_min_token_prob": 0.01,
        "abort_min_score": 0.5,
        "abort_check_tokens": 8,
        "hedge": "auto",
        "hedge_min_prior": 0.8,
        "stream_first_token_s": 0.25,
        "stream_trust_score": 0.1,
        "stream_trust_s": 1.0,
    },
    "adaptive_depth": {
        "server_n_max": {
            "enabled": True,
            "k_min": 4,
            "k_max": 24,
            "k_start": 8,
            "target_acceptance": 0.55,
            "interval": 64,
            "window": 128,
            "start_offsets": {"code": 8, "math": -4},
            "ceilings": {"json": 6},
        },
        "draft_budget": {"enabled": False},
    },
    "learning": {"enabled": False},
}
# The seed's flow: its policy and budget, nothing added since.
SEED: JSON = {
    "speculative_decoding": {
        "policy": "seed",
        "max_draft_tokens": 10,
        "min_confidence": 0.8,
        "early_abort": False,
        "hedge": "off",
        "stream_first_token_s": None,
        "stream_trust_score": None,
    },
    "adaptive_depth": {"server_n_max": {"enabled": False}, "draft_budget": {"enabled": False}},
    "learning": {"enabled": False},
}


# ---------------------------------------------------------------------------------- trace


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of the trace: which item, the text sent, streamed or not."""

    n: int
    item: EvalItem = field(repr=False)
    prompt: str
    stream: bool
    repeat: bool
    variant: str  # "first" for an item's first ask, else one of VARIANTS

    def describe(self) -> JSON:
        """As JSON data (the item by its id)."""
        return {
            "n": self.n,
            "id": self.item.id,
            "prompt": self.prompt,
            "stream": self.stream,
            "repeat": self.repeat,
            "variant": self.variant,
        }


# backticks, double quotes, and single quotes that are not apostrophes ("Python's")
_QUOTED = re.compile(r"(`[^`]*`|\"[^\"]*\"|(?<!\w)'[^']*'(?!\w))")


def _outside_quotes(text: str, change: Any) -> str:
    """``change`` applied to the parts of ``text`` outside quotes and backticks (a quoted
    word, string or expression is what a question is about: it stays as it was)."""
    parts = _QUOTED.split(text)
    return "".join(p if i % 2 else change(p) for i, p in enumerate(parts))


def vary(prompt: str, how: str) -> str:
    """The prompt as a user might repeat it: as it was, lower case, other spacing, or other
    final punctuation; quoted parts never change."""
    if how == "case":
        return _outside_quotes(prompt, str.lower)
    if how == "spacing":
        parts = _QUOTED.split(prompt)
        first = next((i for i in range(0, len(parts), 2) if " " in parts[i]), None)
        if first is not None:
            parts[first] = parts[first].replace(" ", "  ", 1)
        return " " + "".join(parts) + " "
    if how == "punctuation":
        stripped = prompt.rstrip()
        return stripped[:-1] if stripped[-1:] in "?.!" else stripped + "?"
    return prompt


def build_trace(
    items: Sequence[EvalItem], seed: int = 0, repeat_share: float = 1 / 3
) -> list[TraceRequest]:
    """Every item once, plus repeats making ``repeat_share`` of the trace; half streamed.

    A repeat's position and its item are seeded: the item is drawn among those already
    asked with weight 1 / rank (Zipf) in a seeded popularity order; its text is one of
    ``VARIANTS`` (a variant that would not change the text falls to the next).
    """
    if not items:
        return []
    rng = random.Random(seed)
    repeats = round(len(items) * repeat_share / (1 - repeat_share))
    total = len(items) + repeats
    popularity = list(range(len(items)))
    rng.shuffle(popularity)
    rank = {index: r + 1 for r, index in enumerate(popularity)}
    repeat_at = set(rng.sample(range(1, total), repeats)) if repeats else set()
    streamed = set(rng.sample(range(total), total // 2))
    trace: list[TraceRequest] = []
    asked: list[int] = []
    for n in range(total):
        if n in repeat_at:
            index = rng.choices(asked, weights=[1 / rank[i] ** ZIPF_S for i in asked])[0]
            item = items[index]
            start = rng.randrange(len(VARIANTS))
            for how in VARIANTS[start:] + VARIANTS[:start]:
                prompt = vary(item.prompt, how)
                if how == "exact" or prompt != item.prompt:
                    break
            trace.append(TraceRequest(n, item, prompt, n in streamed, True, how))
        else:
            index = len(asked)
            asked.append(index)
            item = items[index]
            trace.append(TraceRequest(n, item, item.prompt, n in streamed, False, "first"))
    return trace


# ------------------------------------------------------------------------------ the cloud


@dataclass
class Bill:
    """What the cloud stand-in sent one API key: calls, prompt and completion tokens."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def usd(self, input_per_mtok: float, output_per_mtok: float) -> float:
        """The bill at these prices (USD per million tokens)."""
        return (
            self.prompt_tokens * input_per_mtok + self.completion_tokens * output_per_mtok
        ) / 1e6

    def minus(self, other: Bill) -> Bill:
        """What was billed since ``other`` (a copy taken earlier)."""
        return Bill(
            self.calls - other.calls,
            self.prompt_tokens - other.prompt_tokens,
            self.completion_tokens - other.completion_tokens,
        )


class BillingCloud(FakeCerebras):
    """The Cerebras stand-in: answers each prompt with its reference at Cerebras' pace and
    bills, per API key, the prompt of every call and the completion tokens it sent."""

    def __init__(self, references: dict[str, str], keys: Sequence[str]) -> None:
        super().__init__(api_key=None, models=[CLOUD_MODEL])
        self.references = references
        self.bills = {key: Bill() for key in keys}
        self.unknown_prompts = 0  # calls whose prompt is no item's: the bench is broken
        self._billing = threading.Lock()

    def bill(self, key: str) -> Bill:
        """A copy of one key's bill so far."""
        with self._billing:
            return copy.copy(self.bills[key])

    def refuse(self, request: Request) -> Response | None:
        """401 unless the bearer key is one of the arms'."""
        header = request.headers.get("authorization", "")
        if header.removeprefix("Bearer ") not in self.bills:
            return self.error(401)
        return None

    def _charge(self, key: str, prompt: int = 0, completion: int = 0, call: int = 0) -> None:
        with self._billing:
            bill = self.bills[key]
            bill.calls += call
            bill.prompt_tokens += prompt
            bill.completion_tokens += completion

    async def play(self, request: Request, body: JSON, limit: int | None) -> Response:
        key = request.headers["authorization"].removeprefix("Bearer ")
        text = self.references.get(last_message(body))
        if text is None:
            self.unknown_prompts += 1
            text = UNKNOWN_PROMPT
        generation = Generation.of(Reply(text=text), limit, prompt_tokens(body))
        self._charge(key, prompt=generation.prompt_tokens, call=1)
        headers = self.response_headers(None)
        if body.get("stream"):
            if not await _pause(request, FIRST_TOKEN_S):
                return Response(status_code=499)
            events = self._paced(self.stream(generation, body), key)
            return StreamingResponse(events, headers=headers, media_type="text/event-stream")
        if not await _pause(request, FIRST_TOKEN_S + len(generation.tokens) / TOKENS_PER_S):
            return Response(status_code=499)
        self._charge(key, completion=len(generation.tokens))
        return JSONResponse(self.completion(generation, body), headers=headers)

    async def _paced(self, stream: Stream, key: str) -> AsyncIterator[bytes]:
        """The stream's events, a content chunk every 1/TOKENS_PER_S s, each billed as it
        goes out (a stream the caller stops is billed up to there)."""
        for chunk in stream.head:
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
        for chunk in stream.content:
            await asyncio.sleep(1 / TOKENS_PER_S)
            self._charge(key, completion=1)
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
        for chunk in stream.tail:
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
        yield b"data: [DONE]\n\n"


# ----------------------------------------------------------------------------- the proxies


def deep_merge(base: JSON, changes: JSON) -> JSON:
    """``base`` with ``changes`` written over it, nested mappings merged key by key."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def arm_tree(arm: str, shipped: JSON, local_url: str, cloud_url: str, state_dir: Path) -> JSON:
    """One arm's whole config: the shipped tree (or the fixed ``before``/``seed`` sections
    over the shipped models), its upstreams pointed at the bench's servers, its cloud key
    its own, its learning state in ``state_dir``, in-memory state, quiet logs."""
    spec = shipped.get("speculative_decoding", {})
    draft = spec.get("draft_model", "local")
    verifiers = spec.get("verify_model", ["cerebras"])
    verifiers = [verifiers] if isinstance(verifiers, str) else list(verifiers)
    models = copy.deepcopy(shipped["models"])
    local = {k: v for k, v in models[draft].items() if k != "launch"}
    models[draft] = local | {"base_url": local_url}
    for name in verifiers:
        models[name] = models[name] | {
            "base_url": f"{cloud_url}/v1",
            "model": CLOUD_MODEL,
            "api_key": "${BENCH_CLOUD_KEY}",
        }
    if arm in ("before", "seed"):
        # the seed's keys over the defaults (which are the seed's); before's as they were
        tree = copy.deepcopy(BEFORE_ISSUE_31 if arm == "before" else SEED)
        tree["speculative_decoding"] |= {"draft_model": draft, "verify_model": verifiers}
        tree["models"] = models
    else:
        tree = copy.deepcopy(shipped) | {"models": models}
        if arm in ("cloud_only", "local_only"):
            strategy = "cerebras_only" if arm == "cloud_only" else "local_only"
            tree = deep_merge(tree, {"routing": {"strategy": strategy}})
    bench: JSON = {
        "logging": {"level": "WARNING", "spec_log_file": None, "spec_adjust_log_file": None},
        "learning": {"state_dir": str(state_dir)},
        "state": {"backend": "memory"},
    }
    if arm != "shipped":  # the cache of verified answers is issue 31's: the config's own
        bench["cache"] = {"enabled": False}
    return deep_merge(tree, _known(bench, Settings))


def _known(changes: JSON, model: type[BaseModel]) -> JSON:
    """The part of ``changes`` the settings' schema still has (the bench sets a learning
    directory and quiet logs; a section renamed later must not make every arm refuse to
    start)."""
    out: JSON = {}
    for key, value in changes.items():
        if key not in model.model_fields:
            continue
        inner = model.model_fields[key].annotation
        if isinstance(value, dict) and isinstance(inner, type) and issubclass(inner, BaseModel):
            out[key] = _known(value, inner)
        else:
            out[key] = value
    return out


def arm_key(arm: str) -> str:
    """The cloud API key an arm's proxy sends: the stand-in bills by it."""
    return f"csk-bench-{arm}"


# ------------------------------------------------------------------------------- asking


def ask(client: openai.OpenAI, request: TraceRequest, max_tokens: int) -> JSON:
    """Send one request through the official SDK; the served text, who served it, TTFT."""
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
    parts: list[str] = []
    error = None
    try:
        if request.stream:
            for chunk in client.chat.completions.create(**params, stream=True):
                model_used = (chunk.model_extra or {}).get("model_used", model_used)
                for choice in chunk.choices:
                    if choice.delta.content:
                        first = first if first is not None else time.perf_counter() - started
                        parts.append(choice.delta.content)
        else:
            completion = client.chat.completions.create(**params)
            model_used = (completion.model_extra or {}).get("model_used")
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
    }


def settle(cloud: BillingCloud, quiet_s: float = 0.5, limit_s: float = 30.0) -> None:
    """Wait until the stand-in has had no call in flight for ``quiet_s`` (a proxy's audits
    and hedges run on after its answer)."""
    deadline = time.monotonic() + limit_s
    calm_since = time.monotonic()
    while time.monotonic() < deadline:
        if cloud.in_flight:
            calm_since = time.monotonic()
        elif time.monotonic() - calm_since >= quiet_s:
            return
        time.sleep(0.05)


def run(
    trace: Sequence[TraceRequest],
    shipped: JSON,
    local_url: str,
    max_tokens: int,
    arms: Sequence[str] = PROXY_ARMS,
) -> JSON:
    """The trace through every proxy arm, request by request, the arms' order rotated; each
    request's row per arm, each arm's bill and its ``/stats`` cost."""
    references = {r.prompt: r.item.reference for r in trace}
    cloud = BillingCloud(references, [arm_key(arm) for arm in arms])
    rows: dict[str, list[JSON]] = {arm: [] for arm in arms}
    stats: dict[str, Any] = {}
    timing: dict[str, float] = dict.fromkeys(arms, 0.0)
    with contextlib.ExitStack() as stack:
        cloud_url = stack.enter_context(serve(cloud.app))
        urls = {}
        for arm in arms:
            state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"value-{arm}-")))
            tree = arm_tree(arm, shipped, local_url, cloud_url, state)
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
                stats[arm] = http.get(f"{url}/stats").json().get("cost")
    bills = {arm: asdict(cloud.bill(arm_key(arm))) for arm in arms}
    return {
        "rows": rows,
        "bills": bills,
        "stats_cost": stats,
        "answer_s": timing,
        "unknown_prompts": cloud.unknown_prompts,
    }


def _draft_name(shipped: JSON) -> str:
    return str(shipped.get("speculative_decoding", {}).get("draft_model", "local"))


# --------------------------------------------------------------------------- offline arms


def random_rows(
    local: Sequence[JSON], cloud: Sequence[JSON], share: float, seed: int = 0
) -> list[JSON]:
    """Each request served by the cloud at random, ``round(share * n)`` of them (seeded)."""
    n = len(local)
    chosen = set(random.Random(seed).sample(range(n), round(share * n)))
    return [
        {**(cloud[i] if i in chosen else local[i]), "cloud_served": i in chosen} for i in range(n)
    ]


def oracle_rows(local: Sequence[JSON], cloud: Sequence[JSON]) -> list[JSON]:
    """The local answer where the judge calls it right, else the cloud's: called once per
    item, and a hit of the cache after (no bill, no time)."""
    cached: set[str] = set()
    rows = []
    for here, there in zip(local, cloud, strict=True):
        if here["correct"]:
            rows.append({**here, "cloud_served": False})
        elif there["id"] in cached:
            hit = {**there, "cloud_served": True, "bill": asdict(Bill()), "total_s": 0.0}
            rows.append(hit | {"ttft_s": 0.0 if there["stream"] else None, "cache_hit": True})
        else:
            cached.add(there["id"])
            rows.append({**there, "cloud_served": True})
    return rows


# ------------------------------------------------------------------------------- summary


def summarise(
    rows: Sequence[JSON],
    prices: tuple[float, float],
    proxy_savings_pct: float | None = None,
    bill: Bill | None = None,
) -> JSON:
    """One arm's figures from its rows; spend and calls from ``bill`` (a proxy arm's whole
    bill, its audits' included) or else the sum of the rows' bills."""
    streamed = [r["ttft_s"] for r in rows if r["stream"]]
    whole = [r["total_s"] for r in rows if not r["stream"]]
    if bill is None:
        bill = Bill()
        for r in rows:
            bill = Bill(
                bill.calls + r["bill"]["calls"],
                bill.prompt_tokens + r["bill"]["prompt_tokens"],
                bill.completion_tokens + r["bill"]["completion_tokens"],
            )
    return {
        "n": len(rows),
        "quality": statistics.fmean(r["correct"] for r in rows) if rows else 0.0,
        "spend_usd": bill.usd(*prices),
        "cloud_calls": bill.calls,
        "calls_per_request": bill.calls / len(rows) if rows else 0.0,
        "cloud_served": statistics.fmean(r["cloud_served"] for r in rows) if rows else 0.0,
        "ttft_p50_s": percentile(streamed, 0.5) if streamed else None,
        "ttft_p90_s": percentile(streamed, 0.9) if streamed else None,
        "whole_mean_s": statistics.fmean(whole) if whole else None,
        "proxy_savings_pct": proxy_savings_pct,
        "errors": sum(r.get("error") is not None for r in rows),
    }


def with_ratios(summary: dict[str, JSON]) -> dict[str, JSON]:
    """Each arm's quality and spend against cloud-only, its bill's savings, and the share of
    the oracle's saving it recovers."""
    cloud = summary.get("cloud_only")
    base_spend = cloud["spend_usd"] if cloud else 0.0
    base_quality = cloud["quality"] if cloud else 0.0
    oracle_saving = None
    out: dict[str, JSON] = {}
    for arm, s in summary.items():
        ratio = s["spend_usd"] / base_spend if base_spend else None
        out[arm] = s | {
            "quality_vs_cloud": s["quality"] / base_quality if base_quality else None,
            "spend_vs_cloud": ratio,
            "bill_savings_pct": 100 * (1 - ratio) if ratio is not None else None,
        }
    if "oracle" in out and out["oracle"]["spend_vs_cloud"] is not None:
        oracle_saving = 1 - out["oracle"]["spend_vs_cloud"]
    for s in out.values():
        ratio = s["spend_vs_cloud"]
        s["oracle_saving_share"] = (
            (1 - ratio) / oracle_saving if ratio is not None and oracle_saving else None
        )
    return out


def evaluate(measured: JSON, prices: tuple[float, float], seed: int = 0) -> dict[str, JSON]:
    """Every arm's figures: the proxies' from their rows, bills and ``/stats``; ``random``
    and ``oracle`` from ``local_only`` and ``cloud_only`` (``random`` also needs
    ``shipped``)."""
    rows: dict[str, list[JSON]] = dict(measured["rows"])
    if "local_only" in rows and "cloud_only" in rows:
        if "shipped" in rows:
            share = statistics.fmean(r["cloud_served"] for r in rows["shipped"])
            rows["random"] = random_rows(rows["local_only"], rows["cloud_only"], share, seed)
        rows["oracle"] = oracle_rows(rows["local_only"], rows["cloud_only"])
    summary = {}
    for arm, arm_rows in rows.items():
        cost = measured["stats_cost"].get(arm) or {}
        bill = Bill(**measured["bills"][arm]) if arm in measured["bills"] else None
        summary[arm] = summarise(arm_rows, prices, cost.get("savings_pct"), bill)
    return with_ratios(summary)


def _pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def markdown(summary: dict[str, JSON]) -> str:
    """The table: one row per arm."""
    lines = [
        "| arm | quality | vs cloud-only | cloud spend vs cloud-only | of the oracle's saving "
        "| cloud calls / request | cloud-served | TTFT p50 | TTFT p90 | whole answer mean "
        "| savings: /stats | savings: bill |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, s in summary.items():
        spend = "-" if s["spend_vs_cloud"] is None else f"{s['spend_vs_cloud']:.3f}"
        lines.append(
            f"| {arm} | {_pct(s['quality'])} | {_pct(s['quality_vs_cloud'])} | {spend} "
            f"| {_pct(s['oracle_saving_share'], 0)} | {s['calls_per_request']:.2f} "
            f"| {_pct(s['cloud_served'])} | {_s(s['ttft_p50_s'])} | {_s(s['ttft_p90_s'])} "
            f"| {_s(s['whole_mean_s'])} | {_points(s['proxy_savings_pct'])} "
            f"| {_points(s['bill_savings_pct'])} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--set", choices=sorted(SETS), default="eval", help="the item set")
    which.add_argument("--data", type=Path, help="another items file (the sets' format)")
    parser.add_argument("--limit", type=int, help="the first N items, one kind at a time")
    parser.add_argument("--seed", type=int, default=0, help="of the trace and the random arm")
    parser.add_argument("--max-tokens", type=int, default=128, help="each request's max_tokens")
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--arms", default=",".join(PROXY_ARMS), help="proxy arms, comma-separated")
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/value.json")
    args = parser.parse_args(argv)
    if (args.limit is not None and args.limit < 1) or args.max_tokens < 1:
        parser.error("--limit and --max-tokens must be at least 1")
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := set(args.arms) - set(PROXY_ARMS):
        parser.error(f"unknown arms {sorted(unknown)}; choose from {', '.join(PROXY_ARMS)}")
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
    done = timed_on_local_model(
        launch, lambda url: run(trace, shipped, url, args.max_tokens, args.arms)
    )
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
        },
        "summary": summary,
        "bills": measured["bills"],
        "stats_cost": measured["stats_cost"],
        "trace": [r.describe() for r in trace],
        "rows": measured["rows"],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
