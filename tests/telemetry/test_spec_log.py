"""The spec log writer: seed 000's schema, no lost or interleaved lines, rotation."""

from __future__ import annotations

import json
import math
import threading
from dataclasses import replace
from pathlib import Path

from app.record import RequestRecord
from app.routing.acceptance import Acceptance
from app.routing.signals import DraftSignals, TokenSignal
from app.telemetry.spec_log import SpecLog, spec_log_entry
from app.vocabulary import Outcome, Strategy


def record(n: int = 3, truncated: bool = False) -> RequestRecord:
    tokens = tuple(
        TokenSignal(
            text=f" t{i}",
            p=0.5,
            entropy=math.log(2),
            token_id=100 + i,
            top_k=((100 + i, 0.5), (7, 0.5)),
        )
        for i in range(n)
    )
    draft = DraftSignals(
        text="".join(t.text for t in tokens),
        n_tokens=n,
        budget=n,
        finish_reason="length" if truncated else "stop",
        tokens=tokens,
    )
    return RequestRecord(
        strategy=Strategy.SPECULATIVE,
        request_id="abc",
        context_type="code",
        outcome=Outcome.SPILLED_OVER,
        draft=draft,
        acceptance=Acceptance(n, 1, 1, " x"),
        decision_reasons=("low_confidence",),
        reasons=["low_confidence", "differs_from_verified"],
        similarity=0.4,
        prompt_tokens=12,
        draft_s=0.0125,
        verify_s=0.045,
        draft_model="local",
        verify_model="cerebras",
        prompt="secret prompt",
    )


def test_a_draft_that_fills_the_clients_own_limit_is_logged_complete() -> None:
    """``n_max`` is a draft cut at the proxy's budget; one that filled the client's own
    ``max_tokens`` is a whole answer (calibrate and analyze read ``n_max`` as forced)."""
    rec = record(truncated=True)
    assert rec.draft is not None
    filled = replace(rec, draft=replace(rec.draft, client_limit=3))
    assert spec_log_entry(filled, 1)["draft"]["stop_reason"] == "complete"
    short = replace(rec, draft=replace(rec.draft, client_limit=4))  # the client allows more
    assert spec_log_entry(short, 1)["draft"]["stop_reason"] == "n_max"


def test_entry_follows_seed_000() -> None:
    entry = spec_log_entry(record(truncated=True), 42, ts_ms=1703001234567)
    assert {k: entry[k] for k in ("ts_ms", "slot_id", "prompt_pos", "round_id")} == {
        "ts_ms": 1703001234567,
        "slot_id": 0,
        "prompt_pos": 12,
        "round_id": 42,
    }
    assert entry["draft"]["n"] == 3 and entry["draft"]["stop_reason"] == "n_max"
    assert entry["draft"]["tokens"][1] == {
        "pos": 1,
        "id": 101,
        "p": 0.5,
        "entropy": round(math.log(2), 6),
        "top_k": [[101, 0.5], [7, 0.5]],
    }
    assert entry["verify"] == {"n_accepted": 1, "rej_pos": 1, "target_id": " x"}
    assert entry["timing"] == {"t_draft_us": 12500, "t_verify_us": 45000}
    assert (entry["decision"], entry["outcome"], entry["context_type"]) == (
        "verify",
        "spilled_over",
        "code",
    )
    assert "content" not in entry and "secret prompt" not in json.dumps(entry)


def test_content_only_when_asked() -> None:
    entry = spec_log_entry(record(), 1, with_content=True)
    assert entry["content"]["prompt"] == "secret prompt"


def test_every_line_written_whole_from_many_threads(tmp_path: Path) -> None:
    log = SpecLog(tmp_path / "spec.jsonl", max_bytes=10**8, backups=1)
    threads = [
        threading.Thread(target=lambda: [log.write(record(8)) for _ in range(250)])
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    lines = (tmp_path / "spec.jsonl").read_text().splitlines()
    assert len(lines) == 1000
    entries = [json.loads(line) for line in lines]  # each line is one whole JSON object
    assert sorted(e["round_id"] for e in entries) == list(range(1, 1001))


def test_rotates_by_size(tmp_path: Path) -> None:
    log = SpecLog(tmp_path / "spec.jsonl", max_bytes=4096, backups=2)
    for _ in range(100):
        log.write(record())
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["spec.jsonl", "spec.jsonl.1", "spec.jsonl.2"]
    assert all(p.stat().st_size <= 4096 for p in tmp_path.iterdir())
