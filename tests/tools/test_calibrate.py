"""``specproxy calibrate``: config editing, threshold choice, and the command end to end."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from app.cli import main as specproxy
from app.config import load_settings
from app.evaluation.metrics import cloud_share_at
from app.record import RequestRecord
from app.routing.features import FEATURES, draft_features
from app.routing.scorer import Scorer, load_scorer
from app.routing.signals import DraftSignals, TokenSignal
from app.telemetry.spec_log import spec_log_entry
from app.tools.calibrate import (
    calibrate,
    edit_is_exact,
    effective_score,
    format_threshold,
    main,
    round_up,
    set_spill_threshold,
    yaml_edit,
)
from app.vocabulary import Outcome, Strategy

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = (ROOT / "config.yaml").read_text(encoding="utf-8")
NOTE = "# specproxy calibrate: target 0.3 on 10 requests"
MARKERS = ("...", "I think", "maybe")


# -- the config writer --------------------------------------------------------------


def section(text: str) -> dict[str, Any]:
    tree = yaml.safe_load(text)
    assert isinstance(tree, dict)
    block = tree["speculative_decoding"]
    assert isinstance(block, dict)
    return block


def test_sets_the_shipped_configs_threshold_changing_nothing_else() -> None:
    out = set_spill_threshold(SHIPPED_CONFIG, "0.42", NOTE)
    before, after = SHIPPED_CONFIG.splitlines(), out.splitlines()
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert len(changed) == 1 and changed[0][0].startswith("  spill_threshold: null")
    assert changed[0][1].startswith("  spill_threshold: 0.42 ")
    assert section(out)["spill_threshold"] == 0.42
    assert edit_is_exact(SHIPPED_CONFIG, out, 0.42)
    assert set_spill_threshold(out, "0.42", NOTE) == out  # idempotent


def test_replaces_an_existing_value_in_place() -> None:
    text = (
        "# top\nspeculative_decoding:\n  policy: combined   # scored\n"
        "  spill_threshold: 0.5\n  top_logprobs: 5\nlogging:\n  level: INFO\n"
    )
    out = set_spill_threshold(text, "0.123457", NOTE)
    assert out == text.replace("spill_threshold: 0.5", f"spill_threshold: 0.123457  {NOTE}")
    assert set_spill_threshold(out, "0.123457", NOTE) == out
    again = set_spill_threshold(out, "0.2", NOTE.replace("0.3", "0.1"))
    assert again == text.replace(
        "spill_threshold: 0.5", f"spill_threshold: 0.2{' ' * 7}{NOTE.replace('0.3', '0.1')}"
    )  # an earlier calibrate note is replaced, at the same column


def test_keeps_a_users_comment_at_its_column() -> None:
    text = "speculative_decoding:\n  spill_threshold: null      # mine\n  policy: combined\n"
    out = set_spill_threshold(text, "0.3", NOTE)
    assert out == "speculative_decoding:\n  spill_threshold: 0.3       # mine\n  policy: combined\n"


def test_only_the_block_key_is_touched() -> None:
    text = (
        "other:\n  spill_threshold: 0.9\n"
        "speculative_decoding:\n"
        "    # spill_threshold: 0.8   (commented out)\n"
        "    policy: combined\n"
        "    nested:\n"
        "        spill_threshold: 0.7\n"
        "logging: {level: INFO}\n"
    )
    out = set_spill_threshold(text, "0.25", NOTE)
    assert out == text.replace(
        "speculative_decoding:\n", f"speculative_decoding:\n    spill_threshold: 0.25  {NOTE}\n"
    )  # inserted with the block's own indentation (four spaces)
    assert edit_is_exact(text, out, 0.25)


def test_appends_a_missing_block() -> None:
    text = "# config\nlogging:\n  level: INFO"  # no final newline either
    out = set_spill_threshold(text, "0.3", NOTE)
    assert out == text + f"\n\nspeculative_decoding:\n  spill_threshold: 0.3  {NOTE}\n"
    assert edit_is_exact(text, out, 0.3)
    assert set_spill_threshold(out, "0.3", NOTE) == out
    assert (
        set_spill_threshold("", "1.0", NOTE)
        == f"speculative_decoding:\n  spill_threshold: 1.0  {NOTE}\n"
    )


def test_header_on_the_last_line_and_crlf() -> None:
    assert set_spill_threshold(
        "logging:\r\n  level: INFO\r\nspeculative_decoding:", "0.5", NOTE
    ) == (
        f"logging:\r\n  level: INFO\r\nspeculative_decoding:\r\n  spill_threshold: 0.5  {NOTE}\r\n"
    )


def test_inline_block_is_refused() -> None:
    with pytest.raises(ValueError, match="inline"):
        set_spill_threshold("speculative_decoding: {policy: combined}\n", "0.3", NOTE)


def test_edit_check_catches_other_changes() -> None:
    text = "speculative_decoding:\n  policy: combined\n"
    assert edit_is_exact(
        text, "speculative_decoding:\n  policy: combined\n  spill_threshold: 0.3\n", 0.3
    )
    assert not edit_is_exact(
        text, "speculative_decoding:\n  policy: seed\n  spill_threshold: 0.3\n", 0.3
    )
    assert not edit_is_exact(
        text, "speculative_decoding:\n  policy: combined\n  spill_threshold: 0.4\n", 0.3
    )
    assert not edit_is_exact(text, "speculative_decoding: [\n", 0.3)


@given(st.floats(0.0, 1.0))
def test_written_text_reads_back_as_the_value(value: float) -> None:
    shown = format_threshold(round_up(value))
    parsed = yaml.safe_load(f"x: {shown}")["x"]
    assert isinstance(parsed, float)  # PyYAML reads 1e-06 as a string: never written
    assert parsed == round_up(value) >= value
    assert parsed - value < 1e-6 + 1e-15


# -- the threshold ------------------------------------------------------------------


def score_lists() -> st.SearchStrategy[list[float]]:
    # a grid of scores (plenty of ties, none closer than 1e-6) plus some forced drafts
    grid = st.integers(1, 200).map(lambda i: i / 200)
    return st.lists(st.one_of(grid, st.just(math.inf)), min_size=1, max_size=60)


@given(score_lists(), st.floats(0.0, 1.0))
def test_threshold_meets_the_target_and_no_more_would_fit(
    scores: list[float], target: float
) -> None:
    result = calibrate(scores, target)
    n = len(scores)
    forced = sum(s == math.inf for s in scores)
    assert 0.0 <= result.threshold <= 1.0
    assert result.threshold == round(result.threshold, 6)
    assert result.achieved == cloud_share_at(scores, result.threshold)
    assert result.forced_share == forced / n
    assert result.unreachable == (forced > math.floor(target * n + 1e-9))
    if result.unreachable:
        assert result.threshold == 1.0 and result.achieved == forced / n  # scored all local
        return
    assert result.achieved <= target + 1e-9
    local = [s for s in scores if s <= result.threshold]
    if local:  # sending the next tie group too would break the budget
        top = max(local)
        assert result.achieved + local.count(top) / n > target + 1e-9


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40), st.floats(0.0, 1.0))
def test_rounding_never_exceeds_the_target(scores: list[float], target: float) -> None:
    assert calibrate(scores, target).achieved <= target + 1e-9


def test_clamps_and_forced_drafts() -> None:
    everything = calibrate([0.2, 0.4, math.inf], 1.0)
    assert everything.threshold == 0.0 and everything.achieved == 1.0  # -inf clamped to 0
    nothing = calibrate([0.2, 0.4], 0.0)
    assert nothing.threshold == 0.4 and nothing.achieved == 0.0
    exact = calibrate([0.2, 0.4, math.inf, math.inf], 0.5)  # forced share = target
    assert not exact.unreachable and exact.threshold == 0.4 and exact.achieved == 0.5
    over = calibrate([0.2, 0.4, math.inf, math.inf], 0.3)
    assert over.unreachable and over.threshold == 1.0 and over.achieved == 0.5


def scorer(**overrides: Any) -> Scorer:
    base: dict[str, Any] = {
        "name": "test",
        "features": ("mean_logp", "min_margin", "ctx_code"),
        "mean": (-0.5, 0.5, 0.2),
        "scale": (0.5, 0.3, 0.4),
        "weights": (-1.5, -0.8, 0.6),
        "bias": -0.2,
        "threshold": 0.5,
    }
    return Scorer(**{**base, **overrides})


def test_effective_score_forces_cut_and_aborted_drafts() -> None:
    s = scorer()
    features = {name: 0.0 for name in FEATURES}
    assert effective_score("n_max", features, s) == math.inf
    assert effective_score("p_min", features, s) == math.inf
    for stop in ("complete", None):
        assert effective_score(stop, features, s) == s.score(features) < 1


# -- end to end ---------------------------------------------------------------------


def record(i: int, *, truncated: bool = False, features: bool = True) -> RequestRecord:
    """A realistic request: confidence falling with ``i``; contexts alternate code / prose."""
    p = 0.99 - 0.009 * (i % 100)
    context = "code" if i % 2 else "prose"
    tokens = tuple(
        TokenSignal(
            text=f" t{k}",
            p=p * (1 - 0.01 * k),
            entropy=0.05 + 0.02 * k,
            token_id=k,
            top_k=((k, p), (k + 1, (1 - p) / 2)),
        )
        for k in range(6)
    )
    draft = DraftSignals(
        text="".join(t.text for t in tokens),
        n_tokens=len(tokens),
        budget=6 if truncated else 10,
        finish_reason="length" if truncated else "stop",
        tokens=tokens,
    )
    return RequestRecord(
        strategy=Strategy.SPECULATIVE,
        context_type=context,
        outcome=Outcome.VERIFIED_DRAFT_USED,
        draft=draft,
        features=draft_features(draft, markers=MARKERS, context_type=context) if features else None,
        spill_score=0.5,
    )


def write_log(path: Path, records: Sequence[RequestRecord], extra: Sequence[str] = ()) -> Path:
    lines = [orjson.dumps(spec_log_entry(r, i, ts_ms=0)).decode() for i, r in enumerate(records)]
    path.write_text("\n".join([*lines, *extra]) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the shipped config (policy combined) with a test scorer file."""
    scorer_path = tmp_path / "scorer.json"
    scorer_path.write_text(orjson.dumps(scorer().as_mapping()).decode(), encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text(
        SHIPPED_CONFIG.replace(
            "speculative_decoding:\n", f"speculative_decoding:\n  scorer_file: {scorer_path}\n"
        ),
        encoding="utf-8",
    )
    return config, scorer_path


def test_calibrates_and_the_written_threshold_gives_the_target(
    setup: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, scorer_path = setup
    before = config.read_text(encoding="utf-8")
    records = [record(i) for i in range(90)] + [record(i, truncated=True) for i in range(5)]
    log = write_log(tmp_path / "spec.jsonl", records[:50])
    rotated = write_log(tmp_path / "spec.jsonl.1", [*records[50:], record(7, features=False)])

    assert (
        main(["--target-cloud-rate", "0.3", "--config", str(config), str(log), str(rotated)]) == 0
    )
    out = capsys.readouterr()
    assert out.err == ""
    after = config.read_text(encoding="utf-8")
    threshold = load_settings(config, env={}).speculative_decoding.spill_threshold
    assert threshold is not None
    changed = [
        (b, a) for b, a in zip(before.splitlines(), after.splitlines(), strict=True) if b != a
    ]  # the shipped null replaced in place (its comment kept), nothing else changed
    assert [a.split("#")[0].strip() for _, a in changed] == [
        f"spill_threshold: {format_threshold(threshold)}"
    ]
    assert changed[0][0].split("#")[1] == changed[0][1].split("#")[1]

    # re-applied to the logged traffic as the proxy would: exactly 30% of 95 fits 28
    s = load_scorer(scorer_path)
    scores = [
        math.inf if r.draft and r.draft.truncated else s.score(r.features or {}) for r in records
    ]
    assert sum(x > threshold for x in scores) == 28
    assert "achieved:         29.47% of 95 drafts" in out.out
    assert "skipped:          1 " in out.out and "lines read:       96" in out.out
    assert f"-> {format_threshold(threshold)}" in out.out and "(scorer 'test' default)" in out.out


def test_json_report_dry_run_and_console_entry(
    setup: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = setup
    before = config.read_bytes()
    log = write_log(tmp_path / "spec.jsonl", [record(i) for i in range(40)])
    args = ["calibrate", "--target-cloud-rate", "0.25", "--config", str(config), "--dry-run"]
    assert specproxy([*args, "--json", str(log)]) == 0
    assert config.read_bytes() == before  # --dry-run writes nothing
    data = orjson.loads(capsys.readouterr().out)
    assert data["used"] == 40 and data["lines"] == 40 and data["skipped_no_features"] == 0
    assert data["achieved_cloud_rate"] == 0.25 and data["forced_share"] == 0.0
    assert data["written"] is False and data["old_threshold"] == 0.5
    by_context = data["by_context_type"]
    assert set(by_context) == {"code", "prose"}
    assert sum(row["lines"] * row["cloud_rate"] for row in by_context.values()) == pytest.approx(10)


def test_unreachable_target_leaves_the_config_and_says_what_would_help(
    setup: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = setup
    before = config.read_bytes()
    records = [record(i) for i in range(6)] + [record(i, truncated=True) for i in range(3)]
    aborted = spec_log_entry(record(9), 9, ts_ms=0)
    aborted["draft"]["stop_reason"] = "p_min"  # stopped early: cloud too
    log = write_log(tmp_path / "spec.jsonl", records, extra=[orjson.dumps(aborted).decode()])
    assert main(["--target-cloud-rate", "0.2", "--config", str(config), "--json", str(log)]) == 1
    out = capsys.readouterr()
    assert "unreachable" in out.err and "40.00%" in out.err and "(3 n_max, 1 p_min)" in out.err
    assert "max_draft_tokens" in out.err and "abort_min_score" in out.err
    assert "left as it was" in out.err
    data = orjson.loads(out.out)
    assert data["unreachable"] and data["written"] is False
    assert config.read_bytes() == before  # 1.0 would change every answer and still miss


def test_streams_stopped_at_the_first_token_budget_are_forced_and_told_apart(
    setup: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Logged as ``n_max`` with ``first_token_budget`` among the reasons: they go to the
    cloud whatever the threshold, and the token budget (K) is not what would help."""
    config, _ = setup
    stopped = []
    for i in range(4):
        line = spec_log_entry(record(i), i, ts_ms=0)
        line["draft"]["stop_reason"], line["reasons"] = "n_max", ["hedged", "first_token_budget"]
        stopped.append(orjson.dumps(line).decode())
    log = write_log(tmp_path / "spec.jsonl", [record(i) for i in range(6)], extra=stopped)
    assert main(["--target-cloud-rate", "0.2", "--config", str(config), str(log)]) == 1
    err = capsys.readouterr().err
    assert "(4 first_token_budget)" in err and "stream_first_token_s" in err
    assert "max_draft_tokens" not in err


def test_rerun_replaces_the_value(setup: tuple[Path, Path], tmp_path: Path) -> None:
    config, _ = setup
    log = write_log(tmp_path / "spec.jsonl", [record(i) for i in range(20)])
    assert main(["--target-cloud-rate", "0.5", "--config", str(config), str(log)]) == 0
    first = config.read_text(encoding="utf-8")
    assert main(["--target-cloud-rate", "0.5", "--config", str(config), str(log)]) == 0
    assert config.read_text(encoding="utf-8") == first  # idempotent
    assert main(["--target-cloud-rate", "0.1", "--config", str(config), str(log)]) == 0
    assert config.read_text(encoding="utf-8").count("spill_threshold:") == 1
    assert config.read_text(encoding="utf-8") != first  # a lower target, a higher threshold


def run_failing(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("specproxy calibrate: ") and "Traceback" not in err
    return err


def test_seed_policy_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    seed = SHIPPED_CONFIG.replace("policy: combined", "policy: seed").replace(
        "hedge: auto", "hedge: off"
    )
    seed = re.sub(r"(\nlearning:[^\n]*\n  enabled: )true", r"\1false", seed)  # nothing to learn
    assert "enabled: false" in seed
    config.write_text(seed, encoding="utf-8")
    log = write_log(tmp_path / "spec.jsonl", [record(1)])
    err = run_failing(["--target-cloud-rate", "0.3", "--config", str(config), str(log)], capsys)
    assert "policy is seed" in err and "policy: combined" in err
    assert config.read_text(encoding="utf-8") == seed


def test_bad_json_line_names_file_and_line(
    setup: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = setup
    before = config.read_bytes()
    log = write_log(tmp_path / "spec.jsonl", [record(1), record(2)], extra=["{not json"])
    err = run_failing(["--target-cloud-rate", "0.3", "--config", str(config), str(log)], capsys)
    assert f"{log}:3: invalid JSON" in err
    assert config.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "message"),
    [("", "no log lines"), ("\n", "no log lines")],
)
def test_empty_log(
    setup: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    message: str,
) -> None:
    config, _ = setup
    log = tmp_path / "spec.jsonl"
    log.write_text(content, encoding="utf-8")
    err = run_failing(["--target-cloud-rate", "0.3", "--config", str(config), str(log)], capsys)
    assert "nothing to calibrate on" in err and message in err


def test_log_without_features(
    setup: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = setup
    log = write_log(tmp_path / "spec.jsonl", [record(i, features=False) for i in range(3)])
    err = run_failing(["--target-cloud-rate", "0.3", "--config", str(config), str(log)], capsys)
    assert "all 3 lines lack features" in err


def test_missing_log_and_features_of_another_version(
    setup: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = setup
    err = run_failing(
        ["--target-cloud-rate", "0.3", "--config", str(config), str(tmp_path / "none.jsonl")],
        capsys,
    )
    assert "cannot read" in err and "none.jsonl" in err
    entry = spec_log_entry(record(1), 1, ts_ms=0)
    del entry["features"]["mean_logp"]
    log = tmp_path / "old.jsonl"
    log.write_text(orjson.dumps(entry).decode() + "\n", encoding="utf-8")
    err = run_failing(["--target-cloud-rate", "0.3", "--config", str(config), str(log)], capsys)
    assert f"{log}:1: features.mean_logp" in err


def test_usage_errors(setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = setup
    assert main(["--target-cloud-rate", "1.5", "--config", str(config), "x.jsonl"]) == 2
    assert "must be a share in [0, 1]" in capsys.readouterr().err
    assert main(["--config", str(config), "x.jsonl"]) == 2
    assert "--target-cloud-rate" in capsys.readouterr().err
    err = run_failing(["--target-cloud-rate", "0.3", "--config", "/nonexistent.yaml", "x"], capsys)
    assert "config error" in err and "no such config file" in err


def test_unwritable_config_exits_1_and_keeps_it(
    setup: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    config, _ = setup
    before = config.read_bytes()
    log = write_log(tmp_path / "spec.jsonl", [record(i) for i in range(5)])
    tmp_path.chmod(0o555)  # no temp file can be created beside the config
    try:
        assert main(["--target-cloud-rate", "0.3", "--config", str(config), str(log)]) == 1
    finally:
        tmp_path.chmod(0o755)
    err = capsys.readouterr().err
    assert "cannot write" in err and "by hand" in err and "Traceback" not in err
    assert config.read_bytes() == before


def test_inline_block_exits_1_and_keeps_the_file(
    setup: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, scorer_path = setup
    text = (
        "models:\n"
        "  local: {provider: llama_server, model: local, base_url: http://127.0.0.1:8080}\n"
        "  cerebras: {provider: cerebras, model: m, base_url: https://api.cerebras.ai/v1}\n"
        f"speculative_decoding: {{policy: combined, scorer_file: {scorer_path}}}\n"
    )
    config.write_text(text, encoding="utf-8")
    log = write_log(tmp_path / "spec.jsonl", [record(i) for i in range(5)])
    assert main(["--target-cloud-rate", "0.3", "--config", str(config), str(log)]) == 1
    err = capsys.readouterr().err
    assert "inline" in err and "Traceback" not in err
    assert config.read_text(encoding="utf-8") == text


def test_a_bad_read_back_restores_the_original(
    setup: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, _ = setup
    before = config.read_bytes()
    log = write_log(tmp_path / "spec.jsonl", [record(i) for i in range(5)])
    real_write = yaml_edit._atomic_write
    writes: list[str] = []

    def corrupting_write(path: Path, text: str) -> None:
        writes.append(text)  # the first write lands damaged, as a full disk might leave it
        real_write(path, text[: len(text) // 2] if len(writes) == 1 else text)

    monkeypatch.setattr(yaml_edit, "_atomic_write", corrupting_write)
    assert main(["--target-cloud-rate", "0.3", "--config", str(config), str(log)]) == 1
    assert "restored" in capsys.readouterr().err
    assert config.read_bytes() == before and len(writes) == 2
