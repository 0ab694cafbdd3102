"""Analyse a speculation log (``app.telemetry.spec_log``): acceptance, positions, latency, advice.

    specproxy analyze FILE [--json] [--plot out.png]     (also: spec_log_analyze FILE ...)

Pure core, thin edges, one module per step:
``app.telemetry.spec_log.reader`` streams the file and flags bad lines by number,
``analysis`` folds valid entries into counters and a plain-data report, ``advice`` applies
seed 003's tuning rules to it, ``render`` lays it out as seed 000 shows it, ``plot`` draws
it (``--plot``), and ``cli`` is the command line.
"""

from __future__ import annotations

from app.tools.spec_log_analyze.advice import advise
from app.tools.spec_log_analyze.analysis import Analysis, analyze
from app.tools.spec_log_analyze.cli import main
from app.tools.spec_log_analyze.plot import plot
from app.tools.spec_log_analyze.render import POSITION_HEADER, position_row, render_text, stat_line

__all__ = [
    "POSITION_HEADER",
    "Analysis",
    "advise",
    "analyze",
    "main",
    "plot",
    "position_row",
    "render_text",
    "stat_line",
]
