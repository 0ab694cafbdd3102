"""What every bench report opens with: the machine it ran on and the commit it measured."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def host_facts() -> dict[str, Any]:
    """CPU model, cores, Python, kernel and the checkout's ``git describe --dirty``."""
    cpu = "unknown"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    git = ["git", "-C", str(REPO), "describe", "--always", "--dirty"]
    commit = subprocess.run(git, capture_output=True, text=True).stdout.strip() or "unknown"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "specproxy_commit": commit,
    }
