"""Settings: the schema of config.yaml (``schema`` with ``models`` and ``depth``) and how a
file becomes one (``loading``)."""

from app.config.depth import (
    AdaptiveDepthConfig,
    BudgetDepthConfig,
    DepthConfig,
    ServerDepthConfig,
)
from app.config.loading import (
    ConfigError,
    interpolate_env,
    load_settings,
    settings_from_mapping,
)
from app.config.models import (
    BreakerConfig,
    ConcurrencyConfig,
    HttpLimits,
    LaunchConfig,
    ModelConfig,
    Price,
    RateReserve,
    Timeouts,
)
from app.config.schema import (
    AlertConfig,
    CacheConfig,
    LearningConfig,
    LoggingConfig,
    ResponsesConfig,
    RoutingConfig,
    ServerConfig,
    Settings,
    SpeculativeConfig,
    StateConfig,
    TelemetryConfig,
)

__all__ = [
    "AdaptiveDepthConfig",
    "AlertConfig",
    "BreakerConfig",
    "BudgetDepthConfig",
    "CacheConfig",
    "ConcurrencyConfig",
    "ConfigError",
    "DepthConfig",
    "HttpLimits",
    "LaunchConfig",
    "LearningConfig",
    "LoggingConfig",
    "ModelConfig",
    "Price",
    "RateReserve",
    "ResponsesConfig",
    "RoutingConfig",
    "ServerConfig",
    "ServerDepthConfig",
    "Settings",
    "SpeculativeConfig",
    "StateConfig",
    "TelemetryConfig",
    "Timeouts",
    "interpolate_env",
    "load_settings",
    "settings_from_mapping",
]
