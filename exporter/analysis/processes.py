"""Whose are a GPU's processes, and is its memory held by anyone a pod on the node owns. Pure: over what
the NVML source listed, what the host's /proc said of each PID, and the kubelet's assignments.

A process is judged only when all three are known and the kubelet's answer is younger than the process
(a pod that just started is not in an older answer): its container's pod holds the GPU (owned), holds
other GPUs of the node but not this one (``other_pod``), is not among the pods the kubelet lists
(``pod_gone``: a pod the kubelet does not list with GPUs, nearly always a deleted pod whose process
lives on; a pod that uses a GPU it was never given reads the same, as the kubelet's device answer
names only the pods holding devices), or it runs in no container (``host``). A process
whose container names no pod the exporter could find is not judged. A GPU whose memory stays above the
idle line while the driver lists no process at all is held by nobody (``no_process``).

The node's MPS server (``nvidia-cuda-mps-server``, started by the MPS control daemon, on the host or in
the device plugin's own pod) holds a context on each GPU it serves and is listed as a compute process;
its clients, the pods' processes, are the driver's MPS list. It is the node's, not memory nobody owns:
it is recognised by its command (the first word of its command line, or the kernel's 15-character name
``nvidia-cuda-mps`` where the command line is empty) and never judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from exporter.policy.thresholds import IDLE_MEMORY
from exporter.sources.kubelet import Assignment
from exporter.sources.processes import ProcessOwner
from exporter.sources.readings import GpuProcess

REPLICA = "::"  # the device plugin's time-slicing replicas: <uuid>::<n>
# the MPS server's command, and its name as the kernel keeps it (15 characters) where the cmdline is empty
MPS_SERVER_COMMANDS = frozenset({"nvidia-cuda-mps-server", "nvidia-cuda-mps"})


def mps_server(command: str) -> bool:
    """Whether a process's command is the node's MPS server (any path to it, any arguments)."""
    first = command.split(" ", 1)[0]
    return first.rsplit("/", 1)[-1] in MPS_SERVER_COMMANDS


@dataclass(frozen=True)
class ProcessView:
    process: GpuProcess
    owner: ProcessOwner | None  # None: the host's /proc did not say
    unowned: str = ""  # pod_gone, other_pod or host; "" when owned or not judged


@dataclass(frozen=True)
class GpuProcesses:
    processes: tuple[ProcessView, ...] = ()
    no_process_bytes: int | None = None  # memory held while no process is listed; None: not the case


def holders(assignments: Iterable[Assignment], ids: Iterable[str], uuid: str) -> set[tuple[str, str]]:
    """(namespace, pod) of each pod given this GPU: its UUID, index or a MIG slice's UUID (``ids``), or a
    time-slicing replica of it."""
    wanted = set(ids)
    return {
        (a.ref.namespace, a.ref.pod)
        for a in assignments
        if a.device_id in wanted or (uuid and a.device_id.startswith(uuid + REPLICA))
    }


def attribute(
    processes: tuple[GpuProcess, ...] | None,
    mem_used: int | None,
    owners: Mapping[int, ProcessOwner] | None,
    held_by: set[tuple[str, str]],
    node_pods: set[tuple[str, str]],
    assignment_t: float | None,
) -> GpuProcesses:
    """One GPU's processes with their owners and verdicts. ``owners`` None: the host's /proc is not
    usable (nothing is judged); ``assignment_t`` None: the kubelet has not answered (no pod is judged)."""
    if processes is None:
        return GpuProcesses()
    if owners is None:
        return GpuProcesses(tuple(ProcessView(p, None) for p in processes))
    views = tuple(
        ProcessView(p, owners.get(p.pid), _verdict(owners.get(p.pid), held_by, node_pods, assignment_t))
        for p in processes
    )
    idle_line = IDLE_MEMORY.value
    held = mem_used if not processes and mem_used is not None and mem_used > idle_line else None
    return GpuProcesses(views, held)


def _verdict(
    owner: ProcessOwner | None,
    held_by: set[tuple[str, str]],
    node_pods: set[tuple[str, str]],
    assignment_t: float | None,
) -> str:
    if owner is None or assignment_t is None:
        return ""
    if owner.start_t is not None and owner.start_t > assignment_t:
        return ""  # younger than the kubelet's answer: its pod may not be in it yet
    if mps_server(owner.command):
        return ""  # the node's MPS server: its context serves the pods' clients
    if not owner.container_id:
        return "host"
    if not owner.pod:
        return ""  # a container whose pod the runtime's files do not name: not judged
    pod = (owner.namespace, owner.pod)
    if pod in held_by:
        return ""
    return "other_pod" if pod in node_pods else "pod_gone"
