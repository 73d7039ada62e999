"""Slopes over Unix timestamps: a temperature climbing toward slowdown and a /dev/shm filling up."""

from __future__ import annotations

import pytest

from exporter.analysis.detectors import thermal
from exporter.analysis.features import gpu_features, host_features, slope
from exporter.analysis.points import GpuPoint, HostPoint

NOW = 1_763_000_000.0  # a Unix time of the kind live sampling and recorded logs carry


@pytest.mark.parametrize("start", [0.0, NOW])
def test_a_slope_is_the_same_whatever_the_clock_reads(start):
    pairs = [(start + 0.2 * i, 70.0 + 0.1 * 0.2 * i) for i in range(150)]  # 0.1 C/s for 30 s
    assert slope(pairs) == pytest.approx(0.1, rel=1e-6)


def test_a_busy_gpu_climbing_toward_slowdown_is_forecast():
    # 30 s of a busy GPU at full clocks, 82 C and rising 0.1 C/s: slowdown at 87 C in about 50 s
    points = [
        GpuPoint(
            t=NOW + 0.2 * i, util=1.0, temp_c=82.0 + 0.1 * 0.2 * i, sm_clock_hz=1.98e9, sm_clock_max_hz=1.98e9
        )
        for i in range(150)
    ]
    features = gpu_features(points)
    assert features.temp_slope == pytest.approx(0.1, rel=1e-3)
    steady = gpu_features([GpuPoint(t=p.t, util=1.0, temp_c=82.0) for p in points])
    assert thermal(features, slowdown_c=87.0).score > thermal(steady, slowdown_c=87.0).score


def test_shm_time_to_full_follows_its_fill_rate():
    size = 64 * 2**30
    points = [HostPoint(t=NOW + i, shm_used_bytes=2**30 + 2**20 * i, shm_size_bytes=size) for i in range(300)]
    features = host_features(points)
    left = size - (2**30 + 2**20 * 299)
    assert features.shm_seconds_to_full == pytest.approx(left / 2**20, rel=1e-6)
