"""Usage by key and by team: ``/stats`` → ``keys``, and what ``/metrics`` labels by key.

``Stats`` hands every finished request to ``KeyUsage.record`` and every late call (an
audit, an embeddings request) to ``KeyUsage.charge``; a request without a key (no
``server.api_keys`` or ``server.keys``) is counted nowhere here. A key is known by its
name (``RequestRecord.key``: a ``server.keys`` name, ``key-<hash>`` for a plain
``server.api_keys`` key, never the key itself) and carries the team it last came with.

Each key keeps a ``Spend`` (app.spend), so its spend by model and purpose, its cloud
calls and its all-cloud baseline follow the same rules as ``/stats`` → ``cost``; its
savings are calibrated on every pair the proxy has seen (``Stats.spend.calibration``), as
the total's are, so the keys' savings add up to the total's when every request had a key.
Teams are the keys' tallies added up when asked. ``state()`` and ``merge()`` carry it
between workers like the rest of ``Stats``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.baseline import Calibration
from app.keys import caller
from app.pricing import Late, shown_usd
from app.record import RequestRecord
from app.spend import Spend

_PROMPT = {"local": "prompt:local", "cloud": "prompt:cloud"}  # KeyTally.tokens' keys
_COMPLETION = {"local": "completion:local", "cloud": "completion:cloud"}


def token_counts(rec: RequestRecord) -> dict[str, dict[str, int]]:
    """The request's prompt and completion tokens, of the local model (the draft model's
    calls, as ``/stats`` → tokens splits them) and of the cloud: what the spec log's
    ``tokens`` field holds."""
    counts = {kind: {"local": 0, "cloud": 0} for kind in ("prompt", "completion")}
    for usage in rec.usage:
        counts["prompt"][usage.side(rec.draft_model)] += usage.prompt_tokens
        counts["completion"][usage.side(rec.draft_model)] += usage.completion_tokens
    return counts


def cloud_usd(rec: RequestRecord) -> float:
    """What the request paid cloud models (the spec log's ``cloud_usd``)."""
    bill = rec.bill
    return shown_usd(sum(c.usd for c in bill.charges if c.cloud)) if bill else 0.0


@dataclass(slots=True)
class KeyTally:
    """One key's (or one team's) requests, tokens, spend, baseline and cache hits."""

    team: str | None = None
    requests: int = 0
    tokens: Counter[str] = field(default_factory=Counter)  # "prompt:local", "completion:cloud"
    cache: Counter[str] = field(default_factory=Counter)  # hit, miss, bypass
    cache_saved_usd: float = 0.0
    cloud_usd: float = 0.0  # the part of the spend paid to cloud models
    spend: Spend = field(default_factory=Spend)

    def record(self, rec: RequestRecord) -> None:
        """Count one finished request."""
        self.team = rec.team
        self.requests += 1
        tokens = self.tokens
        for usage in rec.usage:
            tokens[_PROMPT[usage.side(rec.draft_model)]] += usage.prompt_tokens
            tokens[_COMPLETION[usage.side(rec.draft_model)]] += usage.completion_tokens
        if rec.cache is not None:
            self.cache[rec.cache] += 1
        if rec.bill is not None:
            self.spend.add(rec.bill)
            self.cloud_usd += sum(c.usd for c in rec.bill.charges if c.cloud)
            if rec.cache == "hit":
                self.cache_saved_usd += rec.bill.baseline_usd - rec.bill.spend_usd

    def charge(self, late: Late) -> None:
        """Count what the request spent after it was counted (its audit, a draft beside
        the cloud's answer)."""
        for charge in late.charges:
            self.spend.add_charge(charge)
            self.cloud_usd += charge.usd if charge.cloud else 0.0
        for usage in late.usages:
            self.tokens[_PROMPT[usage.side(late.draft_model)]] += usage.prompt_tokens
            self.tokens[_COMPLETION[usage.side(late.draft_model)]] += usage.completion_tokens

    def merge(self, other: KeyTally) -> None:
        """Add another tally (a worker's, another key of the team) to this one."""
        self.team = other.team if other.team is not None else self.team
        self.requests += other.requests
        self.tokens.update(other.tokens)
        self.cache.update(other.cache)
        self.cache_saved_usd += other.cache_saved_usd
        self.cloud_usd += other.cloud_usd
        self.spend.merge(other.spend)

    def state(self) -> list[Any]:
        """As JSON data, for ``from_state`` in another process."""
        return [
            self.team,
            self.requests,
            dict(self.tokens),
            dict(self.cache),
            self.cache_saved_usd,
            self.cloud_usd,
            self.spend.state(),
        ]

    @classmethod
    def from_state(cls, state: list[Any]) -> KeyTally:
        team, requests, tokens, cache, saved, cloud, spend = state
        return cls(
            team, requests, Counter(tokens), Counter(cache), saved, cloud, Spend.from_state(spend)
        )

    def summary(self, calibration: Calibration) -> dict[str, Any]:
        """``/stats`` → ``keys.by_key.NAME`` (and ``by_team.NAME``): the cost summary's
        spend, baseline and savings under the proxy's calibration."""
        cost = self.spend.summary(calibration)
        hits = self.cache["hit"]
        return {
            "requests": self.requests,
            "tokens": {
                kind: {where: self.tokens[f"{kind}:{where}"] for where in ("local", "cloud")}
                for kind in ("prompt", "completion")
            },
            "spend_usd": {**cost["spend_usd"], "cloud": shown_usd(self.cloud_usd)},
            "cloud_calls": cost["cloud_calls"],
            "baseline_usd": cost["baseline_usd"],
            "savings_usd": cost["savings_usd"],
            "savings_pct": cost["savings_pct"],
            "cache": {
                "hits": hits,
                "misses": self.cache["miss"],
                "hit_rate": round(hits / n, 4) if (n := hits + self.cache["miss"]) else None,
                "saved_usd": shown_usd(self.cache_saved_usd),
            },
        }


class KeyUsage:
    """Every key's ``KeyTally`` by name."""

    def __init__(self) -> None:
        self.keys: dict[str, KeyTally] = {}

    def record(self, rec: RequestRecord) -> None:
        """Count a finished request under its key (none: not counted here)."""
        if rec.key is not None:
            tally = self.keys.get(rec.key)
            if tally is None:
                tally = self.keys[rec.key] = KeyTally()
            tally.record(rec)

    def charge(self, late: Late) -> None:
        """Count late calls under the key of the request they belong to: the caller in
        force (an audit's task and callbacks run in their request's context)."""
        who = caller.get()
        if who.key_id:
            tally = self.keys.setdefault(who.name, KeyTally(team=who.team))
            tally.charge(late)

    def state(self) -> dict[str, list[Any]]:
        return {name: tally.state() for name, tally in self.keys.items()}

    def merge(self, state: Mapping[str, list[Any]]) -> None:
        """Add another worker's ``state()``."""
        for name, part in state.items():
            self.keys.setdefault(name, KeyTally()).merge(KeyTally.from_state(part))

    def teams(self) -> dict[str, KeyTally]:
        """The keys' tallies added up by team (a key without a team is in none)."""
        teams: dict[str, KeyTally] = {}
        for tally in self.keys.values():
            if tally.team is not None:
                teams.setdefault(tally.team, KeyTally(team=tally.team)).merge(tally)
        return teams

    def summary(self, calibration: Calibration) -> dict[str, Any]:
        """``/stats`` → ``keys``: by key (with its team) and by team (with its keys)."""
        teams = self.teams()
        return {
            "by_key": {
                name: {"team": tally.team, **tally.summary(calibration)}
                for name, tally in sorted(self.keys.items())
            },
            "by_team": {
                team: {
                    "keys": sorted(n for n, t in self.keys.items() if t.team == team),
                    **tally.summary(calibration),
                }
                for team, tally in sorted(teams.items())
            },
        }
