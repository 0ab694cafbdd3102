"""Traffic a learner can learn from: the draft is right about capitals, wrong about letters.

Both kinds of draft read alike to the draft-only scorer (same length, same token
probabilities): only the question tells them apart, so a scorer that separates them has
learned from the request's n-grams.
"""

from __future__ import annotations

from typing import Any

from tests.fakes.script import Reply

WORDS = ["apple", "river", "garden", "window", "pencil", "planet", "yellow", "bridge"]
PLACES = [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Peru", "Lima")]
PLACES += [("Japan", "Tokyo"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Chile", "Santiago")]


def questions(n: int, offset: int = 0) -> list[tuple[str, str, str]]:
    """``n`` (prompt, draft, cloud answer) triples, alternating the two kinds."""
    out = []
    for i in range(offset, offset + n):
        if i % 2:
            word = WORDS[(i // 2) % len(WORDS)] + "s" * (i // 16)
            out.append(
                (
                    f"How many letters are in the word {word}?",
                    f"The word {word} has {len(word) + 3} letters.",
                    f"{len(word)}",
                )
            )
        else:
            country, city = PLACES[(i // 2) % len(PLACES)]
            suffix = " Thanks." * (i // 16)
            out.append(
                (
                    f"What is the capital of {country}?{suffix}",
                    f"The capital of {country} is {city}.",
                    city,
                )
            )
    return out


def script(local: Any, cloud: Any, triples: list[tuple[str, str, str]]) -> None:
    for prompt, draft, answer in triples:
        local.script[prompt] = Reply(draft)
        cloud.script[prompt] = Reply(answer)


def learning_config(state_dir: str, **over: Any) -> dict[str, Any]:
    """Every draft labelled: cold audits at 1.0, refit every 10 labels; the learned scorer
    judges at 0.5, an explicit threshold (the target's is tested in test_target_proxy)."""
    return {
        "speculative_decoding": {
            "max_draft_tokens": 32,
            "policy": "combined",
            "spill_threshold": 0.5,
            "agreement": "facts",
            "early_abort": False,
            "hedge": "off",
            "gate": {"enabled": False},  # every draft judged: the gate's lanes skip some
        },
        "learning": {
            "enabled": True,
            "state_dir": state_dir,
            "audit_rate": 1.0,
            "cold_audit_rate": 1.0,
            "min_labels": 10,
            "refit_every": 10,
            **over,
        },
    }
