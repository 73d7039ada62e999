"""A GPU in MIG mode: each MIG instance's point, and the GPU's utilization from its instances. Pure.

A MIG device is a compute instance of a GPU instance. Most GPU instances hold one compute instance spanning
them; one split into several (a 4g.40gb into two 2c.4g.40gb) has a MIG device, a UUID and possibly a pod
per compute instance. Its memory and its GPM metrics are the GPU instance's (the driver measures no compute
instance apart): see ``instance_points``."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace

from exporter.analysis.points import GpuPoint
from exporter.sources.readings import MigReading


def instance_share(m: MigReading, instances: int) -> float:
    """The part of the GPU's wall time an instance stands for: its compute slices over the GPU's (an even
    part when the driver does not say). A compute instance's are its own, not its GPU instance's."""
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


def split_gpu_instances(migs: Iterable[MigReading]) -> frozenset[int]:
    """The GPU instances (ids) split into more than one compute instance: their compute instances are
    named and labelled apart (``mig<gi>.<ci>``, ``mig_compute_instance``)."""
    seen: set[int] = set()
    split: set[int] = set()
    for m in migs:
        if m.gpu_instance >= 0:
            (split if m.gpu_instance in seen else seen).add(m.gpu_instance)
    return frozenset(split)


def instance_points(t: float, migs: Sequence[MigReading], held: Collection[str]) -> list[GpuPoint]:
    """Each MIG device's point (``instance_point``), in order. A compute instance alone in its GPU instance
    has its GPU instance's SM activity and memory. Compute instances sharing a GPU instance cannot be told
    apart by the driver (GPM and memory are the GPU instance's), so: one no pod holds (``held``: the MIG
    UUIDs the kubelet gave out) runs nothing and holds nothing; the held ones are each given the GPU
    instance's SM activity spread over their slices (their mean: which of them computes is not seen) and its
    memory in use. Where none is held, all of them count as held."""
    split = split_gpu_instances(migs)
    out = []
    for m in migs:
        point = instance_point(t, m)
        if m.gpu_instance in split:
            group = [c for c in migs if c.gpu_instance == m.gpu_instance]
            active = [c for c in group if c.uuid in held] or group
            if all(c.uuid != m.uuid for c in active):
                point = replace(point, util=0.0 if m.sm_active is not None else None, mem_used_bytes=0)
            elif m.sm_active is not None:
                whole, part = sum(c.slices for c in group), sum(c.slices for c in active)
                ratio = whole / part if whole and part else len(group) / len(active)
                point = replace(point, util=min(1.0, m.sm_active * ratio))
        out.append(point)
    return out
