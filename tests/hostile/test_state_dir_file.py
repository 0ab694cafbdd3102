"""D23: ``learning.state_dir`` pointing at a file. At start: a config error naming it
(exit 2). A directory replaced by a file while the proxy runs: one warning (no traceback
a second), ``/stats`` → ``learning.store`` shows the error and the failed looks, the
labels wait in memory, and they are stored once the directory can be made again."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import CLOUD_OTHER, HEDGED
from tests.support.processes import ROOT
from tests.support.proxy import CLOUD_KEY, MakeProxy, dead_url, proxy_config, wait_for

pytestmark = pytest.mark.process  # every test here starts a server or a process

ASK = {"messages": [{"role": "user", "content": "What is two plus two?"}]}
SCORED = {"policy": "confidence"}


def test_a_state_dir_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("not a directory")
    learning = {"enabled": True, "state_dir": str(tmp_path / "state")}
    config = proxy_config(dead_url(), dead_url(), learning=learning, speculative_decoding=SCORED)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "main.py", "--config", str(path), "--port", "1"],
        cwd=ROOT,
        env={"CEREBRAS_API_KEY": CLOUD_KEY, "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "learning.state_dir" in done.stderr and "is a file" in done.stderr


def test_a_state_dir_replaced_by_a_file_is_said_once_and_shown(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    local.default = Reply(HEDGED)  # doubted: verified, so each request is a label
    cloud.default = Reply(CLOUD_OTHER)
    state = tmp_path / "state"
    learning = {"enabled": True, "state_dir": str(state), "audit_rate": 0.0}
    with (
        caplog.at_level(logging.WARNING, logger="specproxy.learning"),
        make_proxy(learning=learning, speculative_decoding=SCORED) as proxy,
    ):

        def store() -> dict:
            return proxy.stats()["learning"]["store"]  # type: ignore[no-any-return]

        shutil.rmtree(state, ignore_errors=True)
        state.write_text("a file where the directory was")
        assert proxy.http.post("/v1/chat/completions", json=ASK).status_code == 200
        wait_for(lambda: store()["failures"] >= 3, timeout=10)
        assert str(state) in store()["error"]
        warnings = [r for r in caplog.records if "could not read or write" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].exc_info is None
        state.unlink()  # the directory can be made again: the waiting label is stored
        wait_for(lambda: store()["error"] is None, timeout=10)
        wait_for(lambda: proxy.stats()["learning"]["labels"]["stored"] >= 1, timeout=10)
