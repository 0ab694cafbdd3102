"""The numbers of a speculation log: acceptance overall, by position, context type and outcome.

``Analysis`` folds the entries ``app.telemetry.spec_log.reader`` yields into counters and
``report()`` turns them into plain data, which ``advice``, ``render`` and ``plot`` present.

Acceptance is counted by ``app.telemetry.stats.Speculation`` itself, so the
figures are the ones ``GET /stats`` serves for the same requests: only lines
whose ``verify`` is not null are rounds (a draft served unverified has no
acceptance); drafted = ``draft.n``, accepted = ``verify.n_accepted``;
mean acceptance length = 1 + accepted / rounds; at position i, Drafted =
rounds with ``n > i``, Accepted = rounds with ``n_accepted > i``, ``rate`` =
Accepted / Drafted and ``rate_per_round`` = Accepted / rounds (seed 003's
per-position rate, the one ``/stats`` reports).

The cost and quality summary (``cost``) is ``cost.Cost``'s: spend and savings as
``/stats`` computes them; verified drafts judged (``agreement`` not null, not an audit)
and how many disagreed, as ``/stats`` counts them; audits (``audit`` true) and how often
the draft agreed, with a 95% Wilson interval as the learner reports it.

Several files (rotated logs: ``spec.log``, ``spec.log.1`` ...) are analysed as
one log: ``analyze`` folds them into one ``Analysis``, and each bad line names
its file.

Memory stays bounded by the longest draft and the distinct context types and
outcomes, plus 8 bytes per timing sample (latency percentiles are exact).
"""

from __future__ import annotations

from array import array
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from app.routing.acceptance import Acceptance
from app.telemetry.spec_log.reader import BadLine, iter_entries, stop_of
from app.telemetry.tallies import Speculation, nearest_rank, ratio
from app.tools.spec_log_analyze.advice import advise
from app.tools.spec_log_analyze.cost import Cost

BAD_LINES_SHOWN = 20
SPILLED_OVER = "spilled_over"
UNSET = "(unset)"  # group of lines without a context_type / outcome (e.g. llama-server's own log)
PERCENTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))

_T = TypeVar("_T")


@dataclass(slots=True)
class _Group:
    """Lines sharing a context type or an outcome."""

    lines: int = 0
    unverified: int = 0
    spilled: int = 0
    speculation: Speculation = field(default_factory=Speculation)

    def summary(self, total_lines: int) -> dict[str, Any]:
        """The group's figures as plain data; ``share`` is of all ``total_lines``."""
        return {
            "lines": self.lines,
            "share": ratio(self.lines, total_lines),
            "unverified_drafts": self.unverified,
            "spilled_over": self.spilled,
            **self.speculation.summary(),
        }


