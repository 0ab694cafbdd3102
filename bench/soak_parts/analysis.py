"""Flat or not: the pure reading of the soak's samples (no I/O; ``tests/bench/test_soak.py``).

The proxy is flat when, after the warm-up, its resident memory grew less than
``RSS_LIMIT_MB`` (the median of the last ``SMOOTH`` samples under load against the median
of the first ``SMOOTH`` after the warm-up: one sample is one moment of a heap that
breathes with the requests in flight), and once the load stopped and the proxy settled,
its open descriptors and asyncio tasks are back to what they were at idle before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

RSS_LIMIT_MB = 10.0
KB_PER_MB = 1e6 / 1024  # /proc's kB are KiB; an MB here is 10^6 bytes
SMOOTH = 3  # samples per end of the RSS comparison


@dataclass(frozen=True)
class Sample:
    """One look at the proxy: ``t`` seconds after the load started (idle looks: any ``t``)."""

    t: float
    rss_kb: int
    fds: int
    tasks: int
    in_flight: int = 0
    requests: int = 0  # the proxy's /stats requests.total
    errors: int = 0  # its requests.errors
    config_version: int = 0


@dataclass(frozen=True)
class Verdict:
    flat: bool
    rss_start_mb: float  # after the warm-up
    rss_end_mb: float
    rss_growth_mb: float
    rss_slope_mb_per_h: float  # least squares over the samples after the warm-up
    fds_idle: tuple[int, int]  # before the load, after it (settled)
    tasks_idle: tuple[int, int]
    fds_peak: int
    tasks_peak: int
    why: tuple[str, ...]  # what is not flat; empty when flat


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (0 with fewer than two distinct x)."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def analyze(
    under_load: list[Sample],
    before: Sample,
    after: Sample,
    warmup_s: float,
    rss_limit_mb: float = RSS_LIMIT_MB,
) -> Verdict:
    """The verdict on one soak: ``under_load`` in time order, ``before``/``after`` idle."""
    steady = [s for s in under_load if s.t >= warmup_s]
    if len(steady) < 2 * SMOOTH:
        raise ValueError(
            f"{len(steady)} samples after the {warmup_s:g} s warm-up; need {2 * SMOOTH}"
        )
    start = median(s.rss_kb for s in steady[:SMOOTH]) / KB_PER_MB
    end = median(s.rss_kb for s in steady[-SMOOTH:]) / KB_PER_MB
    per_hour = slope([(s.t / 3600, s.rss_kb / KB_PER_MB) for s in steady])
    why = []
    if end - start >= rss_limit_mb:
        why.append(f"RSS grew {end - start:.1f} MB after the warm-up (limit {rss_limit_mb:g})")
    if after.fds > before.fds:
        why.append(f"open fds {before.fds} at idle before, {after.fds} after")
    if after.tasks > before.tasks:
        why.append(f"asyncio tasks {before.tasks} at idle before, {after.tasks} after")
    return Verdict(
        flat=not why,
        rss_start_mb=round(start, 1),
        rss_end_mb=round(end, 1),
        rss_growth_mb=round(end - start, 1),
        rss_slope_mb_per_h=round(per_hour, 1),
        fds_idle=(before.fds, after.fds),
        tasks_idle=(before.tasks, after.tasks),
        fds_peak=max(s.fds for s in under_load),
        tasks_peak=max(s.tasks for s in under_load),
        why=tuple(why),
    )
