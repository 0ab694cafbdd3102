"""``server.keys`` and ``server.admin_key`` in config.yaml: the shipped commented example
validates once uncommented, keys come only from the environment, and every one of them
is among the secrets masked in logs and errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from app.config import ConfigError, settings_from_mapping

SHIPPED = Path(__file__).resolve().parents[2] / "config.yaml"
ENV = {"SEARCH_KEY": "sk-search-1", "SPECPROXY_ADMIN_KEY": "sk-admin-1", "CEREBRAS_API_KEY": "c"}


def uncommented_example() -> dict[str, object]:
    """config.yaml with its commented ``server.keys`` and ``admin_key`` lines turned on."""
    lines = []
    for line in SHIPPED.read_text().splitlines():
        if re.match(r"^  # (keys:|  - name:|    \w+:|admin_key:)", line):
            line = line.replace("  # ", "  ", 1)
        lines.append(line)
    tree: dict[str, object] = yaml.safe_load("\n".join(lines))
    return tree


def test_the_shipped_example_validates_and_its_secrets_are_masked() -> None:
    settings = settings_from_mapping(uncommented_example(), env=ENV)
    (search,) = settings.server.keys
    assert (search.name, search.team, search.on_budget) == ("search", "retrieval", "local")
    assert search.key.get_secret_value() == "sk-search-1"
    assert settings.server.admin_key is not None
    assert {"sk-search-1", "sk-admin-1"} <= set(settings.secrets())
    assert "sk-search-1" not in repr(settings) and "sk-admin-1" not in repr(settings)


@pytest.mark.parametrize(
    "server",
    [
        {"keys": [{"name": "x", "key": "sk-literal"}]},
        {"admin_key": "sk-literal"},
    ],
)
def test_a_key_written_in_the_file_is_refused(server: dict[str, object]) -> None:
    tree = uncommented_example()
    tree["server"] = server
    with pytest.raises(ConfigError, match="only come from the environment"):
        settings_from_mapping(tree, env=ENV)