class Analysis:
    """Folds entries and bad lines into counters; ``report()`` gives every figure as plain data."""

    def __init__(self) -> None:
        self.lines = 0
        self.unverified = 0
        self.spilled = 0
        self.lines_with_outcome = 0
        self.longest_draft = 0
        self.token_count_mismatches = 0
        self.speculation = Speculation()
        self.by_context: defaultdict[str, _Group] = defaultdict(_Group)
        self.by_outcome: defaultdict[str, _Group] = defaultdict(_Group)
        self.stop_reasons: Counter[str] = Counter()
        self.bad_count = 0
        self.bad_lines: list[tuple[str | None, BadLine]] = []  # the first BAD_LINES_SHOWN
        self.cost = Cost()
        self.server_spec_lines = 0
        self.server_draft_n = 0
        self.server_draft_n_accepted = 0
        self._entropy_sum: list[float] = []
        self._prob_sum: list[float] = []
        self._tokens_at: list[int] = []  # rounds with a logged token at each position
        self._latency_us = {"draft": array("d"), "verify": array("d")}

    def add(self, entry: dict[str, Any]) -> None:
        """Count one entry for which ``entry_problem`` found nothing wrong."""
        draft, verify = entry["draft"], entry["verify"]
        n, tokens = draft["n"], draft["tokens"]
        outcome = entry.get("outcome")
        spilled = outcome == SPILLED_OVER
        self.lines += 1
        self.lines_with_outcome += outcome is not None
        self.spilled += spilled
        self.longest_draft = max(self.longest_draft, n)
        self.token_count_mismatches += bool(tokens) and len(tokens) != n
        if stop := stop_of(entry):
            self.stop_reasons[stop] += 1
        acceptance = None
        if verify is None:
            self.unverified += 1
        else:
            rej_pos = verify.get("rej_pos")
            acceptance = Acceptance(
                n_drafted=n,
                n_accepted=verify["n_accepted"],
                rej_pos=rej_pos if isinstance(rej_pos, int) else -1,
                target=None,
            )
            self.speculation.add(acceptance)
            self._add_tokens(tokens)
        for group in (
            self.by_context[entry.get("context_type") or UNSET],
            self.by_outcome[outcome or UNSET],
        ):
            group.lines += 1
            group.spilled += spilled
            if acceptance is None:
                group.unverified += 1
            else:
                group.speculation.add(acceptance)
        timing = entry.get("timing") or {}
        for phase in ("draft", "verify"):
            value = timing.get(f"t_{phase}_us")
            if value is not None:
                self._latency_us[phase].append(value)
        spec = entry.get("server_spec")
        if spec is not None:
            self.server_spec_lines += 1
            self.server_draft_n += spec["draft_n"]
            self.server_draft_n_accepted += spec["draft_n_accepted"]
        cost = entry.get("cost")
        if isinstance(cost, dict):
            self.cost.add(cost, entry.get("agreement"), entry.get("audit"))

    def _add_tokens(self, tokens: list[dict[str, Any]]) -> None:
        grow = len(tokens) - len(self._tokens_at)
        if grow > 0:
            self._entropy_sum.extend([0.0] * grow)
            self._prob_sum.extend([0.0] * grow)
            self._tokens_at.extend([0] * grow)
        for i, token in enumerate(tokens):
            self._entropy_sum[i] += token["entropy"]
            self._prob_sum[i] += token["p"]
            self._tokens_at[i] += 1

    def add_bad(self, bad: BadLine, file: str | None = None) -> None:
        """Count a line that could not be analysed (the first few are kept for the report);
        ``file`` names the log it is in."""
        self.bad_count += 1
        if len(self.bad_lines) < BAD_LINES_SHOWN:
            self.bad_lines.append((file, bad))

    def report(self) -> dict[str, Any]:
        """Every figure as plain JSON data (fractions in 0..1, latencies in ms)."""
        spec = self.speculation
        summary = spec.summary()
        out: dict[str, Any] = {
            "overall": {
                "total_lines": self.lines + self.bad_count,
                "valid_lines": self.lines,
                "bad_lines": self.bad_count,
                "rounds": spec.drafts,
                "unverified_drafts": self.unverified,
                "drafted": spec.draft_tokens,
                "accepted": spec.accepted_tokens,
                "acceptance_rate": summary["acceptance_rate"],
                "mean_acceptance_length": summary["mean_acceptance_length"],
                "longest_draft": self.longest_draft,
                "token_count_mismatches": self.token_count_mismatches,
            },
            "speculation": summary,
            "positions": self._positions(),
            "by_context_type": {
                name: group.summary(self.lines) for name, group in sorted(self.by_context.items())
            },
            "by_outcome": {
                name: group.summary(self.lines)
                for name, group in sorted(
                    self.by_outcome.items(), key=lambda kv: (-kv[1].lines, kv[0])
                )
            },
            "stop_reasons": dict(self.stop_reasons.most_common()),
            "spill_over": {
                "lines": self.spilled,
                "share": ratio(self.spilled, self.lines_with_outcome),
            },
            "latency_ms": {
                phase: _percentiles(samples) for phase, samples in self._latency_us.items()
            },
            "server_spec": None
            if not self.server_spec_lines
            else {
                "lines": self.server_spec_lines,
                "draft_n": self.server_draft_n,
                "draft_n_accepted": self.server_draft_n_accepted,
                "acceptance_rate": ratio(self.server_draft_n_accepted, self.server_draft_n),
            },
            "bad_lines": {
                "count": self.bad_count,
                "first": [_bad_line(file, bad) for file, bad in self.bad_lines],
            },
            "cost": self.cost.summary(),
        }
        out["tuning"] = advise(out)
        return out

    def _positions(self) -> list[dict[str, Any]]:
        spec = self.speculation
        width = len(spec.drafted_per_pos)
        accepted_at = _padded(spec.accepted_per_pos, width, 0)
        tokens_at = _padded(self._tokens_at, width, 0)
        entropy_sum = _padded(self._entropy_sum, width, 0.0)
        prob_sum = _padded(self._prob_sum, width, 0.0)
        return [
            {
                "pos": pos,
                "drafted": drafted,
                "accepted": accepted_at[pos],
                "rate": ratio(accepted_at[pos], drafted),
                "rate_per_round": ratio(accepted_at[pos], spec.drafts),
                "avg_entropy": ratio(entropy_sum[pos], tokens_at[pos]),
                "avg_prob": ratio(prob_sum[pos], tokens_at[pos]),
            }
            for pos, drafted in enumerate(spec.drafted_per_pos)
        ]


def _bad_line(file: str | None, bad: BadLine) -> dict[str, Any]:
    shown: dict[str, Any] = {"line": bad.line_no, "reason": bad.reason}
    return shown if file is None else {"file": file, **shown}


def _padded(values: list[_T], width: int, fill: _T) -> list[_T]:
    return values[:width] + [fill] * (width - len(values))


def _percentiles(samples_us: array[float]) -> dict[str, Any]:
    """p50/p95/p99 in ms, by the same nearest-rank method as ``/stats``."""
    out: dict[str, Any] = {"n": len(samples_us)}
    ordered = sorted(samples_us)
    for name, q in PERCENTILES:
        out[name] = round(nearest_rank(ordered, q) / 1000, 3) if ordered else None
    return out


def analyze(paths: str | Path | Sequence[str | Path]) -> dict[str, Any]:
    """The report of the log at ``paths``, one file or several analysed as one log
    (``OSError`` when one cannot be read; its ``filename`` names it).

    ``source`` names the files (comma-separated), ``sources`` gives each file's lines.
    """
    files = [paths] if isinstance(paths, str | Path) else list(paths)
    analysis = Analysis()
    sources: list[dict[str, Any]] = []
    for path in files:
        name, lines = str(path), 0
        for item in iter_entries(path):
            lines += 1
            if isinstance(item, BadLine):
                analysis.add_bad(item, name)
            else:
                analysis.add(item[1])
        sources.append({"file": name, "lines": lines})
    return {
        "source": ", ".join(str(path) for path in files),
        "sources": sources,
        **analysis.report(),
    }
