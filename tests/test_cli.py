"""The `specproxy` console script: setup finds what the set-up installed; serve runs main.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main


# `setup` installs llama-server and fetches the model when they are missing: a llama.cpp build
# of ~14 minutes on a fresh machine, so it belongs to the real tier.
@pytest.mark.real
def test_setup_reports_the_binary_and_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["setup"]) == 0  # idempotent: bootstrap already installed both
    out = capsys.readouterr().out
    assert "llama-server: " in out and "SmolLM2-135M-Instruct.Q4_1.gguf" in out


def test_serve_passes_its_options_to_main(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("routing: {strategy: fastest}\nmodels: {}\n")
    assert main(["serve", "--config", str(bad)]) == 2
    assert "routing.strategy" in capsys.readouterr().err
