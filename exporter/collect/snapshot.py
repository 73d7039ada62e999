"""The immutable snapshot /metrics renders, and the pure function that builds it from one cycle's parts.

Nothing here reads a clock, a file or a driver: the sampler hands over what its sources and the
analyzer's result say, and ``build`` decides what is current (a GPU that is not up exports no values,
a signal that failed its last read exports no window) and applies the pod-shm policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from exporter.analysis.engine import KindState
from exporter.analysis.kinds import KINDS
from exporter.analysis.mig import split_gpu_instances
from exporter.analysis.pods import default_shm
from exporter.analysis.processes import GpuProcesses, attribute, holders
from exporter.analysis.result import GpuStats, Result
from exporter.analysis.window import Stats
from exporter.analysis.workload import UNKNOWN, Workload
from exporter.collect.poller import Books
from exporter.sources.kubelet import Assignment, PodRef
from exporter.sources.podlogs import PodLogsView
from exporter.sources.processes import ProcessOwners
from exporter.sources.readings import GpuIdentity, GpuReading, GpuState, HostReading, MigReading


@dataclass(frozen=True)
class PodShare:
    """One pod's share of a GPU pods share (time-slicing, MPS): its own ledger (booked at its share of the
    GPU's wall time), the verdicts whose loss is a pod's, and the class its time is judged as."""

    namespace: str
    pod: str
    ledger: dict[str, float] = field(default_factory=dict)
    verdicts: dict[str, KindState] = field(default_factory=dict)
    workload: Workload = UNKNOWN


@dataclass(frozen=True)
class MigShare:
    """One MIG instance of a GPU in MIG mode, judged apart: its own ledger (booked at its compute slices'
    share of the GPU's wall time), the verdicts whose loss is a pod's, and the pod holding it ("" free)."""

    instance: str  # its GPU instance id, as nvidia-smi mig -lgi shows it
    uuid: str
    profile: str
    namespace: str
    pod: str
    ledger: dict[str, float] = field(default_factory=dict)
    verdicts: dict[str, KindState] = field(default_factory=dict)
    workload: Workload = UNKNOWN
    compute_instance: str = ""  # its compute instance id where its GPU instance is split into several


@dataclass(frozen=True)
class GpuView:
    """One GPU in a snapshot. ``reading`` and the window fields are None unless the GPU is up."""

    index: int
    identity: GpuIdentity
    status: str  # ok, pending, lost, timeout, error, nvml_down
    reading: GpuReading | None = None
    stats: GpuStats | None = field(default=None, repr=False, compare=False)  # the window statistics' source
    idle_fraction: float | None = None
    xids: dict[int, int] = field(default_factory=dict)
    p2p: dict[tuple[int, str], bool] = field(default_factory=dict)  # (peer index, capability) -> OK
    verdicts: dict[str, KindState] = field(default_factory=dict)  # kind -> score, firing, cause
    ledger: dict[str, float] = field(default_factory=dict)  # state -> seconds of this GPU's time so far
    held_back_s: float = 0.0  # seconds it kept peers of its job waiting in a collective
    workload: Workload = UNKNOWN  # the class its time is judged as, and what decided it
    pod: PodRef | None = None  # the container holding the whole GPU, when exactly one does
    assignments: tuple[
        tuple[Assignment, str], ...
    ] = ()  # every device of it the kubelet gave out (, MIG UUID)
    collected_t: float | None = None  # wall time of its last successful collection (kept while down)
    processes: GpuProcesses = field(default_factory=GpuProcesses)  # its processes, their owners
    shares: tuple[PodShare, ...] = ()  # the pods sharing it, each judged on its share (empty: not split)
    migs: tuple[MigShare, ...] = ()  # its MIG instances, each judged apart (empty: MIG mode off)

    @property
    def up(self) -> bool:
        return self.status == "ok"

    # a window is current only while its signal is: a failed read does not leave its window behind.
    # Summarized on first use (GpuStats), so a snapshot no scrape reads costs no statistics.
    @property
    def util_window(self) -> Stats | None:
        r = self.reading
        return self.stats.util_window if self.stats and r is not None and r.util is not None else None

    @property
    def power_window(self) -> Stats | None:
        r = self.reading
        return self.stats.power_window if self.stats and r is not None and r.power_w is not None else None


@dataclass(frozen=True)
class Snapshot:
    seq: int
    t: float
    ready: bool
    nvml_up: bool
    driver: dict[str, str]
    gpus: tuple[GpuView, ...]
    host: HostReading | None
    host_window: dict[str, Stats]
    last_success: dict[str, float]  # wall time of each polled source's last success (the stale alert)
    errors: dict[tuple[str, str], int]
    pod_shm_default: dict[tuple[str, str], bool] = field(default_factory=dict)  # (ns, pod) of GPU pods
    pod_assignment_t: float | None = None  # wall time of the kubelet answer the pod labels come from
    node_checks: tuple = ()  # the node doctor's latest results (exporter.doctor.model.Result)
    pod_logs: PodLogsView | None = None  # what the GPU pods' logs (and progress reports) say; None: off
    source_up: dict[str, bool] = field(default_factory=dict)  # did each source's last attempt succeed
    source_durations: dict[str, float] = field(default_factory=dict)  # seconds of each one's last attempt
    source_intervals: dict[str, float] = field(default_factory=dict)  # seconds between attempts (stale alert)
    # every polled source's reading by registered name, while its last attempt succeeded and no call is
    # overdue: a source that is only exported is rendered from here, with no field of its own
    readings: dict[str, object] = field(default_factory=dict)


EMPTY_SNAPSHOT = Snapshot(0, 0.0, False, False, {}, (), None, {}, {}, {})


@dataclass(frozen=True)
class Sources:
    """The sources' side of a cycle: what they read and how they fared."""

    nvml_up: bool
    driver: dict[str, str]
    gpus: list[GpuState]
    xids: dict[int, dict[int, int]]
    p2p: dict[tuple[int, int, str], bool]
    host: HostReading | None
    readings: dict[str, object]  # every polled source's latest reading, by registered name
    assignments: tuple[Assignment, ...]
    assignment_t: float | None
    owners: Mapping[int, PodRef]
    held: Mapping[int, Iterable[tuple[Assignment, str]]]
    books: Books  # how every source fared (exporter.collect.poller)
    errors: dict[tuple[str, str], int]
    node_checks: tuple = ()
    pod_logs: PodLogsView | None = None
    # GPUs shared by pods: GPU -> (analysis entity, namespace, pod) of each pod's share
    shares: Mapping[int, Iterable[tuple[str, str, str]]] = field(default_factory=dict)
    # GPUs in MIG mode: GPU -> (analysis entity, namespace, pod, its reading) of each MIG instance
    migs: Mapping[int, Iterable[tuple[str, str, str, MigReading]]] = field(default_factory=dict)


def _held_throughout(now: int | None, listed: int | None) -> int | None:
    """Memory in use both now and when the processes were listed (the list is a slow read)."""
    return min(now, listed) if now is not None and listed is not None else None


def gpu_view(
    gpu: GpuState,
    stats: GpuStats,
    src: Sources,
    xids: dict[int, int],
    p2p: dict[tuple[int, str], bool],
    shares: tuple[PodShare, ...] = (),
    instances: tuple[MigShare, ...] = (),
    node_pods: set[tuple[str, str]] | None = None,  # (namespace, pod) of every assignment, made once
) -> GpuView:
    is_up = gpu.status == "ok"
    r = gpu.reading if is_up else None
    found = src.readings.get("processes")
    migs = r.mig_uuids if r is not None else ()
    procs = (
        attribute(
            r.processes,
            _held_throughout(r.mem_used_bytes, r.processes_mem_bytes),
            found.owners if isinstance(found, ProcessOwners) else None,
            holders(src.assignments, (gpu.identity.uuid, str(gpu.index), *migs), gpu.identity.uuid),
            node_pods if node_pods is not None else {(a.ref.namespace, a.ref.pod) for a in src.assignments},
            src.assignment_t,
        )
        if r is not None
        else GpuProcesses()
    )
    # current only while the signal is (util_window and power_window follow the same rule in GpuView)
    has_util = is_up and gpu.reading is not None and gpu.reading.util is not None
    return GpuView(
        index=gpu.index,
        identity=gpu.identity,
        status=gpu.status,
        reading=gpu.reading if is_up else None,
        stats=stats,
        idle_fraction=stats.idle_fraction if has_util else None,
        xids=xids,
        p2p=p2p,
        verdicts=stats.verdicts,
        ledger=stats.ledger,
        held_back_s=stats.held_back_s,
        workload=stats.workload,
        pod=src.owners.get(gpu.index),
        assignments=tuple(src.held.get(gpu.index, ())),
        collected_t=gpu.collected_t,
        processes=procs,
        shares=shares if is_up else (),
        migs=instances if is_up else (),
    )


def _shares(result: Result, entities: Iterable[tuple[str, str, str]]) -> tuple[PodShare, ...]:
    """The pods' shares of one GPU as the analysis judged them: only the kinds whose loss is a pod's."""
    out = []
    for entity, namespace, pod in entities:
        stats = result.gpus.get(entity)
        if stats is not None:
            verdicts = {k: v for k, v in stats.verdicts.items() if KINDS[k].scope == "pod"}
            out.append(PodShare(namespace, pod, stats.ledger, verdicts, stats.workload))
    return tuple(out)


def _migs(result: Result, entities: Iterable[tuple[str, str, str, MigReading]]) -> tuple[MigShare, ...]:
    """A MIG GPU's instances as the analysis judged them: only the kinds whose loss is a pod's."""
    entities = tuple(entities)
    if not entities:  # MIG mode off: the usual case, every GPU every second
        return ()
    out = []
    split = split_gpu_instances(m for _, _, _, m in entities)
    for entity, namespace, pod, m in entities:
        stats = result.gpus.get(entity)
        if stats is not None:
            verdicts = {k: v for k, v in stats.verdicts.items() if KINDS[k].scope == "pod"}
            out.append(
                MigShare(
                    str(m.gpu_instance),
                    m.uuid,
                    m.profile,
                    namespace,
                    pod,
                    stats.ledger,
                    verdicts,
                    stats.workload,
                    str(m.compute_instance) if m.gpu_instance in split else "",
                )
            )
    return tuple(out)


def build(seq: int, t: float, ready: bool, src: Sources, result: Result) -> Snapshot:
    """The snapshot of one cycle. Pure."""
    none = GpuStats()
    p2p: dict[int, dict[tuple[int, str], bool]] = {}  # by GPU: (peer, capability) -> OK
    for (a, b, cap), ok in src.p2p.items():
        p2p.setdefault(a, {})[(b, cap)] = ok
    gpu_pods = {(a.ref.namespace, a.ref.pod) for a in src.assignments}
    views = tuple(
        gpu_view(
            g,
            result.gpus.get(str(g.index), none),
            src,
            src.xids.get(g.index, {}),
            p2p.get(g.index, {}),
            _shares(result, src.shares.get(g.index, ())),
            _migs(result, src.migs.get(g.index, ())),
            gpu_pods,
        )
        for g in sorted(src.gpus, key=lambda g: g.index)
    )
    host = src.host
    if host is not None:  # a pod's own /dev/shm is worth a series only when the pod holds GPUs
        shm = tuple(s for s in host.shm if s.volume != "dev-shm" or (s.namespace, s.pod) in gpu_pods)
        host = replace(host, shm=shm)
    return Snapshot(
        seq=seq,
        t=t,
        ready=ready,
        nvml_up=src.nvml_up,
        driver=dict(src.driver),
        gpus=views,
        host=host,
        host_window=result.host_window,
        last_success=dict(src.books.last_success),
        errors=src.errors,
        pod_shm_default=default_shm(gpu_pods, host.shm, host.pod_dev_shm) if host is not None else {},
        pod_assignment_t=src.assignment_t,
        node_checks=src.node_checks,
        pod_logs=src.pod_logs,
        source_up=dict(src.books.up),
        source_durations=dict(src.books.durations),
        source_intervals=dict(src.books.intervals),
        readings=src.readings,
    )
