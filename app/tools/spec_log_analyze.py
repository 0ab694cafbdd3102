"""Analyse a speculation log (``app.telemetry.spec_log``): acceptance, positions, latency, advice.

    spec_log_analyze FILE [--json] [--plot out.png]

Pure core, thin edges: ``app.telemetry.spec_log.reader`` streams the file line by
line and flags bad lines by number, ``Analysis`` folds valid entries into counters,
``report()`` turns them into plain data, ``render_text`` and ``plot``
present it, ``main`` is the command line.

Acceptance is counted by ``app.telemetry.stats.Speculation`` itself, so the
figures are the ones ``GET /stats`` serves for the same requests: only lines
whose ``verify`` is not null are rounds (a draft served unverified has no
acceptance); drafted = ``draft.n``, accepted = ``verify.n_accepted``;
mean acceptance length = 1 + accepted / rounds; at position i, Drafted =
rounds with ``n > i``, Accepted = rounds with ``n_accepted > i``, ``rate`` =
Accepted / Drafted and ``rate_per_round`` = Accepted / rounds (seed 003's
per-position rate, the one ``/stats`` reports).

Memory stays bounded by the longest draft and the distinct context types and
outcomes, plus 8 bytes per timing sample (latency percentiles are exact).
"""

from __future__ import annotations

import argparse
import os
import sys
from array import array
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson

from app.routing.acceptance import Acceptance
from app.telemetry.spec_log.reader import BadLine, iter_entries
from app.telemetry.stats import Speculation, nearest_rank
from app.tools import parse_or_exit_code

RULE = 70
BAD_LINES_SHOWN = 20
MIN_ROUNDS_TO_JUDGE = 5  # rounds a context type needs before it gets its own advice
SPILLED_OVER = "spilled_over"
UNSET = "(unset)"  # group of lines without a context_type / outcome (e.g. llama-server's own log)
PERCENTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))

# seed 003's thresholds
RAISE_K_ABOVE = 0.30
LOWER_K_BELOW = 0.10
NOT_PAYING_BELOW = 1.2
POOR_BELOW, GOOD_ABOVE, EXCELLENT_ABOVE = 0.40, 0.60, 0.80
POSITION_0_POOR_BELOW = 0.70

_T = TypeVar("_T")


# -- counting -----------------------------------------------------------------


@dataclass(slots=True)
class _Group:
    """Lines sharing a context type or an outcome."""

    lines: int = 0
    unverified: int = 0
    spilled: int = 0
    speculation: Speculation = field(default_factory=Speculation)

    def summary(self, total_lines: int) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "share": _ratio(self.lines, total_lines),
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
        self.bad_lines: list[BadLine] = []  # the first BAD_LINES_SHOWN only
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
        if draft.get("stop_reason"):
            self.stop_reasons[draft["stop_reason"]] += 1
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

    def add_bad(self, bad: BadLine) -> None:
        """Count a line that could not be analysed (the first few are kept for the report)."""
        self.bad_count += 1
        if len(self.bad_lines) < BAD_LINES_SHOWN:
            self.bad_lines.append(bad)

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
                "share": _ratio(self.spilled, self.lines_with_outcome),
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
                "acceptance_rate": _ratio(self.server_draft_n_accepted, self.server_draft_n),
            },
            "bad_lines": {
                "count": self.bad_count,
                "first": [{"line": b.line_no, "reason": b.reason} for b in self.bad_lines],
            },
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
                "rate": _ratio(accepted_at[pos], drafted),
                "rate_per_round": _ratio(accepted_at[pos], spec.drafts),
                "avg_entropy": _ratio(entropy_sum[pos], tokens_at[pos]),
                "avg_prob": _ratio(prob_sum[pos], tokens_at[pos]),
            }
            for pos, drafted in enumerate(spec.drafted_per_pos)
        ]


def _padded(values: list[_T], width: int, fill: _T) -> list[_T]:
    return values[:width] + [fill] * (width - len(values))


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def _percentiles(samples_us: array[float]) -> dict[str, Any]:
    """p50/p95/p99 in ms, by the same nearest-rank method as ``/stats``."""
    out: dict[str, Any] = {"n": len(samples_us)}
    ordered = sorted(samples_us)
    for name, q in PERCENTILES:
        out[name] = round(nearest_rank(ordered, q) / 1000, 3) if ordered else None
    return out


def analyze(path: str | Path) -> dict[str, Any]:
    """The report of the log at ``path`` (``OSError`` when it cannot be read)."""
    analysis = Analysis()
    for item in iter_entries(path):
        if isinstance(item, BadLine):
            analysis.add_bad(item)
        else:
            analysis.add(item[1])
    return {"source": str(path), **analysis.report()}


