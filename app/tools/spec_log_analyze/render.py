"""The analysis report as text: seed 000's layout, then the proxy's own sections.

Pure: a report (``Analysis.report()``'s plain data) in, a string out; ``cli`` prints it.
The tables and figures are built once here (``Table``, ``Stat``, ``cost_stats`` ...) and
laid out twice: as text by ``render_text`` and as HTML by ``html.render_html``, so both
reports show the same cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from app.tools.spec_log_analyze.cells import (
    POSITION_COLUMNS,
    POSITION_WIDTHS,
    label_line,
    num,
    padded,
    pct,
    position_cells,
    share,
    shown,
    stat_line,
    usd,
)

RULE = 70
NO_COST = "no line carries a cost: the log predates prices"


class Stat(NamedTuple):
    """One ``Label: value`` figure of a statistics block."""

    label: str
    value: float | None
    percent: bool = False

    def shown(self) -> str:
        """The value as the report prints it (``55.56%``, ``2.67``, ``n/a``)."""
        return "".join(shown(self.value, self.percent))


@dataclass(frozen=True, slots=True)
class Table:
    """A table of the report: the text pads each cell to its column's width (the last
    column is not padded); the HTML shows the same cells."""

    title: str
    columns: tuple[str, ...]
    widths: tuple[int, ...]
    rows: list[list[str]]
    empty: str | None = None  # said when there is no row

    def lines(self) -> list[str]:
        """The header, then a line per row (or the ``empty`` note)."""
        out = [padded(self.columns, self.widths)]
        out += [padded(row, self.widths) for row in self.rows]
        if not self.rows and self.empty:
            out.append(f"  ({self.empty})")
        return out


def render_text(report: dict[str, Any]) -> str:
    """The report laid out as seed 000's analysis output, then the proxy's extra sections."""
    out = ["SPECULATIVE DECODING LOG ANALYSIS", "=" * RULE]
    out += _section("OVERALL STATISTICS")
    out += [_stat_line(stat) for stat in overall_stats(report)]
    for table in tables(report):
        out += ["", *_section(table.title), *table.lines()]

    out += ["", *_section("LLAMA-SERVER SPECULATION")]
    server = server_stats(report)
    if server is None:
        out.append("  (no server_spec counters: llama-server drafted without a draft model)")
    else:
        out += [_stat_line(stat) for stat in server]

    out += ["", *_section("TUNING ADVICE")]
    out += [f"  - {item['advice']}" for item in report["tuning"]["advice"]]

    bad = report["bad_lines"]
    out += ["", *_section(f"BAD LINES ({bad['count']})")]
    out += [f"  {text}" for text in bad_line_texts(report)]
    if bad["count"] > len(bad["first"]):
        out.append(f"  ... and {bad['count'] - len(bad['first'])} more")
    if not bad["count"]:
        out.append("  none")

    if "cost" in report:
        out += ["", *_section("COST AND QUALITY")]
        figures = cost_stats(report)
        if figures is None:
            out.append(f"  ({NO_COST})")
        else:
            out += [label_line(label, value) for label, value in figures]
            purposes = purpose_table(report)
            out += ["", *purposes.lines()]
            out += ["", *[label_line(label, value) for label, value in quality_stats(report)]]
    return "\n".join(out) + "\n"


def overall_stats(report: dict[str, Any]) -> list[Stat]:
    """The OVERALL STATISTICS block: seed 000's four figures, then the proxy's."""
    overall = report["overall"]
    return [
        Stat("Total Rounds", overall["rounds"]),
        Stat("Total Drafted", overall["drafted"]),
        Stat("Total Accepted", overall["accepted"]),
        Stat("Acceptance Rate", overall["acceptance_rate"], True),
        Stat("Mean Acceptance Length", overall["mean_acceptance_length"]),
        Stat("Unverified Drafts", overall["unverified_drafts"]),
        Stat("Total Lines", overall["total_lines"]),
        Stat("Bad Lines", overall["bad_lines"]),
        Stat("Spill-over Share", report["spill_over"]["share"], True),
    ]


def tables(report: dict[str, Any]) -> list[Table]:
    """The report's tables in order: by position (seed 000's), context type, outcome, latency."""
    return [
        Table(
            "POSITION-WISE ANALYSIS",
            POSITION_COLUMNS,
            POSITION_WIDTHS,
            [position_cells(row) for row in report["positions"]],
            "no verified rounds",
        ),
        Table(
            "BY CONTEXT TYPE",
            ("Context", "Lines", "Rounds", "Unverified", "Accept %", "Mean Len", "Spilled %"),
            (16, 8, 8, 12, 10, 10),
            [
                [
                    name,
                    str(group["lines"]),
                    str(group["num_drafts"]),
                    str(group["unverified_drafts"]),
                    num(group["acceptance_rate"], 100),
                    num(group["mean_acceptance_length"]),
                    num(share(group["spilled_over"], group["lines"]), 100),
                ]
                for name, group in report["by_context_type"].items()
            ],
        ),
        Table(
            "BY OUTCOME",
            ("Outcome", "Lines", "Share %", "Rounds", "Accept %", "Mean Len"),
            (32, 8, 10, 8, 10),
            [
                [
                    name,
                    str(group["lines"]),
                    num(group["share"], 100),
                    str(group["num_drafts"]),
                    num(group["acceptance_rate"], 100),
                    num(group["mean_acceptance_length"]),
                ]
                for name, group in report["by_outcome"].items()
            ],
        ),
        Table(
            "LATENCY (ms)",
            ("Phase", "Samples", "p50", "p95", "p99"),
            (10, 10, 12, 12),
            [
                [
                    phase,
                    str(p["n"]),
                    num(p["p50"], digits=3),
                    num(p["p95"], digits=3),
                    num(p["p99"], digits=3),
                ]
                for phase, p in report["latency_ms"].items()
            ],
        ),
    ]


def server_stats(report: dict[str, Any]) -> list[Stat] | None:
    """llama-server's own speculation counters, or None when no line carried them."""
    server = report["server_spec"]
    if server is None:
        return None
    return [
        Stat("Lines Reporting", server["lines"]),
        Stat("Server Drafted", server["draft_n"]),
        Stat("Server Accepted", server["draft_n_accepted"]),
        Stat("Acceptance Rate", server["acceptance_rate"], True),
    ]


