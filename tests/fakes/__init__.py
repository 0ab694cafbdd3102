"""Stand-in upstream servers (llama-server, Cerebras) scripted per test, served on loopback."""

from .cerebras import FakeCerebras
from .llama_server import FakeLlamaServer
from .script import Reply, tokenize
from .server import serve

__all__ = ["FakeCerebras", "FakeLlamaServer", "Reply", "serve", "tokenize"]
