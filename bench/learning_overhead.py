"""Per-request cost of learning on the request path (issue 15: at most 50 µs).

    cd /work/main && .venv/bin/python -m bench.learning_overhead [--requests N]

With ``learning.enabled``, each speculative request does four things more, all on the
event loop: it reads the request (``request_features``: the shape and the hashed
n-grams), scores the draft with the learned scorer (which adds one weight per n-gram to
the shipped scorer's sum), asks whether to audit an accepted draft (``audit_now``) and
queues its label (``Learner.observe``; a thread writes it). Each is timed alone with
``perf_counter_ns`` after a warm-up, on requests that are all different: the questions
of the project's item sets with a random tail of words, so the per-word cache is partly
cold, as on real traffic. The spec-log line's ``ngrams`` are written by the log's own
thread; their extra cost is shown apart. The refit is not on this path (a thread,
tested in ``tests/learning/test_learner.py``).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from app.config import LearningConfig
from app.evaluation.judges import load_items
from app.learning.fit import fit_scorer
from app.learning.labels import Label
from app.learning.learner import Learner
from app.routing.features import draft_features
from app.routing.policy import Policy
from app.routing.request_features import RequestFeatures, request_features
from app.routing.scorer import load_scorer
from app.telemetry.spec_log import spec_log_entry
from bench.telemetry_overhead import HEADER, record, row, timed

ROOT = Path(__file__).resolve().parent.parent
DATA = ("routing_tune.jsonl", "routing_eval.jsonl", "transfer.jsonl")
BUDGET_US = 50.0
SYSTEM = (
    "You are a careful assistant for an engineering team. Answer briefly, cite the "
    "file you read, and say when you are not sure. Use the tools when a question needs "
    "fresh data; never invent a tool's output."
)


def requests(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """``n`` chat requests, all different: an item's question and a random tail."""
    rng = random.Random(seed)
    prompts = [
        item.prompt
        for name in DATA
        for item in load_items((ROOT / "bench/data" / name).read_text().splitlines())
    ]
    vocabulary = sorted({w for p in prompts for w in p.split()})
    out = []
    for i in range(n):
        tail = " ".join(rng.choices(vocabulary, k=rng.randint(0, 40)))
        messages = [{"role": "user", "content": f"{prompts[i % len(prompts)]} {tail}"}]
        if i % 2:
            messages.insert(0, {"role": "system", "content": SYSTEM})
        out.append({"model": "speculative", "messages": messages, "max_tokens": 256})
    return out


def learned_scorer(reqs: list[dict[str, Any]], features: dict[str, float]) -> Any:
    """A scorer fitted as the learner fits one, with weights on every n-gram bucket seen."""
    rng = random.Random(3)
    labels = [
        Label(
            features=features,
            ngrams=request_features(raw).ngrams,
            context_type="prose",
            agreed=rng.random() < 0.5,
        )
        for raw in reqs[:500]
    ]
    return fit_scorer(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="timed requests per part")
    parser.add_argument("--warmup", type=int, default=2_000)
    args = parser.parse_args()
    reqs = requests(args.requests + args.warmup)
    warm, timed_reqs = reqs[: args.warmup], reqs[args.warmup :]
    recs = [record(i) for i in range(args.requests)]

    print(
        f"$ {' '.join([Path(sys.executable).name, '-m', 'bench.learning_overhead', *sys.argv[1:]])}"
    )
    print(
        f"python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; {args.requests:,} requests after {args.warmup:,} warm-up"
    )
    shipped = load_scorer("combined")
    signals = recs[0].draft
    assert signals is not None
    features = draft_features(signals, markers=Policy().uncertainty_markers, context_type="prose")
    read: list[RequestFeatures] = [request_features(raw) for raw in timed_reqs]
    learned = learned_scorer(warm, {**features, **read[0].shape})
    with_shape = [{**features, **r.shape} for r in read]

    with tempfile.TemporaryDirectory() as state:
        learner = Learner(LearningConfig(enabled=True, state_dir=state), Policy(scorer=shipped))
        labelled = [
            replace(rec, agreement=i % 3 != 0, features=with_shape[i], ngrams=read[i].ngrams)
            for i, rec in enumerate(recs)
        ]
        timed(learner.observe, labelled[: args.warmup])
        learner.outbox.queued.clear()
        timed(request_features, warm)
        parts = {
            "request_features(raw)": timed(request_features, timed_reqs),
            "learned scorer.score(features, ngrams)": timed(
                lambda i: learned.score(with_shape[i], read[i].ngrams), range(len(read))
            ),
            "  against shipped scorer.score(features)": timed(
                lambda i: shipped.score(features), range(len(read))
            ),
            "Learner.audit_now()": timed(lambda _: learner.audit_now(), range(len(read))),
            "Learner.observe(rec)": timed(learner.observe, labelled),
        }
    entries = [spec_log_entry(rec, 1) for rec in labelled]
    bare = [{**entry, "ngrams": None} for entry in entries]
    thread = {
        "orjson.dumps(spec-log entry with ngrams)": timed(orjson.dumps, entries),
        "  against the same entry without": timed(orjson.dumps, bare),
    }

    print("\non the event loop, per request:")
    print(HEADER)
    for name, ns in parts.items():
        print(row(name, ns))
    mean = {name: statistics.fmean(ns) / 1000 for name, ns in parts.items()}
    added = (
        mean["request_features(raw)"]
        + mean["learned scorer.score(features, ngrams)"]
        - mean["  against shipped scorer.score(features)"]
        + mean["Learner.audit_now()"]
        + mean["Learner.observe(rec)"]
    )
    print("\nin the spec log's thread, per line:")
    print(HEADER)
    for name, ns in thread.items():
        print(row(name, ns))
    verdict = "within" if added <= BUDGET_US else "OVER"
    print(
        f"\nlearning adds {added:.1f} µs per request on the event loop",
        f"({verdict} {BUDGET_US:.0f} µs)",
    )


if __name__ == "__main__":
    main()
