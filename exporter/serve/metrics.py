"""Snapshot -> Prometheus exposition, written by prometheus_client. Never touches hardware: it only reads
the immutable snapshot.

The snapshot's families reach the library through one custom collector, registered in a private
registry beside the library's process, platform and GC collectors (``process_*``, ``python_info``,
``python_gc_*``); ``generate_latest`` and its OpenMetrics twin write the body. Rendering happens at most
once per snapshot and format; every further scrape of the same snapshot is a dictionary lookup.
"""

from __future__ import annotations

import functools
import gzip
import logging
import platform
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import ALLOWUTF8
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

from exporter import __version__
from exporter.analysis.engine import KindState
from exporter.analysis.processes import ProcessView
from exporter.collect.snapshot import GpuView, Snapshot
from exporter.policy import catalog
from exporter.policy.cost import DEFAULT as DEFAULT_PRICES
from exporter.policy.cost import Prices
from exporter.policy.nvml_vocab import CLOCK_REASONS, FABRIC_STATES
from exporter.policy.thresholds import CRITICAL_XIDS, DOCTOR_SEVERITY, PROCESS_TOP_N

# the classic text format: what every Prometheus 2.x understands (the names here are all legacy-valid)
TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
POWER_STATS = ("mean", "min", "max")


def _bindings_version() -> str:
    try:
        return metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        return "unknown"


BINDINGS = _bindings_version()
log = logging.getLogger(__name__)
# a lone surrogate: how Python holds a byte of a file name, an environment variable or /proc text that is
# not UTF-8 (os.listdir and friends decode with surrogateescape); it cannot be encoded as UTF-8
_SURROGATE = re.compile("[\ud800-\udfff]")
_PAIR = re.compile(r'(\w+)="([^"]*)"')

Labels = dict[str, str]


def labels(**pairs: str) -> Labels:
    return pairs


class Family:
    """One metric family of one render: samples carry their label set as a dict (a GPU's ``gpu``/``uuid``
    pair is one dict shared by its series, merged into each sample's own labels)."""

    __slots__ = ("doc", "kind", "name", "samples")

    def __init__(self, name: str, kind: str, doc: str) -> None:
        self.name, self.kind, self.doc = name, kind, doc
        self.samples: list[tuple[Mapping[str, str], float]] = []

    def add(self, pairs: Mapping[str, str] | str, value: float) -> None:
        # "" stands for no labels too (the spelling of the label text this class took before)
        self.samples.append((pairs or {}, value))  # type: ignore[arg-type]

    def metric(self) -> Metric:
        """The family as prometheus_client's Metric (a counter's samples named ``_total``)."""
        metric = Metric(self.name, self.doc, self.kind)
        name = self.name + "_total" if self.kind == "counter" else self.name
        metric.samples = [Sample(name, pairs, value) for pairs, value in self.samples]  # type: ignore[misc]
        return metric


class _Families:
    """Metric families of one render, created on first use, in a stable order."""

    def __init__(self) -> None:
        self._by_name: dict[str, Family] = {}

    def _family(self, name: str, kind: str, doc: str) -> Family:
        fam = self._by_name.get(name)
        if fam is None:
            fam = self._by_name[name] = Family(name, kind, doc)
        return fam

    def gauge(self, name: str, doc: str) -> Family:
        return self._family(name, "gauge", doc)

    def counter(self, name: str, doc: str) -> Family:
        return self._family(name, "counter", doc)

    def __iter__(self) -> Iterator[Family]:
        return iter(self._by_name.values())


def _set(fams: _Families, name: str, doc: str, base: Labels, value: float | None) -> None:
    if value is not None:
        fams.gauge(name, doc).add(base, value)


def _gpu(fams: _Families, view: GpuView, snapshot: Snapshot, detail: frozenset[str] = frozenset()) -> None:
    """Every family of one GPU: identity and liveness always, the rest while it has a reading. The order
    of the renderers is the order the families first appear in the exposition."""
    base = _gpu_identity(fams, view, snapshot)
    _xids(fams, view, base, detail)
    if view.reading is None:
        return
    for render in (
        _gpu_time,
        _gpu_workload,
        _gpu_verdicts,
        _gpu_shares,
        _gpu_migs,
        _readings,
        _gpu_windows,
        _gpu_clock_events,
        _gpu_nvlinks,
        _gpu_pcie,
        _gpu_p2p,
        _gpu_fabric,
        _gpu_processes,
    ):
        render(fams, view, base, detail)


