"""The analyzer's cost and quality summary, several logs as one, and the ``--html`` report."""

from __future__ import annotations

import base64
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest

from app.evaluation.metrics import wilson
from app.pricing import Bill, Charge
from app.record import RequestRecord
from app.tools.spec_log_analyze import analyze, main, render_text
from app.vocabulary import Outcome
from tests.tools.test_spec_log_analyze import HAND, PNG_MAGIC, entries_of, record, write_log

SCRIPT = "<script>alert(1)</script>"
NO_PLOT = "--plot needs matplotlib: pip install 'specproxy[plot]'"


def priced(
    rec: RequestRecord,
    charges: list[tuple[str, float, bool]],
    baseline: float,
    baseline_from: Literal["verified", "estimated", "none"],
    *,
    agreement: bool | None = None,
    audit: bool = False,
    request_id: str = "-",
) -> RequestRecord:
    """``rec`` with a bill (purpose, USD, estimated per call) and its quality verdict."""
    rec.bill = Bill(
        [Charge("m", purpose, usd, estimated) for purpose, usd, estimated in charges],
        baseline,
        baseline_from,
    )
    rec.agreement, rec.audit, rec.request_id = agreement, audit, request_id
    return rec


TOKENS = [(0.9, 0.1), (0.8, 0.2), (0.6, 0.5)]
# Five priced requests (USD in whole micro-dollars: exact to compare as shown) and one from
# before prices (no cost: left out of the summary, its agreement verdict too).
PRICED = [
    priced(
        record(TOKENS, 3, context="code"),
        [("draft", 0.000010, False), ("verification", 0.000200, False)],
        0.000200,
        "verified",
        agreement=True,
    ),
    priced(
        record(TOKENS, 1, context=SCRIPT, outcome=Outcome.SPILLED_OVER),
        [("draft", 0.000020, False), ("verification", 0.000300, False)],
        0.000300,
        "verified",
        agreement=False,
        request_id=SCRIPT,
    ),
    priced(
        record(TOKENS, None, outcome=Outcome.ACCEPTED),
        [("draft", 0.000010, False), ("audit", 0.000150, False)],
        0.000180,
        "estimated",
        agreement=True,
        audit=True,
    ),
    priced(
        record(TOKENS, None, outcome=Outcome.ACCEPTED),
        [("draft", 0.000030, False), ("audit", 0.000100, False)],
        0.000120,
        "estimated",
        agreement=False,
        audit=True,
    ),
    priced(
        record(TOKENS, None, outcome=Outcome.ACCEPTED),
        [("draft", 0.000020, True)],
        0.000100,
        "estimated",
    ),
]
OLD = record(TOKENS, 2, context="code")
OLD.agreement = True  # judged, but from a log without costs

# The hand computation.
SPEND = {"audit": 0.000250, "draft": 0.000090, "verification": 0.000500}
SPEND_TOTAL = 0.000840
BASELINE = 0.000900
BASELINE_ESTIMATED = 0.000400
SAVINGS = 0.000060


@pytest.fixture
def priced_log(tmp_path: Path) -> Path:
    lines = entries_of([*PRICED, OLD])
    assert lines[0]["cost"]["by_purpose"] == {"draft": 0.00001, "verification": 0.0002}
    assert lines[-1]["cost"] is None
    return write_log(tmp_path / "spec.log", lines)


