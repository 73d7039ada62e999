"""The simulated /proc writer: the CPU it reports as the simulation's."""

from __future__ import annotations

import time

from exporter.sim import parse_scenario
from exporter.sim.hostfs import SimHost
from exporter.sim.physics import NodeModel
from tests.timing import HANG_GUARD_S


def test_the_writer_thread_counts_all_of_its_cpu_as_the_simulations_not_only_its_refreshes():
    """Benchmarks take the simulation's CPU out of the exporter's: the writer's thread is the simulation's
    whole, so its waking and waiting count too (with no work in its refreshes, only those are left)."""
    host = SimHost(NodeModel(parse_scenario("healthy"), n_gpus=1))
    try:
        seen: list[float] = []
        host._update = lambda: seen.append(time.thread_time())  # a refresh that does no work
        before = host.cpu_s
        host.start(period_s=0.002)
        deadline = time.monotonic() + HANG_GUARD_S
        while len(seen) < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        host.close()
    assert len(seen) >= 30
    assert host.cpu_s - before >= seen[-1] - seen[0] > 0  # every bit of the thread's time between them
