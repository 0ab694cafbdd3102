"""The trace: each item of a set once, repeats making a third of it (Zipf-popular, in
other case, spacing or final punctuation, quoted parts never changed), half streamed."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.evaluation.judges import EvalItem
from tests.fakes.script import JSON

ROOT = Path(__file__).resolve().parents[2]
SETS = {
    "eval": ROOT / "bench/data/routing_eval.jsonl",
    "tune": ROOT / "bench/data/routing_tune.jsonl",
    "transfer": ROOT / "bench/data/transfer.jsonl",
}
ZIPF_S = 1.0
VARIANTS = ("exact", "case", "spacing", "punctuation")


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
