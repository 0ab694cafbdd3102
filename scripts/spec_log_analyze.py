"""Analyse speculation logs: ``python scripts/spec_log_analyze.py FILE... [--json] [--html OUT]``.

A thin wrapper around ``app.tools.spec_log_analyze`` (also installed as the
``spec_log_analyze`` console script and as ``specproxy analyze``) for running from a checkout.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a plain script, the repository root is not on sys.path; put it there for `app`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.tools.spec_log_analyze import main

if __name__ == "__main__":
    sys.exit(main())
