"""Which pod holds which GPU, and which GPU pods run on the 64 MiB default /dev/shm. Pure functions over
what the kubelet and the host sources found."""

from __future__ import annotations

from collections.abc import Iterable

from exporter.policy.thresholds import SHM_DEFAULT_BYTES
from exporter.sources.kubelet import Assignment, PodRef
from exporter.sources.readings import ShmReading


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
        found = by_id.get(a.device_id)
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
