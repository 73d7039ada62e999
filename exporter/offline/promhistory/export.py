"""A trace's samples as the series another exporter would have had scraped (dcgm-exporter in either
naming scheme, nvidia_gpu_exporter, with node_exporter beside them), every ``step`` seconds: what loads
a Prometheus (OpenMetrics for ``promtool tsdb create-blocks-from openmetrics``) or a VictoriaMetrics
(Prometheus text with millisecond times for its import API) with a history to replay. Each scrape takes
the GPU's latest sample (the exporters' fields are instants), as a scrape does."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from exporter.analysis.engine import VerdictEvent
from exporter.offline.promhistory import names
from exporter.offline.traces import TraceRow

# the attributes each scheme writes (a subset of what it could carry: the default fields)
_SKIP = {"fabric_ready", "nvlink_active", "nvlink_links", "nvlink_errors", "p2p_failed"}


@dataclass
class Family:
    name: str
    kind: str  # gauge or counter
    series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, labels: dict[str, str], t: float, value: float) -> None:
        self.series.setdefault(tuple(sorted(labels.items())), []).append((t, value))


def writers(scheme: str) -> list[names.Series]:
    seen: set[str] = set()
    out = []
    for s in names.GPU_SERIES:
        if s.scheme == scheme and s.attr not in seen and s.attr not in _SKIP and not s.counter:
            seen.add(s.attr)
            out.append(s)
    return out


def families(
    rows: Iterable[TraceRow],
    scheme: str,
    step: float,
    start: float,
    node: str = "node-1",
    pod: tuple[str, str] | None = None,
) -> list[Family]:
    """The series of ``scheme`` for the trace's rows, one scrape every ``step`` seconds from Unix time
    ``start`` (trace time 0), on node ``node``; ``pod``: (namespace, pod) holding every GPU."""
    fields = writers(scheme)
    fams: dict[str, Family] = {s.metric: Family(s.metric, "gauge") for s in fields}
    host = _Host(node)
    last: dict[str, TraceRow] = {}
    next_scrape = 0.0
    for row in _with_end(rows):
        while row is None or row.t > next_scrape:
            if last:
                _scrape(fams, fields, scheme, last, start + next_scrape, node, pod)
                host.scrape(start + next_scrape)
            next_scrape += step
            if row is None and (not last or next_scrape > max(r.t for r in last.values())):
                break
        if row is None:
            break
        last[row.gpu] = row
        if row.host is not None:
            host.see(row.t, row.host)
    out = list(fams.values())
    if scheme == names.NVIDIA_SMI:
        info = Family("nvidia_smi_gpu_info", "gauge")
        for gpu, row in last.items():
            info.add(
                {"uuid": _uuid(gpu), "index": gpu, "name": row.name, **_target(node, scheme)}, start, 1.0
            )
        out.append(info)
    return [f for f in out if f.series] + host.families()


def _with_end(rows: Iterable[TraceRow]) -> Iterator[TraceRow | None]:
    yield from rows
    yield None


def _uuid(gpu: str) -> str:
    return f"GPU-{int(gpu):08d}-0000-0000-0000-000000000000" if gpu.isdigit() else f"GPU-{gpu}"


def _target(node: str, scheme: str) -> dict[str, str]:
    port = {names.NVIDIA_SMI: "9835", names.OWN: "9612"}.get(scheme, "9400")  # each exporter's default
    return {"instance": f"{node}:{port}", "job": "gpu"}


def _labels(scheme: str, gpu: str, row: TraceRow, node: str, pod: tuple[str, str] | None) -> dict[str, str]:
    labels = _target(node, scheme)
    if scheme == names.NVIDIA_SMI:
        return {**labels, "uuid": _uuid(gpu)}
    host_label = "hostname" if scheme == names.DCGM_49 else "Hostname"
    labels |= {
        "gpu": gpu,
        "UUID": _uuid(gpu),
        "device": f"nvidia{gpu}",
        "modelName": row.name,
        host_label: node,
    }
    if pod:
        labels |= {"namespace": pod[0], "pod": pod[1], "container": "main"}
    return labels


def _scrape(
    fams: dict[str, Family],
    fields: list[names.Series],
    scheme: str,
    last: dict[str, TraceRow],
    at: float,
    node: str,
    pod: tuple[str, str] | None,
) -> None:
    for gpu, row in last.items():
        labels = _labels(scheme, gpu, row, node, pod)
        for s in fields:
            value = getattr(row.point, s.attr, None)
            if value is None:
                continue
            fams[s.metric].add(labels, at, float(value) / s.scale)


class _Host:
    """node_exporter's series from the trace's host columns: two CPUs (the busiest core and the rest,
    so that the busiest core and the I/O wait share read back), the pressure and disk counters, and the
    ``/dev/shm`` filesystem."""

    def __init__(self, node: str) -> None:
        self.labels = {"instance": f"{node}:9100", "job": "node"}
        self.t: float | None = None
        self.now: dict[str, float] = {}
        self.totals: dict[tuple[str, str, str], float] = {}
        self.shm: tuple[float, float] | None = None
        self.fams = {
            "node_cpu_seconds": Family("node_cpu_seconds", "counter"),
            "node_pressure_io_waiting_seconds": Family("node_pressure_io_waiting_seconds", "counter"),
            "node_pressure_cpu_waiting_seconds": Family("node_pressure_cpu_waiting_seconds", "counter"),
            "node_pressure_memory_waiting_seconds": Family("node_pressure_memory_waiting_seconds", "counter"),
            "node_disk_read_bytes": Family("node_disk_read_bytes", "counter"),
            "node_filesystem_size_bytes": Family("node_filesystem_size_bytes", "gauge"),
            "node_filesystem_avail_bytes": Family("node_filesystem_avail_bytes", "gauge"),
        }

    def see(self, t: float, host: object) -> None:
        if self.t is not None and t > self.t:
            self._integrate(t - self.t)
        self.t = t
        get = lambda attr: getattr(host, attr)  # noqa: E731
        self.now = {
            a: v
            for a in ("iowait", "core_busy_max", "psi_io", "psi_cpu", "psi_memory", "disk_read_bps")
            if (v := get(a)) is not None
        }
        if get("shm_size_bytes") is not None and get("shm_used_bytes") is not None:
            self.shm = (get("shm_size_bytes"), get("shm_used_bytes"))

    def _integrate(self, dt: float) -> None:
        iowait, busy = self.now.get("iowait"), self.now.get("core_busy_max")
        if iowait is not None or busy is not None:
            io, user = iowait or 0.0, busy or 0.0
            for key, share in (
                (("node_cpu_seconds", "0", "user"), user),
                (("node_cpu_seconds", "0", "iowait"), io),
                (("node_cpu_seconds", "0", "idle"), max(0.0, 1.0 - user - io)),
                (("node_cpu_seconds", "1", "iowait"), io),
                (("node_cpu_seconds", "1", "idle"), max(0.0, 1.0 - io)),
            ):
                self.totals[key] = self.totals.get(key, 0.0) + share * dt
        for attr, fam in (
            ("psi_io", "node_pressure_io_waiting_seconds"),
            ("psi_cpu", "node_pressure_cpu_waiting_seconds"),
            ("psi_memory", "node_pressure_memory_waiting_seconds"),
            ("disk_read_bps", "node_disk_read_bytes"),
        ):
            if attr in self.now:
                key = (fam, "", "")
                self.totals[key] = self.totals.get(key, 0.0) + self.now[attr] * dt

    def scrape(self, at: float) -> None:
        for (fam, cpu, mode), total in self.totals.items():
            extra = (
                {"cpu": cpu, "mode": mode}
                if cpu
                else ({"device": "nvme0n1"} if fam == "node_disk_read_bytes" else {})
            )
            self.fams[fam].add({**self.labels, **extra}, at, total)
        if self.shm is not None:
            fs = {**self.labels, "mountpoint": "/dev/shm", "fstype": "tmpfs", "device": "shm"}
            self.fams["node_filesystem_size_bytes"].add(fs, at, self.shm[0])
            self.fams["node_filesystem_avail_bytes"].add(fs, at, self.shm[0] - self.shm[1])

    def families(self) -> list[Family]:
        return [f for f in self.fams.values() if f.series]


def _label_text(labels: tuple[tuple[str, str], ...]) -> str:
    return ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"' for k, v in labels
    )


def openmetrics(fams: Iterable[Family]) -> Iterator[str]:
    """OpenMetrics text (times in seconds), for ``promtool tsdb create-blocks-from openmetrics``."""
    for fam in fams:
        yield f"# TYPE {fam.name} {fam.kind}\n"
        suffix = "_total" if fam.kind == "counter" else ""
        for labels, samples in fam.series.items():
            text = _label_text(labels)
            for t, v in samples:
                yield f"{fam.name}{suffix}{{{text}}} {v!r} {t:.3f}\n"
    yield "# EOF\n"


def prometheus_text(fams: Iterable[Family]) -> Iterator[str]:
    """Prometheus text with millisecond times, for VictoriaMetrics' /api/v1/import/prometheus."""
    for fam in fams:
        suffix = "_total" if fam.kind == "counter" else ""
        for labels, samples in fam.series.items():
            text = _label_text(labels)
            for t, v in samples:
                yield f"{fam.name}{suffix}{{{text}}} {v!r} {round(t * 1000)}\n"


