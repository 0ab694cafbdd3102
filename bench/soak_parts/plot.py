"""The soak's picture: the proxy's RSS, open fds, asyncio tasks and request rate over time."""

from __future__ import annotations

import itertools
from pathlib import Path

from bench.soak_parts.analysis import KB_PER_MB, Sample, Verdict


def plot(
    samples: list[Sample],
    verdict: Verdict,
    warmup_s: float,
    events: dict[str, list[float]],
    path: Path,
    title: str,
) -> None:
    """Four panels over minutes; the warm-up shaded, the Redis restart and the SIGHUPs
    marked (``events``: "sighup", "redis down", "redis up": seconds since the start)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s.t / 60 for s in samples]
    rate = [
        (b.requests - a.requests) / (b.t - a.t) if b.t > a.t else 0.0
        for a, b in itertools.pairwise(samples)
    ]
    panels = [
        ("RSS (MB)", minutes, [s.rss_kb / KB_PER_MB for s in samples]),
        ("open fds", minutes, [float(s.fds) for s in samples]),
        ("asyncio tasks", minutes, [float(s.tasks) for s in samples]),
        ("requests/s", minutes[1:], rate),
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 8.5), sharex=True)
    for ax, (label, xs, values) in zip(axes, panels, strict=True):
        ax.plot(xs, values, marker=".", linewidth=1)
        ax.set_ylabel(label)
        ax.axvspan(0, warmup_s / 60, color="0.9", label="warm-up")
        for t in events.get("sighup", []):
            ax.axvline(t / 60, color="tab:green", alpha=0.25, linewidth=0.8)
        for t in events.get("redis down", []):
            ax.axvline(t / 60, color="tab:red", linestyle="--", linewidth=1)
        for t in events.get("redis up", []):
            ax.axvline(t / 60, color="tab:red", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
    axes[0].axhline(
        verdict.rss_start_mb + 10, color="tab:orange", linewidth=0.8, label="start + 10 MB"
    )
    for ax, (before, after) in ((axes[1], verdict.fds_idle), (axes[2], verdict.tasks_idle)):
        ax.axhline(before, color="0.4", linestyle="--", linewidth=0.8, label="idle before")
        ax.plot([minutes[-1]], [after], marker="x", color="black", label="idle after")
        ax.legend(loc="upper left", fontsize=8)
    axes[0].legend(loc="lower right", fontsize=8)
    axes[-1].set_xlabel("minutes (green: SIGHUP; red dashed: redis-server killed, dotted: back)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
