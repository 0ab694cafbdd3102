"""Stand-ins for llama.cpp's files: a ``llama-server`` binary that runs a script, tiny GGUFs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from app.config import LaunchConfig

STAND_IN = Path(__file__).resolve().parents[1] / "local_server" / "stand_in_llama_server.py"
VOCAB = tuple(["<s>", "</s>", "<unk>", "<pad>", "<x>"] + [f"tok{i}" for i in range(300)])


class StandIn:
    """Builds LaunchConfigs that run the stand-in; records the pids it spawned."""

    def __init__(self, tmp_path: Path) -> None:
        self.binary = tmp_path / "llama-server"
        self.binary.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STAND_IN}" "$@"\n')
        self.binary.chmod(0o755)
        self.model = tmp_path / "model.gguf"
        self.model.write_bytes(b"GGUF\x03\x00\x00\x00")
        self.pid_file = tmp_path / "pids"
        self.flag = tmp_path / "fail-from-now-on"

    def config(self, *args: str, **overrides: Any) -> LaunchConfig:
        fields: dict[str, Any] = {
            "binary": str(self.binary),
            "model": str(self.model),
            "port": 0,
            "args": ["--pid-file", str(self.pid_file), *args],
            "startup_timeout": 10,
            "restart_backoff_initial": 0.05,
            "restart_backoff_max": 0.2,
            "max_restarts": 3,
        }
        return LaunchConfig(**(fields | overrides))

    def pids(self) -> list[int]:
        if not self.pid_file.exists():
            return []
        return [int(line) for line in self.pid_file.read_text().split()]


def write_gguf(path: Path, *, params: int = 1000, **over: Any) -> Path:
    """A tiny GGUF with a tokenizer (the fields pairing reads) and one tensor of ``params``."""
    fields = {
        "vocab_type": "gpt2",
        "tokens": VOCAB,
        "bos": 1,
        "eos": 2,
        "add_bos": False,
        "add_eos": False,
    } | over
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(path.stem)
    writer.add_tokenizer_model(fields["vocab_type"])
    writer.add_token_list(list(fields["tokens"]))
    writer.add_bos_token_id(fields["bos"])
    writer.add_eos_token_id(fields["eos"])
    writer.add_add_bos_token(fields["add_bos"])
    writer.add_add_eos_token(fields["add_eos"])
    writer.add_tensor("weight", np.zeros(params, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
