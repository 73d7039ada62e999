"""The scrape interval of a history with holes: found where samples exist, or the message names --step."""

from __future__ import annotations

import pytest

from exporter.offline.promhistory.client import PromError
from exporter.offline.promhistory.history import Found, Request, scrape_interval
from exporter.offline.promhistory.names import DCGM_LEGACY

DAY = 86400.0


class _Client:
    """A server whose GPU series have samples only in ``(low, high]`` (15 s apart)."""

    url = "http://prom:9090"

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high
        self.asked: list[float] = []

    def raw_times(self, expr: str, at: float, window_s: float) -> list[list[float]]:
        self.asked.append(at)
        times = [t for t in range(int(at - window_s), int(at) + 1, 15) if self.low < t <= self.high]
        return [[float(t) for t in times]] if times else []


FOUND = Found(schemes=[DCGM_LEGACY], nodes={"n1": 'Hostname="n1"'}, host_nodes={}, present=set(), pod_jobs={})


def test_a_week_whose_end_start_and_middle_hold_no_sample_still_tells_its_interval():
    """A pool at zero now, and only a day of samples three quarters into the week."""
    request = Request("http://prom:9090", 0.0, 7 * DAY)
    client = _Client(5.0 * DAY, 5.5 * DAY)
    assert scrape_interval(client, request, FOUND) == 15.0  # type: ignore[arg-type]


def test_a_history_with_no_sample_at_any_probe_names_step():
    request = Request("http://prom:9090", 0.0, 7 * DAY)
    client = _Client(0.3 * DAY, 0.31 * DAY)
    with pytest.raises(PromError) as caught:
        scrape_interval(client, request, FOUND)  # type: ignore[arg-type]
    assert "--step" in str(caught.value) and "\n" not in str(caught.value)
    assert len(client.asked) == 9  # the end, the start and seven eighths: bounded
