"""The soak's verdict (``bench/soak_parts/analysis.py``): flat or not, from its samples."""

from __future__ import annotations

import pytest

from bench.soak_parts.analysis import KB_PER_MB, Sample, analyze, slope

WARMUP_S = 300.0
IDLE = Sample(t=0.0, rss_kb=100_000, fds=20, tasks=4)


def load(rss_mb: list[float], fds: int = 60, tasks: int = 40) -> list[Sample]:
    """A sample every 10 s from t=0, with these RSS values (MB)."""
    return [
        Sample(t=10.0 * i, rss_kb=round(mb * KB_PER_MB), fds=fds, tasks=tasks)
        for i, mb in enumerate(rss_mb)
    ]


def steady_rss(after_warmup: list[float]) -> list[float]:
    """30 warm-up samples climbing from 80 to 120 MB, then these."""
    return [80 + 40 * i / 29 for i in range(30)] + after_warmup


def test_memory_that_climbs_only_in_the_warm_up_and_then_breathes_is_flat() -> None:
    rss = steady_rss([120 + (3 if i % 2 else -3) for i in range(150)])
    verdict = analyze(load(rss), IDLE, IDLE, WARMUP_S)
    assert verdict.flat and verdict.why == ()
    assert abs(verdict.rss_growth_mb) <= 6
    assert verdict.rss_start_mb == pytest.approx(117, abs=3.1)
    assert abs(verdict.rss_slope_mb_per_h) < 3
    assert verdict.fds_idle == (20, 20) and verdict.tasks_idle == (4, 4)
    assert (verdict.fds_peak, verdict.tasks_peak) == (60, 40)


def test_memory_that_keeps_growing_after_the_warm_up_is_a_leak() -> None:
    rss = steady_rss([120 + 0.1 * i for i in range(150)])  # +15 MB over 25 minutes
    verdict = analyze(load(rss), IDLE, IDLE, WARMUP_S)
    assert not verdict.flat
    assert verdict.rss_growth_mb == pytest.approx(14.7, abs=0.2)
    assert verdict.rss_slope_mb_per_h == pytest.approx(36, abs=1)
    assert verdict.why == ("RSS grew 14.7 MB after the warm-up (limit 10)",)


def test_growth_inside_the_warm_up_does_not_count() -> None:
    rss = [50 + i for i in range(30)] + [120.0] * 30
    assert analyze(load(rss), IDLE, IDLE, WARMUP_S).flat


def test_one_spike_at_the_end_is_not_growth() -> None:
    rss = steady_rss([120.0] * 149 + [160.0])  # the median of the last three ignores it
    assert analyze(load(rss), IDLE, IDLE, WARMUP_S).flat


def test_descriptors_or_tasks_left_after_the_load_are_not_flat() -> None:
    rss = steady_rss([120.0] * 30)
    fds_left = Sample(t=0.0, rss_kb=100_000, fds=23, tasks=4)
    tasks_left = Sample(t=0.0, rss_kb=100_000, fds=20, tasks=9)
    fewer = Sample(t=0.0, rss_kb=100_000, fds=18, tasks=3)
    assert analyze(load(rss), IDLE, fds_left, WARMUP_S).why == (
        "open fds 20 at idle before, 23 after",
    )
    assert analyze(load(rss), IDLE, tasks_left, WARMUP_S).why == (
        "asyncio tasks 4 at idle before, 9 after",
    )
    assert analyze(load(rss), IDLE, fewer, WARMUP_S).flat  # fewer than before is fine


def test_too_few_samples_after_the_warm_up_is_refused() -> None:
    with pytest.raises(ValueError, match="5 samples after the 300 s warm-up; need 6"):
        analyze(load(steady_rss([120.0] * 5)), IDLE, IDLE, WARMUP_S)


def test_slope() -> None:
    assert slope([(0, 1), (1, 3), (2, 5)]) == pytest.approx(2)
    assert slope([(1, 1), (1, 2)]) == 0.0
    assert slope([(0, 7)]) == 0.0
