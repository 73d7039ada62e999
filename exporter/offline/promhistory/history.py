"""A Prometheus' history of GPU series as replay's trace rows, and the replay of it.

The GPUs are found by the series of any source in ``names`` (the selector narrowing them), then read one
node at a time: a gauge's raw samples in bounded chunks (one query per series name per node per chunk,
all the node's GPUs in one answer; VictoriaMetrics' export where the server has it), placed on the step's
clock here (``Grid``: what a range query of the fresh samples answers, without the server evaluating
it at every step); counters and the node's series as range queries (``rate`` over the step). Each
sample stands for its step in the analysis; nothing finer than the step is made up, and the kinds a
step cannot show are said (``resolution.py``). Each pod's GPUs on a node are one job, as live; GPUs no pod
holds are their node's job. Every job is replayed on its own and the results are joined.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import ctypes.util
import itertools
import math
import os
import signal
import statistics
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from exporter.analysis.engine import VerdictEvent
from exporter.analysis.points import NO_EXTRA, GpuPoint, HostPoint
from exporter.offline.promhistory import names, own
from exporter.offline.promhistory.client import (
    RAW_SAMPLES_PER_ANSWER,
    Auth,
    Budget,
    BudgetSpent,
    PromClient,
    PromError,
    Raw,
)
from exporter.offline.promhistory.resolution import silenced, unjudged_causes
from exporter.offline.promhistory.rollup import rollup
from exporter.offline.replay import ReplayResult, replay
from exporter.offline.traces import BOUNDS, ReadStats, TraceRow, gap_seconds
from exporter.policy.cost import DEFAULT as DEFAULT_PRICES
from exporter.policy.cost import Prices

# where the scrape interval is looked for: the range's sample counts in buckets of at least this many
# seconds (two samples of the coarsest step replay takes)...
INTERVAL_PROBE_S = 600.0
# ...and at most this many buckets (one range query's points), the raw samples of the fullest read
INTERVAL_PROBE_BUCKETS = 1000
# where a server refuses the count, the first of these nodes are probed at the range's end, start, eighths
INTERVAL_PROBE_NODES = 5
# the coarsest step replay takes: past it no kind of the analysis can be told (docs/diagnose.md)
MAX_STEP_S = 300.0
# a counter's rate and the node's CPU shares are taken over this many steps (two samples at least)
RATE_STEPS = 4
# a sample older than this many steps at a query's time is stale (one missed scrape is tolerated)...
STALE_STEPS = 2
# ...and never older than the server's lookback (Prometheus' default: a range query's own limit)
LOOKBACK_S = 300.0
# raw samples are asked this many steps at a time per series (what a range query's chunk holds)
CHUNK_STEPS = 10_000
# at coarse steps a gap (a new segment) is at least this many missing steps, however short replay's is
GAP_STEPS = 4
NO_POD = ""  # a GPU no pod holds: its node's job
PR_SET_PDEATHSIG = 1  # Linux's prctl option: a signal to this process when its parent ends
HEARTBEAT_S = 1.0  # while workers read, the progress line is offered this often (it prints every few s)
# A node is read whole before it is judged, about 500 bytes a GPU a step (8 GPUs at 15 s: 23 MB a day):
# one node's range may hold this many GPU-steps (1.75 GB), so a worker stays under 2 GiB (docs/diagnose.md).
# Each answer is placed on the step's clock as it comes, so what a node holds is its steps, never the
# samples the server sent: the cap is checked on the GPUs discovery found before any sample is asked, and
# on the GPU-steps held as they are read (a server may answer for GPUs its index did not name).
MAX_GPU_STEPS = 3_500_000


@dataclass
class Request:
    url: str
    start: float
    end: float
    selector: str = ""  # PromQL label matchers without braces: namespace="ml",pod=~"train-.*"
    step: float | None = None  # None: the series' scrape interval
    auth: Auth = field(default_factory=Auth)
    timeout_s: float = 60.0
    budget_s: float | None = None  # the run's time budget (--max-duration; None: no budget)
    budget: Budget | None = None  # ...from when the run started (set by replay_prometheus)
    export: bool | None = None  # read raw samples by VictoriaMetrics' export (None: where the server has it)
    jobs: int | None = None  # processes judging nodes (None: one per core)
    recompute: bool = False  # judge this exporter's nodes from their raw readings, not read their verdicts


@dataclass
class Gpu:
    node: str
    ident: str
    model: str = ""
    values: dict[str, dict[float, float]] = field(default_factory=dict)  # attr -> time -> value
    uuid: str = ""  # the board's UUID, where its series carry one: two boards never share a name
    note: str = ""  # why it is named as it is (its name was another board's on the node)
    pods: dict[float, str] = field(default_factory=dict)  # time -> "namespace/pod"

    @property
    def name(self) -> str:
        return f"{self.node}/{self.ident}"


@dataclass
class Progress:
    """What has been read so far, for the line on stderr."""

    nodes: int = 0
    nodes_done: int = 0
    queries: int = 0
    samples: int = 0
    reading_s: float = 0.0  # CPU seconds spent reading and placing the samples (workers' added)


@dataclass
class Found:
    schemes: list[str]
    nodes: dict[str, str]  # node -> its GPU series' matcher
    host_nodes: dict[str, str]  # node -> its node_exporter series' matcher
    present: set[str]
    pod_jobs: dict[str, str]  # "namespace/pod" -> its job's name (kube_pod_labels)
    export: bool = False  # the server exports raw samples (VictoriaMetrics)
    read_back: set[str] = field(default_factory=set)  # nodes this exporter judged: its analysis is read
    # the scrape targets (("job", name), ("pod", namespace/pod)) whose series' namespace/pod name the
    # exporter's own pod (their scrape renamed the workload's labels to exported_*)
    targets: frozenset[tuple[str, str]] = frozenset()
    named_by: dict[str, int] = field(default_factory=dict)  # which labels named the workload: series
    gpus: dict[str, int] = field(default_factory=dict)  # node -> the GPUs its series index names


def _quote(value: str) -> str:
    """A PromQL string (a raw line break would end the query's string: escaped, as the others)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def _matchers(*parts: str) -> str:
    return ",".join(p for p in parts if p)


def node_of(labels: dict[str, str]) -> tuple[str, str] | None:
    """The node a series is from and the matcher that selects its node's series."""
    for label in names.NODE_LABELS:
        if labels.get(label):
            return labels[label], f"{label}={_quote(labels[label])}"
    instance = labels.get("instance", "")
    if not instance:
        return None
    host = instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance
    return host, f"instance=~{_quote(_regex_escape(host) + '(:[0-9]+)?')}"


def _regex_escape(text: str) -> str:
    """RE2's escape of ``text`` (the string's own quoting is ``_quote``'s)."""
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in text)


