"""Settings: the schema of config.yaml (``schema``, with a module per section or group
of sections: ``server``, ``models``, ``speculative``, ``depth``, ``learning``, ``keys``,
``state``, ``telemetry``, ``otel``) and how a file becomes one (``loading``)."""

from app.config.depth import (
    AdaptiveDepthConfig,
    BudgetDepthConfig,
    DepthConfig,
    ServerDepthConfig,
)
from app.config.learning import LearningConfig
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
from app.config.schema import RoutingConfig, Settings
from app.config.server import ServerConfig
from app.config.speculative import GateConfig, SpeculativeConfig
from app.config.state import CacheConfig, ResponsesConfig, StateConfig
from app.config.telemetry import AlertConfig, LoggingConfig, TelemetryConfig

__all__ = [
    "AdaptiveDepthConfig",
    "AlertConfig",
    "BreakerConfig",
    "BudgetDepthConfig",
    "CacheConfig",
    "ConcurrencyConfig",
    "ConfigError",
    "DepthConfig",
    "GateConfig",
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
