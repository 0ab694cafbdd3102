"""The project's near-duplicate set gives no false hit, and its case, spacing and
punctuation variants all hit (``bench/near_duplicates.py``, the cache's own look-up)."""

from __future__ import annotations

import asyncio
import json

from bench.near_duplicates import DATA, report, served


def test_no_false_hit_and_every_variant_hits() -> None:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    result = report(rows, asyncio.run(served(rows)))
    assert result["pairs_that_must_miss"] >= 60 and result["variants_that_must_hit"] >= 30
    assert result["of_which_alike_once_normalized"] >= 7  # the guard is what stops these
    assert (result["false_hits"], result["variants_missed"]) == (0, 0)
    kinds = {"number", "negation", "name", "unit", "quoted", "case", "spacing", "punctuation"}
    assert set(result["by_kind"]) == kinds