# -- advice -------------------------------------------------------------------


def advise(report: dict[str, Any]) -> dict[str, Any]:
    """Seed 003's tuning rules applied to a report; each advice names the number it rests on."""
    overall, positions = report["overall"], report["positions"]
    rounds = overall["rounds"]
    advice: list[dict[str, Any]] = []

    def say(topic: str, value: float | None, text: str) -> None:
        advice.append({"topic": topic, "value": value, "advice": text})

    k = _k(positions, rounds)
    tuning: dict[str, Any] = {"k": k, "longest_draft": overall["longest_draft"], "advice": advice}
    if not rounds:
        say(
            "rounds",
            0,
            f"no verified rounds ({overall['unverified_drafts']} drafts served without "
            "verification): no acceptance to tune on",
        )
        return tuning

    rate = overall["acceptance_rate"]
    if rate is not None:
        band, threshold = _band(rate)
        hint = "; the draft model often disagrees with the verifier" if band == "poor" else ""
        say("acceptance_rate", rate, f"acceptance rate {_pct(rate)} {threshold}: {band}{hint}")
    length = overall["mean_acceptance_length"]
    if length < NOT_PAYING_BELOW:
        say(
            "mean_acceptance_length",
            length,
            f"mean acceptance length {length:.2f} < {NOT_PAYING_BELOW}: speculation is not "
            "paying; use a closer draft model or turn speculative_decoding off",
        )
    else:
        say(
            "mean_acceptance_length",
            length,
            f"mean acceptance length {length:.2f} >= {NOT_PAYING_BELOW}: speculation pays",
        )

    first = positions[0]["rate"] if positions else None
    if first is not None and first < POSITION_0_POOR_BELOW:
        say(
            "position_0",
            first,
            f"position 0 acceptance {_pct(first)} < 70%: drafts already go wrong at the "
            "first token",
        )

    if k is not None:
        at = positions[k - 1]["rate_per_round"]
        basis = (
            f"position {k - 1} acceptance {_pct(at)} of rounds (k = {k}, the longest draft "
            f"at least half the rounds reach; longest seen {overall['longest_draft']})"
        )
        budget = _budget_note(report["stop_reasons"])
        if at > RAISE_K_ABOVE:
            text = f"{basis} > 30%: raise K (speculative_decoding.max_draft_tokens){budget}"
        elif at < LOWER_K_BELOW:
            text = f"{basis} < 10%: lower K (speculative_decoding.max_draft_tokens){budget}"
        else:
            text = f"{basis} is within 10-30%: K looks balanced"
        say("max_draft_tokens", at, text)

    few = []
    for name, group in report["by_context_type"].items():
        n = group["num_drafts"]
        if n >= MIN_ROUNDS_TO_JUDGE:
            group_rate, group_length = group["acceptance_rate"], group["mean_acceptance_length"]
            if group_rate is None:  # rounds of empty drafts only
                continue
            band, threshold = _band(group_rate)
            paying = "" if group_length >= NOT_PAYING_BELOW else " (< 1.2: not paying)"
            say(
                f"context_type:{name}",
                group_rate,
                f"context '{name}': acceptance {_pct(group_rate)} {threshold} over {n} rounds: "
                f"{band}; mean length {group_length:.2f}{paying}",
            )
        elif n:
            few.append(f"{name} ({n})")
    if few:
        say(
            "context_type",
            None,
            f"too few rounds (< {MIN_ROUNDS_TO_JUDGE}) to judge: {', '.join(few)}",
        )
    return tuning


def _k(positions: list[dict[str, Any]], rounds: int) -> int | None:
    """Seed 003's k: one past the last position that at least half the rounds reach."""
    reached = [row["pos"] for row in positions if 2 * row["drafted"] >= rounds > 0]
    return reached[-1] + 1 if reached else None


def _band(rate: float) -> tuple[str, str]:
    """Seed 003's verdict on an acceptance rate, and the threshold it rests on."""
    if rate > EXCELLENT_ABOVE:
        return "excellent", "> 80%"
    if rate > GOOD_ABOVE:
        return "good", "> 60%"
    if rate < POOR_BELOW:
        return "poor", "< 40%"
    return "fair", "within 40-60%"


def _budget_note(stop_reasons: dict[str, int]) -> str:
    """How many drafts the budget cut: K only matters for those."""
    total = sum(stop_reasons.values())
    if not total:
        return ""
    share = stop_reasons.get("n_max", 0) / total
    return f"; {_pct(share)} of drafts stopped at the budget (n_max)"


# -- presenting ---------------------------------------------------------------


