"""D13: hot reload after a Kubernetes ConfigMap update. The kubelet mounts a ConfigMap as
``config.yaml -> ..data/config.yaml`` with ``..data -> ..<timestamp>``, and updates it by
writing a new ``..<timestamp>`` directory, swapping ``..data`` to it (a rename) and
deleting the old one; the proxy reads the path it was given at each reload."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.processes import main_process
from tests.support.proxy import dead_url, proxy_config, wait_for

pytestmark = pytest.mark.process  # every test here starts a process


def version(url: str) -> int:
    return int(httpx.get(f"{url}/stats", timeout=5).json()["config_version"])


def publish(mount: Path, stamp: str, config: dict) -> None:
    """What the kubelet does: a new timestamped directory, ``..data`` swapped to it by a
    rename, the old directory removed."""
    new = mount / f"..{stamp}"
    new.mkdir()
    (new / "config.yaml").write_text(yaml.safe_dump(config))
    old = os.readlink(mount / "..data") if (mount / "..data").is_symlink() else None
    (mount / "..data_tmp").symlink_to(new.name)
    os.replace(mount / "..data_tmp", mount / "..data")
    if old is not None:
        (mount / old / "config.yaml").unlink()
        (mount / old).rmdir()
    if not (mount / "config.yaml").is_symlink():
        (mount / "config.yaml").symlink_to("..data/config.yaml")


def test_sighup_after_a_configmap_swap_reloads_the_new_config(tmp_path: Path, edge: str) -> None:
    config = proxy_config(dead_url(), dead_url(), server={"edge": edge})
    mount = tmp_path / "mount"
    mount.mkdir()
    publish(mount, "2026_11_26_10_00_00.1", config)
    changed = {**config, "speculative_decoding": {**config["speculative_decoding"]}}
    changed["speculative_decoding"]["min_confidence"] = 0.7
    with main_process(config, tmp_path, "--config", str(mount / "config.yaml")) as (proc, url):
        assert version(url) == 1
        publish(mount, "2026_11_26_10_05_00.2", changed)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: version(url) == 2, timeout=10)
        publish(mount, "2026_11_26_10_10_00.3", config)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: version(url) == 3, timeout=10)
        assert proc.poll() is None
    text = (tmp_path / "proxy.log").read_text()
    assert "no such config file" not in text
    assert "changed: speculative_decoding.min_confidence" in text