def pod_of(labels: dict[str, str], targets: frozenset[tuple[str, str]] = frozenset()) -> str:
    """The "namespace/pod" a series' GPU was allocated to (``targets``: the renaming scrapes', whose
    plain namespace/pod name the exporter's pod: names.workload_labels)."""
    labels = names.workload_labels(labels, targets)
    for ns, pod in names.POD_LABELS:
        if labels.get(pod):
            return f"{labels.get(ns, '')}/{labels[pod]}"
    return NO_POD


def gpu_id(scheme: str, labels: dict[str, str]) -> str | None:
    for label in names.GPU_LABELS[scheme]:
        if labels.get(label):
            return labels[label]
    return None


def discover(client: PromClient, request: Request) -> Found:
    """The schemes, nodes and series present in the range (one line when no GPU series is there)."""
    schemes: list[str] = []
    nodes: dict[str, str] = {}
    seen: list[dict[str, str]] = []  # the presence series' labels, for how they name the workload
    gpus: dict[str, int] = {}  # node -> its GPUs in the scheme that names the most of them
    for scheme in names.SCHEMES:
        match = "{" + _matchers(f"__name__={_quote(names.PRESENCE[scheme])}", request.selector) + "}"
        found = False
        idents: dict[str, set[str]] = {}
        for labels in client.series(match, request.start, request.end):
            found = True
            where = node_of(labels)
            if where is not None:
                nodes.setdefault(*where)
                idents.setdefault(where[0], set()).add(gpu_id(scheme, labels) or "")
            seen.append({k: labels[k] for k in ("job", "namespace", "pod", *_WORKLOAD_KEYS) if k in labels})
        for node, ids in idents.items():
            gpus[node] = max(gpus.get(node, 0), len(ids))
        if found:
            schemes.append(scheme)
    # the range against each node's memory before any sample is asked: at the step given, or at the
    # coarsest one the scrape interval could give (checked again at the interval found)
    too_large_everywhere(nodes, gpus, request, request.step or MAX_STEP_S)
    if not schemes:
        known = ", ".join(names.PRESENCE.values())
        what = f"matching {{{request.selector}}} " if request.selector else ""
        raise PromError(
            f"{client.url}: no GPU series {what}between {_iso(request.start)} and {_iso(request.end)} "
            f"(looked for {known})"
        )
    wanted = {s.metric for scheme in schemes for s in names.series_for(scheme)} | {
        names.INFO_SERIES.get(s, "") for s in schemes
    }
    if names.OWN in schemes:
        wanted |= set(own.NAMES)
    regex = "|".join(sorted(m for m in wanted if m))
    present = set(
        client.label_values("__name__", f"{{__name__=~{_quote(regex)}}}", request.start, request.end)
    )
    host_nodes: dict[str, str] = {}
    for labels in client.series('node_cpu_seconds_total{mode="idle",cpu="0"}', request.start, request.end):
        where = node_of(labels)
        if where is not None and where[0] in nodes:
            host_nodes.setdefault(*where)
    export = request.export
    if export is None:
        presence = f"{names.PRESENCE[schemes[0]]}{{{next(iter(nodes.values()))}}}" if nodes else "up"
        export = client.has_export(presence, request.end)
    read_back = set()
    if own.LEDGER in present and not request.recompute:  # the nodes this exporter judged
        for labels in client.series(f"{own.LEDGER}{{{request.selector}}}", request.start, request.end):
            where = node_of(labels)
            if where is not None and where[0] in nodes:
                read_back.add(where[0])
    targets, named_by = _naming(seen)
    pod_jobs = _pod_jobs(client, request)
    return Found(schemes, nodes, host_nodes, present, pod_jobs, export, read_back, targets, named_by, gpus)


_WORKLOAD_KEYS = (*(names.RENAMED + n for n in names.WORKLOAD_LABELS), "pod_namespace", "pod_name")


def _naming(seen: list[dict[str, str]]) -> tuple[frozenset[tuple[str, str]], dict[str, int]]:
    """The scrape targets that renamed the workload's labels, and how many series each way named it."""
    targets = frozenset(t for labels in seen if names.renamed(labels) for t in names.scrape_target(labels))
    named_by: dict[str, int] = {}
    for labels in seen:
        by = names.named_by(labels, targets)
        if by:
            named_by[by] = named_by.get(by, 0) + 1
    return targets, named_by


def _pod_jobs(client: PromClient, request: Request) -> dict[str, str]:
    """kube-state-metrics' pod labels: the job each pod belongs to (none when it is not scraped)."""
    jobs: dict[str, str] = {}
    for labels in client.series(names.KUBE_POD_LABELS, request.start, request.end):
        labels = names.workload_labels(labels)  # kube-state-metrics scraped with its labels renamed too
        for label in names.JOB_LABELS:
            if labels.get(label) and labels.get("pod"):
                jobs[f"{labels.get('namespace', '')}/{labels['pod']}"] = labels[label]
                break
    return jobs


