"""This exporter's own analysis, read back: where a node's GPUs were watched by gpu-bottleneck-exporter,
its time ledger (``gpu_time_seconds_total``, and the ledgers of pods sharing a GPU and of MIG instances),
its verdicts (``gpu_bottleneck``), its workload classes and its hold-ups are read as they were exported.
They were judged live, on every second's samples; recomputing them from a Prometheus' 15-60 s samples of
the raw readings could only see less (``resolution.py``).

- The ledger: each counter's raw samples, their increases added (a counter reset, the exporter's
  restart, counts from zero). As ``increase()`` does, a series' first sample is its baseline: the seconds
  before it are the range's start's, or a new series' (a GPU's first state change, a new pod), at most one
  scrape of them each.
- The verdicts: the steps in which a verdict series was 1 (``max_over_time`` over the step, which sees
  every raw sample and never a stale one), joined into episodes while they follow each other; each
  begins when its loss began, as ``gpu_bottleneck_since_timestamp_seconds`` said (when it fired where
  that series is not there: an exporter older than it).
- The classes: the steps each ``gpu_workload_class`` series was there.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from exporter.analysis.engine import VerdictEvent
from exporter.analysis.ledger import STATES
from exporter.offline.promhistory.client import PromClient, Raw
from exporter.offline.replay import Episode, ReplayResult
from exporter.offline.traces import ReadStats
from exporter.policy.cost import Prices

LEDGER = "gpu_time_seconds_total"
POD_LEDGER = "gpu_pod_time_seconds_total"  # a pod's share of a GPU pods share (time-slicing, MPS)
MIG_LEDGER = "gpu_mig_time_seconds_total"  # a MIG instance's ledger
HOLDUP = "gpu_job_holdup_seconds_total"
VERDICT = "gpu_bottleneck"
SINCE = "gpu_bottleneck_since_timestamp_seconds"  # while a verdict fires: when its loss began
CLASS = "gpu_workload_class"
INFO = "gpu_info"
NAMES = (LEDGER, POD_LEDGER, MIG_LEDGER, HOLDUP, VERDICT, SINCE, CLASS)
# verdict steps this many steps apart or closer are one episode (a missed scrape does not split it)
JOIN_STEPS = 2.0
# a ledger counter may grow by this much more than the time between two of its samples (the exporter's
# count and the scrape are not taken at the same instant); more is not a count of seconds
SCRAPE_JITTER_S = 2.0
# the evidence a class read back stands on
CLASS_EVIDENCE = "read back from gpu_workload_class"
DEFAULT_SOURCE = "default"  # the class no evidence decided


@dataclass
class Entity:
    """What a ledger is kept for: a GPU, a pod's share of one, or a MIG instance."""

    name: str  # node/gpu, node/gpu/namespace/pod, node/gpu/mig<instance>[.<compute instance>]
    gpu: str  # node/gpu: whose model prices it
    job: str


@dataclass
class NodeBack:
    """One node's analysis as it was exported: per job, a result like replay's."""

    results: dict[str, ReplayResult] = field(default_factory=dict)
    ticks: list[tuple[float, str, str]] = field(default_factory=list)  # (t, entity, state): see _Back
    events: list[VerdictEvent] = field(default_factory=list)


@dataclass
class Where:
    """One node's series on the server: ``sel`` selects them (its matcher and the user's), ``raw`` reads a
    series name's raw samples from the range's baseline on (the caller's chunked reader)."""

    client: PromClient
    sel: str
    start: float
    end: float
    step: float
    present: set[str]
    raw: Callable[[str], list[Raw]]
    # the labels as they name the workload (a renaming scrape's exported_* namespace/pod: names.py)
    relabel: Callable[[dict[str, str]], dict[str, str]] = lambda labels: labels


def read_node(
    where: Where,
    node: str,
    job_name: Callable[[str, dict[str, str]], str],
    prices: Prices | None,
    origin: float,
    ticks: bool = False,
) -> NodeBack:
    """One node's ledger, verdicts, classes and hold-ups, by job, on replay's clock (``origin``: 0 s).
    ``ticks``: also each entity's state at each scrape (the report's ledger strip)."""
    client, sel, step = where.client, where.sel, where.step
    back = _Back(node, where, origin, prices, _models(where, node), job_name, ticks)

    def raw(metric: str) -> list[Raw]:
        return where.raw(metric) if metric in where.present else []

    shares = raw(POD_LEDGER) + raw(MIG_LEDGER)
    back.split_times(shares)
    for series in raw(LEDGER):
        back.ledger(series.labels, series.times_ms, series.values, share=False)
    for series in shares:
        back.ledger(series.labels, series.times_ms, series.values, share=True)
    for series in raw(HOLDUP):
        back.holdup(series.labels, series.times_ms, series.values)
    window = f"{math.ceil(step)}s"
    if VERDICT in where.present:
        for s in client.query_range(
            f"max_over_time({VERDICT}{{{sel}}}[{window}]) == 1", where.start, where.end, step
        ):
            back.verdict(s.labels, s.times)
    if SINCE in where.present:
        onsets = f"min_over_time({SINCE}{{{sel}}}[{window}])"
        for s in client.query_range(onsets, where.start, where.end, step):
            back.since(s.labels, s.times, s.values)
    if CLASS in where.present:
        for s in client.query_range(f"{CLASS}{{{sel}}} == 1", where.start, where.end, step):
            back.workload(s.labels, len(s.times))
    return back.done()


