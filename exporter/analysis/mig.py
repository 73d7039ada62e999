"""A GPU in MIG mode: each MIG instance's point, and the GPU's utilization from its instances. Pure."""

from __future__ import annotations

from collections.abc import Iterable

from exporter.analysis.points import GpuPoint
from exporter.sources.readings import MigReading


def instance_share(m: MigReading, instances: int) -> float:
    """The part of the GPU's wall time an instance stands for: its compute slices over the GPU's (an even
    part when the driver does not say)."""
    return m.slices / m.gpu_slices if m.slices and m.gpu_slices else 1 / instances


def instance_point(t: float, m: MigReading) -> GpuPoint:
    """An instance's point: its GPM SM activity as its utilization (the driver offers no utilization per
    instance; None without GPM) and its memory. Power, clocks, temperatures and links are the GPU's: the
    point has none, so nothing is judged of them per instance."""
    return GpuPoint(t=t, util=m.sm_active, mem_used_bytes=m.mem_used_bytes, mem_total_bytes=m.mem_total_bytes)


def gpu_util(migs: Iterable[MigReading]) -> float | None:
    """A MIG GPU's utilization for its own ledger, which the driver does not give in MIG mode: its
    instances' SM activity weighted by their slices (None when no instance's is known)."""
    migs = tuple(migs)
    known = [m for m in migs if m.sm_active is not None]
    if not known:
        return None
    return sum(m.sm_active * instance_share(m, len(migs)) for m in known)  # type: ignore[operator]
