"""bench.key_usage_overhead runs end to end (its figures are in docs/teams.md, not asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process  # it starts a process

ROOT = Path(__file__).resolve().parents[2]


def test_the_key_usage_bench_times_both_arms() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.key_usage_overhead", "--records", "300", "--rounds", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    for arm in ("without a key", "by key"):
        assert re.search(rf"{arm}\s+\d+\.\d\d\s+\d+\.\d\d$", done.stdout, re.M), done.stdout
