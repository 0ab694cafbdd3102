"""Reading config.yaml: ``${VAR}`` interpolation, secrets only from the environment,
validation into ``Settings`` with errors that name the key.

``${VAR}`` and ``${VAR:-default}`` are replaced from the environment before
validation. Secrets (model API keys, the proxy's own client keys and ``state.redis_url``) may only
come from the environment: a literal secret written in the file is refused.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from app.config.schema import Settings

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SECRET_KEYS = frozenset({"api_key", "api_keys", "redis_url", "key", "admin_key", "telemetry_key"})


class ConfigError(Exception):
    """A config file that cannot be used; the message names the key and the problem."""


def interpolate_env(node: Any, env: dict[str, str], path: str = "") -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string of a parsed YAML tree."""
    if isinstance(node, dict):
        return {
            k: interpolate_env(v, env, f"{path}.{k}" if path else str(k)) for k, v in node.items()
        }
    if isinstance(node, list):
        return [interpolate_env(v, env, f"{path}[{i}]") for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        return env.get(name) or (default if default is not None else "")

    return _ENV_REF.sub(substitute, node)


def _refuse_literal_secrets(node: Any, path: str = "") -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            if key in _SECRET_KEYS:
                values = value if isinstance(value, list) else [value]
                for v in values:
                    if v not in (None, "") and not (isinstance(v, str) and _ENV_REF.fullmatch(v)):
                        raise ConfigError(
                            f"{here}: secrets may only come from the environment; "
                            "write it as ${ENV_VAR} and export the variable"
                        )
            else:
                _refuse_literal_secrets(value, here)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _refuse_literal_secrets(v, f"{path}[{i}]")


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        lines.append(f"{where}: {item['msg']}")
    return "; ".join(lines)


def settings_from_mapping(raw: Any, env: dict[str, str] | None = None) -> Settings:
    """Validate a parsed config tree; raises ConfigError naming the key."""
    if not isinstance(raw, dict):
        raise ConfigError("the config must be a mapping of sections (server, models, ...)")
    _refuse_literal_secrets(raw)
    tree = interpolate_env(raw, dict(os.environ) if env is None else env)
    try:
        return Settings.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc


def load_settings(path: str | Path, env: dict[str, str] | None = None) -> Settings:
    """Read and validate a YAML config file; raises ConfigError naming the key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such config file") from exc
    except (OSError, UnicodeDecodeError) as exc:  # unreadable: a directory, no permission
        raise ConfigError(f"{path}: cannot be read: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except RecursionError:  # the YAML parser recurses once per level
        raise ConfigError(f"{path}: nested too deep to read") from None
    try:
        return settings_from_mapping(raw, env)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    except RecursionError:  # a tree the parser read, too deep to check
        raise ConfigError(f"{path}: nested too deep to read") from None
