"""Which pod holds which GPU, and which GPU pods run on the 64 MiB default /dev/shm. Pure functions over
what the kubelet and the host sources found."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from exporter.analysis.points import GpuPoint
from exporter.analysis.processes import mps_server
from exporter.policy.thresholds import SHM_DEFAULT_BYTES
from exporter.sources.kubelet import Assignment, PodRef
from exporter.sources.processes import ProcessOwner
from exporter.sources.readings import GpuProcess, ShmReading

REPLICA = "::"  # the device plugin's time-slicing replicas of a GPU: <uuid>::<n>


def gpu_owners(
    assignments: Iterable[Assignment], gpus: Iterable[tuple[int, str, tuple[str, ...]]]
) -> tuple[dict[int, PodRef], dict[int, list[tuple[Assignment, str]]]]:
    """Map devices to GPUs. ``gpus``: (index, uuid, MIG device UUIDs). Returns the GPUs wholly held by
    one container (they carry pod labels), and every assignment per GPU (for gpu_pod_info) with the
    MIG UUID when the device is a MIG slice."""
    by_id: dict[str, tuple[int, str]] = {}
    for index, uuid, migs in gpus:
        by_id[uuid] = (index, "")
        by_id[str(index)] = (index, "")  # the device plugin's index strategy
        for mig in migs:
            by_id[mig] = (index, mig)
    held: dict[int, list[tuple[Assignment, str]]] = {}
    for a in assignments:
        # a time-slicing replica is its GPU (one container holding one is holding the GPU whole)
        found = by_id.get(a.device_id) or by_id.get(a.device_id.partition(REPLICA)[0])
        if found is not None:
            held.setdefault(found[0], []).append((a, found[1]))
    owners = {}
    for index, items in held.items():
        refs = {a.ref for a, mig in items if not mig}
        if len(refs) == 1 and all(not mig for _, mig in items):
            owners[index] = refs.pop()
    return owners, held


def default_shm(
    pods: Iterable[tuple[str, str]], shm: Iterable[ShmReading], dev_shm: dict[tuple[str, str], set[str]]
) -> dict[tuple[str, str], bool]:
    """For each GPU pod whose /dev/shm the runtime tells: is it the 64 MiB default?"""
    sizes = {s.mountpoint: s.size_bytes for s in shm}
    out = {}
    for pod in set(pods):
        sources = [src for src in dev_shm.get(pod, ()) if src]
        known = [sizes[src] for src in sources if src in sizes]
        if known:
            out[pod] = max(known) <= SHM_DEFAULT_BYTES.value
    return out


@dataclass(frozen=True)
class PodUse:
    """One pod's part of a shared GPU, from its processes: their SM utilization summed and their memory."""

    namespace: str
    pod: str
    sm_util: float
    mem_bytes: int


def sharing_pods(held: Iterable[tuple[Assignment, str]]) -> list[tuple[str, str]]:
    """The pods holding a GPU (not a MIG slice of it), sorted: two or more share it by time-slicing (the
    device plugin's replicas) or MPS."""
    return sorted({(a.ref.namespace, a.ref.pod) for a, mig in held if not mig})


def pod_uses(
    processes: Iterable[GpuProcess], owners: Mapping[int, ProcessOwner], pods: Iterable[tuple[str, str]]
) -> list[PodUse]:
    """Each pod's use of the GPU over the last processes read (a pod with no process there uses none).
    A process the host's /proc did not place in one of these pods counts for no pod."""
    sums = {pod: [0.0, 0] for pod in pods}
    for p in processes:
        owner = owners.get(p.pid)
        acc = sums.get((owner.namespace, owner.pod)) if owner is not None else None
        if acc is not None:
            acc[0] += p.sm_util or 0.0  # no sample since the last read: no kernel ran
            acc[1] += p.used_bytes or 0
    return [PodUse(ns, pod, sm, int(mem)) for (ns, pod), (sm, mem) in sums.items()]


def booked_to_server(processes: Iterable[GpuProcess], owners: Mapping[int, ProcessOwner]) -> bool:
    """Whether the driver books kernels to the MPS server rather than to its clients (MPS before Volta):
    the server, a process of no pod, has SM time of its own. The pods' shares cannot be told apart then
    (each would read idle): the GPU is judged as one."""
    for p in processes:
        owner = owners.get(p.pid)
        if (p.sm_util or 0.0) > 0.0 and owner is not None and mps_server(owner.command):
            return True
    return False


def share_point(t: float, use: PodUse, pods: int, mem_total: float | None) -> GpuPoint:
    """A pod's point on a GPU shared by ``pods``: its utilization of its own slice (its SM time over its
    share, at most all of it) and its memory. Power, clocks, temperatures and links are the whole GPU's:
    they would mislead a pod's detectors, so the point has none."""
    return GpuPoint(
        t=t, util=min(1.0, use.sm_util * pods), mem_used_bytes=use.mem_bytes, mem_total_bytes=mem_total
    )
