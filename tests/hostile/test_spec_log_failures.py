"""D8: the speculation log survives its directory going away: a line that cannot be
written is counted in /stats and /metrics and reported at most once a minute (no
traceback on stderr), and the writer recovers when the directory can be made again."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from tests.fakes import FakeLlamaServer
from tests.support.proxy import MakeProxy, Proxy, wait_for

ASK = [{"role": "user", "content": "Say hello"}]


def ask(proxy: Proxy) -> None:
    assert proxy.http.post("/v1/chat/completions", json={"messages": ASK}).status_code == 200


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_spec_log_recovers_when_its_directory_is_deleted(
    make_proxy: MakeProxy, local: FakeLlamaServer, tmp_path: Path
) -> None:
    log_file = tmp_path / "logs" / "spec.jsonl"
    with make_proxy(logging={"spec_log_file": str(log_file)}) as proxy:
        ask(proxy)
        wait_for(lambda: lines(log_file) == 1)
        shutil.rmtree(log_file.parent)
        ask(proxy)
        wait_for(lambda: lines(log_file) == 1)  # written to a new file, not the deleted one
        assert proxy.stats()["lost_log_lines"] == {}


def test_lines_that_cannot_be_written_are_counted_and_reported_once(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.WARNING)
    log_file = tmp_path / "logs" / "spec.jsonl"
    with make_proxy(logging={"spec_log_file": str(log_file)}) as proxy:
        ask(proxy)
        wait_for(lambda: lines(log_file) == 1)
        shutil.rmtree(log_file.parent)
        log_file.parent.write_text("a file where the directory was")  # nothing can be made
        ask(proxy)
        ask(proxy)
        wait_for(lambda: proxy.stats()["lost_log_lines"] == {"spec_log": 2})
        metrics = proxy.http.get("/metrics").text
        log_file.parent.unlink()  # the disk is back
        ask(proxy)
        wait_for(lambda: lines(log_file) == 1)
    assert 'specproxy_log_lines_lost_total{log="spec_log"} 2.0' in metrics
    lost = [r for r in caplog.records if "a line was lost" in r.getMessage()]
    assert len(lost) == 1  # at most once a minute
    assert "Logging error" not in capsys.readouterr().err
