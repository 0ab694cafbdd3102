"""The arms: each proxy's config (cloud only, local only, the seed's flow, the config
before issue 31, the shipped one, the shipped one at another ``target_agreement``), and
the two computed from the others' answers (random routing, the oracle)."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from pydantic import BaseModel

from app.config import Settings
from bench.value.cloud import CLOUD_MODEL, Bill
from tests.fakes.script import JSON

PROXY_ARMS = ("cloud_only", "local_only", "seed", "before", "shipped")
OFFLINE_ARMS = ("random", "oracle")
TARGET_PREFIX = "target_"  # target_0.95: the shipped arm at that target_agreement
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
# Defaults issue 31 changed that config.yaml at 06ca9f8 did not set: the ``before`` and
# ``seed`` arms keep them as they were then (a key the schema lacks is left out).
DEFAULTS_THEN: JSON = {
    "speculative_decoding": {"agreement": "similarity", "gate": {"enabled": False}},
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


def deep_merge(base: JSON, changes: JSON) -> JSON:
    """``base`` with ``changes`` written over it, nested mappings merged key by key."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def target_arm(target: float) -> str:
    """The name of the shipped arm run at ``target_agreement`` ``target``."""
    return f"{TARGET_PREFIX}{target:g}"


def arm_target(arm: str) -> float | None:
    """The ``target_agreement`` a target arm runs at (None for the others)."""
    return float(arm.removeprefix(TARGET_PREFIX)) if arm.startswith(TARGET_PREFIX) else None


def arm_overrides(arm: str) -> JSON:
    """What an arm sets over the shipped config (a target arm: its ``target_agreement``)."""
    target = arm_target(arm)
    return {} if target is None else {"speculative_decoding": {"target_agreement": target}}


def arm_tree(
    arm: str,
    shipped: JSON,
    local_url: str,
    cloud_url: str,
    state_dir: Path,
    spec_log: Path | None = None,
) -> JSON:
    """One arm's whole config: the shipped tree (or the fixed ``before``/``seed`` sections
    over the shipped models), its upstreams pointed at the bench's servers, its cloud key
    its own, its learning state in ``state_dir``, in-memory state, quiet logs; a target
    arm the shipped tree at its ``target_agreement``; ``spec_log``: its speculation log's
    file (none without)."""
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
        tree = deep_merge(tree, _known(DEFAULTS_THEN, Settings))
    else:
        tree = copy.deepcopy(shipped) | {"models": models}
        if arm in ("cloud_only", "local_only"):
            strategy = "cerebras_only" if arm == "cloud_only" else "local_only"
            tree = deep_merge(tree, {"routing": {"strategy": strategy}})
        tree = deep_merge(tree, _known(arm_overrides(arm), Settings))
    bench: JSON = {
        "logging": {
            "level": "WARNING",
            "spec_log_file": str(spec_log) if spec_log is not None else None,
            "spec_adjust_log_file": None,
        },
        "learning": {"state_dir": str(state_dir)},
        "state": {"backend": "memory"},
    }
    if arm != "shipped" and arm_target(arm) is None:
        bench["cache"] = {"enabled": False}  # the cache of verified answers: the config's own
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


def unknown_overrides(arm: str) -> list[str]:
    """The keys an arm sets that the settings' schema does not have (they would be
    dropped: a target arm before ``target_agreement`` exists is the shipped arm again)."""
    changes = arm_overrides(arm)
    kept = _known(changes, Settings)
    return [
        f"{section}.{key}"
        for section, keys in changes.items()
        for key in keys
        if key not in kept.get(section, {})
    ]


def arm_key(arm: str) -> str:
    """The cloud API key an arm's proxy sends: the stand-in bills by it."""
    return f"csk-bench-{arm}"


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
