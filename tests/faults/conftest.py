"""Fault tests: a sampler over a simulated node whose monotonic clock is the test's clock too, so that
backoffs, grace periods and polls are stepped by hand, never waited for."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.collect.sampler import Sampler, Snapshot
from exporter.serve.metrics import Renderer
from exporter.sim import SimulatedNode
from exporter.sources.errors import ErrorCounter
from exporter.sources.kubelet import PodResourcesSource
from exporter.sources.nvml import NvmlSource
from tests.conftest import FAST, ManualClock, RefreshingHostSource


@pytest.fixture
def faulty(clock: ManualClock, make_node) -> Iterator:
    """``faulty(node, pods=False, **settings)`` -> (sampler, errors); one clock for wall and monotonic."""
    samplers: list[Sampler] = []

    def make(node: SimulatedNode, pods: bool = False, **overrides) -> tuple[Sampler, ErrorCounter]:
        settings = replace(FAST, **overrides)
        errors = ErrorCounter()
        host = RefreshingHostSource(node, errors, clock=clock, **node.host_options())  # type: ignore[arg-type]
        nvml = NvmlSource.configured(node.install(), errors, settings, clock=clock)
        kubelet = PodResourcesSource(errors, node.kubelet_socket, timeout_s=0.5) if pods else None
        sampler = Sampler(
            settings, errors, {"host": host, "nvml": nvml, "kubelet": kubelet}, clock=clock, monotonic=clock
        )
        samplers.append(sampler)
        return sampler, errors

    yield make
    for sampler in samplers:
        sampler.stop()


def cycle(sampler: Sampler, clock: ManualClock, n: int = 1, seconds: float = 1.0) -> Snapshot:
    snap = sampler.snapshot
    for _ in range(n):
        clock.advance(seconds)
        snap = sampler.cycle(wait_s=2.0)
    return snap


def scrape(snapshot: Snapshot) -> dict[str, list]:
    """The rendered exposition, parsed by prometheus_client: sample name -> samples."""
    body, _ = Renderer().render(snapshot)
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def of_gpu(metrics: dict[str, list], name: str, gpu: int) -> list:
    return [s for s in metrics.get(name, []) if s.labels.get("gpu") == str(gpu)]
