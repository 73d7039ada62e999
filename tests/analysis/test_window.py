"""The window's suffix lookup: the same points as testing each one's time, found by bisection."""

from __future__ import annotations

import pytest

from exporter.analysis.points import GpuPoint
from exporter.analysis.window import Window

TIMES = [1.0, 2.0, 2.0, 2.0, 3.5, 4.0, 4.0, 7.25]


@pytest.mark.parametrize("t", [0.0, 1.0, 1.5, 2.0, 3.5, 4.0, 7.0, 7.25, 9.0])
def test_since_is_the_points_after_t_oldest_first(t):
    window: Window[GpuPoint] = Window(span_s=100.0)
    window.extend(GpuPoint(t=x, util=i / 10) for i, x in enumerate(TIMES))
    assert window.since(t) == [p for p in window if p.t > t]


def test_since_on_an_empty_or_bounded_window():
    window: Window[GpuPoint] = Window(span_s=10.0, max_points=3)
    assert window.since(0.0) == []
    window.extend(GpuPoint(t=x) for x in TIMES)  # the bound keeps the newest three
    assert [p.t for p in window.since(0.0)] == [4.0, 4.0, 7.25]
    assert [p.t for p in window.since(4.0)] == [7.25]