def bad_line_texts(report: dict[str, Any]) -> list[str]:
    """``line N: reason`` for each bad line shown (the file named when there are several)."""
    several = len(report.get("sources", ())) > 1
    return [
        f"{b['file']} line {b['line']}: {b['reason']}"
        if several and "file" in b
        else f"line {b['line']}: {b['reason']}"
        for b in report["bad_lines"]["first"]
    ]


def cost_stats(report: dict[str, Any]) -> list[tuple[str, str]] | None:
    """The cost summary as (label, value) pairs; None when no line carried a cost."""
    cost = report["cost"]
    if not cost["lines"]:
        return None
    estimated = cost["baseline_estimated_usd"]
    estimated_share = cost["baseline_estimated_share"]
    return [
        ("Lines With Cost", str(cost["lines"])),
        ("Spend", usd(cost["spend_usd"]["total"])),
        ("Baseline (All Cloud)", usd(cost["baseline_usd"])),
        ("Savings", usd(cost["savings_usd"])),
        ("Savings %", pct(cost["savings_pct"], 1)),
        ("Estimated Baseline", f"{usd(estimated)} ({pct(estimated_share, 100)})"),
        ("Estimated Spend Lines", str(cost["spend_estimated_lines"])),
    ]


def purpose_table(report: dict[str, Any]) -> Table:
    """Spend by purpose (the calls a request made: draft, verification, audit ...)."""
    spend = report["cost"]["spend_usd"]
    return Table(
        "SPEND BY PURPOSE",
        ("Purpose", "USD", "Share %"),
        (24, 14),
        [
            [purpose, usd(value), num(share(value, spend["total"]), 100)]
            for purpose, value in spend["by_purpose"].items()
        ],
        "no priced call",
    )


def quality_stats(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Verified drafts judged and how many disagreed; audits and their agreement."""
    quality = report["cost"]["quality"]
    audits = quality["audits"]
    ci = audits["ci95"]
    interval = f" (95% CI {pct(ci[0], 100)}-{pct(ci[1], 100)})" if ci else ""
    return [
        ("Verified Drafts Judged", str(quality["verified_drafts"])),
        (
            "Verified Disagreed",
            f"{quality['verified_disagreed']} ({pct(quality['verified_disagreed_rate'], 100)})",
        ),
        ("Audits", f"{audits['n']} ({audits['judged']} judged)"),
        ("Audit Agreement", f"{pct(audits['agree_rate'], 100)}{interval}"),
    ]


def _section(title: str) -> list[str]:
    return [title, "-" * RULE]


def _stat_line(stat: Stat) -> str:
    return stat_line(stat.label, stat.value, percent=stat.percent)
