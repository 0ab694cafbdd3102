"""bench/data/speculative_prompts.jsonl: 12 prompts per context type, classified as labelled."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from app.routing.classify import classify
from app.vocabulary import CONTEXT_TYPES

DATA = Path(__file__).resolve().parents[2] / "bench" / "data" / "speculative_prompts.jsonl"
PROMPTS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line]


def test_twelve_prompts_per_context_type_with_unique_ids() -> None:
    assert Counter(p["context_type"] for p in PROMPTS) == dict.fromkeys(CONTEXT_TYPES, 12)
    assert len({p["id"] for p in PROMPTS}) == len(PROMPTS) == 60
    assert all(set(p) == {"id", "context_type", "prompt"} for p in PROMPTS)


@pytest.mark.parametrize("item", PROMPTS, ids=[p["id"] for p in PROMPTS])
def test_the_proxy_classifies_each_prompt_as_labelled(item: dict[str, str]) -> None:
    assert classify(item["prompt"], json_mode=False).value == item["context_type"]
