"""``specproxy calibrate --target-agreement``: the learner's quality-target rule on the
speculation logs' labels, written as spill_threshold."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from app.config import load_settings
from app.learning.labels import label_from_log
from app.record import RequestRecord
from app.routing.target import lower_bound, threshold_for
from app.telemetry.spec_log import spec_log_entry
from app.tools.calibrate import main
from tests.tools.test_calibrate import SHIPPED_CONFIG, record, scorer, write_log


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A copy of the shipped config with a test scorer file."""
    scorer_path = tmp_path / "scorer.json"
    scorer_path.write_text(orjson.dumps(scorer().as_mapping()).decode(), encoding="utf-8")
    path = tmp_path / "config.yaml"
    path.write_text(
        SHIPPED_CONFIG.replace(
            "speculative_decoding:\n", f"speculative_decoding:\n  scorer_file: {scorer_path}\n"
        ),
        encoding="utf-8",
    )
    return path


def labelled(i: int, agreed: bool | None, *, audit: bool = False) -> RequestRecord:
    rec = record(i)
    rec.agreement, rec.audit = agreed, audit
    return rec


def traffic() -> list[RequestRecord]:
    """100 judged drafts, wrong more often as the draft's confidence falls, and 10 lines
    that were never judged (no label)."""
    judged = [labelled(i, i < 70 or (i < 90 and i % 4 == 0)) for i in range(100)]
    return judged + [labelled(i, None) for i in range(10)]


def test_the_written_threshold_holds_the_target_on_the_logged_labels(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = config.read_text(encoding="utf-8")
    records = traffic()
    log = write_log(tmp_path / "spec.jsonl", records)
    assert main(["--target-agreement", "0.9", "--config", str(config), str(log)]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    threshold = load_settings(config, env={}).speculative_decoding.spill_threshold
    assert threshold is not None
    changed = [
        a
        for b, a in zip(before.splitlines(), config.read_text().splitlines(), strict=True)
        if b != a
    ]
    assert len(changed) == 1 and changed[0].strip().startswith(f"spill_threshold: {threshold}")
    # rescored as the proxy would: what the threshold serves holds the target, no more fits
    s = scorer()
    judged = [r for r in records if r.agreement is not None]
    scores = [s.score(r.features or {}) for r in judged]
    served = [r.agreement for r, x in zip(judged, scores, strict=True) if x <= threshold]
    assert lower_bound(sum(served), len(served)) >= 0.9
    rule = threshold_for(scores, [bool(r.agreement) for r in judged], 0.9)
    assert rule.threshold is not None and threshold - rule.threshold < 1e-6
    assert rule.served == len(served) < 100
    assert f"served locally:   {len(served)} of 100 labels" in out.out
    assert "unlabelled:       10" in out.out and "wrote speculative_decoding" in out.out


def test_audits_weigh_by_their_rate(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Confident drafts served and audited at 0.1 stand for ten each: with that weight the
    few wrong verified drafts among them barely move the agreement; counted once each,
    they sink it under the target."""
    records = [labelled(i, True, audit=True) for i in range(0, 160, 2)]  # prose, confident
    records += [labelled(i, False) for i in range(1, 10, 2)]  # code, wrong
    log = write_log(tmp_path / "spec.jsonl", records)
    entries = [spec_log_entry(r, i, ts_ms=0) for i, r in enumerate(records)]
    assert all(label_from_log(e) is not None for e in entries)
    common = ["--target-agreement", "0.9", "--config", str(config), "--dry-run", "--json"]
    assert main([*common, "--audit-rate", "0.1", str(log)]) == 0
    weighted = orjson.loads(capsys.readouterr().out)
    assert weighted["audits"] == 80 and weighted["audit_rate"] == 0.1
    assert weighted["new_threshold"] is not None and weighted["written"] is False
    assert weighted["bound"]["lower_bound"] >= 0.9
    assert main([*common, "--audit-rate", "1", str(log)]) == 1
    unweighted = orjson.loads(capsys.readouterr().out)
    assert unweighted["new_threshold"] is None and unweighted["unreachable"] is True


def test_no_threshold_holding_the_target_leaves_the_config(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = config.read_bytes()
    log = write_log(tmp_path / "spec.jsonl", [labelled(i, i % 3 > 0) for i in range(30)])
    assert main(["--target-agreement", "0.95", "--config", str(config), str(log)]) == 1
    out = capsys.readouterr()
    assert "no threshold holds 95.00% agreement" in out.err and "left as it was" in out.err
    assert config.read_bytes() == before


def test_usage_and_empty_logs(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path / "spec.jsonl", [labelled(i, None) for i in range(3)])
    args = ["--config", str(config), str(log)]
    assert main(["--target-agreement", "0", *args]) == 2
    assert "must be a share in (0, 1]" in capsys.readouterr().err
    assert main(["--target-agreement", "0.9", "--target-cloud-rate", "0.3", *args]) == 2
    assert "not allowed with" in capsys.readouterr().err
    assert main(["--target-agreement", "0.9", *args]) == 2
    assert "none of the 3 lines is a label" in capsys.readouterr().err
