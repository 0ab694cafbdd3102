"""Config loading: env interpolation, secrets from the environment only, errors name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from app.composition import check, load
from app.config import ConfigError, SpeculativeConfig, load_settings, settings_from_mapping
from app.config.depth import DEPTH_LOW_MARGIN
from app.routing.depth import LOW_MARGIN
from app.vocabulary import Strategy

SHIPPED = Path(__file__).resolve().parent.parent / "config.yaml"


def minimal(**overrides) -> dict:
    tree = {
        "models": {
            "local": {
                "provider": "llama_server",
                "base_url": "http://127.0.0.1:8080",
                "model": "l",
            },
            "cerebras": {
                "provider": "cerebras",
                "base_url": "https://api.cerebras.ai/v1",
                "model": "gpt-oss-120b",
                "api_key": "${CEREBRAS_API_KEY}",
            },
        }
    }
    tree.update(overrides)
    return tree


def test_shipped_config_loads_with_the_measured_policy() -> None:
    settings = load_settings(SHIPPED, env={"CEREBRAS_API_KEY": "csk-abc"})
    spec = settings.speculative_decoding
    assert settings.routing.strategy is Strategy.SPECULATIVE
    # README "Routing quality": the combined policy, a budget that fits most answers
    assert (spec.policy, spec.max_draft_tokens, spec.early_abort, spec.hedge) == (
        "combined",
        128,
        True,
        "streams",  # whole requests are not hedged: likely spills take the gate's cloud lane
    )
    assert (spec.min_confidence, spec.short_draft_chars) == (0.8, 50)
    # docs/performance.md (streams) and docs/routing-quality.md (a stricter early abort)
    assert (spec.stream_first_token_s, spec.abort_check_tokens, spec.abort_min_score) == (
        0.25,
        8,
        0.5,
    )
    assert (spec.stream_trust_score, spec.stream_trust_s) == (0.1, 1.0)
    assert spec.uncertainty_markers == ["...", "I think", "maybe"]
    assert settings.models["cerebras"].api_key.get_secret_value() == "csk-abc"
    assert settings.models["local"].launch is not None


def shipped_leaves_against_defaults() -> list[tuple[str, Any, Any]]:
    """(path, shipped value, schema default) for every leaf config.yaml sets that has a
    default, walking the file's tree beside the schema's sections. The values are compared
    validated, as the proxy holds them (``verify_model: cerebras`` is ``["cerebras"]``)."""
    tree = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    # No variable exported: ${SPECPROXY_API_KEYS:-} is empty, what the file says by itself.
    settings = load_settings(SHIPPED, env={})
    leaves: list[tuple[str, Any, Any]] = []

    def walk(section: BaseModel, written: dict[str, Any], path: str) -> None:
        for key, value in written.items():
            here = f"{path}.{key}" if path else key
            held = getattr(section, key)
            if key == "models" and not path:
                # A map of upstreams named by the user: it has no default entries, and each
                # entry's values (timeouts, prices, retries) are that upstream's own, different
                # for the local model and the cloud, so no one default could equal them.
                continue
            if isinstance(held, BaseModel):
                walk(held, value or {}, here)
                continue
            default = type(section).model_fields[key].get_default(call_default_factory=True)
            assert default is not PydanticUndefined, f"{here} is set but has no default"
            leaves.append((here, held, default))

    walk(settings, tree, "")
    return leaves


def test_every_schema_default_is_the_value_the_shipped_config_sets() -> None:
    # A key left out means what the shipped file says: a minimal config behaves as shipped.
    leaves = shipped_leaves_against_defaults()
    differ = [
        f"{path}: shipped {held!r}, default {default!r}"
        for path, held, default in leaves
        if held != default
    ]
    assert differ == [], "set the schema's default to the shipped value:\n" + "\n".join(differ)
    compared = {path for path, _, _ in leaves}
    # The walk reached the nested sections and the keys that once differed.
    assert {
        "server.port",
        "routing.strategy",
        "logging.level",
        "adaptive_depth.server_n_max.start_offsets",
        "adaptive_depth.draft_budget.enabled",
    } | {
        f"speculative_decoding.{key}"
        for key in (
            "max_draft_tokens",
            "policy",
            "early_abort",
            "abort_min_score",
            "abort_check_tokens",
            "hedge",
            "stream_first_token_s",
            "stream_trust_score",
        )
    } <= compared


def test_the_default_comparison_sees_a_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    # The check above is not vacuous: a default moved away from the shipped value is found.
    field = SpeculativeConfig.model_fields["max_draft_tokens"]
    monkeypatch.setattr(field, "default", 10)
    leaves = {path: (held, default) for path, held, default in shipped_leaves_against_defaults()}
    assert leaves["speculative_decoding.max_draft_tokens"] == (128, 10)


def test_missing_key_variable_means_no_key() -> None:
    settings = settings_from_mapping(minimal(), env={})
    assert settings.models["cerebras"].api_key is None


def test_env_default_and_key_list() -> None:
    tree = minimal(server={"api_keys": "${KEYS:-}", "port": "${PORT:-9001}"})
    settings = settings_from_mapping(tree, env={"KEYS": "k1, k2"})
    assert [k.get_secret_value() for k in settings.server.api_keys] == ["k1", "k2"]
    assert settings.server.port == 9001


def test_secret_values_never_show_in_dumps() -> None:
    settings = settings_from_mapping(
        minimal(server={"api_keys": "${K}"}),
        env={"CEREBRAS_API_KEY": "csk-secret-1", "K": "proxy-secret"},
    )
    dumped = str(settings.model_dump(mode="json")) + repr(settings)
    assert "csk-secret-1" not in dumped and "proxy-secret" not in dumped
    assert sorted(settings.secrets()) == ["csk-secret-1", "proxy-secret"]


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        (minimal(routing={"strategy": "fastest"}), "routing.strategy"),
        (
            minimal(speculative_decoding={"min_confidence": 1.5}),
            "speculative_decoding.min_confidence",
        ),
        (minimal(speculative_decoding={"max_draft_tokenz": 5}), "max_draft_tokenz"),
        (minimal(speculative_decoding={"verify_model": "gpt"}), "verify_model names 'gpt'"),
        (
            minimal(speculative_decoding={"model_name": "local"}),
            "speculative_decoding.model_name 'local' is also a name under models",
        ),
        (minimal(speculative_decoding={"model_name": ""}), "speculative_decoding.model_name"),
        (minimal(server={"api_keys": ["plain-text-key"]}), "server.api_keys: secrets may only"),
        (minimal(server={"workers": 0}), "server.workers"),
        ({"models": {"x": {"provider": "cerebras", "model": "m"}}}, "models.x"),
        (
            {
                "models": {
                    "x": {"provider": "llama_server", "base_url": "localhost:1", "model": "m"}
                }
            },
            "models.x.base_url",
        ),
        ([1, 2], "mapping"),
    ],
)
def test_bad_config_names_the_key(tree, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("'", ".")):
        settings_from_mapping(tree, env={})


def test_bad_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_settings(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("models: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(tmp_path / "bad.yaml")


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"hedge": "auto", "policy": "seed"}, ["hedge: auto", "policy"]),
        ({"policy": "combined", "scorer_file": "/nonexistent.json"}, ["cannot read scorer"]),
        ({"policy": "foo"}, ["speculative_decoding.policy", "seed", "combined"]),
        ({"abort_min_token_prob": 1.5}, ["speculative_decoding.abort_min_token_prob"]),
        ({"spill_threshold": -0.1}, ["speculative_decoding.spill_threshold"]),
        ({"hedge": "sometimes"}, ["speculative_decoding.hedge"]),
        (
            {"stream_first_token_s": 1.0, "stream_trust_score": 0.2, "stream_trust_s": 1.0},
            ["stream_trust_s (1) must be above stream_first_token_s (1)"],
        ),
    ],
)
def test_bad_routing_policy_is_refused_at_load(tmp_path: Path, spec: dict, words: list) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(minimal(speculative_decoding=spec)), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load(path, env={})  # the schema's checks and the composition root's (the scorer loads)
    message = str(caught.value)
    assert message.startswith(f"{path}: speculative_decoding")
    for word in words:
        assert word in message
    assert "Traceback" not in message and "\n" not in message


@pytest.mark.parametrize(
    "spec",
    [
        {"policy": "combined", "hedge": "auto"},
        {"policy": "confidence", "hedge": "always", "early_abort": True},
        {"policy": "seed", "hedge": "always", "abort_min_token_prob": 0.0},
    ],
)
def test_valid_routing_policies_load(spec: dict) -> None:
    settings = settings_from_mapping(minimal(speculative_decoding=spec), env={})
    assert settings.speculative_decoding.policy == spec["policy"]


def test_a_scorer_file_that_is_not_a_scorer_is_refused(tmp_path: Path) -> None:
    scorer = tmp_path / "scorer.json"
    scorer.write_text('{"name": "half"}', encoding="utf-8")
    tree = minimal(speculative_decoding={"policy": "combined", "scorer_file": str(scorer)})
    with pytest.raises(ConfigError, match=r"speculative_decoding: .*not a scorer file"):
        check(settings_from_mapping(tree, env={}))


def test_the_seed_policy_loads_with_the_shipped_hedge() -> None:
    # hedge: streams reads no spill rates, so the seed policy needs no other hedge
    spec = settings_from_mapping(minimal(speculative_decoding={"policy": "seed"}), env={})
    assert (spec.speculative_decoding.policy, spec.speculative_decoding.hedge) == (
        "seed",
        "streams",
    )


def test_a_bare_yaml_off_turns_hedging_off(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(SHIPPED.read_text(encoding="utf-8").replace("hedge: streams", "hedge: off"))
    spec = load_settings(path, env={}).speculative_decoding
    assert spec.hedge == "off"


def test_the_depth_targets_floor_is_the_controllers_step_down_margin() -> None:
    # config cannot import routing, so it keeps its own copy of the margin.
    assert DEPTH_LOW_MARGIN == LOW_MARGIN


def test_learning_ships_on_and_under_the_seed_policy_is_off_unless_asked() -> None:
    shipped = load_settings(SHIPPED, env={"CEREBRAS_API_KEY": "csk-abc"})
    assert shipped.learning.enabled and shipped.learning.state_dir == "state"
    assert shipped.speculative_decoding.agreement == "facts"
    ignored = (SHIPPED.parent / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert "/state/" in ignored  # the learner's labels never end up in a commit
    seed = {"policy": "seed", "hedge": "off"}
    assert not settings_from_mapping(minimal(speculative_decoding=seed), env={}).learning.enabled
    with pytest.raises(ConfigError, match=r"learning\.enabled needs a scored policy"):
        settings_from_mapping(
            minimal(speculative_decoding=seed, learning={"enabled": True}), env={}
        )
