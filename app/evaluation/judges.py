"""Judges: decide whether a drafted answer is correct for one evaluation item. Pure.

The evaluation harness drafts every prompt on the local model and asks a judge whether the
draft is right. Judges are deliberately simple, deterministic string/number checks (no model
in the loop), so a quality-vs-cloud-share curve is reproducible and cheap to recompute.

This module is the entry point: ``judge`` one answer, or build items (``EvalItem``,
``load_items``) that carry their judge. The spec shapes are in ``app.evaluation.specs``;
normalisation and number reading, re-exported here, in ``normalise`` and ``answer_numbers``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.evaluation.answer_numbers import first_number, last_number, numbers
from app.evaluation.checks import check
from app.evaluation.normalise import normalise
from app.evaluation.specs import JUDGE_TYPES, require, validate_spec

__all__ = [
    "JUDGE_TYPES",
    "KINDS",
    "SPLITS",
    "EvalItem",
    "first_number",
    "judge",
    "last_number",
    "load_items",
    "normalise",
    "numbers",
    "validate_spec",
]

# The routing files' kinds, then transfer.jsonl's (traffic of other kinds, for transfer checks).
KINDS: frozenset[str] = frozenset(
    {"fact", "arithmetic", "code", "reasoning", "open"}
    | {"letters", "yesno", "convert", "calendar", "words", "translate", "compare", "classify"}
)
# Optional per-item split: "warm" items may teach an online learner, "eval" items score it.
SPLITS: frozenset[str] = frozenset({"warm", "eval"})


def judge(answer: str, spec: Mapping[str, Any]) -> bool:
    """True when ``answer`` is correct under ``spec``; ValueError when the spec is malformed.

    Checks ``spec`` on every call; ``EvalItem.passes`` judges with a spec checked once.
    """
    validate_spec(spec)
    return check(answer, spec)


# ---------------------------------------------------------------------------------- items


@dataclass(frozen=True, slots=True)
class EvalItem:
    """One evaluation prompt with its judge and a reference answer that passes the judge.

    The judge spec is validated when the item is built (ValueError when it is malformed),
    not again for each answer judged; it must not be changed afterwards. ``split`` is
    optional (one of ``SPLITS``), None for items whose file does not split them.
    """

    id: str
    kind: str
    prompt: str
    judge: Mapping[str, Any] = field(hash=False)
    reference: str
    split: str | None = None

    def __post_init__(self) -> None:
        validate_spec(self.judge)

    def passes(self, answer: str) -> bool:
        """Judge ``answer`` against this item's spec."""
        return check(answer, self.judge)


_ITEM_KEYS = frozenset({"id", "kind", "prompt", "judge", "reference"})
_OPTIONAL_KEYS = frozenset({"split"})


def _parse_item(raw: object) -> EvalItem:
    """Check one decoded JSON value and build the item; ValueError says what is wrong."""
    require(isinstance(raw, dict), "expected a JSON object")
    assert isinstance(raw, dict)
    missing = sorted(_ITEM_KEYS - set(raw))
    extra = sorted(set(raw) - _ITEM_KEYS - _OPTIONAL_KEYS)
    require(not missing, f"missing key(s) {missing}")
    require(not extra, f"unknown key(s) {extra}")
    for key in ("id", "kind", "prompt", "reference"):
        require(isinstance(raw[key], str) and raw[key].strip() != "", f"{key!r} must be text")
    require(raw["kind"] in KINDS, f"unknown kind {raw['kind']!r} (use {sorted(KINDS)})")
    split = raw.get("split")
    require(split is None or split in SPLITS, f"unknown split {split!r} (use {sorted(SPLITS)})")
    # A copy, so the spec validated when the item is built stays the item's own.
    spec = copy.deepcopy(raw["judge"])
    item = EvalItem(raw["id"], raw["kind"], raw["prompt"], spec, raw["reference"], split)
    require(item.passes(item.reference), f"reference does not pass its own judge: {item.id}")
    return item


def load_items(lines: Iterable[str]) -> list[EvalItem]:
    """Parse and validate JSONL lines (blank lines skipped) into items, ids unique.

    Takes lines rather than a path so callers choose the I/O and tests need no files.
    Raises ``ValueError("line N: ...")`` (1-based) on the first bad line.
    """
    items: list[EvalItem] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = _parse_item(json.loads(line))
            require(item.id not in seen, f"duplicate id {item.id!r}")
        except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
            raise ValueError(f"line {number}: {exc}") from exc
        seen.add(item.id)
        items.append(item)
    return items
