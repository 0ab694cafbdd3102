"""The cache's false hits on near duplicates: ``bench/data/near_duplicates.jsonl``.

    .venv/bin/python -m bench.near_duplicates [--data bench/data/near_duplicates.jsonl]

Each row stores an answer for ``stored`` and asks ``asked`` in the same scope, through the
cache's own keys and look-up (``AnswerCache.find`` over a memory store): rows marked
``hit: false`` differ in one number, negation, name, unit or quoted literal and must never
be served; rows marked ``hit: true`` differ in case, spacing or final punctuation and must
be. Prints the counts per kind and exits non-zero on any false hit or missed variant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from app.cache import AnswerCache
from app.cache.backends import MemoryBackend, keep
from app.cache.entry import Entry, encode
from app.cache.guard import normalize
from app.cache.key import keys_of, scope_of
from app.config import CacheConfig

DATA = Path(__file__).parent / "data" / "near_duplicates.jsonl"


def body(question: str) -> dict[str, Any]:
    return {"model": "speculative", "messages": [{"role": "user", "content": question}]}


async def served(rows: list[dict[str, Any]]) -> list[bool]:
    """Whether each row's ``asked`` is served the answer stored for its ``stored``."""
    out = []
    scope = scope_of("Bearer bench")
    for row in rows:
        config = CacheConfig()
        cache = AnswerCache(config, MemoryBackend(config.max_bytes, config.max_age_s))
        stored = keys_of(body(row["stored"]), scope, near=True)
        asked = keys_of(body(row["asked"]), scope, near=True)
        assert stored is not None and asked is not None and stored.near is not None
        answer = {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}
        value = encode(Entry(answer, "cerebras", stored.question, "cerebras", 1, 1))
        await keep(cache.backend, stored.exact, stored.near, value)
        out.append(await cache.find(asked) is not None)
    return out


def report(rows: list[dict[str, Any]], hits: list[bool]) -> dict[str, Any]:
    """False hits (a ``hit: false`` row served) and missed variants, per kind."""
    false_hits: Counter[str] = Counter()
    missed: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    for row, hit in zip(rows, hits, strict=True):
        totals[row["kind"]] += 1
        if hit and not row["hit"]:
            false_hits[row["kind"]] += 1
        if row["hit"] and not hit:
            missed[row["kind"]] += 1
    alike = sum(not r["hit"] and normalize(r["stored"]) == normalize(r["asked"]) for r in rows)
    return {
        "pairs_that_must_miss": sum(not r["hit"] for r in rows),
        "of_which_alike_once_normalized": alike,  # the fact guard alone stops these
        "false_hits": sum(false_hits.values()),
        "variants_that_must_hit": sum(r["hit"] for r in rows),
        "variants_missed": sum(missed.values()),
        "by_kind": {
            kind: {"pairs": n, "false_hits": false_hits[kind], "missed": missed[kind]}
            for kind, n in sorted(totals.items())
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    result = report(rows, asyncio.run(served(rows)))
    print(json.dumps(result, indent=2))
    return 1 if result["false_hits"] or result["variants_missed"] else 0


if __name__ == "__main__":
    sys.exit(main())
