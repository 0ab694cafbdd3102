"""The composition root: the pure routing parts, built from the settings.

``app.routing`` knows nothing of config.yaml and ``app.config`` nothing of routing;
this is the one place that reads settings and builds policies and depth rules, so
both stay free to change on their own. ``check`` runs at start-up, so a scorer
that cannot be read stops the proxy before it serves, with the key named.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.config import ConfigError, DepthConfig, Settings, SpeculativeConfig, load_settings
from app.learning.store import LearningStore
from app.routing.depth import DepthRule
from app.routing.policy import Policy
from app.routing.scorer import load_scorer
from app.vocabulary import PolicyName

if TYPE_CHECKING:
    from app.learning.shared_store import SharedLearningStore


def build_policy(config: SpeculativeConfig) -> Policy:
    """The configured policy; a scorer file that cannot be loaded raises ValueError."""
    scorer = None
    if config.policy is not PolicyName.SEED:
        scorer = load_scorer(config.scorer_file or config.policy.value)
    threshold = config.spill_threshold
    if threshold is None:
        threshold = scorer.threshold if scorer is not None else 0.5
    return Policy(
        short_draft_chars=config.short_draft_chars,
        incomplete_ratio=config.incomplete_ratio,
        uncertainty_markers=tuple(config.uncertainty_markers),
        min_mean_token_prob=config.min_mean_token_prob,
        min_token_prob=config.min_token_prob,
        scorer=scorer,
        threshold=threshold,
    )


def learning_store(settings: Settings) -> LearningStore | SharedLearningStore:
    """Where the learner keeps labels and its scorer: files under ``learning.state_dir``,
    and Redis over them with ``state.backend: redis`` (replicas then learn as one)."""
    local = LearningStore(settings.learning.state_dir, settings.learning.max_labels)
    if settings.state.backend != "redis":
        return local
    from app.learning.shared_store import SharedLearningStore
    from app.state import redis_client
    from app.state.health import RedisHealth
    from app.state.sync import replica_id

    health = RedisHealth(settings.secrets(), "learning")
    state = settings.state
    return SharedLearningStore(
        local, redis_client(state, asyncio=False), state.key_prefix, replica_id(), health
    )


def depth_rule(config: DepthConfig, k_start: int | None = None) -> DepthRule:
    """The pure controller's rule for one knob; ``k_start`` stands in when the config's is None."""
    return DepthRule(
        k_min=config.k_min,
        k_max=config.k_max,
        k_start=config.k_start or k_start or config.k_min,
        target=config.target_acceptance,
        interval=config.interval,
        window=config.window,
        step_small=config.step_small,
        step_large=config.step_large,
        start_offsets=config.start_offsets,
        ceilings=config.ceilings,
    )


def check(settings: Settings) -> None:
    """Refuse, before serving, settings whose parts cannot be built (ConfigError names the key)."""
    try:
        build_policy(settings.speculative_decoding)
    except ValueError as exc:
        raise ConfigError(f"speculative_decoding: {exc}") from exc


def load(path: str | Path, env: dict[str, str] | None = None) -> Settings:
    """``load_settings`` and ``check``: a config the proxy can serve with, or ConfigError."""
    settings = load_settings(path, env)
    try:
        check(settings)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    return settings