def _gpu_identity(fams: _Families, view: GpuView, snapshot: Snapshot) -> Labels:
    """The pod assignments, identity, liveness and last collection of a GPU, up or not; returns the labels
    of its series (gpu and uuid, and the pod holding it whole)."""
    ident = view.identity
    base = {"gpu": str(view.index), "uuid": ident.uuid}
    for assignment, mig in view.assignments:
        ref = assignment.ref
        fams.gauge("gpu_pod_info", "A GPU (or a MIG slice of it) the kubelet assigned to a container.").add(
            base
            | labels(resource=assignment.resource, device=assignment.device_id, mig_uuid=mig)
            | labels(namespace=ref.namespace, pod=ref.pod, container=ref.container),
            1,
        )
    if view.pod is not None:  # a GPU held whole by one container: its series name the pod
        base |= labels(namespace=view.pod.namespace, pod=view.pod.pod, container=view.pod.container)
    info = ident.labels() | {
        "driver_version": snapshot.driver.get("driver_version", ""),
        "cuda_version": snapshot.driver.get("cuda_version", ""),
    }
    fams.gauge("gpu_info", "GPU identity; join on uuid.").add(base | info, 1)
    fams.gauge(
        "gpu_up", "1 when the GPU answered its last collection; 0 when lost, timed out or erroring."
    ).add(base, 1 if view.up else 0)
    if view.collected_t is not None:  # kept while the GPU is down: how old its last data is
        fams.gauge(
            "gpu_last_collect_timestamp_seconds",
            "Unix time of the GPU's last successful collection; stays at it while the GPU is down.",
        ).add(base, view.collected_t)
    return base


UNOWNED = "gpu_memory_unowned_bytes"
UNOWNED_HELP = (
    "GPU memory held by a process no pod on the node owns (reason: pod_gone, other_pod, host) with its pid, "
    "command, container and last pod, or held with no process at all (no_process, pid empty)."
)
UNOWNED_START = "gpu_memory_unowned_start_time_seconds"
UNOWNED_START_HELP = "Unix time the process holding memory nobody owns started."