def render_text(report: dict[str, Any]) -> str:
    """The report laid out as seed 000's analysis output, then the proxy's extra sections."""
    overall = report["overall"]
    out = ["SPECULATIVE DECODING LOG ANALYSIS", "=" * RULE]
    out += _section("OVERALL STATISTICS")
    out += [
        stat_line("Total Rounds", overall["rounds"]),
        stat_line("Total Drafted", overall["drafted"]),
        stat_line("Total Accepted", overall["accepted"]),
        stat_line("Acceptance Rate", overall["acceptance_rate"], percent=True),
        stat_line("Mean Acceptance Length", overall["mean_acceptance_length"]),
        stat_line("Unverified Drafts", overall["unverified_drafts"]),
        stat_line("Total Lines", overall["total_lines"]),
        stat_line("Bad Lines", overall["bad_lines"]),
        stat_line("Spill-over Share", report["spill_over"]["share"], percent=True),
    ]

    out += ["", *_section("POSITION-WISE ANALYSIS")]
    out.append(POSITION_HEADER)
    out += [position_row(row) for row in report["positions"]]
    if not report["positions"]:
        out.append("  (no verified rounds)")

    out += ["", *_section("BY CONTEXT TYPE")]
    out.append(
        f"{'Context':<16}{'Lines':<8}{'Rounds':<8}{'Unverified':<12}"
        f"{'Accept %':<10}{'Mean Len':<10}Spilled %"
    )
    for name, group in report["by_context_type"].items():
        out.append(
            f"{name:<16}{group['lines']:<8}{group['num_drafts']:<8}"
            f"{group['unverified_drafts']:<12}{_num(group['acceptance_rate'], 100):<10}"
            f"{_num(group['mean_acceptance_length']):<10}"
            f"{_num(_share(group['spilled_over'], group['lines']), 100)}"
        )

    out += ["", *_section("BY OUTCOME")]
    out.append(f"{'Outcome':<32}{'Lines':<8}{'Share %':<10}{'Rounds':<8}{'Accept %':<10}Mean Len")
    for name, group in report["by_outcome"].items():
        out.append(
            f"{name:<32}{group['lines']:<8}{_num(group['share'], 100):<10}"
            f"{group['num_drafts']:<8}{_num(group['acceptance_rate'], 100):<10}"
            f"{_num(group['mean_acceptance_length'])}"
        )

    out += ["", *_section("LATENCY (ms)")]
    out.append(f"{'Phase':<10}{'Samples':<10}{'p50':<12}{'p95':<12}p99")
    for phase, p in report["latency_ms"].items():
        out.append(
            f"{phase:<10}{p['n']:<10}{_num(p['p50'], digits=3):<12}"
            f"{_num(p['p95'], digits=3):<12}{_num(p['p99'], digits=3)}"
        )

    out += ["", *_section("LLAMA-SERVER SPECULATION")]
    server = report["server_spec"]
    if server is None:
        out.append("  (no server_spec counters: llama-server drafted without a draft model)")
    else:
        out += [
            stat_line("Lines Reporting", server["lines"]),
            stat_line("Server Drafted", server["draft_n"]),
            stat_line("Server Accepted", server["draft_n_accepted"]),
            stat_line("Acceptance Rate", server["acceptance_rate"], percent=True),
        ]

    out += ["", *_section("TUNING ADVICE")]
    out += [f"  - {item['advice']}" for item in report["tuning"]["advice"]]

    bad = report["bad_lines"]
    out += ["", *_section(f"BAD LINES ({bad['count']})")]
    out += [f"  line {b['line']}: {b['reason']}" for b in bad["first"]]
    if bad["count"] > len(bad["first"]):
        out.append(f"  ... and {bad['count'] - len(bad['first'])} more")
    if not bad["count"]:
        out.append("  none")
    return "\n".join(out) + "\n"


POSITION_HEADER = (
    f"{'Pos':<6}{'Drafted':<10}{'Accepted':<11}{'Rate %':<11}"
    f"{'Avg Entropy':<13}{'Avg Prob':<10}Rate/Round %"
)


def position_row(row: dict[str, Any]) -> str:
    """One row of the position-wise table, in seed 000's columns plus ``Rate/Round %``."""
    return (
        f"{row['pos']:<6}{row['drafted']:<10}{row['accepted']:<11}"
        f"{_num(row['rate'], 100):<11}{_num(row['avg_entropy'], digits=4):<13}"
        f"{_num(row['avg_prob'], digits=4):<10}{_num(row['rate_per_round'], 100)}"
    )


def _section(title: str) -> list[str]:
    return [title, "-" * RULE]


