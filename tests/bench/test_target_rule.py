"""``bench/target_rule.py`` runs and finds what the rule promises on its label sets."""

from __future__ import annotations

import pytest

from bench import target_rule


def test_no_lower_target_serves_less(capsys: pytest.CaptureFixture[str]) -> None:
    target_rule.main(["--sets", "60"])
    out = capsys.readouterr().out
    assert "lower serves less: 0 of 60 sets" in out
    held = int(out.split("null: 0.8 held on ")[1].split()[0])
    assert held <= 20  # of 400: about 5% at most
