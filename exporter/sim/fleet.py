"""Simulated nodes beyond one: a node sampled on a virtual clock, and (below) a fleet served from one
process through the real render path."""

from __future__ import annotations

from dataclasses import replace

from exporter.config import Settings
from exporter.errors import ErrorCounter
from exporter.sampler import Sampler, Snapshot
from exporter.sim import SimulatedNode
from exporter.sources.host import HostSource
from exporter.sources.kubelet import PodResourcesSource
from exporter.sources.nvml import NvmlSource


class VirtualClock:
    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


def stepped_snapshot(scenario: str = "healthy", n_gpus: int = 8, seconds: int = 70) -> Snapshot:
    """The snapshot of a simulated node after ``seconds`` one-second collections on a virtual clock, with
    the kubelet's pod attribution: the window is full and the slow collections have run."""
    clock = VirtualClock()
    settings = replace(Settings(), lost_gpu_retry_s=0.0, nvml_retry_initial_s=0.0, nvml_retry_max_s=0.0)
    node = SimulatedNode(scenario, n_gpus=n_gpus, clock=clock)
    sampler = None
    try:
        errors = ErrorCounter()
        host = HostSource(errors, clock=clock, **node.host_options())  # type: ignore[arg-type]
        nvml = NvmlSource(node.install(), errors, clock=clock, slow_interval_s=settings.slow_interval_s)
        kubelet = PodResourcesSource(errors, node.kubelet_socket, timeout_s=0.5)
        sampler = Sampler(settings, errors, host, nvml, clock=clock, kubelet=kubelet)
        snapshot = None
        for _ in range(seconds):
            clock.t += 1.0
            node.host.refresh()
            snapshot = sampler.cycle(wait_s=2.0)
        assert snapshot is not None
        return snapshot
    finally:
        if sampler is not None:
            sampler.stop()
        node.close()