def _models(where: Where, node: str) -> dict[str, str]:
    models: dict[str, str] = {}
    for labels in where.client.series(f"{INFO}{{{where.sel}}}", where.start, where.end):
        if labels.get("gpu") and labels.get("model"):
            models[f"{node}/{labels['gpu']}"] = labels["model"]
    return models


class _Back:
    """The node's series, as they are read, into per-job results."""

    def __init__(
        self,
        node: str,
        where: Where,
        origin: float,
        prices: Prices | None,
        models: dict[str, str],
        job_name: Callable[[str, dict[str, str]], str],
        ticks: bool,
    ) -> None:
        self.node, self.where, self.step, self.origin = node, where, where.step, origin
        self.prices, self.models, self.job_name = prices, models, job_name
        self.out = NodeBack()
        # (time, entity) -> (seconds, state): the state that grew most at each scrape (None: not kept)
        self.ticks: dict[tuple[float, str], tuple[float, str]] | None = {} if ticks else None
        self.split: dict[str, list[float]] = {}  # node/gpu -> the times its shares' ledgers were scraped
        self.last_t = 0.0
        # (entity, kind) -> (time, cause, job) of each step its verdict series was 1
        self.episodes: dict[tuple[str, str], list[tuple[float, str, str]]] = {}
        self.onsets: dict[tuple[str, str], list[tuple[float, float]]] = {}  # (entity, kind) -> (t, since)

    def _result(self, job: str) -> ReplayResult:
        r = self.out.results.get(job)
        if r is None:
            stats = ReadStats(format="", first_timestamp=self.where.start)
            r = self.out.results[job] = ReplayResult(
                path=Path(), stats=stats, seconds=self.where.end - self.where.start, prices=self.prices
            )
        return r

    def entity(self, labels: dict[str, str], share: bool) -> Entity | None:
        gpu = labels.get("gpu")
        if not gpu:
            return None
        base = f"{self.node}/{gpu}"
        job = self.job_name(self.node, labels)
        if labels.get("mig_instance"):  # a compute instance of a split GPU instance: <gi>.<ci>
            ci = f".{labels['mig_compute_instance']}" if labels.get("mig_compute_instance") else ""
            return Entity(f"{base}/mig{labels['mig_instance']}{ci}", base, job)
        if share and labels.get("pod"):
            return Entity(f"{base}/{labels.get('namespace', '')}/{labels['pod']}", base, job)
        return Entity(base, base, job)

    def split_times(self, shares: list[Raw]) -> None:
        for series in shares:
            if series.labels.get("gpu"):
                times = self.split.setdefault(f"{self.node}/{series.labels['gpu']}", [])
                times.extend(t / 1000 for t in series.times_ms)
        for times in self.split.values():
            times.sort()

    def _shared_at(self, gpu: str, t: float) -> bool:
        """Were the GPU's seconds at ``t`` booked to its pods' shares (or MIG instances)?"""
        times = self.split.get(gpu)
        if not times:
            return False
        i = bisect.bisect_left(times, t - JOIN_STEPS * self.step)
        return i < len(times) and times[i] <= t + JOIN_STEPS * self.step

    def _increases(self, times_ms: list[int], values: list[float]) -> list[tuple[float, float]]:
        """(time, seconds counted since the previous sample) of a counter's samples in the range. A
        count of seconds grows by at most the time between two samples (a scrape's jitter aside): more,
        or a negative count, is not this exporter's counter (two series merged, answers out of order),
        and is bounded so, never booked as years of GPU time or a negative cost."""
        out = []
        start = self.where.start
        kept = [(t, v) for t, v in zip(times_ms, values, strict=True) if v >= 0]
        for (t0, prev), (t1, v) in itertools.pairwise(kept):
            t = t1 / 1000
            if t <= start or t1 <= t0:
                continue
            grew = v - prev if v >= prev else v  # below the previous: counted again from zero
            out.append((t, min(grew, (t1 - t0) / 1000 + SCRAPE_JITTER_S)))
        return out

    def ledger(self, labels: dict[str, str], times_ms: list[int], values: list[float], share: bool) -> None:
        labels = self.where.relabel(labels)
        state = labels.get("state", "")
        e = self.entity(labels, share)
        if e is None or state not in STATES:
            return
        per_hour = self.prices.of(self.models.get(e.gpu, "")) / 3600 if self.prices is not None else 0.0
        gpu_total = job_total = 0.0
        for t, seconds in self._increases(times_ms, values):
            self.last_t = max(self.last_t, t)
            if share:
                job_total += seconds
            else:
                gpu_total += seconds
                if labels.get("pod") or not self._shared_at(e.gpu, t):
                    job_total += seconds
            if self.ticks is not None and seconds > self.ticks.get((t, e.name), (0.0, ""))[0]:
                self.ticks[(t, e.name)] = (seconds, state)
        r = self._result(e.job)
        if not share:
            _add(r.ledger.setdefault(e.name, dict.fromkeys(STATES, 0.0)), state, gpu_total)
            _add(r.cost.setdefault(e.name, dict.fromkeys(STATES, 0.0)), state, gpu_total * per_hour)
            if e.name not in r.stats.gpus:
                r.stats.gpus.append(e.name)
                if e.gpu in self.models:
                    r.stats.names[e.name] = r.models[e.name] = self.models[e.gpu]
        _add(r.job_ledger.setdefault(e.job, dict.fromkeys(STATES, 0.0)), state, job_total)
        _add(r.job_cost.setdefault(e.job, dict.fromkeys(STATES, 0.0)), state, job_total * per_hour)
        r.stats.rows += len(times_ms)

    def holdup(self, labels: dict[str, str], times_ms: list[int], values: list[float]) -> None:
        labels = self.where.relabel(labels)
        e = self.entity(labels, share=False)
        if e is None:
            return
        r = self._result(e.job)
        r.held_back[e.name] = r.held_back.get(e.name, 0.0) + sum(
            s for _, s in self._increases(times_ms, values)
        )

    def verdict(self, labels: dict[str, str], times: list[float]) -> None:
        labels = self.where.relabel(labels)
        kind = labels.get("kind", "")
        e = self.entity(labels, share=bool(labels.get("pod")) and self._shared_any(labels))
        if e is None or not kind or not times:
            return
        self.episodes.setdefault((e.name, kind), []).extend(
            (t, labels.get("cause", ""), e.job) for t in times
        )

    def since(self, labels: dict[str, str], times: list[float], values: list[float]) -> None:
        """When a firing verdict's loss began, at each step it was read."""
        labels = self.where.relabel(labels)
        kind = labels.get("kind", "")
        e = self.entity(labels, share=bool(labels.get("pod")) and self._shared_any(labels))
        if e is not None and kind:
            self.onsets.setdefault((e.name, kind), []).extend(zip(times, values, strict=True))

    def _shared_any(self, labels: dict[str, str]) -> bool:
        return f"{self.node}/{labels.get('gpu', '')}" in self.split

    def workload(self, labels: dict[str, str], steps: int) -> None:
        labels = self.where.relabel(labels)
        e = self.entity(labels, share=False)
        if e is None or not labels.get("workload"):
            return
        r = self._result(e.job)
        source = labels.get("source", "")
        # the exporter's "training by default" is replay's undecided class (nothing said otherwise)
        key = ("", "") if source in ("", DEFAULT_SOURCE) else (labels["workload"], source)
        classes = r.classes.setdefault(e.name, {})
        classes[key] = classes.get(key, 0.0) + steps * self.step
        r.class_evidence[(e.name, *key)] = CLASS_EVIDENCE

    def done(self) -> NodeBack:
        end = self.where.end
        for (name, kind), steps in sorted(self.episodes.items()):
            steps.sort()
            run: list[tuple[float, str, str]] = []
            for step in steps:
                if run and step[0] - run[-1][0] > JOIN_STEPS * self.step:
                    self._episode(name, kind, run, end)
                    run = []
                run.append(step)
            if run:
                self._episode(name, kind, run, end)
        if self.ticks:
            self.out.ticks = [
                (t - self.origin, name, state) for (t, name), (_, state) in sorted(self.ticks.items())
            ]
        for r in self.out.results.values():
            r.stats.last_timestamp = self.last_t or None
            r.sampled_seconds = r.seconds
        return self.out

    def _episode(self, name: str, kind: str, run: list[tuple[float, str, str]], end: float) -> None:
        first, (last, cause, job) = run[0][0], run[-1]
        still = end - last < self.step  # firing at the range's end
        began = min(
            (v for t, v in self.onsets.get((name, kind), ()) if first <= t <= last and v <= first),
            default=first,
        )
        fired, resolved = first - self.origin, None if still else last - self.origin
        episode = Episode(name, kind, began - self.origin, resolved, cause, math.nan, (), fired, resolved)
        r = self._result(job)
        r.episodes.append(episode)
        since = episode.start
        self.out.events.append(VerdictEvent(fired, name, kind, "firing", math.nan, cause, (), since))
        if resolved is not None:
            self.out.events.append(VerdictEvent(resolved, name, kind, "resolved", math.nan, cause, (), since))


def _add(into: dict[str, float], key: str, value: float) -> None:
    into[key] = into.get(key, 0.0) + value
