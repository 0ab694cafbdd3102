"""bench/overhead.py in its quickest mode, as a subprocess: every arm answers, none errs.

No LiteLLM (it needs its own venv). Half-second cells at c=1 and c=16, 50 open
streams: this checks the bench and the proxy under it work, not their speed. The
upstream answers logprobs only when asked, as llama-server does (its other mode, always,
is the plainer path; both are checked on the upstream alone).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.proxy import free_port, wait_for

pytestmark = pytest.mark.process  # every test here starts a server or a process

ROOT = Path(__file__).resolve().parents[2]
ARMS = ("direct", "forwarder", "stack_floor", "local_only", "speculative")
QUICKEST = [
    "--quick",
    "--arms",
    ",".join(ARMS),
    "--litellm",
    "off",
    "--concurrency",
    "1,16",
    "--sse-concurrency",
    "16",
    "--delay-concurrency",
    "16",
    "--delay-ms",
    "5",
    "--seconds",
    "0.5",
    "--warmup",
    "0.2",
    "--streams",
    "50",
    "--upstream-logprobs",  # as llama-server: the speculative arm's drafts ask for them
    "asked",
]


@pytest.mark.slow
def test_quickest_run_measures_every_arm_without_errors(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    argv = [sys.executable, "-m", "bench.overhead", *QUICKEST, "--json", str(out)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())

    assert set(result["arms"]) == set(ARMS)
    rows = result["results"]
    cells = {(r["arm"], r["variant"], r["c"]) for r in rows}
    plan = [("json", 1), ("json", 16), ("sse", 16), ("delay", 16)]
    assert cells == {(arm, variant, c) for arm in ARMS for variant, c in plan}
    for row in rows:
        where = f"{row['arm']} {row['variant']} c={row['c']}"
        assert row["requests"] > 0, where
        assert row["errors"] == 0, f"{where}: {row['error_kinds']}"
        assert row["cpu_us_per_req"] > 0, where
        if row["arm"] != "direct":
            assert row["added_p50_ms"] is not None, where

    # The speculative arm served the upstream's answer as an accepted draft, every time.
    for row in rows:
        if row["arm"] == "speculative":
            assert row["draft_accepted"] == row["requests"], row
        else:
            assert row["draft_accepted"] == 0, row

    memory = {m["arm"]: m for m in result["memory"]}
    for arm in ("forwarder", "local_only"):
        m = memory[arm]
        assert (m["opened"], m["completed"], m["errors"]) == (50, 50, 0), m
        assert m["rss_open_kb"] > 0

    statuses = {t["status"] for t in result["targets"]}
    assert statuses <= {"PASS", "FAIL", "NOT EVALUATED"}
    assert "### Targets" in done.stdout


@pytest.mark.parametrize("mode", ["always", "asked"])
def test_the_upstream_answers_logprobs_always_or_only_when_asked(mode: str) -> None:
    port = free_port()
    script = ROOT / "bench" / "overhead_parts" / "upstream.py"
    argv = [sys.executable, str(script), "--port", str(port), "--logprobs", mode]
    child = subprocess.Popen(argv)
    try:
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(f"{url}/health").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, timeout=10)
        ask = {"messages": [{"role": "user", "content": "hi"}]}
        plain, asking = (
            httpx.post(f"{url}/v1/chat/completions", json=body).json()["choices"][0]
            for body in (ask, {**ask, "logprobs": True})
        )
    finally:
        child.terminate()
        child.wait(10)
    assert plain["message"] == asking["message"]
    assert len(asking["logprobs"]["content"]) == 12
    assert (plain["logprobs"] is None) is (mode == "asked")