def scrape_interval(client: PromClient, request: Request, found: Found) -> float:
    """The median spacing of the raw samples of the GPU series where the range holds most of them.

    History has holes (a pool scaled to zero now, nodes gone, an exporter that was down): one range
    query of each presence series' sample count per bucket of the range (``topk(1, count_over_time)``,
    a thousand buckets at most) says where samples exist and which series has most; its raw samples
    there give the spacing. Samples at the same time (a broken HA pair's merge) are one: a zero gap is
    no interval."""
    window = float(math.ceil(max(INTERVAL_PROBE_S, (request.end - request.start) / INTERVAL_PROBE_BUCKETS)))
    for scheme in found.schemes:
        for expr, at in _probes(client, request, found, names.PRESENCE[scheme], window):
            # the last ten minutes before the probe's time first: a bucket of a long range (days) read
            # whole would be every sample of those days on a densely sampled server
            for span in dict.fromkeys((min(INTERVAL_PROBE_S, window), window)):
                gaps = [
                    b - a
                    for times in client.raw_times(expr, at, span)
                    for a, b in itertools.pairwise(sorted(set(times)))
                ]
                if gaps:
                    return max(1.0, round(statistics.median(gaps)))
    raise PromError(
        f"{client.url}: the GPU series have no two samples within {window:.0f} s of each other anywhere "
        f"between {_iso(request.start)} and {_iso(request.end)} to tell their scrape interval: pass --step "
        "SECONDS (the interval the series were scraped at, such as --step 15)"
    )


def _probes(
    client: PromClient, request: Request, found: Found, metric: str, window: float
) -> Iterator[tuple[str, float]]:
    """Where to read raw samples of ``metric``: the series and bucket with most samples; where the
    server (or a proxy before it) refuses the count, the range's end, start and each eighth of it, on
    the first few nodes."""
    counts = f"topk(1, count_over_time({metric}{{{request.selector}}}[{window:.0f}s]))"
    first = min(request.start + window, request.end)
    try:
        answer = client.query_range(counts, first, request.end, window)
    except PromError:
        span = request.end - request.start
        eighths = (request.start + span * k / 8 for k in (4, 2, 6, 1, 3, 5, 7))  # the middle first
        nodes = list(itertools.islice(found.nodes.values(), INTERVAL_PROBE_NODES))
        for at in (request.end, first, *eighths):
            for matcher in nodes:
                yield f"{metric}{{{_matchers(matcher, request.selector)}}}", at
        return
    best: tuple[float, float, dict[str, str]] | None = None  # (samples, time, the series)
    for series in answer:
        for t, n in zip(series.times, series.values, strict=True):
            if n >= 2 and (best is None or (n, t) > best[:2]):
                best = (n, t, series.labels)
    if best is not None:
        labels = best[2]
        yield f"{metric}{{{_matchers(*(f'{k}={_quote(v)}' for k, v in sorted(labels.items())))}}}", best[1]


def read_node(
    client: PromClient, request: Request, found: Found, node: str, step: float
) -> tuple[dict[str, Gpu], dict[str, dict[float, float]]]:
    """One node's GPUs (their values by attribute and time, their pods) and its host values."""
    window = f"{int(RATE_STEPS * step)}s"
    grid = Grid.of(request.start, request.end, step)
    gpus: dict[str, Gpu] = {}
    for scheme in found.schemes:
        for s in names.series_for(scheme):
            if s.metric not in found.present:
                continue
            selector = "{" + _matchers(found.nodes[node], s.labels, request.selector) + "}"
            if s.counter:
                expr = f"rate({s.metric}{selector}[{window}])"
                points = _chunk_steps(found.gpus.get(node, 1))
                read = [
                    (series.labels, series.times, series.values)
                    for series in client.query_range(expr, request.start, request.end, step, points=points)
                ]
                for labels, times, values in read:
                    _keep(gpus, scheme, s, node, labels, times, values, found.targets)
                _held(node, gpus, request, step)
                continue
            # a gauge's raw samples, each answer placed on the step's clock as it comes: what is held is
            # at most a value a step, however dense the samples the server sends
            placers: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], Placer]] = {}
            span = _chunk_steps(found.gpus.get(node, 1)) * step
            for chunk in client.raw_chunks(
                f"{s.metric}{selector}", grid.first_s, request.end, span, found.export, step
            ):
                for key, labels, times_ms, values in chunk:
                    entry = placers.get(key) or placers.setdefault(key, (labels, Placer(grid)))
                    _keep(gpus, scheme, s, node, labels, *entry[1].add(times_ms, values), found.targets)
                del chunk
                _held(node, gpus, request, step)
            for key in sorted(placers):
                labels, placer = placers[key]
                _keep(gpus, scheme, s, node, labels, *placer.finish(), found.targets)
        _identify(client, request, found, scheme, node, gpus)
    host: dict[str, dict[float, float]] = {}
    matcher = found.host_nodes.get(node)
    if matcher:
        for attr, template in names.HOST_SERIES.items():
            for series in client.query_range(
                template.format(sel=matcher, w=window), request.start, request.end, step
            ):
                host.setdefault(attr, {}).update(zip(series.times, series.values, strict=True))
    return gpus, host


