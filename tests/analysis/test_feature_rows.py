"""The feature rows a GPU's window keeps as points arrive give the same features as computing them from
the points, whatever the window evicted, dropped or refused, and the class-string counts match the loops."""

from __future__ import annotations

import dataclasses
import random

from exporter.analysis.features import (
    GpuWindow,
    _gaps,
    _util_stats,
    count_gaps,
    gpu_features,
    util_class,
    util_stats,
)
from exporter.analysis.points import GpuPoint

UTILS = (0.0, 0.05, 0.0999, 0.1, 0.3, 0.4999, 0.5, 0.7, 0.99, 1.0)


def _point(rnd: random.Random, t: float) -> GpuPoint:
    def maybe(value: object, missing: float = 0.15) -> object:
        return None if rnd.random() < missing else value

    return GpuPoint(
        t=t,
        util=maybe(rnd.choice(UTILS)),  # type: ignore[arg-type]
        mem_util=maybe(rnd.random()),  # type: ignore[arg-type]
        power_w=maybe(rnd.gauss(400, 150)),  # type: ignore[arg-type]
        power_limit_w=maybe(700.0, 0.5),  # type: ignore[arg-type]
        mem_used_bytes=maybe(rnd.choice([1e8, 6e10])),  # type: ignore[arg-type]
        temp_c=maybe(rnd.gauss(80, 10)),  # type: ignore[arg-type]
        sm_clock_hz=maybe(rnd.choice([0.0, 1.2e9, 1.98e9])),  # type: ignore[arg-type]
        sm_clock_max_hz=maybe(1.98e9),  # type: ignore[arg-type]
        reasons=maybe(rnd.choice([0, 0x4, 0x8, 0x20, 0x40, 0x80])),  # type: ignore[arg-type]
        sm_active=maybe(rnd.random()),  # type: ignore[arg-type]
        nvlink_tx_bps=maybe(rnd.random() * 1e10),  # type: ignore[arg-type]
        nvlink_rx_bps=maybe(rnd.random() * 1e10),  # type: ignore[arg-type]
        pcie_tx_bps=maybe(rnd.random() * 1e9),  # type: ignore[arg-type]
        nvlink_errors=maybe(float(int(t))),  # type: ignore[arg-type]
        fabric_ready=maybe(rnd.random() < 0.5),  # type: ignore[arg-type]
    )


def _exact(features: object) -> str:
    return repr(dataclasses.asdict(features))  # type: ignore[call-overload]  # floats to the last bit


def test_window_rows_give_the_features_of_the_points() -> None:
    rnd = random.Random(3)
    for _ in range(60):
        window = GpuWindow(rnd.choice([5.0, 30.0, 60.0]), rnd.choice([None, 40, 400]))
        t = now = 0.0
        for _ in range(120):
            for _ in range(rnd.choice([0, 1, 5])):
                t += rnd.choice([-0.5, 0.0, 0.2, 1.0])  # a step back is refused by the window
                window.add(_point(rnd, t))
            now = max(now, t) + rnd.choice([-3.0, 0.0, 1.0])  # an evaluation earlier than the last one too
            window.evict(now)
            if rnd.random() < 0.02:
                window.clear()
            points = window.since(now - rnd.choice([10.0, 30.0]))
            assert _exact(gpu_features(points, "", None, window)) == _exact(gpu_features(points))


def test_class_counts_match_the_loops() -> None:
    rnd = random.Random(5)
    for _ in range(500):
        utils = [rnd.choice(UTILS) for _ in range(rnd.randint(0, 40))]
        classes = "".join(util_class(u) for u in utils)
        assert _gaps(classes) == count_gaps(utils)
        assert _util_stats(utils, classes) == util_stats(utils)