def own_analysis(
    trace: Path,
    step: float,
    start: float,
    node: str = "node-1",
    pod: tuple[str, str] | None = None,
) -> list[Family]:
    """What this exporter would have exported of its own analysis of the trace, scraped every ``step``
    seconds: each GPU's ledger counters (``gpu_time_seconds_total``: its evaluated seconds by state),
    its verdicts (``gpu_bottleneck``: 1 with the cause while firing, else 0, and while firing when its
    loss began, ``gpu_bottleneck_since_timestamp_seconds``), its workload class and its
    ``gpu_info``. The trace is judged at 1 s, as live."""
    from exporter.analysis.kinds import KINDS
    from exporter.offline.replay import replay

    ticks: list[tuple[float, str, str]] = []
    events: list[VerdictEvent] = []
    rows: dict[str, TraceRow] = {}
    result = replay(
        trace,
        on_tick=lambda t, gpu, state: ticks.append((t, gpu, state)),
        on_event=events.append,
        on_row=lambda row: rows.setdefault(row.gpu, row),
    )
    ledger = Family("gpu_time_seconds", "counter")
    verdict, since, workload, info = (
        Family("gpu_bottleneck", "gauge"),
        Family("gpu_bottleneck_since_timestamp_seconds", "gauge"),
        Family("gpu_workload_class", "gauge"),
        Family("gpu_info", "gauge"),
    )
    totals: dict[tuple[str, str], float] = {}
    firing: dict[tuple[str, str], tuple[str, float]] = {}  # (gpu, kind) -> cause, when its loss began
    ticks.sort()
    events.sort(key=lambda e: e.t)
    last = ticks[-1][0] if ticks else 0.0
    i = j = 0
    at = 0.0
    while at <= last + step:
        while i < len(ticks) and ticks[i][0] <= at:
            _, gpu, state = ticks[i]
            totals[(gpu, state)] = totals.get((gpu, state), 0.0) + 1.0
            i += 1
        while j < len(events) and events[j].t <= at:
            e = events[j]
            if e.state == "firing":
                firing[(e.gpu, e.kind)] = (e.cause, e.t if e.since is None else e.since)
            else:
                firing.pop((e.gpu, e.kind), None)
            j += 1
        for gpu, row in rows.items():
            labels = {**_labels(names.OWN, gpu, row, node, pod), "uuid": _uuid(gpu)}
            t = start + at
            for (g, state), seconds in totals.items():
                if g == gpu:
                    ledger.add({**labels, "state": state}, t, seconds)
            for kind in KINDS:
                on = firing.get((gpu, kind))
                cause = on[0] if on is not None else ""
                verdict.add({**labels, "kind": kind, "cause": cause}, t, 1.0 if on is not None else 0.0)
                if on is not None:
                    since.add({**labels, "kind": kind, "cause": cause}, t, start + on[1])
            classes = result.classes.get(gpu) or {}
            if classes:
                (cls, source), _ = max(classes.items(), key=lambda kv: kv[1])
                # as the exporter says it: training by default while nothing decided the class
                workload.add({**labels, "workload": cls or "training", "source": source or "default"}, t, 1.0)
            info.add({**labels, "model": row.name}, t, 1.0)
        at += step
    return [f for f in (ledger, verdict, since, workload, info) if f.series]
