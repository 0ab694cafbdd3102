"""Settings: the schema of config.yaml (``schema``) and how a file becomes one (``loading``)."""

from app.config.loading import (
    ConfigError,
    interpolate_env,
    load_settings,
    settings_from_mapping,
)
from app.config.schema import (
    AdaptiveDepthConfig,
    AlertConfig,
    BreakerConfig,
    BudgetDepthConfig,
    ConcurrencyConfig,
    DepthConfig,
    LaunchConfig,
    LoggingConfig,
    ModelConfig,
    RateReserve,
    RoutingConfig,
    ServerConfig,
    ServerDepthConfig,
    Settings,
    SpeculativeConfig,
    TelemetryConfig,
    Timeouts,
)
from app.vocabulary import PolicyName, Strategy

__all__ = [
    "AdaptiveDepthConfig",
    "AlertConfig",
    "BreakerConfig",
    "BudgetDepthConfig",
    "ConcurrencyConfig",
    "ConfigError",
    "DepthConfig",
    "LaunchConfig",
    "LoggingConfig",
    "ModelConfig",
    "PolicyName",
    "RateReserve",
    "RoutingConfig",
    "ServerConfig",
    "ServerDepthConfig",
    "Settings",
    "SpeculativeConfig",
    "Strategy",
    "TelemetryConfig",
    "Timeouts",
    "interpolate_env",
    "load_settings",
    "settings_from_mapping",
]
