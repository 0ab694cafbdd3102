"""The analysis report as text: seed 000's layout, then the proxy's own sections.

Pure: a report (``Analysis.report()``'s plain data) in, a string out; ``cli`` prints it.
"""

from __future__ import annotations

from typing import Any

RULE = 70


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


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None
