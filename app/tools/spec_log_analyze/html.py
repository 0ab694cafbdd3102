"""The analysis report as one self-contained HTML page (``--html``).

Pure: ``render_html`` takes a report (``analyze``'s plain data) and the plot as PNG bytes
(or None) and gives the page as a string; ``plot_png`` draws the plot into PNG bytes in
memory. The page fetches nothing: its style is inline and the plot a ``data:`` URI, so it
can be mailed or attached as it is. The tables are ``render``'s, the cells the text
report shows; every text that came from the log (file names, context types, outcomes,
reasons) is escaped.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterable
from html import escape
from typing import Any

from app.tools.spec_log_analyze.render import (
    NO_COST,
    Stat,
    Table,
    bad_line_texts,
    cost_stats,
    overall_stats,
    purpose_table,
    quality_stats,
    server_stats,
    tables,
)

PLOT_EXTRA = "specproxy[plot]"

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.1em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { padding: 0.2em 0.8em; border-bottom: 1px solid #eee; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f4f4f4; }
table.stats th { font-weight: normal; }
table.stats td { font-variant-numeric: tabular-nums; font-weight: 600; }
td { font-variant-numeric: tabular-nums; }
.note { color: #666; }
img { max-width: 100%; height: auto; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""


def plot_png(report: dict[str, Any]) -> bytes:
    """The ``--plot`` picture as PNG bytes, drawn in memory (``ImportError`` without
    matplotlib)."""
    from app.tools.spec_log_analyze.plot import DPI, figure

    buffer = io.BytesIO()
    figure(report).savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def render_html(report: dict[str, Any], plot: bytes | None) -> str:
    """The report as one HTML page; ``plot`` is the PNG to embed (None: matplotlib is
    missing, and the page says which extra to install)."""
    title = f"Speculation log analysis: {files_title(report)}"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        "<h1>Speculative decoding log analysis</h1>",
        *_sources(report),
    ]
    out += _stats_section("OVERALL STATISTICS", overall_stats(report))
    for table in tables(report):
        out += [_h2(table.title), *_table(table)]

    server = server_stats(report)
    if server is None:
        out += [
            _h2("LLAMA-SERVER SPECULATION"),
            _note("no server_spec counters: llama-server drafted without a draft model"),
        ]
    else:
        out += _stats_section("LLAMA-SERVER SPECULATION", server)

    if "cost" in report:
        out.append(_h2("COST AND QUALITY"))
        figures = cost_stats(report)
        if figures is None:
            out.append(_note(NO_COST))
        else:
            out += _pairs("cost", figures)
            out += _table(purpose_table(report), heading="h3")
            out += _pairs("quality", quality_stats(report))

    out.append(_h2("TUNING ADVICE"))
    out += _list(item["advice"] for item in report["tuning"]["advice"])

    out.append(_h2("PLOTS"))
    if plot is None:
        out.append(
            _note(
                "The plots need matplotlib, which is not installed: "
                f"<code>pip install '{_e(PLOT_EXTRA)}'</code>",
                escaped=True,
            )
        )
    else:
        data = base64.b64encode(plot).decode("ascii")
        out.append(
            f'<p><img src="data:image/png;base64,{data}" '
            'alt="Acceptance rate and draft confidence by draft position"></p>'
        )

    bad = report["bad_lines"]
    out.append(_h2(f"BAD LINES ({bad['count']})"))
    shown = bad_line_texts(report)
    if bad["count"] > len(shown):
        shown.append(f"... and {bad['count'] - len(shown)} more")
    out += _list(shown) if shown else [_note("none")]
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


def files_title(report: dict[str, Any]) -> str:
    """The logs analysed and their lines: ``spec.log (120 lines), spec.log.1 (80 lines)``."""
    sources = report.get("sources") or [
        {"file": report.get("source", "speculation log"), "lines": report["overall"]["total_lines"]}
    ]
    return ", ".join(f"{s['file']} ({_lines(s['lines'])})" for s in sources)


def _sources(report: dict[str, Any]) -> list[str]:
    overall = report["overall"]
    return [
        f'<p class="sources">{_e(files_title(report))}</p>',
        _note(
            f"{_lines(overall['total_lines'])} in all: {overall['valid_lines']} analysed, "
            f"{overall['bad_lines']} bad"
        ),
    ]


def _stats_section(title: str, stats: list[Stat]) -> list[str]:
    return [_h2(title), *_pairs(_slug(title), [(s.label, s.shown()) for s in stats])]


def _pairs(table_id: str, pairs: list[tuple[str, str]]) -> list[str]:
    """A two-column table of ``label: value`` figures."""
    rows = [
        f'<tr><th scope="row">{_e(label)}</th><td>{_e(value)}</td></tr>' for label, value in pairs
    ]
    return [f'<table class="stats" id="{_slug(table_id)}">', *rows, "</table>"]


def _table(table: Table, heading: str = "") -> list[str]:
    out = [f"<{heading}>{_e(table.title)}</{heading}>"] if heading else []
    head = "".join(f'<th scope="col">{_e(c)}</th>' for c in table.columns)
    out += [f'<table id="{_slug(table.title)}">', f"<thead><tr>{head}</tr></thead>", "<tbody>"]
    out += [
        "<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>" for row in table.rows
    ]
    out += ["</tbody>", "</table>"]
    if not table.rows and table.empty:
        out.append(_note(table.empty))
    return out


def _list(items: Iterable[str]) -> list[str]:
    return ["<ul>", *(f"<li>{_e(item)}</li>" for item in items), "</ul>"]


def _h2(title: str) -> str:
    return f'<h2 id="{_slug(title)}-section">{_e(title)}</h2>'


def _note(text: str, *, escaped: bool = False) -> str:
    return f'<p class="note">{text if escaped else _e(text)}</p>'


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def _slug(title: str) -> str:
    """An id from a (constant) title: ``LATENCY (ms)`` -> ``latency-ms``."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _e(value: object) -> str:
    return escape(str(value), quote=True)
