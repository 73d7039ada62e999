"""Live readings into points: the P2P failures and the job's silence that each point carries."""

from __future__ import annotations

from exporter.analysis.points import gpu_points, p2p_failures
from exporter.sources.readings import GpuIdentity, GpuReading, Sample


def test_p2p_failures_count_each_gpus_unreachable_nvlink_peers():
    p2p = {
        (0, 1, "nvlink"): True,
        (0, 2, "nvlink"): False,
        (0, 2, "read"): False,  # another capability: not an NVLink failure
        (1, 0, "nvlink"): True,
        (2, 0, "nvlink"): False,
        (2, 1, "nvlink"): False,
        (3, 0, "read"): True,  # no NVLink result at all: not counted, not zero
    }
    assert p2p_failures(p2p) == {0: 1, 1: 0, 2: 2}


def test_each_point_carries_the_p2p_failures_and_the_seconds_since_the_last_sign():
    reading = GpuReading(
        t=110.0,
        identity=GpuIdentity(index=0, uuid="GPU-0"),
        util_samples=(Sample(109.5, 1.0), Sample(109.7, 0.0)),
        util=0.0,
    )
    points = gpu_points(reading, None, 2, last_sign=100.0)
    assert [(p.t, p.p2p_failed) for p in points] == [(109.5, 2), (109.7, 2)]
    assert [p.log_silent_s for p in points] == [109.5 - 100.0, 109.7 - 100.0]
    assert [p.log_silent_s for p in gpu_points(reading, None, None, last_sign=None)] == [None, None]
    future = gpu_points(reading, None, None, last_sign=200.0)  # a clock step: never negative
    assert [p.log_silent_s for p in future] == [0.0, 0.0]
