"""``test_speculative_decoding.py`` (the README's check after `scripts/run.sh`) on what the run
install has: it runs in a Python where the dev extra (httpx, openai, ...) cannot be imported,
against the real proxy on stand-in upstreams."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT, HEDGED, LONG
from tests.support.processes import ROOT
from tests.support.proxy import MakeProxy, Proxy, chat_bodies, dead_url

pytestmark = pytest.mark.process  # every test here starts a server or a process

SCRIPT = ROOT / "test_speculative_decoding.py"
# Import names of the dev extra's packages (pyproject.toml), none of which `pip install -e .`
# brings: the script must not need any of them.
DEV_ONLY = ("httpx", "openai", "pytest", "hypothesis", "matplotlib", "schemathesis", "sklearn")
# -I: no PYTHON* variables, no user site, not the current directory on sys.path. A finder
# ahead of all others refuses the dev extra's modules, as if they were not installed.
WITHOUT_DEV_EXTRA = f"""
import importlib.abc, runpy, sys

class RunInstallOnly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {set(DEV_ONLY)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, RunInstallOnly())
try:
    import httpx
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("httpx is still importable")
script, *sys.argv[1:] = sys.argv[1:]
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
"""


def run_script(base_url: str) -> subprocess.CompletedProcess[str]:
    """The script against ``base_url``, in a Python without the dev extra."""
    argv = [sys.executable, "-I", "-c", WITHOUT_DEV_EXTRA, str(SCRIPT), "--base-url", base_url]
    return subprocess.run(argv, cwd=Path("/"), capture_output=True, text=True, timeout=60)


def field(out: str, case: int, key: str) -> str:
    """The value printed for ``key`` under the ``case``-th test (1-based)."""
    block = out.split(f"\nTest {case}: ")[1].split("\nTest ")[0]
    [line] = [line for line in block.splitlines() if line.startswith(f"  {key}:")]
    return line.split(":", 1)[1].strip()


def test_the_three_requests_run_without_the_dev_extra(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(GOOD_DRAFT), Reply(HEDGED), Reply(LONG))
    cloud.enqueue(Reply(CLOUD_OTHER), Reply(LONG))

    done = run_script(proxy.url)

    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert (field(out, 1, "model_used"), field(out, 1, "accepted")) == ("local", "True")
    assert field(out, 1, "answer") == repr(GOOD_DRAFT)
    assert (field(out, 2, "model_used"), field(out, 2, "spilled_over")) == ("cerebras", "True")
    assert field(out, 2, "reasons") == "['uncertainty_marker', 'differs_from_verified']"
    assert field(out, 3, "model_used") == "cerebras"
    assert field(out, 3, "reasons") == "['incomplete', 'draft_truncated']"
    assert field(out, 3, "answer") == repr(LONG[:160]) + "..."
    assert field(out, 1, "latency").endswith(" ms")
    outcomes = proxy.stats()["requests"]["by_outcome"]
    assert f"\n/stats: outcomes {outcomes}, spill-over rate " in out
    # Each request reached the proxy as the script means it: prompt and client's token budget.
    drafts = chat_bodies(local)
    assert [body["messages"][-1]["content"] for body in drafts[:3]] == [
        "Say hello",
        "Write a detailed explanation of machine learning",
        "Write a Python function that checks whether a string is a palindrome.",
    ]
    assert [body["max_completion_tokens"] for body in chat_bodies(cloud)] == [500, 300]


def test_failed_requests_are_reported_and_exit_1(make_proxy: MakeProxy) -> None:
    with make_proxy(local_url=dead_url(), cloud_url=dead_url()) as proxy:
        done = run_script(proxy.url)
    assert done.returncode == 1
    assert done.stdout.count("  FAILED: HTTP 503: ") == 3, done.stdout + done.stderr
    assert "local: cannot connect" in done.stdout  # the proxy's own words, shown to the user
    assert "\n/stats: outcomes " in done.stdout  # the report still ends with the stats


def test_no_proxy_is_one_clear_line_and_exit_1() -> None:
    url = dead_url()
    done = run_script(url)
    assert done.returncode == 1
    assert f"cannot talk to the proxy at {url}: " in done.stdout
    assert "(is `python main.py` running?)" in done.stdout
    assert "Traceback" not in done.stderr