def stat_line(label: str, value: float | None, *, percent: bool = False) -> str:
    """``  Label:   value``, the number ending at column 30 as in seed 000."""
    if value is None:
        shown, suffix = "n/a", ""
    elif percent:
        shown, suffix = f"{100 * value:.2f}", "%"
    elif isinstance(value, int):
        shown, suffix = str(value), ""
    else:
        shown, suffix = f"{value:.2f}", ""
    width = max(len(shown) + 1, 27 - len(label))
    return f"  {label}:{shown:>{width}}{suffix}"


def _num(value: float | None, scale: float = 1, digits: int = 2) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _pct(value: float) -> str:
    return f"{100 * value:.2f}%"


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def plot(report: dict[str, Any], out: str | Path) -> None:
    """Draw acceptance by position, and mean entropy / probability by position, into a PNG."""
    # Lazy: only --plot pays for matplotlib; Figure + the Agg canvas leave pyplot's state alone.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    rows = report["positions"]
    pos = [r["pos"] for r in rows]
    fig = Figure(figsize=(9, 7), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    fig.suptitle(f"Speculation log: {report['overall']['rounds']} verified rounds")

    top.bar(
        pos,
        [_or_nan(r["rate"], 100) for r in rows],
        color="tab:blue",
        alpha=0.6,
        label="Rate % (accepted / drafted at the position)",
    )
    top.plot(
        pos,
        [_or_nan(r["rate_per_round"], 100) for r in rows],
        color="tab:red",
        marker="o",
        label="Rate/Round % (accepted / rounds)",
    )
    top.set_title("Acceptance rate by draft position")
    top.set_ylabel("acceptance (%)")
    top.set_ylim(0, 105)
    top.legend(loc="upper right", fontsize="small")

    bottom.plot(
        pos,
        [_or_nan(r["avg_entropy"]) for r in rows],
        color="tab:purple",
        marker=".",
        label="avg entropy",
    )
    bottom.set_ylabel("avg top-k entropy (nats)", color="tab:purple")
    bottom.set_ylim(bottom=0)
    prob_axis = bottom.twinx()
    prob_axis.plot(
        pos, [_or_nan(r["avg_prob"]) for r in rows], color="tab:green", marker=".", label="avg p"
    )
    prob_axis.set_ylabel("avg token probability", color="tab:green")
    prob_axis.set_ylim(0, 1.05)
    bottom.set_title("Draft confidence by position")
    bottom.set_xlabel("draft position")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles = bottom.get_legend_handles_labels()[0] + prob_axis.get_legend_handles_labels()[0]
    bottom.legend(handles=handles, loc="lower right", fontsize="small")
    if not rows:
        top.text(0.5, 0.5, "no verified rounds", ha="center", va="center", transform=top.transAxes)
    fig.savefig(out, dpi=100)


def _or_nan(value: float | None, scale: float = 1) -> float:
    return float("nan") if value is None else value * scale


# -- command line -------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spec_log_analyze",
        description="Analyse specproxy's speculation log (JSON lines): acceptance overall, "
        "by draft position, context type and outcome, latency, and tuning advice.",
    )
    parser.add_argument("file", metavar="FILE", help="the log (logging.spec_log_file)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--plot", metavar="OUT.png", help="also draw acceptance and confidence by position"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; 0 on success, 1 for an unreadable or useless log, 2 for usage."""
    args = parse_or_exit_code(_parser(), argv)
    if isinstance(args, int):
        return args
    try:
        report = analyze(args.file)
    except OSError as exc:
        return _fail(f"cannot read {args.file}: {exc.strerror or exc}")
    overall = report["overall"]
    if not overall["valid_lines"]:
        if not overall["bad_lines"]:
            return _fail(f"{args.file} holds no log line (empty file?)")
        first = report["bad_lines"]["first"][0]
        return _fail(
            f"{args.file}: none of its {overall['bad_lines']} lines is a valid spec-log "
            f"entry (line {first['line']}: {first['reason']})"
        )
    if args.json:
        text = orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n"
    else:
        text = render_text(report)
    write_stdout(text)
    if args.plot:
        try:
            plot(report, args.plot)
        except ImportError:
            return _fail("--plot needs matplotlib: pip install 'specproxy[dev]'")
        except OSError as exc:
            return _fail(f"cannot write the plot {args.plot}: {exc.strerror or exc}")
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _fail(message: str) -> int:
    print(f"spec_log_analyze: {message}", file=sys.stderr)
    return 1


def write_stdout(text: str) -> None:
    """Write a report to stdout; a reader that left early (``| head``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader left early (`| head`): not an error; keep Python's exit flush quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
