"""Can a draft model speculate for a target? llama.cpp's pairing rules, read from GGUF files.

llama-server speculates with a draft model only if both share a tokenizer (seed 002, from
``common_speculative_are_compatible``): the same vocabulary type, the same BOS/EOS tokens
and add-BOS/EOS flags, vocabulary sizes within 128 of each other, and identical token texts
from id 5 up to the smaller vocabulary. ``check_pair`` gives the verdict with every reason
(pure); ``read_facts`` is the only part that opens a file. The size ratio is checked against
seed 002's range (2:1 to 10:1, best 3:1 to 5:1) and gives starting ``n_max`` / ``p_min``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VOCAB_MAX_SIZE_DIFFERENCE = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
VOCAB_CHECK_START_TOKEN_ID = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What pairing reads from one GGUF file (None: the key is not in the file)."""

    path: str
    name: str | None
    vocab_type: str | None
    tokens: tuple[str, ...]
    bos: int | None
    eos: int | None
    add_bos: bool | None
    add_eos: bool | None
    n_params: int


@dataclass(frozen=True, slots=True)
class PairVerdict:
    """``compatible`` when no problem was found; notes and suggestions hold either way."""

    compatible: bool
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    size_ratio: float | None
    n_max: int
    p_min: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "compatible": self.compatible,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "size_ratio": self.size_ratio,
            "suggested": {"n_max": self.n_max, "p_min": self.p_min},
        }


def check_pair(target: ModelFacts, draft: ModelFacts) -> PairVerdict:
    """Every reason the pair cannot speculate, plus the size ratio and starting parameters."""
    problems: list[str] = []
    if target.vocab_type != draft.vocab_type:
        problems.append(f"vocabulary type differs: {target.vocab_type!r} vs {draft.vocab_type!r}")
    for label, mine, theirs in (
        ("BOS token id", target.bos, draft.bos),
        ("EOS token id", target.eos, draft.eos),
        ("add-BOS flag", target.add_bos, draft.add_bos),
        ("add-EOS flag", target.add_eos, draft.add_eos),
    ):
        if mine != theirs:
            problems.append(f"{label} differs: {mine} vs {theirs}")
    n_target, n_draft = len(target.tokens), len(draft.tokens)
    if abs(n_target - n_draft) > VOCAB_MAX_SIZE_DIFFERENCE:
        problems.append(
            f"vocabulary sizes differ by {abs(n_target - n_draft)} "
            f"({n_target} vs {n_draft}; at most {VOCAB_MAX_SIZE_DIFFERENCE})"
        )
    for token_id in range(VOCAB_CHECK_START_TOKEN_ID, min(n_target, n_draft)):
        if target.tokens[token_id] != draft.tokens[token_id]:
            problems.append(
                f"token {token_id} differs: {target.tokens[token_id]!r} vs "
                f"{draft.tokens[token_id]!r} (texts must match from id "
                f"{VOCAB_CHECK_START_TOKEN_ID} on)"
            )
            break
    ratio = target.n_params / draft.n_params if target.n_params and draft.n_params else None
    notes, n_max, p_min = _size_advice(ratio)
    return PairVerdict(not problems, tuple(problems), notes, ratio, n_max, p_min)


def _size_advice(ratio: float | None) -> tuple[tuple[str, ...], int, float]:
    """Seed 002: a draft 2-10x smaller than the target pays (best 3-5x); start at n_max 8,
    p_min 0.75, and draft less, more surely, outside that range."""
    if ratio is None:
        return ("parameter counts unknown: no size advice",), 8, 0.75
    if ratio < 2:
        note = (
            f"size ratio {ratio:.1f}:1 is under 2:1: the draft costs nearly as much as the "
            "target, so speculation gains little"
        )
        return (note,), 4, 0.8
    if ratio > 10:
        note = f"size ratio {ratio:.1f}:1 is over 10:1: expect low acceptance"
        return (note,), 4, 0.8
    where = "in the sweet spot (3:1 to 5:1)" if 3 <= ratio <= 5 else "within 2:1 to 10:1"
    return (f"size ratio {ratio:.1f}:1 is {where}",), 8, 0.75


def read_facts(path: str | Path) -> ModelFacts:
    """Read the pairing facts from a GGUF file; ValueError naming the file if it cannot.

    Parsing a vocabulary takes seconds (3 s for SmolLM2's 49k tokens here), so a file
    read before, and unchanged since, is not parsed again (e.g. a model drafting for itself).
    """
    try:
        stat = Path(path).stat()
    except OSError as exc:
        raise ValueError(f"{path}: not a readable GGUF file ({exc})") from exc
    return _read_facts(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _read_facts(path: str, size: int, mtime_ns: int) -> ModelFacts:
    """``read_facts`` of one version of a file (size and mtime are the cache key's)."""
    import gguf  # numpy-backed; imported only when a check runs

    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{path}: not a readable GGUF file ({exc})") from exc

    def value(key: str) -> Any:
        field = reader.fields.get(key)
        return None if field is None else field.contents()

    tokens = value("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        raise ValueError(f"{path}: no tokenizer.ggml.tokens: not a language model?")
    return ModelFacts(
        path=str(path),
        name=value("general.name"),
        vocab_type=value("tokenizer.ggml.model"),
        tokens=tuple(tokens),
        bos=value("tokenizer.ggml.bos_token_id"),
        eos=value("tokenizer.ggml.eos_token_id"),
        add_bos=value("tokenizer.ggml.add_bos_token"),
        add_eos=value("tokenizer.ggml.add_eos_token"),
        n_params=sum(int(t.n_elements) for t in reader.tensors),
    )
