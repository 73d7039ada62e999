"""A tracker's run as replay reads it: its GPUs' system metrics, its own progress, its name and config.

Each reader (mlflow_run.py, wandb_run.py, wandb_csv.py) fills a ``TrackerRun``; ``TrackerRows`` hands its
samples to replay as rows, one per GPU per sample, each standing for the tracker's sampling interval.
The run's own step counter becomes the rows' ``log_silent_s`` (seconds since the counter last moved),
exactly the column a pod's log fills live: a counter that stops while every rank sits in a quiet
collective confirms a hang.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field

from exporter.analysis.points import GpuPoint
from exporter.offline.traces import ReadStats, TraceRow
from exporter.policy.thresholds import TRACKER_MAX_POINTS

# the GpuPoint fields a tracker's GPU metrics fill, in base units
FIELDS = (
    "util",
    "mem_util",
    "power_w",
    "power_limit_w",
    "mem_used_bytes",
    "mem_total_bytes",
    "temp_c",
    "sm_clock_hz",
)
# where a run's own step counter lies, tried in this order (the last part of a metric's name)
STEP_NAMES = ("global_step", "step", "iteration", "iter", "steps")
EXTRA = {"mlflow": "mlflow", "wandb": "wandb"}


class TrackerError(Exception):
    """A run that cannot be read: one line, naming the run or the flag."""


def missing_extra(package: str) -> TrackerError:
    """The one line for a tracker's package that is not installed."""
    return TrackerError(
        f"reading this run needs the {package} package: pip install "
        f"'gpu-bottleneck-exporter[{EXTRA[package]}]'"
    )


@dataclass
class TrackerRun:
    """One run as a tracker kept it. Times are Unix seconds."""

    tracker: str  # "MLflow" or "W&B"
    kept: str  # how it was kept: "file store", "SQLite store", "tracking server", "run file", "CSV export"
    label: str  # the path or URI it was read from
    name: str = ""
    run_id: str = ""
    config: dict[str, str] = field(default_factory=dict)
    # gpu -> time -> field -> value (FIELDS, base units)
    samples: dict[str, dict[float, dict[str, float]]] = field(default_factory=dict)
    progress: list[tuple[float, float]] = field(default_factory=list)  # (time, the run's step counter)
    progress_key: str = ""  # the metric the counter was read from
    logged: list[float] = field(default_factory=list)  # times the run logged anything of its own
    board: str = ""
    points: int = 0

    def count(self, points: int = 1) -> None:
        """Points read and kept; the run is refused past TRACKER_MAX_POINTS."""
        self.points += points
        if self.points > TRACKER_MAX_POINTS.value:
            raise TrackerError(
                f"{self.label}: more than {TRACKER_MAX_POINTS.value:.0f} metric points in this run; "
                "replay reads runs up to that size"
            )

    def put(self, gpu: str, t: float, name: str, value: float | None) -> None:
        """One metric point of one GPU."""
        if value is None:
            return
        self.count()
        self.samples.setdefault(gpu, {}).setdefault(t, {})[name] = value

    def step_s(self) -> float:
        """The tracker's sampling interval: the median spacing of a GPU's samples."""
        gaps = [
            b - a
            for times in (sorted(s) for s in self.samples.values())
            for a, b in itertools.pairwise(times)
            if b > a
        ]
        return float(statistics.median(gaps)) if gaps else 1.0

    def start(self) -> float | None:
        times = [t for s in self.samples.values() for t in s]
        return min(times) if times else None


def gpu_order(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)


def counter_like(name: str) -> bool:
    """A metric that may be the run's step counter (only those of its own metrics are kept)."""
    return name == "_step" or name.replace("/", ".").rsplit(".", 1)[-1].lower() in STEP_NAMES


def step_counter(series: dict[str, list[tuple[float, float]]]) -> tuple[str, list[tuple[float, float]]]:
    """The run's own step counter among its metrics (name -> [(time, value)]): the first STEP_NAMES match
    by the last part of its name; ("", []) without one."""
    for wanted in STEP_NAMES:
        for name in sorted(series):
            if name.replace("/", ".").rsplit(".", 1)[-1].lower() == wanted and series[name]:
                return name, sorted(series[name])
    return "", []


class TrackerRows:
    """The run's samples as replay's rows, in time order, on a clock from its first sample."""

    def __init__(self, run: TrackerRun, stats: ReadStats) -> None:
        """``stats``: the reading's, with its gaps set for the tracker's step."""
        self.run = run
        self.origin = run.start() or 0.0
        self.stats = stats
        stats.first_timestamp = self.origin
        self.moves = _moves(run)  # times the run showed progress

    def silent_at(self, t: float) -> float | None:
        """Seconds since the run last showed progress at ``t`` (None: it has shown none yet)."""
        import bisect

        i = bisect.bisect_right(self.moves, t) - 1
        return None if i < 0 else t - self.moves[i]

    def __iter__(self) -> Iterator[TraceRow]:
        by_time: dict[float, list[str]] = {}
        for gpu, times in self.run.samples.items():
            for t in times:
                by_time.setdefault(t, []).append(gpu)
        segment, last = 0, None
        gap = self.stats.gap_s or 0.0
        for t in sorted(by_time):
            if last is not None and t - last > gap:
                segment += 1
                self.stats.gap_count = segment
                if len(self.stats.gaps) < 5:
                    self.stats.gaps.append((self.stats.rows, t - last))
            last = t
            silent = self.silent_at(t)
            for gpu in sorted(by_time[t], key=gpu_order):
                values = self.run.samples[gpu][t]
                self.stats.rows += 1
                if gpu not in self.stats.gpus:
                    self.stats.gpus.append(gpu)
                    if self.run.board:
                        self.stats.names[gpu] = self.run.board
                point = GpuPoint(t=t - self.origin, log_silent_s=silent, **values)  # type: ignore[arg-type]
                yield TraceRow(self.stats.rows, t - self.origin, gpu, point, None, self.run.board, segment)
            self.stats.last_timestamp = t


def _moves(run: TrackerRun) -> list[float]:
    """When the run showed progress: its step counter's advances, else any point it logged."""
    if run.progress:
        out, before = [], None
        for t, value in sorted(run.progress):
            if before is None or value > before:
                out.append(t)
            before = value if before is None else max(before, value)
        return out
    return sorted(run.logged)


def rate(progress: list[tuple[float, float]], a: float, b: float) -> float | None:
    """Steps a second of the counter between times ``a`` and ``b`` (None: too few points)."""
    inside = [(t, v) for t, v in progress if a <= t <= b]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
