"""Analyse a speculation log (``app.telemetry.spec_log``): acceptance, positions, latency,
cost and quality, advice.

    specproxy analyze FILE... [--json] [--plot OUT.png] [--html OUT.html]
                                                         (also: spec_log_analyze FILE ...)

Pure core, thin edges, one module per step:
``app.telemetry.spec_log.reader`` streams each file and flags bad lines by number,
``analysis`` folds valid entries (of one log or several, e.g. rotated ones) into counters
and a plain-data report, ``advice`` applies seed 003's tuning rules to it, ``render`` lays
it out as seed 000 shows it, ``html`` as one self-contained page (``--html``), ``plot``
draws it (``--plot``; matplotlib, the ``plot`` extra), and ``cli`` is the command line.
"""

from __future__ import annotations

from app.tools.spec_log_analyze.advice import advise
from app.tools.spec_log_analyze.analysis import Analysis, analyze
from app.tools.spec_log_analyze.cells import POSITION_HEADER, position_row, stat_line
from app.tools.spec_log_analyze.cli import main
from app.tools.spec_log_analyze.html import plot_png, render_html
from app.tools.spec_log_analyze.plot import plot
from app.tools.spec_log_analyze.render import render_text

__all__ = [
    "POSITION_HEADER",
    "Analysis",
    "advise",
    "analyze",
    "main",
    "plot",
    "plot_png",
    "position_row",
    "render_html",
    "render_text",
    "stat_line",
]