def test_cost_and_quality_summary(priced_log: Path) -> None:
    cost = analyze(priced_log)["cost"]
    assert cost["lines"] == 5
    assert cost["spend_usd"]["total"] == pytest.approx(SPEND_TOTAL)
    assert cost["spend_usd"]["by_purpose"] == pytest.approx(SPEND)
    assert list(cost["spend_usd"]["by_purpose"]) == ["audit", "draft", "verification"]
    assert cost["baseline_usd"] == pytest.approx(BASELINE)
    assert cost["baseline_estimated_usd"] == pytest.approx(BASELINE_ESTIMATED)
    assert cost["baseline_estimated_share"] == round(BASELINE_ESTIMATED / BASELINE, 4)
    assert cost["baseline_from"] == {"verified": 2, "estimated": 3, "none": 0}
    assert cost["spend_estimated_lines"] == 1
    assert cost["savings_usd"] == pytest.approx(SAVINGS)
    assert cost["savings_pct"] == round(100 * SAVINGS / BASELINE, 2) == 6.67
    assert cost["quality"] == {
        "verified_drafts": 2,  # the line without a cost is not counted
        "verified_disagreed": 1,
        "verified_disagreed_rate": 0.5,
        "audits": {
            "n": 2,
            "judged": 2,
            "agreed": 1,
            "agree_rate": 0.5,
            "ci95": wilson(1, 2),
        },
    }


def test_text_report_appends_the_cost_section(priced_log: Path) -> None:
    lines = render_text(analyze(priced_log)).splitlines()
    at = lines.index("COST AND QUALITY")
    assert at > lines.index("BAD LINES (0)")  # after every existing section
    assert lines[at + 1] == "-" * 70
    section = "\n".join(lines[at:])
    assert "  Spend:" in section
    assert "$0.000840" in section
    assert "$0.000900" in section
    assert "6.67%" in section
    assert "Audit Agreement:" in section
    assert "95% CI" in section


def test_old_log_without_costs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path / "old.log", entries_of(HAND))
    report = analyze(log)
    assert report["cost"]["lines"] == 0
    assert report["cost"]["savings_pct"] is None
    assert report["cost"]["quality"]["audits"]["ci95"] is None
    assert main([str(log)]) == 0
    out = capsys.readouterr().out
    assert out.endswith(
        "COST AND QUALITY\n" + "-" * 70 + "\n  (no line carries a cost: the log predates prices)\n"
    )


# -- several logs ---------------------------------------------------------------


def test_two_logs_are_analysed_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = entries_of([*HAND, *PRICED])
    newer = write_log(tmp_path / "spec.log", lines[:4])
    older = write_log(tmp_path / "spec.log.1", [*lines[4:], "{oops"])
    whole = write_log(tmp_path / "all.log", [*lines, "{oops"])
    assert main([str(newer), str(older), "--json"]) == 0
    both = orjson.loads(capsys.readouterr().out)
    alone = [analyze(newer), analyze(older)]
    one = analyze(whole)
    overall = both["overall"]
    for key in ("total_lines", "valid_lines", "bad_lines", "rounds", "drafted", "accepted"):
        assert overall[key] == alone[0]["overall"][key] + alone[1]["overall"][key], key
        assert overall[key] == one["overall"][key], key
    assert (overall["total_lines"], overall["valid_lines"], overall["bad_lines"]) == (10, 9, 1)
    for key in ("positions", "by_context_type", "by_outcome", "latency_ms", "cost", "tuning"):
        assert both[key] == one[key], key
    assert both["cost"]["lines"] == alone[1]["cost"]["lines"] == 5
    assert both["sources"] == [
        {"file": str(newer), "lines": 4},
        {"file": str(older), "lines": 6},
    ]
    assert both["source"] == f"{newer}, {older}"
    assert both["bad_lines"]["first"][0]["file"] == str(older)
    assert both["bad_lines"]["first"][0]["line"] == 6  # numbered within its own file

    assert main([str(newer), str(older)]) == 0
    assert f"  {older} line 6: invalid JSON" in capsys.readouterr().out


