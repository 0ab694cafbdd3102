"""``python -m app.tools.spec_log_analyze FILE``: the analyzer from a checkout (bench scripts)."""

from __future__ import annotations

import sys

from app.tools.spec_log_analyze.cli import main

sys.exit(main())
