"""``specproxy usage``: lines by key from speculation logs, --since/--key/--team, errors."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from app.cli import main as cli
from app.tools.usage import NO_KEY, since_ms, usage_by_key

NOW = 1_800_000_000.0


def line(ts_ms: int, key: str | None, team: str | None, spend: float, baseline: float) -> dict:
    return {
        "ts_ms": ts_ms,
        "draft": {"n": 1, "tokens": []},
        "verify": None,
        "key": key,
        "team": team,
        "cost": {"spend_usd": spend, "baseline_usd": baseline},
        "cloud_usd": spend / 2,
        "tokens": {"prompt": {"local": 10, "cloud": 4}, "completion": {"local": 3, "cloud": 2}},
    }


def test_since_reads_an_age_or_an_iso_date() -> None:
    assert since_ms("30m", NOW) == int((NOW - 1800) * 1000)
    assert since_ms("7d", NOW) == int((NOW - 7 * 86400) * 1000)
    assert since_ms("2026-11-26") == 1795651200000  # midnight UTC
    assert since_ms("2026-11-26T01:00+01:00") == 1795651200000
    with pytest.raises(ValueError, match="an age"):
        since_ms("yesterday")


def test_lines_add_up_by_key_within_the_filters() -> None:
    entries = [
        line(1000, "alice", "search", 0.4, 1.0),
        line(2000, "alice", "search", 0.2, 0.5),
        line(2000, "bob", None, 0.1, 0.1),
        line(3000, None, None, 0.3, 0.3),
    ]
    found = usage_by_key(entries)
    assert list(found) == [NO_KEY, "alice", "bob"]
    alice = found["alice"]
    assert (alice.requests, alice.team) == (2, "search")
    assert alice.spend_usd == pytest.approx(0.6) and alice.savings_usd == pytest.approx(0.9)
    assert alice.cloud_usd == pytest.approx(0.3)
    assert (alice.prompt_tokens, alice.completion_tokens, alice.cloud_tokens) == (28, 10, 12)
    assert list(usage_by_key(entries, since=2000)) == [NO_KEY, "alice", "bob"]
    assert usage_by_key(entries, since=2000)["alice"].requests == 1
    assert list(usage_by_key(entries, team="search")) == ["alice"]
    assert list(usage_by_key(entries, key="bob")) == ["bob"]


def test_the_command_prints_a_table_and_refuses_a_bad_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "spec.jsonl"
    log.write_bytes(orjson.dumps(line(1000, "alice", "search", 0.4, 1.0)) + b"\n")
    assert cli(["usage", str(log)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split()[:3] == ["key", "team", "requests"]
    assert rows[1].split()[:3] == ["alice", "search", "1"]
    assert cli(["usage", str(log), "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["alice"]["savings_usd"] == pytest.approx(0.6)
    # sums of float dollars are shown as the proxy shows USD, not 0.30000000000000004
    lines = [line(1000, "bob", None, 0.1, 1.0), line(1001, "bob", None, 0.2, 1.0)]
    log.write_bytes(b"".join(orjson.dumps(entry) + b"\n" for entry in lines))
    assert cli(["usage", str(log), "--json"]) == 0
    bob = orjson.loads(capsys.readouterr().out)["bob"]
    assert 0.1 + 0.2 != 0.3 and bob["spend_usd"] == 0.3 and bob["cloud_usd"] == 0.15
    assert bob["savings_usd"] == 1.7
    log.write_bytes(b'{"draft": 1}\n')
    assert cli(["usage", str(log)]) == 2
    assert "spec.jsonl:1" in capsys.readouterr().err
    assert cli(["usage", str(log), "--since", "soon"]) == 2
