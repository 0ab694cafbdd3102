"""``specproxy usage LOG... [--since WHEN] [--key NAME] [--team NAME] [--json]``: usage by
key read from speculation logs.

Each line carries its caller's ``key`` and ``team`` (never the key itself), its ``cost``
(spend and the all-cloud baseline, an audit's spend included), ``cloud_usd`` and
``tokens``. The table adds them up per key: requests, cloud spend, spend, savings and
tokens. The log holds the speculative requests that drafted (docs/teams.md "Usage"):
cache hits, pass-throughs and local-only requests are in ``/stats`` → ``keys`` and
``/metrics`` only, and savings here use each line's own baseline, uncalibrated (as
``specproxy_key_baseline_cost_usd``). Rotated files (``spec.jsonl.1``, ...) are logs too:
pass them all (``logs/spec.jsonl*``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from app.pricing import shown_usd
from app.telemetry.spec_log.reader import BadLine, iter_entries

NO_KEY = "-"  # lines written without a key (no server.api_keys or server.keys)
_AGO = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(slots=True)
class KeyLines:
    """One key's lines added up."""

    team: str | None = None
    requests: int = 0
    cloud_usd: float = 0.0
    spend_usd: float = 0.0
    baseline_usd: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cloud_tokens: int = 0  # prompt and completion tokens of cloud models

    @property
    def savings_usd(self) -> float:
        return self.baseline_usd - self.spend_usd

    def shown(self) -> dict[str, Any]:
        """The key's lines as ``--json`` shows them: USD rounded as the proxy shows it."""
        lines = asdict(self) | {"savings_usd": self.savings_usd}
        return {k: shown_usd(v) if k.endswith("_usd") else v for k, v in lines.items()}

    def add(self, entry: dict[str, Any]) -> None:
        self.team = entry.get("team")
        self.requests += 1
        cost = entry.get("cost") or {}
        self.spend_usd += cost.get("spend_usd", 0.0)
        self.baseline_usd += cost.get("baseline_usd", 0.0)
        self.cloud_usd += entry.get("cloud_usd") or 0.0
        tokens = entry.get("tokens") or {}
        for kind in ("prompt", "completion"):
            counts = tokens.get(kind) or {}
            n = counts.get("local", 0) + counts.get("cloud", 0)
            if kind == "prompt":
                self.prompt_tokens += n
            else:
                self.completion_tokens += n
            self.cloud_tokens += counts.get("cloud", 0)


def since_ms(when: str, now: float | None = None) -> int:
    """``--since`` in ms since the epoch: an age (``30m``, ``24h``, ``7d``) or an ISO date
    or time (``2026-11-26``, ``2026-11-26T09:30``; UTC unless it names its zone)."""
    now = time.time() if now is None else now
    if match := _AGO.fullmatch(when.strip()):
        return int((now - float(match.group(1)) * _UNIT_S[match.group(2)]) * 1000)
    try:
        moment = datetime.fromisoformat(when.strip())
    except ValueError:
        raise ValueError(f"--since {when!r}: give an age (30m, 24h, 7d) or an ISO date") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def usage_by_key(
    entries: Iterable[dict[str, Any]],
    since: int | None = None,
    key: str | None = None,
    team: str | None = None,
) -> dict[str, KeyLines]:
    """The lines at or after ``since`` (ms), of ``key`` and ``team`` when given, by key."""
    found: dict[str, KeyLines] = {}
    for entry in entries:
        if since is not None and entry.get("ts_ms", 0) < since:
            continue
        name = entry.get("key") or NO_KEY
        if (key is not None and name != key) or (team is not None and entry.get("team") != team):
            continue
        found.setdefault(name, KeyLines()).add(entry)
    return dict(sorted(found.items()))


def table(found: dict[str, KeyLines]) -> str:
    """The report: one row per key and a total."""
    head = (
        "key",
        "team",
        "requests",
        "cloud_usd",
        "spend_usd",
        "savings_usd",
        "prompt_tok",
        "completion_tok",
        "cloud_tok",
    )
    rows = [
        (
            name,
            k.team or "-",
            k.requests,
            k.cloud_usd,
            k.spend_usd,
            k.savings_usd,
            k.prompt_tokens,
            k.completion_tokens,
            k.cloud_tokens,
        )
        for name, k in found.items()
    ]
    total = KeyLines()
    for k in found.values():
        for attr in (
            "requests",
            "cloud_usd",
            "spend_usd",
            "baseline_usd",
            "prompt_tokens",
            "completion_tokens",
            "cloud_tokens",
        ):
            setattr(total, attr, getattr(total, attr) + getattr(k, attr))
    rows.append(
        (
            "total",
            "",
            total.requests,
            total.cloud_usd,
            total.spend_usd,
            total.savings_usd,
            total.prompt_tokens,
            total.completion_tokens,
            total.cloud_tokens,
        )
    )
    cells = [
        head,
        *[tuple(f"{v:.6f}" if isinstance(v, float) else str(v) for v in row) for row in rows],
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in cells
    )


def read(paths: Sequence[str]) -> Iterable[dict[str, Any]]:
    """Every good line of the logs (a bad one is an error; a cut-off last line is skipped)."""
    for path in paths:
        for item in iter_entries(path):
            if isinstance(item, BadLine):
                if item.truncated:
                    continue
                raise ValueError(f"{path}:{item.line_no}: {item.reason}")
            yield item[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specproxy usage", description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", help="speculation log files (logging.spec_log_file)")
    parser.add_argument("--since", help="an age (30m, 24h, 7d) or an ISO date/time (UTC)")
    parser.add_argument("--key", help="only this key (its name)")
    parser.add_argument("--team", help="only this team's keys")
    parser.add_argument("--json", action="store_true", help="JSON by key instead of a table")
    args = parser.parse_args(argv)
    try:
        since = since_ms(args.since) if args.since else None
        found = usage_by_key(read(args.logs), since, args.key, args.team)
    except (OSError, ValueError) as exc:
        print(f"specproxy usage: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(
            json.dumps(
                {name: k.shown() for name, k in found.items()},
                indent=2,
            )
        )
    else:
        print(table(found))
    return 0