def test_two_logs_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_log(tmp_path / "spec.log", entries_of(HAND))
    missing = tmp_path / "spec.log.1"
    assert main([str(good), str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"spec_log_analyze: cannot read {missing}: ")

    empty = [write_log(tmp_path / f"e{i}.log", []) for i in range(2)]
    assert main([str(p) for p in empty]) == 1
    assert "hold no log line" in capsys.readouterr().err

    junk = [write_log(tmp_path / f"j{i}.log", ["x"]) for i in range(2)]
    assert main([str(p) for p in junk]) == 1
    err = capsys.readouterr().err
    assert f"none of their 2 lines is a valid spec-log entry ({junk[0]} line 1: invalid JSON" in err


# -- the HTML report ------------------------------------------------------------


class Page(HTMLParser):
    """The tables (by id, rows of cell texts), images, links and tags of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.tags: list[str] = []
        self.images: list[str] = []
        self.urls: list[str] = []
        self.text: list[str] = []
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self._title: list[str] | None = None
        self.title = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        attr = dict(attrs)
        for name in ("src", "href", "action", "srcset", "poster", "data"):
            if attr.get(name):
                self.urls.append(attr[name] or "")
        if tag == "img":
            self.images.append(attr.get("src") or "")
        elif tag == "table":
            self._table = self.tables.setdefault(attr.get("id") or f"#{len(self.tables)}", [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "title":
            self._title = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table is not None and self._cell is not None:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "title" and self._title is not None:
            self.title, self._title = "".join(self._title), None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._title is not None:
            self._title.append(data)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def pairs(rows: list[list[str]]) -> dict[str, str]:
    return {label: value for label, value in rows}


@pytest.fixture
def html_log(priced_log: Path) -> Path:
    """The priced log, a line whose bad field carries a script, and HAND's figures."""
    with priced_log.open("a") as out:
        out.write(orjson.dumps({"draft": SCRIPT, "verify": None}).decode() + "\n")
        for line in entries_of(HAND):
            out.write(orjson.dumps(line).decode() + "\n")
    return priced_log


def test_html_report(html_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    assert main([str(html_log), "--json", "--html", str(out)]) == 0
    captured = capsys.readouterr()
    report = orjson.loads(captured.out)
    assert f"HTML report written to {out}" in captured.err
    assert out.exists()
    raw = out.read_text(encoding="utf-8")
    page = parse(out)

    # The title names the file and its lines.
    assert page.title == f"Speculation log analysis: {html_log} (11 lines)"
    assert report["overall"]["total_lines"] == 11

    # Seed 000's tables, the numbers the JSON report has.
    overall = pairs(page.tables["overall-statistics"])
    assert overall["Total Rounds"] == str(report["overall"]["rounds"])
    assert overall["Total Drafted"] == str(report["overall"]["drafted"])
    assert overall["Total Accepted"] == str(report["overall"]["accepted"])
    assert overall["Acceptance Rate"] == f"{100 * report['overall']['acceptance_rate']:.2f}%"
    header, *rows = page.tables["position-wise-analysis"]
    assert header == [
        "Pos",
        "Drafted",
        "Accepted",
        "Rate %",
        "Avg Entropy",
        "Avg Prob",
        "Rate/Round %",
    ]
    assert len(rows) == len(report["positions"]) > 0
    for cells, row in zip(rows, report["positions"], strict=True):
        assert cells == [
            str(row["pos"]),
            str(row["drafted"]),
            str(row["accepted"]),
            f"{100 * row['rate']:.2f}",
            f"{row['avg_entropy']:.4f}",
            f"{row['avg_prob']:.4f}",
            f"{100 * row['rate_per_round']:.2f}",
        ]
    for table in ("by-context-type", "by-outcome", "latency-ms"):
        assert len(page.tables[table]) > 1, table

    # The cost summary, as computed by hand.
    cost = pairs(page.tables["cost"])
    assert cost["Lines With Cost"] == "5"
    assert cost["Spend"] == f"${SPEND_TOTAL:.6f}" == "$0.000840"
    assert cost["Baseline (All Cloud)"] == f"${BASELINE:.6f}"
    assert cost["Savings"] == f"${SAVINGS:.6f}"
    assert cost["Savings %"] == "6.67%"
    assert cost["Estimated Baseline"] == f"${BASELINE_ESTIMATED:.6f} (44.44%)"
    purposes = {row[0]: row[1] for row in page.tables["spend-by-purpose"][1:]}
    assert purposes == {p: f"${usd:.6f}" for p, usd in SPEND.items()}
    quality = pairs(page.tables["quality"])
    low, high = wilson(1, 2) or [0.0, 0.0]
    assert quality["Verified Drafts Judged"] == "2"
    assert quality["Verified Disagreed"] == "1 (50.00%)"
    assert quality["Audits"] == "2 (2 judged)"
    assert quality["Audit Agreement"] == f"50.00% (95% CI {100 * low:.2f}%-{100 * high:.2f}%)"

    # The advice, the plot, nothing fetched.
    text = " ".join(page.text)
    for item in report["tuning"]["advice"]:
        assert item["advice"] in text
    assert any(src.startswith("data:image/png;base64,") for src in page.images)
    png = base64.b64decode(page.images[0].removeprefix("data:image/png;base64,"))
    assert png.startswith(PNG_MAGIC)
    assert all(url.startswith("data:") for url in page.urls)
    assert "http://" not in raw
    assert "https://" not in raw
    assert "url(" not in raw

    # What came from the log is escaped: shown as text, never a tag.
    assert "script" not in page.tags
    assert "<script" not in raw
    assert [row[0] for row in page.tables["by-context-type"]].count(SCRIPT) == 1
    assert any(SCRIPT in t for t in page.text if "draft" in t)  # the bad line's reason


def test_html_two_logs_in_the_title(tmp_path: Path) -> None:
    lines = entries_of(HAND)
    logs = [
        write_log(tmp_path / "spec.log", lines[:1]),
        write_log(tmp_path / "spec.log.1", lines[1:]),
    ]
    out = tmp_path / "r.html"
    assert main([*map(str, logs), "--html", str(out)]) == 0
    page = parse(out)
    assert page.title == f"Speculation log analysis: {logs[0]} (1 line), {logs[1]} (3 lines)"
    assert pairs(page.tables["overall-statistics"])["Total Lines"] == "4"
    assert "no line carries a cost" in " ".join(page.text)


def without_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "matplotlib",
        "matplotlib.backends.backend_agg",
        "matplotlib.figure",
        "matplotlib.ticker",
    ):
        monkeypatch.setitem(sys.modules, name, None)


def test_html_without_matplotlib_says_which_extra(
    priced_log: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    without_matplotlib(monkeypatch)
    out = tmp_path / "report.html"
    assert main([str(priced_log), "--html", str(out)]) == 0
    assert "(no plots: pip install 'specproxy[plot]')" in capsys.readouterr().err
    page = parse(out)
    assert page.images == []
    assert "pip install 'specproxy[plot]'" in "".join(page.text)
    assert pairs(page.tables["cost"])["Spend"] == "$0.000840"


def test_plot_without_matplotlib(
    priced_log: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    without_matplotlib(monkeypatch)
    assert main([str(priced_log), "--plot", str(tmp_path / "p.png")]) == 1
    assert capsys.readouterr().err == f"spec_log_analyze: {NO_PLOT}\n"


def test_unwritable_html_exits_1(priced_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = priced_log.parent / "no" / "such" / "dir" / "r.html"
    assert main([str(priced_log), "--html", str(out)]) == 1
    assert "cannot write the HTML report" in capsys.readouterr().err


def test_html_is_pure(priced_log: Path) -> None:
    """``render_html`` is a function of the report: same report, same page."""
    from app.tools.spec_log_analyze.html import render_html

    report: dict[str, Any] = analyze(priced_log)
    assert render_html(report, None) == render_html(report, None)
    assert render_html(report, b"png").count('src="data:image/png;base64,cG5n"') == 1
