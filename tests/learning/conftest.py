"""The learning tests' stand-ins answer by prompt: each question has its own draft and answer."""

from tests.support.scripted import cerebras_class, llama_server_class

__all__ = ["cerebras_class", "llama_server_class"]
