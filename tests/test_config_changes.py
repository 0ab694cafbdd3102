"""What a reload changes: every changed key named, the restart-only ones told apart and kept."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import ConfigError, Settings, settings_from_mapping
from app.config.changes import classify, keep_running, needs_restart
from tests.support.proxy import CLOUD_KEY, deep_merge, proxy_config

ENV = {"CEREBRAS_API_KEY": CLOUD_KEY, "OTHER_KEY": "csk-other-0123456789", "CLIENT": "k-1"}


def settings(**overrides: Any) -> Settings:
    tree = proxy_config("http://127.0.0.1:1", "http://127.0.0.1:2")
    return settings_from_mapping(deep_merge(tree, overrides), env=ENV)


LAUNCH = {"local": {"base_url": None, "launch": {"port": 0}}}


@pytest.mark.parametrize(
    ("change", "changed", "restart"),
    [
        ({}, [], []),
        (
            {"speculative_decoding": {"min_confidence": 0.5, "policy": "combined"}},
            ["speculative_decoding.min_confidence", "speculative_decoding.policy"],
            [],
        ),
        (
            {"models": {"cerebras": {"price": {"input_per_mtok": 0.35}}}},
            ["models.cerebras.price.input_per_mtok"],
            [],
        ),
        (
            {"models": {"cerebras": {"api_key": "${OTHER_KEY}"}}},
            ["models.cerebras.api_key"],
            [],
        ),
        ({"server": {"api_keys": ["${CLIENT}"]}}, ["server.api_keys"], []),
        (
            {"models": {"local": {"base_url": "http://127.0.0.1:3", "timeout": {"read": 9}}}},
            ["models.local.base_url", "models.local.timeout.read"],
            [],
        ),
        ({"learning": {"state_dir": "elsewhere"}}, ["learning.state_dir"], []),
        (
            {"models": {"local": {"base_url": None, "base_urls": ["http://a:1", "http://b:2"]}}},
            ["models.local.base_url", "models.local.base_urls"],
            [],
        ),
        ({"state": {"sync_every_s": 2}}, ["state.sync_every_s"], ["state.sync_every_s"]),
        ({"server": {"max_body_bytes": 4096}}, ["server.max_body_bytes"], []),
        ({"server": {"limits": {"body_timeout_s": 3}}}, ["server.limits.body_timeout_s"], []),
        (
            {"server": {"port": 9000, "host": "127.0.0.1", "workers": 3}},
            ["server.host", "server.port", "server.workers"],
            ["server.host", "server.port", "server.workers"],
        ),
        (
            {"server": {"limits": {"keep_alive_s": 1}, "cors_origins": ["https://a.example"]}},
            ["server.cors_origins", "server.limits.keep_alive_s"],
            ["server.cors_origins", "server.limits.keep_alive_s"],
        ),
        (
            {"logging": {"spec_log_file": "spec.jsonl", "level": "DEBUG"}},
            ["logging.level", "logging.spec_log_file"],
            ["logging.spec_log_file"],
        ),
    ],
)
def test_changed_keys_and_those_that_need_a_restart(
    change: dict[str, Any], changed: list[str], restart: list[str]
) -> None:
    found = classify(settings(), settings(**change))
    assert list(found.changed) == changed
    assert list(found.restart) == restart
    assert list(found.live) == [k for k in changed if k not in restart]


def test_a_model_added_names_its_keys_and_applies_live() -> None:
    small = {"provider": "openai", "base_url": "http://h", "model": "m"}
    found = classify(settings(), settings(models={"small": small}))
    assert {"models.small.base_url", "models.small.model"} <= set(found.changed)
    assert all(k.startswith("models.small.") for k in found.changed)
    assert "models.small.launch" not in found.changed  # None: not a key it sets
    assert found.restart == ()


def test_a_launch_section_added_changed_or_removed_needs_a_restart() -> None:
    launched = settings(models=LAUNCH)
    assert classify(settings(), launched).restart == ("models.local.launch",)
    assert classify(launched, settings()).restart == ("models.local.launch",)
    moved = settings(models={"local": {"base_url": None, "launch": {"port": 0, "host": "::1"}}})
    assert classify(launched, moved).restart == ("models.local.launch.host",)


@pytest.mark.parametrize(
    ("key", "restart"),
    [
        ("server.port", True),
        ("server.limits.max_headers", True),
        ("server.limits.body_timeout_s", False),
        ("server.api_keys", False),
        ("models.local.launch.args", True),
        ("models.local.launcher", False),
        ("models.local.price.output_per_mtok", False),
        ("logging.spec_adjust_log_file", False),
        ("speculative_decoding.spill_threshold", False),
    ],
)
def test_needs_restart(key: str, restart: bool) -> None:
    assert needs_restart(key) is restart


def test_restart_only_changes_keep_their_running_values_the_rest_applies() -> None:
    old = settings()
    new = settings(server={"port": 9000}, speculative_decoding={"min_confidence": 0.3})
    applied = keep_running(old, new, classify(old, new).restart)
    assert applied.server.port == old.server.port
    assert applied.speculative_decoding.min_confidence == 0.3
    assert keep_running(old, new, ()) is new


def test_a_model_added_with_launch_is_left_out_until_a_restart() -> None:
    old = settings()
    new = settings(models={"extra": {"provider": "llama_server", "model": "m", "launch": {}}})
    change = classify(old, new)
    assert change.restart and all(k.startswith("models.extra.launch") for k in change.restart)
    assert "extra" not in keep_running(old, new, change.restart).models


def test_a_role_on_a_model_that_cannot_start_without_a_restart_is_refused() -> None:
    old = settings()
    new = settings(
        models={"extra": {"provider": "llama_server", "model": "m", "launch": {}}},
        speculative_decoding={"draft_model": "extra"},
    )
    with pytest.raises(ConfigError, match="restart-only"):
        keep_running(old, new, classify(old, new).restart)


def test_a_removed_launched_model_stays_until_a_restart() -> None:
    old = settings(models={"extra": {"provider": "llama_server", "model": "m", "launch": {}}})
    change = classify(old, settings())
    assert change.restart
    assert keep_running(old, settings(), change.restart).models["extra"].launch is not None


def test_embeddings_turned_on_for_a_managed_server_waits_for_a_restart() -> None:
    """``--embeddings`` is on the managed llama-server's command line: a reload reports
    it pending and keeps serving no embeddings from it; elsewhere it applies live."""
    launched = settings(models=LAUNCH)
    on = settings(models=deep_merge(LAUNCH, {"local": {"embeddings": True}}))
    change = classify(launched, on)
    assert change.restart == ("models.local.embeddings",) and change.live == ()
    assert not keep_running(launched, on, change.restart).models["local"].embeddings
    assert classify(on, launched).restart == ("models.local.embeddings",)
    unmanaged = classify(settings(), settings(models={"local": {"embeddings": True}}))
    assert unmanaged.changed == ("models.local.embeddings",) and unmanaged.restart == ()
