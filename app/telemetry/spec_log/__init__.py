"""The speculation log's one home: ``writer`` appends its lines, ``reader`` reads them back.

Seed 000 fixes the line format (``writer``'s docstring shows it); the proxy writes it and
the tools (``specproxy analyze``, ``specproxy calibrate``) read it, so the writer and the
reader's validation live side by side and change together.
"""

from __future__ import annotations

from app.telemetry.spec_log.reader import BadLine, entry_problem, iter_entries, stop_of
from app.telemetry.spec_log.writer import SpecLog, spec_log_entry

__all__ = ["BadLine", "SpecLog", "entry_problem", "iter_entries", "spec_log_entry", "stop_of"]
