"""D19: ``state.backend: redis`` where the ``redis`` extra is not installed: the proxy
exits at start naming the extra (exit 2, no traceback). The package is hidden from a real
``main.py`` process (``sys.modules["redis"] = None``: what an import finds when it is
not installed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.processes import ROOT
from tests.support.proxy import CLOUD_KEY, dead_url, proxy_config

pytestmark = pytest.mark.process  # every test here starts a process

WITHOUT_REDIS = (
    "import sys; sys.modules['redis'] = None; sys.argv[0] = 'main.py'; "
    "from app.server import main; sys.exit(main(sys.argv[1:]))"
)


def test_a_redis_backend_without_the_redis_extra_names_it(tmp_path: Path) -> None:
    state = {"backend": "redis", "redis_url": "${REDIS_URL}"}
    config = proxy_config(dead_url(), dead_url(), state=state)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_REDIS, "--config", str(path), "--port", "1"],
        cwd=ROOT,
        env={"CEREBRAS_API_KEY": CLOUD_KEY, "REDIS_URL": "redis://127.0.0.1:1/0", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "specproxy[redis]" in done.stderr
    assert "Traceback" not in done.stderr