def _chunk_steps(gpus: int) -> int:
    """The steps one raw-sample query asks for: CHUNK_STEPS, fewer on a node of many GPUs (MIG
    instances), so that an answer of a sample a step stays within the client's RAW_BODY_BYTES."""
    return max(100, min(CHUNK_STEPS, RAW_SAMPLES_PER_ANSWER // max(1, gpus)))


def too_large(node: str, gpus: int, request: Request, step: float) -> str:
    """Why a node whose range would not fit a worker's memory is refused, before any of it is read
    (``gpus``: those its series index names), or "" where it fits."""
    steps = (request.end - request.start) / step
    if gpus * steps <= MAX_GPU_STEPS:
        return ""
    return (
        f"node {node}: {gpus} GPU(s) x {steps:.0f} steps is more than {MAX_GPU_STEPS:,} GPU-steps one "
        "node may hold (2 GiB): read a shorter range (--from/--to) or a coarser --step"
    )


def too_large_everywhere(
    nodes: Iterable[str], gpus: dict[str, int], request: Request, step: float
) -> dict[str, str]:
    """Each node too large for a worker's memory at ``step``, with why; when that is every node, the
    run is refused (one line) before any of their samples is asked."""
    nodes = list(nodes)
    failed = {n: why for n in nodes if (why := too_large(n, gpus.get(n, 1), request, step))}
    if nodes and len(failed) == len(nodes):
        raise PromError(f"no node could be read: {failed[min(failed)]}")
    return failed


def _held(node: str, gpus: dict[str, Gpu], request: Request, step: float) -> None:
    """The GPU-steps a node holds as it is read (each GPU's most-filled attribute): a server that
    answers for more GPUs than its index named is refused before more of it is read."""
    steps = (request.end - request.start) / step
    held = sum(max(map(len, g.values.values()), default=0) for g in gpus.values())
    if held > MAX_GPU_STEPS:
        raise PromError(
            f"node {node}: {len(gpus)} GPU(s) answered, {held:,} GPU-steps held of {steps:.0f} steps "
            f"each, more than the {MAX_GPU_STEPS:,} one node may hold (2 GiB): read a shorter range "
            "(--from/--to), a coarser --step or fewer GPUs (--selector)"
        )


def _keep(
    gpus: dict[str, Gpu],
    scheme: str,
    s: names.Series,
    node: str,
    labels: dict[str, str],
    times: list[float],
    values: list[float],
    targets: frozenset[tuple[str, str]] = frozenset(),
) -> None:
    """One series' values into its GPU's (the first series to give a time keeps it)."""
    ident = gpu_id(scheme, labels)
    if ident is None:
        return
    gpu = _board(gpus, node, ident, labels.get("UUID") or labels.get("uuid") or "")
    gpu.model = gpu.model or next((labels[m] for m in names.MODEL_LABELS if labels.get(m)), "")
    into = gpu.values.setdefault(s.attr, {})
    scale = s.scale
    low, high = BOUNDS[s.attr][:2] if s.attr in BOUNDS else (-math.inf, math.inf)
    for t, v in zip(times, values, strict=True):
        if low <= v * scale <= high:  # an impossible value (-1e6 %, 1e308 W) is read as missing
            into.setdefault(t, v * scale)
    pod = pod_of(labels, targets)
    if pod:
        gpu.pods.update(dict.fromkeys(times, pod))


def _board(gpus: dict[str, Gpu], node: str, ident: str, uuid: str) -> Gpu:
    """The GPU a series is of: by its UUID where it has one, so that two boards whose series carry one
    name (a relabelling that dropped a label, a board swapped mid-range) are kept apart, the second named
    by its UUID and said so."""
    if uuid:
        for gpu in gpus.values():
            if gpu.uuid == uuid:
                return gpu
    gpu = gpus.get(ident)
    if gpu is None:
        return gpus.setdefault(ident, Gpu(node, ident, uuid=uuid))
    if not uuid or not gpu.uuid:
        gpu.uuid = gpu.uuid or uuid
        return gpu
    note = (
        f"node {node}: two GPUs' series both name GPU {ident} (UUIDs {gpu.uuid} and {uuid}): kept apart, "
        f"the second as {node}/{uuid}"
    )
    return gpus.setdefault(uuid, Gpu(node, uuid, uuid=uuid, note=note))


@dataclass(frozen=True)
class Grid:
    """The step's clock from the range's start, in milliseconds (exact), and how stale a sample may be
    on it: what a range query at the step answers for a gauge's fresh samples (Prometheus' query of
    ``last_over_time(...[two steps])``), worked out here from the raw samples."""

    start_ms: int
    end_ms: int
    step_ms: int
    stale_ms: int

    @classmethod
    def of(cls, start: float, end: float, step: float) -> Grid:
        stale = min(STALE_STEPS * step, LOOKBACK_S)
        return cls(round(start * 1000), round(end * 1000), round(step * 1000), round(stale * 1000))

    @property
    def first_s(self) -> float:
        """Where the raw samples are read from: the first step's staleness earlier, less a millisecond
        (a chunk is (lo, hi]: a sample exactly that stale is read)."""
        return (self.start_ms - self.stale_ms - 1) / 1000

    def place(
        self, times_ms: list[int], values: list[float], next_ms: int | None = None
    ) -> tuple[list[float], list[float]]:
        """Each step's value: the latest sample at or before it, while no staler than ``stale_ms``
        (``next_ms``: the time of the sample after the last, which takes over from its own step)."""
        start, step, stale = self.start_ms, self.step_ms, self.stale_ms
        last_k = (self.end_ms - start) // step
        out_t: list[float] = []
        out_v: list[float] = []
        n = len(times_ms)
        for i in range(n):
            ts = times_ms[i]
            first = max(0, -((start - ts) // step))  # the first step at or after the sample
            last = min(last_k, (ts + stale - start) // step)
            after = times_ms[i + 1] if i + 1 < n else next_ms
            if after is not None:  # the next sample takes over from its own first step
                last = min(last, -((start - after) // step) - 1)
            v = values[i]
            for k in range(first, last + 1):
                out_t.append((start + k * step) / 1000)
                out_v.append(v)
        return out_t, out_v


class Placer:
    """One series' raw samples placed on the grid an answer at a time, as ``Grid.place`` places them
    all at once: the latest sample waits for the next answer (the next sample ends its steps), and the
    chunks' shared edge is read once. What it holds between answers is that one sample."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self.last: tuple[int, float] | None = None

    def add(self, times_ms: list[int], values: list[float]) -> tuple[list[float], list[float]]:
        if self.last is not None and times_ms and times_ms[0] <= self.last[0]:  # the chunks' overlap
            keep = bisect.bisect_right(times_ms, self.last[0])
            times_ms, values = times_ms[keep:], values[keep:]
        if not times_ms:
            return [], []
        held, self.last = self.last, (times_ms[-1], values[-1])
        if held is None:
            return self.grid.place(times_ms[:-1], values[:-1], times_ms[-1])
        return self.grid.place([held[0], *times_ms[:-1]], [held[1], *values[:-1]], times_ms[-1])

    def finish(self) -> tuple[list[float], list[float]]:
        """The last sample's steps (no sample came after it)."""
        if self.last is None:
            return [], []
        (ts, v), self.last = self.last, None
        return self.grid.place([ts], [v])


def _identify(
    client: PromClient, request: Request, found: Found, scheme: str, node: str, gpus: dict[str, Gpu]
) -> None:
    """nvidia_gpu_exporter and this exporter name the board on an info series: each GPU's model from
    it, and nvidia_gpu_exporter's GPUs (named by uuid) get their index there."""
    info = names.INFO_SERIES.get(scheme)
    if not info or info not in found.present:
        return
    for labels in client.series(f"{info}{{{found.nodes[node]}}}", request.start, request.end):
        ident = gpu_id(scheme, labels)
        gpu = gpus.get(ident or "")
        if gpu is None:
            continue
        gpu.model = gpu.model or labels.get("name") or labels.get("model") or ""
        index = labels.get("index", "")
        if scheme == names.NVIDIA_SMI and index.isdigit() and index not in gpus:
            gpu.ident = index
            gpus[index] = gpus.pop(ident or "")


class JobRows:
    """The rows of one job's GPUs (one pod on one node, or the node's GPUs no pod holds): one row per
    sample at its own time, on a clock counted from the range's start so that every job's times line up;
    replay evaluates them once per step (``replay(step=...)``), each sample standing for its step. A
    stretch with no sample longer than replay's gap starts a new segment."""

    def __init__(
        self,
        label: str,
        gpus: list[Gpu],
        times: dict[str, list[float]],
        host: dict[str, dict[float, float]],
        step: float,
        origin: float,
        fmt: str,
    ) -> None:
        self.label, self.gpus, self.times, self.host = label, gpus, times, host
        self.step, self.origin = step, origin
        self.stats = stepped(ReadStats(format=fmt, first_timestamp=origin), step)

    def __iter__(self) -> Iterator[TraceRow]:
        by_time: dict[float, list[Gpu]] = {}
        for gpu in self.gpus:
            for t in self.times[gpu.name]:
                by_time.setdefault(t, []).append(gpu)
        segment, last = 0, None
        for t in sorted(by_time):
            if last is not None and t - last > self.stats.gap_s:  # type: ignore[operator]
                segment += 1
                self.stats.gap_count = segment
                if len(self.stats.gaps) < 5:  # where: the second it resumes at, from the range's start
                    self.stats.gaps.append((round(t - self.origin), t - last))
            last = t
            at = t - self.origin
            host = {attr: vals[t] for attr, vals in self.host.items() if t in vals}
            host_point = HostPoint(t=at, **host) if host else None  # type: ignore[arg-type]
            for gpu in by_time[t]:
                self.stats.rows += 1
                if gpu.name not in self.stats.gpus:
                    self.stats.gpus.append(gpu.name)
                    if gpu.note:
                        self.stats.warnings.append(gpu.note)
                    if gpu.model:
                        self.stats.names[gpu.name] = gpu.model
                yield TraceRow(
                    line=self.stats.rows,
                    t=at,
                    gpu=gpu.name,
                    point=_point(gpu, t, at),
                    host=host_point,
                    name=gpu.model,
                    segment=segment,
                )
                host_point = None
            self.stats.last_timestamp = t


def stepped(stats: ReadStats, step: float) -> ReadStats:
    """A range's stats: its gaps are placed by time, and are at least GAP_STEPS steps long."""
    stats.position, stats.gap_s = "time", max(gap_seconds(), GAP_STEPS * step)
    return stats


def _point(gpu: Gpu, t: float, at: float) -> GpuPoint:
    values: dict[str, float | int | bool | None] = {}
    for attr, by_time in gpu.values.items():
        value = by_time.get(t)
        if value is None:
            continue
        if attr == "reasons":
            values[attr] = int(value)
        elif attr == "fabric_ready":
            values[attr] = bool(value)
        else:
            values[attr] = value
    return GpuPoint(t=at, extra=NO_EXTRA, **values)  # type: ignore[arg-type]


def jobs_of(gpus: dict[str, Gpu], pod_jobs: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    """Per job (its name), each of its GPUs' sample times: a pod's GPUs are its job while it holds them."""
    jobs: dict[str, dict[str, list[float]]] = {}
    for gpu in gpus.values():
        times = sorted(
            {t for values in gpu.values.values() for t in values} & set(gpu.values.get("util", {}))
        )
        for t in times:
            pod = gpu.pods.get(t, NO_POD)
            job = _job_name(gpu.node, pod, pod_jobs)
            jobs.setdefault(job, {}).setdefault(gpu.name, []).append(t)
    return jobs


def _job_name(node: str, pod: str, pod_jobs: dict[str, str]) -> str:
    if pod == NO_POD:
        return f"{node} (no pod)"
    namespace = pod.split("/", 1)[0]
    job = pod_jobs.get(pod)
    return f"{namespace}/{job} ({pod.split('/', 1)[1]})" if job else pod


@dataclass
class Hooks:
    """What a caller of replay watches as it goes (replay's own callbacks, and the reading's progress)."""

    on_event: Callable[[VerdictEvent], None] | None = None
    on_job: Callable[[dict[str, object]], None] | None = None
    on_row: Callable[[TraceRow], None] | None = None
    on_tick: Callable[[float, str, str], None] | None = None


Node = tuple[dict[str, Gpu], dict[str, dict[float, float]]]  # its GPUs, its host values


def replay_prometheus(
    request: Request,
    on_event: Callable[[VerdictEvent], None] | None = None,
    on_job: Callable[[dict[str, object]], None] | None = None,
    on_row: Callable[[TraceRow], None] | None = None,
    on_tick: Callable[[float, str, str], None] | None = None,
    prices: Prices | None = DEFAULT_PRICES,
    workload: str = "",
    on_progress: Callable[[Progress], None] | None = None,
) -> ReplayResult:
    """Read the range and replay every job in it; the result reads like one trace's. Nodes are judged
    in ``request.jobs`` processes, each reading and judging one node at a time; their results are
    joined in node order, so the output is the same whatever the number."""
    if request.budget is None and request.budget_s:
        request = replace(request, budget=Budget.of(request.budget_s))  # the run's clock starts here
    client = PromClient(request.url, request.auth, request.timeout_s, request.budget)
    found = discover(client, request)
    step = request.step or scrape_interval(client, request, found)
    if step > MAX_STEP_S:
        raise PromError(f"--step {step:g} s: past {MAX_STEP_S:g} s no verdict can be told (docs/diagnose.md)")
    # each node's range against the memory it may hold, before any of its samples is asked; a node
    # that cannot be read is said in the summary (the others' results still count)
    failed = too_large_everywhere(found.nodes, found.gpus, request, step)
    progress = Progress(nodes=len(found.nodes), nodes_done=len(failed))
    counts = client.counts

    def tell() -> None:
        progress.queries, progress.samples = counts.queries, counts.samples
        if on_progress:
            on_progress(progress)

    client.on_query = tell  # a line inside a long node's read too
    hooks = Hooks(on_event, on_job, on_row, on_tick)
    fmt = "prometheus: " + ", ".join(found.schemes)
    merged = Merged(_label(client.url), step, fmt, request.start, prices, workload)
    merged.named_by = found.named_by
    for node in sorted(found.read_back - set(failed)):  # this exporter's nodes: verdicts read, not judged
        began = time.process_time()
        try:
            read_back(client, request, found, node, step, merged, hooks)
        except BudgetSpent:
            raise
        except PromError as exc:
            failed[node] = str(exc)
        progress.reading_s += time.process_time() - began
        progress.nodes_done += 1
        tell()
    judged = sorted(set(found.nodes) - found.read_back - set(failed))
    jobs = min(request.jobs or cores(), len(judged))
    if jobs > 1:
        task = Task(request, found, "", step, fmt, prices, workload, on_row is not None, on_tick is not None)
        pool = ProcessPoolExecutor(jobs, initializer=_worker_start)
        try:
            futures = [pool.submit(judge_remote, replace(task, node=n)) for n in judged]
            for node, future in zip(judged, futures, strict=True):
                done = _awaited(future, tell)
                counts.queries += done.queries
                counts.samples += done.samples
                progress.reading_s += done.reading_s
                if done.spent:  # the run's budget: the other workers' reads end too
                    _end(pool)
                    raise BudgetSpent(done.failed)
                if done.failed:
                    failed[node] = done.failed
                else:
                    done.replay(merged, hooks)
                progress.nodes_done += 1
                tell()
        except KeyboardInterrupt:
            _end(pool)  # they ignore SIGINT
            raise PromError("interrupted: no summary written") from None
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    else:
        for node in judged:
            began = time.process_time()
            try:
                gpus, host = read_node(client, request, found, node, step)
            except BudgetSpent:
                raise
            except PromError as exc:
                failed[node] = str(exc)
            else:
                progress.reading_s += time.process_time() - began
                tell()
                judge_node(merged, gpus, host, found.pod_jobs, hooks)
            progress.nodes_done += 1
            tell()
    if failed and len(failed) == len(found.nodes):
        raise PromError(f"no node could be read: {failed[min(failed)]}")
    result = merged.result({"queries": counts.queries, "samples": counts.samples})
    if failed and result.fleet is not None:
        result.fleet["failed"] = dict(sorted(failed.items()))
    return result


def _end(pool: ProcessPoolExecutor) -> None:
    """The pool's workers ended now (a node's read may have long to go)."""
    for process in list((pool._processes or {}).values()):
        process.terminate()


def _awaited(future: Future[Done], tell: Callable[[], None]) -> Done:
    """A worker's node, the progress line told while the workers read (a node's read may be long)."""
    while True:
        try:
            return future.result(timeout=HEARTBEAT_S)
        except TimeoutError:
            tell()


def _worker_start() -> None:
    """A worker ends with its parent (a SIGTERM from ``timeout`` or a CI's cancel reaches the parent
    only), and leaves Ctrl-C to it (the parent says one line; the workers' tracebacks would be noise)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the parent ended before the line above took effect
        os._exit(1)


def read_back(
    client: PromClient, request: Request, found: Found, node: str, step: float, merged: Merged, hooks: Hooks
) -> None:
    """A node this exporter watched: its ledger, verdicts and classes as it exported them, by job; the
    rows of its raw readings only where the caller watches them (the report's charts)."""

    def job_name(node: str, labels: dict[str, str]) -> str:
        return _job_name(node, pod_of(labels, found.targets), found.pod_jobs)

    sel = _matchers(found.nodes[node], request.selector)

    def raw(metric: str) -> list[Raw]:  # from each series' baseline: its last sample before the range
        lo = max(0.0, request.start - LOOKBACK_S)
        # a sample each half step at most (a scrape's jitter never puts two there; a dense server's
        # samples are thinned to two a step): what a node holds is bounded by its steps
        span = _chunk_steps(found.gpus.get(node, 1)) * step
        return client.raw(f"{metric}{{{sel}}}", lo, request.end, span, found.export, step, thin_s=step / 2)

    where = own.Where(client, sel, request.start, request.end, step, found.present, raw)
    where.relabel = lambda labels: names.workload_labels(labels, found.targets)
    back = own.read_node(where, node, job_name, merged.prices, merged.origin, hooks.on_tick is not None)
    if hooks.on_row:
        gpus, host = read_node(client, request, found, node, step)
        by_name = {g.name: g for g in gpus.values()}
        for job, times in sorted(jobs_of(gpus, found.pod_jobs).items()):
            rows = JobRows(job, [by_name[g] for g in times], times, host, step, merged.origin, merged.fmt)
            for row in rows:
                hooks.on_row(row)
    if hooks.on_event:
        for event in sorted(back.events, key=lambda e: e.t):
            hooks.on_event(event)
    if hooks.on_tick:
        for tick in back.ticks:
            hooks.on_tick(*tick)
    for job, result in sorted(back.results.items()):
        merged.add(job, result, read_back=True)
    merged.read_back_nodes += 1


def cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


@dataclass
class Task:
    """What a worker needs to read and judge one node (sent to it: nothing here holds a connection)."""

    request: Request
    found: Found
    node: str
    step: float
    fmt: str
    prices: Prices | None
    workload: str
    rows: bool  # the caller watches the rows (on_row)...
    ticks: bool  # ...and the ticks (on_tick): they are sent back


@dataclass
class Done:
    """A node read and judged by a worker: its jobs' results, and the callbacks it would have made, in
    their order, for the caller to make."""

    results: list[tuple[str, ReplayResult]]
    calls: list[tuple[str, object]]  # ("event", VerdictEvent) or ("job", dict), as they came
    rows: list[TraceRow]
    ticks: list[tuple[float, str, str]]
    queries: int
    samples: int
    reading_s: float  # CPU seconds the worker spent reading the node
    failed: str = ""  # why the node could not be read (nothing else is set)
    spent: bool = False  # ...because the run's budget is spent (the whole run ends)

    def replay(self, merged: Merged, hooks: Hooks) -> None:
        for kind, payload in self.calls:
            if kind == "event":
                merged.event(payload, hooks)  # type: ignore[arg-type]
            else:
                merged.job(payload, hooks)  # type: ignore[arg-type]
        if hooks.on_row:
            for row in self.rows:
                hooks.on_row(row)
        if hooks.on_tick:
            for tick in self.ticks:
                hooks.on_tick(*tick)
        for job, result in self.results:
            merged.add(job, result)


def judge_remote(task: Task) -> Done:
    """A worker's part: one node read and judged, the callbacks recorded."""
    client = PromClient(task.request.url, task.request.auth, task.request.timeout_s, task.request.budget)
    began = time.process_time()
    try:
        gpus, host = read_node(client, task.request, task.found, task.node, task.step)
    except PromError as exc:
        c = client.counts
        return Done([], [], [], [], c.queries, c.samples, 0.0, str(exc), isinstance(exc, BudgetSpent))
    done = Done([], [], [], [], 0, 0, time.process_time() - began)
    hooks = Hooks(
        on_event=lambda e: done.calls.append(("event", e)),
        on_job=lambda j: done.calls.append(("job", j)),
        on_row=done.rows.append if task.rows else None,
        on_tick=(lambda *tick: done.ticks.append(tick)) if task.ticks else None,
    )
    recorder = Merged(Path(), task.step, task.fmt, task.request.start, task.prices, task.workload)
    recorder.keep = done.results
    judge_node(recorder, gpus, host, task.found.pod_jobs, hooks, raw=True)
    done.queries, done.samples = client.counts.queries, client.counts.samples
    return done


def replay_nodes(
    nodes: Iterable[Node],
    pod_jobs: dict[str, str],
    step: float,
    origin: float,
    fmt: str,
    label: Path,
    prices: Prices | None = DEFAULT_PRICES,
    workload: str = "",
    hooks: Hooks | None = None,
) -> ReplayResult:
    """Replay every job of every node, each at the data's step, and join the results; the kinds the step
    cannot show are left out and said silent (``resolution.py``)."""
    merged = Merged(label, step, fmt, origin, prices, workload)
    for gpus, host in nodes:
        judge_node(merged, gpus, host, pod_jobs, hooks or Hooks())
    return merged.result()


def judge_node(
    merged: Merged,
    gpus: dict[str, Gpu],
    host: dict[str, dict[float, float]],
    pod_jobs: dict[str, str],
    hooks: Hooks,
    raw: bool = False,
) -> None:
    """Replay every job of one node into ``merged``. ``raw``: every verdict is passed to the hooks (a
    worker's recording: the caller's Merged leaves out what the step cannot show)."""

    def events(event: VerdictEvent) -> None:
        if raw and hooks.on_event:
            hooks.on_event(event)
        else:
            merged.event(event, hooks)

    def jobs(job: dict[str, object]) -> None:
        if raw and hooks.on_job:
            hooks.on_job(job)
        else:
            merged.job(job, hooks)

    by_name = {g.name: g for g in gpus.values()}
    for job, times in sorted(jobs_of(gpus, pod_jobs).items()):
        rows = JobRows(job, [by_name[g] for g in times], times, host, merged.step, merged.origin, merged.fmt)
        result = replay(
            merged.path,
            on_event=events,
            on_job=jobs,
            on_row=hooks.on_row,
            on_tick=hooks.on_tick,
            prices=merged.prices,
            workload=merged.workload,
            reader=rows,
            step=merged.step,
        )
        merged.add(job, result)


def _label(url: str) -> Path:
    parsed = urllib.parse.urlparse(url)
    return Path(parsed.netloc + parsed.path.rstrip("/"))


def _iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Merged:
    """Every job's replay joined into one result: GPUs are named node/gpu, jobs by pod (or job), all on
    one clock from the range's start."""

    def __init__(
        self, path: Path, step: float, fmt: str, origin: float, prices: Prices | None, workload: str
    ) -> None:
        self.path, self.fmt, self.origin, self.prices, self.workload = path, fmt, origin, prices, workload
        self.keep: list[tuple[str, ReplayResult]] | None = None  # a worker's: the results as they are
        self.quiet = silenced(step)  # kinds the step cannot show...
        self.unjudged = unjudged_causes(step)  # ...and causes it cannot tell from something benign
        self.verdicts: dict[str, dict[str, int]] = {}  # job -> kind -> episodes
        self.out = ReplayResult(
            path=path,
            stats=stepped(ReadStats(format=fmt, first_timestamp=origin), step),
            seconds=0.0,
            prices=prices,
            workload=workload,
        )
        self.step = step
        self.silent: dict[str, str] | None = None
        self.judged_jobs = 0  # jobs judged here at the step (the others' verdicts were read back)
        self.read_back_nodes = 0
        self.named_by: dict[str, int] | None = None  # which labels named the workload (discover's)
        self.notes: list[str] = []  # what reading the history decided that a person should know

    def event(self, event: VerdictEvent, hooks: Hooks) -> None:
        if hooks.on_event and self.shown(event.kind, event.cause):
            hooks.on_event(event)

    def job(self, job: dict[str, object], hooks: Hooks) -> None:
        if hooks.on_job and self.shown(str(job.get("kind")), str(job.get("cause", ""))):
            hooks.on_job(job)

    def add(self, job: str, r: ReplayResult, read_back: bool = False) -> None:
        """One job's result; ``read_back``: this exporter's own, judged live (nothing left out, nothing
        silent at the step)."""
        if self.keep is not None:
            self.keep.append((job, r))
            return
        shown = (lambda kind, cause: True) if read_back else self.shown
        self.judged_jobs += not read_back
        out, s = self.out, self.out.stats
        s.rows += r.stats.rows
        s.gpus.extend(g for g in r.stats.gpus if g not in s.gpus)
        for gpu, name in r.stats.names.items():
            s.names.setdefault(gpu, name)
        s.last_timestamp = max(s.last_timestamp or 0.0, r.stats.last_timestamp or 0.0)
        s.gap_count += r.stats.gap_count
        s.gaps.extend(r.stats.gaps[: max(0, 5 - len(s.gaps))])
        self.notes.extend(n for n in r.stats.warnings if n not in self.notes)
        out.seconds = max(out.seconds, r.seconds)
        out.sampled_seconds = max(out.sampled_seconds, r.sampled_seconds)
        out.events.extend(e for e in r.events if shown(e.kind, e.cause))
        episodes = [e for e in r.episodes if shown(e.kind, e.cause)]
        out.episodes.extend(episodes)
        out.jobs.extend(j for j in r.jobs if shown(str(j.get("kind")), str(j.get("cause", ""))))
        kinds = self.verdicts.setdefault(job, {})
        for e in episodes:
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
        for gpu, states in r.ledger.items():
            _add(out.ledger.setdefault(gpu, {}), states)
        for gpu, states in r.cost.items():
            _add(out.cost.setdefault(gpu, {}), states)
        for states in r.job_ledger.values():
            _add(out.job_ledger.setdefault(job, {}), states)
        for states in r.job_cost.values():
            _add(out.job_cost.setdefault(job, {}), states)
        if r.job_throttle_lost:
            lost = sum(r.job_throttle_lost.values())
            out.job_throttle_lost[job] = out.job_throttle_lost.get(job, 0.0) + lost
        for gpu, seconds in r.held_back.items():
            out.held_back[gpu] = out.held_back.get(gpu, 0.0) + seconds
        out.envelopes.update(r.envelopes)
        out.models.update(r.models)
        for gpu, classes in r.classes.items():
            _add(out.classes.setdefault(gpu, {}), classes)  # type: ignore[arg-type]
        out.class_evidence.update(r.class_evidence)
        # a kind is silent only where no job had its inputs
        if not read_back:
            self.silent = (
                dict(r.silent)
                if self.silent is None
                else {k: v for k, v in self.silent.items() if k in r.silent}
            )

    def shown(self, kind: str, cause: str) -> bool:
        """A verdict the step can show (its kind, and its cause, told apart at this step)."""
        return kind not in self.quiet and (kind, cause) not in self.unjudged

    def result(self, read: dict[str, float] | None = None) -> ReplayResult:
        """The joined result, with its roll-up by namespace (``read``: the queries and samples read)."""
        out = self.out
        out.events.sort(key=lambda e: e.t)
        out.episodes.sort(key=lambda e: e.start)
        out.stats.gaps.sort()  # every job's first few, in time order
        judged = self.judged_jobs > 0  # what the step cannot show matters only where it was judged
        out.silent = {**(self.silent or {}), **(self.quiet if judged else {})}
        out.stats.period = None
        unjudged = self.unjudged if judged else {}
        out.fleet = {
            "read": {
                "step_s": self.step,
                "read_back_nodes": self.read_back_nodes,
                **({} if self.named_by is None else {"workload_labels": dict(self.named_by)}),
                **(read or {}),
            },
            "notes": list(self.notes),
            "unjudged": {f"{kind}/{cause}": why for (kind, cause), why in unjudged.items()},
            "namespaces": rollup(out, self.verdicts),
        }
        return out


def _add(into: dict, more: dict) -> None:  # type: ignore[type-arg]
    for key, value in more.items():
        into[key] = into.get(key, 0.0) + value
