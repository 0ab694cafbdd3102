"""The per-request cost benches run end to end (their figures are in docs, not asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process  # every test here starts a server or a process

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_learning_overhead_times_every_part_and_sums_them() -> None:
    out = _run("bench.learning_overhead", "--requests", "300", "--warmup", "100")
    for part in ("request_features(raw)", "Learner.observe(rec)", "Learner.audit_now()"):
        assert re.search(rf"{re.escape(part)}\s+300\s+\d+\.\d+", out), out
    assert re.search(r"learning adds \d+\.\d µs per request", out), out


def test_telemetry_overhead_times_the_sinks_and_the_snapshots() -> None:
    out = _run("bench.telemetry_overhead", "--records", "300", "--warmup", "50")
    for part in ("Telemetry.record (every sink)", "/metrics render()"):
        assert re.search(rf"{re.escape(part)}\s+[\d,]+\s+\d+\.\d+", out), out
