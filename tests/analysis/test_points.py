"""Live readings into points: the P2P failures and the job's silence that each point carries."""

from __future__ import annotations

from dataclasses import fields

from exporter.analysis.points import _SHARED, GpuPoint, gpu_points, p2p_failures
from exporter.sources.readings import GpuIdentity, GpuReading, NvLinkReading, Sample


def test_points_are_built_in_the_order_of_their_fields():
    names = tuple(f.name for f in fields(GpuPoint))
    assert names == (
        "t",
        "util",
        "mem_util",
        "power_w",
        *_SHARED,
        "log_silent_s",
        "requests_running",
        "requests_waiting",
        "extra",
    )


def test_every_field_of_a_point_comes_from_its_reading():
    link = NvLinkReading  # 3 links: one unknown, one up with errors, one down without traffic counted
    before = GpuReading(
        t=100.0,
        identity=GpuIdentity(index=0, uuid="GPU-0"),
        pcie_tx_bytes=1_000,
        pcie_rx_bytes=3_000,
        nvlinks=(link(0, None, 4096, 1024), link(1, True, 2048, 0), link(2, False, None, None)),
    )
    reading = GpuReading(
        t=102.0,
        identity=GpuIdentity(index=0, uuid="GPU-0"),
        util_samples=(Sample(101.5, 0.9),),
        mem_util_samples=(Sample(101.0, 0.4),),
        power_samples=(Sample(101.2, 650.0),),
        util=0.8,
        mem_util=0.3,
        power_w=600.0,
        power_limit_w=700.0,
        power_default_limit_w=700.0,
        mem_used_bytes=1e9,
        mem_total_bytes=8e10,
        temp_c=60.0,
        temp_mem_c=70.0,
        clock_sm_hz=1.98e9,
        clock_sm_max_hz=1.98e9,
        clock_reasons=4,
        sm_active=0.5,
        tensor_active=0.25,
        pcie_tx_bytes=3_000,
        pcie_rx_bytes=4_000,
        nvlinks=(
            link(0, None, 8192, 2048),
            link(1, True, 6144, 1024, {"replay": 2, "crc": 1}),
            link(2, False, None, None, {"replay": 0}),
        ),
        fabric_state="completed",
        extra={"x": 1.0},
    )
    (point,) = gpu_points(reading, before, 3, last_sign=100.0)
    assert point == GpuPoint(
        t=101.5,
        util=0.9,
        mem_util=0.4,
        power_w=650.0,
        power_limit_w=700.0,
        power_default_w=700.0,
        mem_used_bytes=1e9,
        mem_total_bytes=8e10,
        temp_c=60.0,
        temp_mem_c=70.0,
        sm_clock_hz=1.98e9,
        sm_clock_max_hz=1.98e9,
        reasons=4,
        sm_active=0.5,
        tensor_active=0.25,
        nvlink_tx_bps=(14336 - 6144) / 2.0,
        nvlink_rx_bps=(3072 - 1024) / 2.0,
        pcie_tx_bps=1_000.0,
        pcie_rx_bps=500.0,
        nvlink_active=1,
        nvlink_links=3,
        nvlink_errors=3,
        p2p_failed=3,
        fabric_ready=True,
        log_silent_s=1.5,
        extra={"x": 1.0},
    )
    (bare,) = gpu_points(GpuReading(t=5.0, identity=GpuIdentity(index=1, uuid="GPU-1"), power_w=90.0), None)
    assert bare == GpuPoint(t=5.0, power_w=90.0)  # no links: no NVLink figures at all, no rates


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


def test_points_pickle_for_the_replays_process_pool():
    """replay --prometheus judges nodes in a process pool and hands points back: they must pickle."""
    import pickle

    from exporter.analysis.points import NO_EXTRA, GpuPoint

    back = pickle.loads(pickle.dumps(GpuPoint(t=1.0, util=0.5)))
    assert back.extra is NO_EXTRA and back.util == 0.5 and not back.extra
