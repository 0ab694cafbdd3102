"""The proxy's own llama-server: find the binary and model, run and supervise the process."""

from app.local_server.assets import (
    MODEL_SHA256,
    ensure_model,
    find_llama_server,
    install_llama_server,
    llama_server_version,
    model_cache_dir,
)
from app.local_server.errors import LocalServerError
from app.local_server.managed import ManagedLlamaServer, ServerState

__all__ = [
    "MODEL_SHA256",
    "LocalServerError",
    "ManagedLlamaServer",
    "ServerState",
    "ensure_model",
    "find_llama_server",
    "install_llama_server",
    "llama_server_version",
    "model_cache_dir",
]
