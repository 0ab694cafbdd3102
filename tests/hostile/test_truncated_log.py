"""D21: a speculation log whose last line was cut off (the writer stopped mid-line, or the
line is still being written) is read by ``specproxy calibrate`` and ``specproxy fit`` as
``specproxy analyze`` reads it: that line is skipped, the rest used; a bad line inside the
log is still refused, naming it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from app.cli import main as specproxy
from app.telemetry.spec_log import spec_log_entry
from tests.tools.test_calibrate import record, setup  # noqa: F401  (setup: a fixture)


def cut_log(path: Path, n: int) -> Path:
    """``n`` whole lines, then half of one more with no newline: a real file on disk."""
    lines = [orjson.dumps(spec_log_entry(record(i), i, ts_ms=0)) for i in range(n + 1)]
    path.write_bytes(b"".join(line + b"\n" for line in lines[:n]) + lines[n][:60])
    return path


def test_calibrate_skips_a_cut_off_last_line(
    setup: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, _ = setup
    log = cut_log(tmp_path / "spec.jsonl", 40)
    args = ["calibrate", "--target-cloud-rate", "0.25", "--config", str(config), "--dry-run"]
    assert specproxy([*args, "--json", str(log)]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["used"] == 40 and data["lines"] == 41


def test_fit_skips_a_cut_off_last_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = cut_log(tmp_path / "spec.jsonl", 40)
    code = specproxy(["fit", "--out", str(tmp_path / "scorer.json"), str(log)])
    err = capsys.readouterr().err
    assert "invalid JSON" not in err, err
    assert code in (0, 1), err  # 1: these lines carry too few labels of each kind to fit


def test_a_cut_line_inside_the_log_is_still_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = cut_log(tmp_path / "spec.jsonl", 3)
    log.write_bytes(log.read_bytes() + b"\n" + orjson.dumps(spec_log_entry(record(9), 9, ts_ms=0)))
    assert specproxy(["fit", "--out", str(tmp_path / "scorer.json"), str(log)]) == 2
    assert f"{log}:4: invalid JSON" in capsys.readouterr().err