def _gpu_processes(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """Per pod on the GPU: its processes and their memory; memory nobody on the node owns, with what is
    known of its holder; with ``--detail processes`` the top processes by memory, one series each."""
    gpu = {"gpu": base["gpu"], "uuid": base["uuid"]}
    found = view.processes
    pods: dict[tuple[str, str], list[int]] = {}
    for v in found.processes:
        if v.owner is None:  # the host's /proc did not say: no pod to count it under
            continue
        count = pods.setdefault((v.owner.namespace, v.owner.pod), [0, 0])
        count[0] += 1
        count[1] += v.process.used_bytes or 0
    for (namespace, pod), (n, used) in pods.items():
        pod_labels = gpu | labels(namespace=namespace, pod=pod)
        fams.gauge(
            "gpu_pod_processes", "Compute processes of a pod on the GPU (namespace and pod empty: no pod's)."
        ).add(pod_labels, n)
        fams.gauge("gpu_pod_process_memory_bytes", "GPU memory the pod's processes hold on the GPU.").add(
            pod_labels, used
        )
    for v in found.processes:
        if v.unowned and v.owner is not None:
            who = gpu | _process_labels(v) | labels(reason=v.unowned)
            _set(fams, UNOWNED, UNOWNED_HELP, who, v.process.used_bytes or 0)
            _set(fams, UNOWNED_START, UNOWNED_START_HELP, who, v.owner.start_t)
    if found.no_process_bytes is not None:
        nobody = labels(pid="", command="", container_id="", namespace="", pod="", container="")
        _set(fams, UNOWNED, UNOWNED_HELP, gpu | nobody | labels(reason="no_process"), found.no_process_bytes)
    if "processes" in detail:
        _process_detail(fams, view, gpu)


def _process_labels(v: ProcessView) -> Labels:
    """Who a process is: its pid, and where the host's /proc said, its command, container and pod."""
    o = v.owner
    if o is None:
        return labels(pid=str(v.process.pid), command="", container_id="", namespace="", pod="", container="")
    return labels(
        pid=str(o.pid),
        command=o.command,
        container_id=o.container_id[:12],  # the short id, as the runtimes' tools print it
        namespace=o.namespace,
        pod=o.pod,
        container=o.container,
    )


def _process_detail(fams: _Families, view: GpuView, gpu: Labels) -> None:
    """One series per process, for the top processes by memory."""
    ranked = sorted(view.processes.processes, key=lambda v: v.process.used_bytes or 0, reverse=True)
    for v in ranked[: int(PROCESS_TOP_N.value)]:
        p = v.process
        pl = gpu | _process_labels(v) | labels(kind=p.kind)
        _set(fams, "gpu_process_memory_bytes", "GPU memory one process holds.", pl, p.used_bytes)
        _set(
            fams,
            "gpu_process_sm_utilization_ratio",
            "A process's share of the GPU's SM time over its driver samples since the last read, 0-1.",
            pl,
            p.sm_util,
        )
        _set(
            fams,
            "gpu_process_memory_utilization_ratio",
            "A process's share of the GPU's memory-controller time since the last read, 0-1.",
            pl,
            p.mem_util,
        )


def _gpu_time(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """The ledger's seconds by state, and the seconds the GPU held its job back."""
    time_fam = fams.counter(
        "gpu_time_seconds",
        "Where the GPU's time went: seconds in each ledger state (computing, input_wait, comm_wait, stalled, "
        "checkpoint, throttled, idle, free); the states sum to the time observed.",
    )
    for state, seconds in view.ledger.items():
        # a state the GPU has never been in has no series (most GPUs never see half of them: the series
        # budget); it appears with its first second, and the recording rules read a missing state as 0
        if seconds > 0:
            time_fam.add(base | {"state": state}, round(seconds, 3))
    if view.held_back_s > 0:  # a series only for a GPU that has held its job back (the series budget)
        fams.counter(
            "gpu_job_holdup_seconds",
            "Seconds the GPU spent off-kernel (its rank on the host) while other GPUs of its job waited "
            "for it in a collective: the rank holding the job back.",
        ).add(base, round(view.held_back_s, 3))


def _gpu_workload(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """The class the GPU's time is judged as (one series; ``training`` while nothing says otherwise)."""
    w = view.workload
    fams.gauge(
        "gpu_workload_class",
        "The workload class the GPU's time is judged as (training, serving, batch, evaluation, interactive, "
        "pipeline) and what decided it (source: flag, log, process, image, name, shape; default: nothing "
        "said otherwise).",
    ).add(base | labels(workload=w.kind or "training", source=w.source or "default"), 1)


def _gpu_verdicts(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """One series per verdict kind, with its cause; their scores with ``--detail scores``."""
    _verdicts(fams, view.verdicts, base, detail)
    _holder(fams, view, view.verdicts, base, None)


HOLDER = "gpu_holder_info"
HOLDER_HELP = (
    "While idle_allocated holds (on the GPU, a pod's share of it or a MIG instance): the process holding "
    "the most of its memory, by pid and command; one series per such verdict."
)


def _holder(
    fams: _Families,
    view: GpuView,
    verdicts: Mapping[str, KindState],
    entity: Labels,
    pod: tuple[str, str] | None,
) -> None:
    """Names what holds an idle GPU's memory: the largest process on it (of ``pod`` only, for a pod's
    share or a MIG instance), with the entity's labels so the alert can join on them. Nothing while the
    verdict does not hold or no process is known (the processes source off or down)."""
    state = verdicts.get("idle_allocated")
    if state is None or not state.firing:
        return
    found = [
        v
        for v in view.processes.processes
        if pod is None or (v.owner is not None and (v.owner.namespace, v.owner.pod) == pod)
    ]
    if not found:
        return
    top = max(found, key=lambda v: v.process.used_bytes or 0)
    command = top.owner.command if top.owner is not None else ""
    fams.gauge(HOLDER, HOLDER_HELP).add(entity | labels(pid=str(top.process.pid), command=command), 1)


SINCE = "gpu_bottleneck_since_timestamp_seconds"
SINCE_HELP = (
    "While a verdict holds: Unix time its loss began (the onset of the evidence that fired it, before "
    "the verdict's own hold). One series per firing verdict, with its labels."
)


def _verdicts(
    fams: _Families, verdicts: Mapping[str, KindState], base: Labels, detail: frozenset[str]
) -> None:
    for kind, state in verdicts.items():
        fams.gauge("gpu_bottleneck", "1 while the verdict of this kind holds, with its probable cause.").add(
            base | {"kind": kind, "cause": state.cause}, 1 if state.firing else 0
        )
    for kind, state in verdicts.items():
        if state.firing and state.since is not None:  # one series per firing verdict, none otherwise
            fams.gauge(SINCE, SINCE_HELP).add(base | {"kind": kind, "cause": state.cause}, state.since)
    for kind, state in verdicts.items() if "scores" in detail else ():
        fams.gauge("gpu_bottleneck_score", "Strength of the evidence for a verdict of this kind, 0-1.").add(
            base | {"kind": kind}, round(state.score, 4)
        )


def _gpu_shares(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """A GPU pods share (time-slicing, MPS): each pod's ledger, booked at its share of the GPU's wall
    time, and the verdicts judged on its share (a pod's loss pages with the pod's labels)."""
    for share in view.shares:
        pod = {"gpu": base["gpu"], "uuid": base["uuid"]} | labels(namespace=share.namespace, pod=share.pod)
        time_fam = fams.counter(
            "gpu_pod_time_seconds",
            "A pod's share of a GPU that pods share (time-slicing, MPS): seconds in each ledger state, "
            "booked at its share of the GPU's wall time (the pods' seconds sum to the GPU's).",
        )
        for state, seconds in share.ledger.items():
            if seconds > 0:  # as gpu_time_seconds: a state appears with its first second
                time_fam.add(pod | {"state": state}, round(seconds, 3))
        _verdicts(fams, share.verdicts, pod, detail)
        _holder(fams, view, share.verdicts, pod, (share.namespace, share.pod))


def _gpu_migs(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """A GPU in MIG mode: each instance's ledger, booked at its compute slices' share of the GPU's wall
    time, and the verdicts judged on it, labelled with the instance (its GPU instance, and its compute
    instance where the GPU instance is split into several) and the pod holding it. A family of its own: an
    instance stands whether or not a pod holds it, and its seconds are not a pod's share."""
    for m in view.migs:
        inst = {
            "gpu": base["gpu"],
            "uuid": base["uuid"],
            "mig_instance": m.instance,
            "mig_profile": m.profile,
        }
        if m.compute_instance:  # its GPU instance split into several compute instances: one series each
            inst["mig_compute_instance"] = m.compute_instance
        inst |= labels(namespace=m.namespace, pod=m.pod)
        time_fam = fams.counter(
            "gpu_mig_time_seconds",
            "A MIG instance of a GPU in MIG mode: seconds in each ledger state, booked at its compute "
            "slices' share of the GPU's wall time (the instances' seconds sum to the GPU's when every slice "
            "is given out).",
        )
        for state, seconds in m.ledger.items():
            if seconds > 0:
                time_fam.add(inst | {"state": state}, round(seconds, 3))
        entity = {k: v for k, v in inst.items() if k != "mig_profile"}
        _verdicts(fams, m.verdicts, entity, detail)
        if m.pod:  # a free instance holds nothing of a pod's
            _holder(fams, view, m.verdicts, entity, (m.namespace, m.pod))


def _gpu_windows(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """Utilization and power over the analysis window: the mean, every statistic with ``--detail window``."""
    if view.util_window is not None:
        fam = fams.gauge(
            "gpu_utilization_window_ratio", "GPU utilization over the analysis window of driver samples."
        )
        for stat, value in view.util_window.as_dict().items():
            if stat == "mean" or "window" in detail:
                fam.add(base | {"stat": stat}, value)
    _set(
        fams,
        "gpu_utilization_idle_fraction",
        "Share of window samples with utilization below the idle line.",
        base,
        view.idle_fraction,
    )
    if view.power_window is not None:
        fam = fams.gauge("gpu_power_window_watts", "Power draw over the analysis window.")
        for stat in POWER_STATS if "window" in detail else ("mean",):
            fam.add(base | {"stat": stat}, getattr(view.power_window, stat))


def _gpu_clock_events(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """Clock-event (throttle) reasons active now and their counted time: ``--detail clocks`` only."""
    r = view.reading
    if r is None or "clocks" not in detail:
        return
    if r.clock_reasons is not None:
        fam = fams.gauge("gpu_clock_event_active", "1 while a clock-event (throttle) reason is active.")
        for bit, reason in CLOCK_REASONS.items():
            fam.add(base | {"reason": reason}, 1 if r.clock_reasons & bit else 0)
    for reason, seconds in sorted(r.clock_reason_seconds.items()):
        fams.counter("gpu_clock_event_seconds", "Time the clocks were held down, by reason.").add(
            base | {"reason": reason}, seconds
        )


def _gpu_nvlinks(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """The NVLink aggregates; every link's state, traffic and errors with ``--detail nvlink``."""
    _nvlink_totals(fams, view, base)
    r = view.reading
    for link in r.nvlinks if r is not None and "nvlink" in detail else ():
        lbase = base | {"link": str(link.link)}
        if link.up is not None:
            fams.gauge("gpu_nvlink_up", "1 while the NVLink is active.").add(lbase, 1 if link.up else 0)
        for direction, value in (("tx", link.tx_bytes), ("rx", link.rx_bytes)):
            if value is not None:
                fams.counter("gpu_nvlink_bytes", "NVLink data bytes.").add(
                    lbase | {"direction": direction}, value
                )
        for kind, value in sorted(link.errors.items()):
            fams.counter("gpu_nvlink_errors", "NVLink error counters.").add(lbase | {"type": kind}, value)


def _gpu_pcie(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    r = view.reading
    for direction, value in (("tx", r.pcie_tx_bytes), ("rx", r.pcie_rx_bytes)) if r is not None else ():
        if value is not None:
            fams.counter("gpu_pcie_bytes", "PCIe bytes.").add(base | {"direction": direction}, value)


def _gpu_p2p(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """Failing peer-to-peer pairs; every pair's status with ``--detail p2p``."""
    if view.p2p:
        fams.gauge(
            "gpu_p2p_failing_pairs", "Peer GPU and capability pairs whose peer-to-peer status is not OK."
        ).add(base, sum(1 for ok in view.p2p.values() if not ok))
    for (peer, capability), ok in sorted(view.p2p.items()) if "p2p" in detail else ():
        fams.gauge("gpu_p2p_status", "1 when peer-to-peer access to peer_gpu is OK for the capability.").add(
            base | {"peer_gpu": str(peer), "capability": capability}, 1 if ok else 0
        )


def _gpu_fabric(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """NVSwitch fabric registration; every state with ``--detail fabric``."""
    r = view.reading
    if r is None or r.fabric_state is None:
        return
    fams.gauge("gpu_fabric_registered", "1 when NVSwitch fabric registration has completed.").add(
        base, 1 if r.fabric_state == "completed" else 0
    )
    if "fabric" in detail:
        fam = fams.gauge("gpu_fabric_state", "NVSwitch fabric registration; 1 for the current state.")
        for state in FABRIC_STATES.values():
            fam.add(base | {"state": state}, 1 if state == r.fabric_state else 0)


def _readings(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """The catalog's plain per-GPU signals (exporter/policy/catalog.py): a series each where a GPU has it."""
    r = view.reading
    if r is None:
        return
    extra = r.extra
    for attr, name, kind, doc, label, generic in catalog.metric_rows(detail):
        value = extra.get(attr) if generic else getattr(r, attr)
        if value is not None:
            fams._family(name, kind, doc).add(base | _pairs(label) if label else base, value)


def _xids(fams: _Families, view: GpuView, base: Labels, detail: frozenset[str]) -> None:
    """XIDs by criticality (the critical class from zero, so increase() sees the first event); one
    counter per code with ``--detail xid``."""
    fam = fams.counter("gpu_xid_errors_by_criticality", "XID events reported by the driver, by criticality.")
    critical = sum(n for xid, n in view.xids.items() if xid in CRITICAL_XIDS)
    other = sum(n for xid, n in view.xids.items() if xid not in CRITICAL_XIDS)
    fam.add(base | {"criticality": "critical"}, critical)
    if other:
        fam.add(base | {"criticality": "other"}, other)
    if "xid" in detail:
        xid_fam = fams.counter("gpu_xid_errors", "XID events reported by the driver, by XID code.")
        for xid in sorted(set(CRITICAL_XIDS) | set(view.xids)):
            xid_fam.add(base | {"xid": str(xid)}, view.xids.get(xid, 0))


def _nvlink_totals(fams: _Families, view: GpuView, base: Labels) -> None:
    """Per-GPU NVLink aggregates: links up of those the GPU has, traffic by direction, errors of all
    links and types (traffic: see GpuReading.nvlink_traffic)."""
    r = view.reading
    if r is None or not r.nvlinks:
        return
    states = [link.up for link in r.nvlinks if link.up is not None]
    if states:
        fams.gauge("gpu_nvlink_links_up", "NVLinks active.").add(base, sum(1 for up in states if up))
        fams.gauge("gpu_nvlink_links_expected", "NVLinks the GPU has (up or not).").add(base, len(states))
    for direction, total in zip(("tx", "rx"), r.nvlink_traffic(), strict=True):
        if total is not None:
            fams.counter("gpu_nvlink_traffic_bytes", "NVLink data bytes over all links.").add(
                base | {"direction": direction}, total
            )
    counts = [n for link in r.nvlinks for n in link.errors.values()]
    if counts:
        fams.counter("gpu_nvlink_link_errors", "NVLink errors over all links and error types.").add(
            base, sum(counts)
        )


def _host(fams: _Families, snapshot: Snapshot) -> None:
    h = snapshot.host
    if h is None:
        return
    for shm in h.shm:
        shm_labels = labels(
            mountpoint=shm.mountpoint, namespace=shm.namespace, pod=shm.pod, volume=shm.volume
        )
        fams.gauge("gpu_node_shm_used_bytes", "Used bytes of /dev/shm and memory-backed volumes.").add(
            shm_labels, shm.used_bytes
        )
        fams.gauge("gpu_node_shm_size_bytes", "Size of /dev/shm and memory-backed volumes.").add(
            shm_labels, shm.size_bytes
        )
    if "iowait" in snapshot.host_window:
        fams.gauge("gpu_node_cpu_iowait_ratio", "Share of CPU time in I/O wait over the window.").add(
            {}, snapshot.host_window["iowait"].mean
        )
    if "core_busy_max" in snapshot.host_window:
        fams.gauge("gpu_node_cpu_core_busy_max_ratio", "Busy share of the busiest core over the window.").add(
            {}, snapshot.host_window["core_busy_max"].mean
        )
    for disk in h.disks:
        fams.counter("gpu_node_disk_read_bytes", "Bytes read from the block device.").add(
            labels(device=disk.device), disk.read_bytes
        )
    for (namespace, pod), default in sorted(snapshot.pod_shm_default.items()):
        fams.gauge(
            "gpu_pod_shm_default_size", "1 when a pod holding GPUs runs on the 64 MiB default /dev/shm."
        ).add(labels(namespace=namespace, pod=pod), 1 if default else 0)
    for resource, value in sorted(h.pressure.items()):
        fams.gauge("gpu_node_pressure_ratio", 'Pressure stall information, "some" avg10.').add(
            {"resource": resource}, value
        )


def _self(fams: _Families, snapshot: Snapshot) -> None:
    fams.gauge("gpu_exporter_build_info", "Exporter build.").add(
        labels(version=__version__, python_version=platform.python_version(), nvml_bindings_version=BINDINGS),
        1,
    )
    fams.gauge("gpu_exporter_nvml_up", "1 while an NVML session is open.").add(
        {}, 1 if snapshot.nvml_up else 0
    )
    if snapshot.pod_assignment_t is not None:
        fams.gauge(
            "gpu_exporter_pod_assignment_timestamp_seconds",
            "Unix time of the kubelet answer the pod labels come from; older than the poll interval while "
            "the kubelet does not answer and the last assignment is held for its grace period.",
        ).add({}, snapshot.pod_assignment_t)
    errors = fams.counter("gpu_exporter_collect_errors", "Collection errors by source and error name.")
    for (source, error), count in sorted(snapshot.errors.items()):
        errors.add(labels(source=source, error=error), count)


def _sources(fams: _Families, snapshot: Snapshot) -> None:
    """Every registered source's last attempt, booked in one place (exporter.collect.poller): success and
    duration; and, for the sources on the sampler's cadence, the time of the last success, which the
    stale-collection alert needs (a hung call leaves no new attempt to book)."""
    for source, up in sorted(snapshot.source_up.items()):
        fams.gauge("gpu_exporter_source_up", "1 if the source's last collection succeeded.").add(
            {"source": source}, 1 if up else 0
        )
    for source, seconds in sorted(snapshot.source_durations.items()):
        fams.gauge(
            "gpu_exporter_source_duration_seconds", "Duration of the source's last collection, failed or not."
        ).add({"source": source}, seconds)
    for source, ts in sorted(snapshot.last_success.items()):
        fams.gauge(
            "gpu_exporter_last_collect_timestamp_seconds", "Time of the last successful collection."
        ).add({"source": source}, ts)
    for source, seconds in sorted(snapshot.source_intervals.items()):
        fams.gauge(
            "gpu_exporter_source_interval_seconds",
            "Seconds between the source's collections, as configured (the stale-collection alert's scale).",
        ).add({"source": source}, seconds)


def _node_checks(fams: _Families, snapshot: Snapshot) -> None:
    """The node doctor's latest results: one series per check in each family (13 checks; bounded)."""
    for r in snapshot.node_checks:
        status = r.status.value
        fams.gauge(
            "gpu_node_check_info",
            "The node check's latest result (status pass, warn, fail, skipped) and its detail word.",
        ).add(labels(check=r.check, status=status, detail=r.detail), 1)
        if status == "skipped":
            continue  # nothing was judged: no value rather than a false "0 = passing"
        # a failing check carries its own severity; a warning is a warning, but from an info check (a
        # setting, not a fault: it shows in the checklist and pages no one)
        own = DOCTOR_SEVERITY[r.check].value
        severity = own if status != "warn" or own == "info" else "warning"
        fams.gauge(
            "gpu_node_check_failed", "1 while the node check fails (or warns); severity says how bad."
        ).add(labels(check=r.check, severity=severity), 1 if status in ("fail", "warn") else 0)


def _pod_logs(fams: _Families, snapshot: Snapshot) -> None:
    """What the GPU pods' logs say: derived numbers only, label values from closed vocabularies."""
    from exporter.podlogs.logparse import ERROR_KINDS

    v = snapshot.pod_logs
    if v is None:
        return
    for c in v.containers:
        container = labels(namespace=c.namespace, pod=c.pod, container=c.container)
        _set(
            fams,
            "gpu_pod_log_last_line_seconds",
            "Time of the container's newest log line (or progress report), Unix seconds.",
            container,
            c.last_line_t,
        )
        _set(
            fams,
            "gpu_pod_training_step",
            "The newest training step the container's log (or a progress report) shows.",
            container,
            c.step,
        )
        _set(
            fams,
            "gpu_pod_step_seconds",
            "Seconds per training step, as the log says or from successive steps.",
            container,
            c.step_seconds,
        )
    for p in v.pods:
        pod = labels(namespace=p.namespace, pod=p.pod)
        if p.version or p.network:
            fams.gauge(
                "gpu_pod_nccl_info", "NCCL's version and network plugin, from NCCL_DEBUG=INFO lines."
            ).add(pod | labels(version=p.version, network=p.network), 1)
        for scope, name in p.transports:
            fams.gauge(
                "gpu_pod_nccl_transport", "A transport NCCL set up channels on (scope intra or inter node)."
            ).add(pod | labels(scope=scope, transport=name), 1)
        fams.counter(
            "gpu_pod_nccl_warnings", "NCCL WARN lines in the pod's logs since the exporter started."
        ).add(pod, p.warnings)
        errors = dict(p.errors)
        fam = fams.counter("gpu_pod_log_errors", "Job-ending errors in the pod's logs, by kind.")
        for kind in ERROR_KINDS:  # from zero, so that increase() sees the first
            fam.add(pod | {"kind": kind}, errors.get(kind, 0))
    _set(
        fams,
        "gpu_node_rdma_devices",
        "RDMA devices of the node (/sys/class/infiniband: IB HCAs, EFA).",
        {},
        v.rdma_devices,
    )
    lines = fams.counter("gpu_exporter_pod_log_lines", "Pod log records read, by what became of them.")
    lines.add({"result": "parsed"}, v.lines - v.skipped_lines - v.junk)
    lines.add({"result": "skipped"}, v.skipped_lines)
    lines.add({"result": "junk"}, v.junk)
    fams.counter(
        "gpu_exporter_pod_log_skipped_bytes",
        "Pod log bytes jumped over (backlog beyond a read's bound, over-long lines).",
    ).add({}, v.skipped_bytes)
    fams.counter(
        "gpu_exporter_pod_log_progress_deferred",
        "Times a container's newest log lines waited for a later pass of the pod-log thread before the "
        "progress patterns were tried on them: the pass's CPU budget (podlogs.progress_cpu_seconds) was "
        "spent.",
    ).add({}, v.progress_deferred)
    fams.gauge(
        "gpu_exporter_pod_log_progress_wait_seconds",
        "How long the longest-waiting container's newest log lines have waited for the progress patterns "
        "(0: none waits): how stale the step and hang confirmation from pod logs may be.",
    ).add({}, round(v.progress_wait_s, 3))


def _prices(fams: _Families, snapshot: Snapshot, prices: Prices | None) -> None:
    """One price series per GPU model on the node: the cost rules join it to gpu_info by model."""
    if prices is None or not snapshot.gpus:
        return
    fam = fams.gauge(
        "gpu_node_price_per_hour",
        "What a GPU-hour of this model costs, from --price (examples unless set); joins gpu_info on model.",
    )
    for model in dict.fromkeys(view.identity.name for view in snapshot.gpus):
        fam.add(labels(model=model, currency=prices.currency), prices.of(model))


def families(
    snapshot: Snapshot, detail: frozenset[str] = frozenset(), prices: Prices | None = DEFAULT_PRICES
) -> list[Family]:
    fams = _Families()
    for view in snapshot.gpus:
        _gpu(fams, view, snapshot, detail)
    _prices(fams, snapshot, prices)
    _host(fams, snapshot)
    _node_checks(fams, snapshot)
    _pod_logs(fams, snapshot)
    _self(fams, snapshot)
    _sources(fams, snapshot)
    return list(fams)


# ---- exposition: prometheus_client writes both formats ---------------------------------------------
# The library takes several times as long as the hand-written writer it replaced (bench/exposition.py:
# a few milliseconds for an 8-GPU node's snapshot against under half of one), but a render happens once
# per snapshot and format and only when scraped: at 15 s scrapes about 0.02 s of CPU a minute, for the
# format every client library writes and the self metrics every one of them exposes.


@functools.cache
def _pairs(text: str) -> Labels:
    """A catalog row's fixed label text (',sensor="gpu"') as labels: parsed once per row."""
    return dict(_PAIR.findall(text))


class SnapshotCollector(Collector):
    """The snapshot's families, and the server's own, for the render under way: ``source`` is set by the
    Renderer before each render (and stays, so a scrape of the registry writes the same snapshot)."""

    def __init__(self) -> None:
        self.source: Callable[[], list[Family]] = list
        self.clean = False  # replace bytes that were not UTF-8 (set for a render that could not encode)

    def collect(self) -> Iterator[Metric]:
        for fam in self.source():
            metric = fam.metric()
            if self.clean:
                _clean(metric)
            yield metric


SELF_REFRESH_S = 5.0  # how often the process's own metrics are read: a counter a few seconds old is fine


class SelfMetrics(Collector):
    """The library's process (process_*, Linux only), platform (python_info) and GC (python_gc_*)
    metrics, read on a thread of their own every SELF_REFRESH_S and served from there: the process
    collector reads /proc/self and lists every open descriptor, which the scrape path never does. One
    per process (what they describe is the process), read once when made."""

    def __init__(self) -> None:
        self._inner = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._inner)
        PlatformCollector(registry=self._inner)
        GCCollector(registry=self._inner)
        self._metrics: list[Metric] = list(self._inner.collect())
        threading.Thread(target=self._refresh, name="self-metrics", daemon=True).start()

    def _refresh(self) -> None:
        while True:
            time.sleep(SELF_REFRESH_S)
            self._metrics = list(self._inner.collect())  # one assignment: a render sees old or new

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


@functools.cache
def _self_metrics() -> SelfMetrics:
    return SelfMetrics()


def runtime_registry(collector: Collector) -> CollectorRegistry:
    """A private registry (the library's global one is left alone): the snapshot's families first, then
    the process's own metrics (``SelfMetrics``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    registry.register(_self_metrics())
    return registry


_warned_surrogates = False


def _clean(metric: Metric) -> None:
    """Every byte that was not UTF-8 as U+FFFD: a name a source let through (a file or mount that is not
    UTF-8) must not turn every scrape into an error. Said once in the log."""
    global _warned_surrogates
    for i, sample in enumerate(metric.samples):
        if any(_SURROGATE.search(v) for v in sample.labels.values()):
            pairs = {k: _SURROGATE.sub("\ufffd", v) for k, v in sample.labels.items()}
            metric.samples[i] = sample._replace(labels=pairs)
            if not _warned_surrogates:
                _warned_surrogates = True
                log.warning(
                    "a label value is not UTF-8; exported with U+FFFD in its place: %s %s", sample.name, pairs
                )


def _openmetrics(registry: CollectorRegistry) -> bytes:
    """The OpenMetrics body. The library's default escaping rewrites every sample's name character by
    character (about a quarter of a render); under its UTF-8 escaping a legacy-valid name is written as
    it is, and every name here is legacy-valid, so the bytes are the same (tests/test_metrics.py renders
    both)."""
    return generate_openmetrics(registry, escaping=ALLOWUTF8)


class Renderer:
    """Renders snapshots through prometheus_client, caching the body of the latest one per format and
    encoding."""

    def __init__(self, detail: frozenset[str] = frozenset(), prices: Prices | None = DEFAULT_PRICES) -> None:
        self.detail = detail  # the --detail categories (exporter/policy/detail.py)
        self.prices = prices  # --price (exporter/policy/cost.py); None: no gpu_node_price_per_hour
        self.collector = SnapshotCollector()
        self.registry = runtime_registry(self.collector)
        self._lock = threading.Lock()
        self._seq = -1
        self._cache: dict[tuple[bool, bool], bytes] = {}

    def render(
        self,
        snapshot: Snapshot,
        openmetrics: bool = False,
        gzipped: bool = False,
        extra: Callable[[], list[Family]] | None = None,  # the server's own families, as of this render
    ) -> tuple[bytes, str]:
        key = (openmetrics, gzipped)
        content_type = OPENMETRICS_TYPE if openmetrics else TEXT_TYPE
        with self._lock:
            if self._seq != snapshot.seq:
                self._seq, self._cache = snapshot.seq, {}
            body = self._cache.get(key)
            if body is None:
                plain = self._cache.get((openmetrics, False))
                if plain is None:
                    self.collector.source = functools.partial(self._families, snapshot, extra)
                    plain = self._cache[(openmetrics, False)] = self._write(openmetrics)
                body = gzip.compress(plain, compresslevel=1) if gzipped else plain
                self._cache[key] = body
        return body, content_type

    def _families(self, snapshot: Snapshot, extra: Callable[[], list[Family]] | None) -> list[Family]:
        return families(snapshot, self.detail, self.prices) + (extra() if extra else [])

    def _write(self, openmetrics: bool) -> bytes:
        write = _openmetrics if openmetrics else generate_latest
        try:
            return write(self.registry)
        except UnicodeEncodeError:  # a label value with a lone surrogate: write it again, cleaned
            self.collector.clean = True
            try:
                return write(self.registry)
            finally:
                self.collector.clean = False
