"""Pair check: llama.cpp's draft/target rules on GGUF files written here and on the real model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.cli import main as specproxy
from app.local_server import ensure_model
from app.local_server.pair_check import ModelFacts, check_pair, read_facts
from tests.local_server.gemma_model import ensure_gemma_270m
from tests.support.local_server import VOCAB, write_gguf


def test_reads_the_facts_written(tmp_path: Path) -> None:
    facts = read_facts(write_gguf(tmp_path / "m.gguf", params=4096))
    assert (facts.vocab_type, facts.bos, facts.eos) == ("gpt2", 1, 2)
    assert (facts.add_bos, facts.add_eos) == (False, False)
    assert facts.tokens == VOCAB and facts.n_params == 4096 and facts.name == "m"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"vocab_type": "llama"}, "vocabulary type differs: 'gpt2' vs 'llama'"),
        ({"bos": 0}, "BOS token id differs: 1 vs 0"),
        ({"eos": 3}, "EOS token id differs: 2 vs 3"),
        ({"add_bos": True}, "add-BOS flag differs: False vs True"),
        ({"add_eos": True}, "add-EOS flag differs: False vs True"),
        ({"tokens": VOCAB[:150]}, "vocabulary sizes differ by 155 (305 vs 150; at most 128)"),
        (
            {"tokens": (*VOCAB[:7], "changed", *VOCAB[8:])},
            "token 7 differs: 'tok2' vs 'changed'",
        ),
    ],
)
def test_each_failure_mode_is_refused_with_its_reason(
    tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    target = write_gguf(tmp_path / "target.gguf", params=4000)
    draft = write_gguf(tmp_path / "draft.gguf", params=1000, **change)
    verdict = check_pair(read_facts(target), read_facts(draft))
    assert not verdict.compatible
    assert any(p.startswith(reason) for p in verdict.problems), verdict.problems


def test_ids_below_five_and_a_small_size_gap_are_allowed(tmp_path: Path) -> None:
    tokens = ("<bos>", "<eos>", "a", "b", "c", *VOCAB[5:-100])  # ids 0-4 differ; 100 fewer
    target = write_gguf(tmp_path / "target.gguf", params=4000)
    draft = write_gguf(tmp_path / "draft.gguf", params=1000, tokens=tokens)
    verdict = check_pair(read_facts(target), read_facts(draft))
    assert verdict.compatible and verdict.problems == ()
    assert verdict.size_ratio == 4.0 and (verdict.n_max, verdict.p_min) == (8, 0.75)
    assert "sweet spot" in verdict.notes[0]


FACTS = ModelFacts("t", "t", "gpt2", VOCAB, 1, 2, False, False, 1000)


@pytest.mark.parametrize(
    ("target_params", "n_max", "p_min", "says"),
    [
        (1000, 4, 0.8, "under 2:1"),
        (2500, 8, 0.75, "within 2:1 to 10:1"),
        (5000, 8, 0.75, "sweet spot"),
        (20000, 4, 0.8, "over 10:1"),
    ],
)
def test_size_ratio_advice(target_params: int, n_max: int, p_min: float, says: str) -> None:
    verdict = check_pair(replace(FACTS, n_params=target_params), FACTS)
    assert (verdict.n_max, verdict.p_min) == (n_max, p_min) and says in verdict.notes[0]


def test_cli_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = str(write_gguf(tmp_path / "target.gguf", params=4000))
    good = str(write_gguf(tmp_path / "good.gguf"))
    bad = str(write_gguf(tmp_path / "bad.gguf", vocab_type="llama", bos=0))
    assert specproxy(["check-pair", target, good]) == 0
    assert "verdict: compatible" in capsys.readouterr().out
    assert specproxy(["check-pair", target, bad, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["compatible"] is False and len(data["problems"]) == 2
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf at all")
    assert specproxy(["check-pair", target, str(tmp_path / "junk.gguf")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specproxy check-pair: ") and "junk.gguf" in err


@pytest.mark.real
def test_the_real_smollm2_pairs_with_itself(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(ensure_model("auto"))
    assert specproxy(["check-pair", model, model]) == 0
    out = capsys.readouterr().out
    assert "verdict: compatible" in out and "under 2:1" in out
    facts = read_facts(model)
    assert facts.vocab_type == "gpt2" and len(facts.tokens) == 49152


@pytest.mark.real
def test_smollm2_and_gemma_do_not_pair(capsys: pytest.CaptureFixture[str]) -> None:
    smollm2, gemma = str(ensure_model("auto")), str(ensure_gemma_270m())
    facts = read_facts(gemma)
    assert facts.vocab_type == "llama" and len(facts.tokens) == 262144
    assert specproxy(["check-pair", smollm2, gemma, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["compatible"] is False
    assert "vocabulary type differs: 'gpt2' vs 'llama'" in data["problems"]
    assert "vocabulary sizes differ by 212992 (49152 vs 262144; at most 128)" in data["problems"]


def test_a_file_is_parsed_once_until_it_changes(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", params=1000)
    first = read_facts(path)
    assert read_facts(path) is first  # the same file again: no second parse
    write_gguf(path, params=5000)  # rewritten: another size, a new parse
    assert read_facts(path).n_params == 5000
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        read_facts(tmp_path / "missing.gguf")
