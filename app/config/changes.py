"""What a reload of config.yaml changes, and which of those changes wait for a restart.

A running proxy can swap its pipeline (policy, scorer, thresholds, prices, upstream
clients, learner) and its per-request settings (keys, body limits, strategy), but not
what was fixed when the process started: the listening socket, the worker count,
uvicorn's connection limits, the CORS middleware, the managed llama-servers, the
speculation log's file and the shared state's Redis (and a managed server's
``embeddings``, which is on its command line). ``classify`` names every changed
key and which of them are restart-only; ``keep_running`` lays the running values back
over those keys, so the settings a reload applies are exactly what the proxy serves
with. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.config.loading import ConfigError
from app.config.schema import Settings

# Dotted key patterns ("*" is one segment) whose change needs a restart; a pattern also
# covers every key below it.
RESTART_ONLY: tuple[str, ...] = (
    "server.host",  # the listening socket
    "server.port",
    "server.workers",  # uvicorn's supervisor spawned them
    "server.cors_origins",  # middleware is fixed once the app serves
    "server.shutdown_grace_s",  # uvicorn's setting
    "server.edge",  # the app's class, its server protocol and stream writer
    "server.limits.max_header_bytes",  # the protocol class's limits, set before serving
    "server.limits.max_headers",
    "server.limits.head_timeout_s",
    "server.limits.keep_alive_s",  # uvicorn's settings
    "server.limits.max_connections",
    "models.*.launch",  # the managed llama-server keeps running
    "logging.spec_log_file",  # the speculation log stays open
    "logging.spec_log_max_bytes",
    "logging.spec_log_backups",
    "logging.spec_log_content",
    "state",  # the fleet's Redis connection and sync are made once at start
    "telemetry.otel",  # the tracer and its exporter are made once at start
)
# Keys of a model entry that shape its managed llama-server's command line
# (``ModelConfig.managed_launch``): restart-only for a model with ``launch``, live otherwise.
LAUNCH_SHAPING: tuple[str, ...] = ("embeddings",)  # adds --embeddings (and --pooling)


@dataclass(frozen=True)
class ConfigChange:
    """The keys a new config changes (dotted paths), and those of them that need a restart."""

    changed: tuple[str, ...]
    restart: tuple[str, ...]

    @property
    def live(self) -> tuple[str, ...]:
        """The changed keys a reload applies."""
        return tuple(key for key in self.changed if key not in self.restart)


def needs_restart(key: str) -> bool:
    """Whether a change of this dotted key waits for a restart."""
    parts = key.split(".")
    for pattern in RESTART_ONLY:
        wanted = pattern.split(".")
        if len(parts) >= len(wanted) and all(
            w in ("*", p) for w, p in zip(wanted, parts, strict=False)
        ):
            return True
    return False


def classify(old: Settings, new: Settings) -> ConfigChange:
    """Every key whose value differs between two settings, and the restart-only ones."""
    changed = tuple(_differences(old.model_dump(), new.model_dump(), ""))
    kept = old.models.keys() & new.models.keys()  # one added or removed: its launch says so
    managed = {n for n in kept if old.models[n].launch or new.models[n].launch}
    return ConfigChange(
        changed, tuple(k for k in changed if needs_restart(k) or _shapes_launch(k, managed))
    )


def _shapes_launch(key: str, managed: set[str]) -> bool:
    """Whether ``key`` changes the command line of a managed llama-server (``managed``:
    the models kept with ``launch`` before or after): it keeps running as it started."""
    parts = key.split(".")
    return (
        len(parts) == 3
        and parts[0] == "models"
        and parts[1] in managed
        and (parts[2] in LAUNCH_SHAPING)
    )


def keep_running(old: Settings, new: Settings, keys: tuple[str, ...]) -> Settings:
    """``new`` with the running values of ``keys`` (restart-only changes are not applied).

    A key the running settings lack (a model added with ``launch:``) takes its entry out:
    what cannot start without a restart is not served. Raises ConfigError when what is
    left does not validate (e.g. a role names that model).
    """
    if not keys:
        return new
    tree, running = new.model_dump(), old.model_dump()
    for key in keys:
        _restore(tree, running, key.split("."))
    try:
        return Settings.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(
            f"without its restart-only changes ({', '.join(keys)}) the config is not valid: "
            + "; ".join(str(e["msg"]) for e in exc.errors())
        ) from exc


def _differences(old: Any, new: Any, path: str) -> Iterator[str]:
    """Dotted paths of the leaves that differ; a key on one side only: its side's leaves
    that are set (a model added without ``launch`` names no ``launch`` key)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted({*old, *new}, key=str):
            here = f"{path}.{key}" if path else str(key)
            if key not in old:
                yield from _leaves(new[key], here)
            elif key not in new:
                yield from _leaves(old[key], here)
            else:
                yield from _differences(old[key], new[key], here)
    elif old != new:  # SecretStr compares its secret values
        yield path


def _leaves(node: Any, path: str) -> Iterator[str]:
    if isinstance(node, Mapping):
        for key in sorted(node, key=str):
            yield from _leaves(node[key], f"{path}.{key}")
    elif node is not None:
        yield path


def _restore(tree: dict[str, Any], running: dict[str, Any], parts: list[str]) -> None:
    """Set ``tree`` at ``parts`` to ``running``'s value; where ``running`` lacks a level,
    drop that level from ``tree``."""
    here, there = tree, running
    for i, part in enumerate(parts):
        if not isinstance(there, dict) or part not in there:
            if isinstance(here, dict):
                here.pop(part, None)
            return
        if i == len(parts) - 1:
            here[part] = there[part]
            return
        if not isinstance(here.get(part), dict):
            here[part] = there[part]
            return
        here, there = here[part], there[part]
