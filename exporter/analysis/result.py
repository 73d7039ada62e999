"""What one evaluation says, exported statistics included: the analyzer's result for a snapshot. Pure.

The analyzer owns the windows of points, so the statistics that /metrics exports are computed here,
from the same windows and with the same definitions (``window.summarize``) as the detectors' features,
and the exported idle fraction is the detectors' own (``features.idle_fraction``, over the evidence
window): the dashboard's starvation line and the detector compare one number.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from exporter.analysis.engine import Analyzer, KindState, VerdictEvent
from exporter.analysis.points import GpuPoint
from exporter.analysis.window import Stats, summarize
from exporter.analysis.workload import UNKNOWN, Workload

HOST_STATS = ("iowait", "core_busy_max")  # the host columns exported as window means


@dataclass(frozen=True)
class GpuStats:
    """One GPU's exported statistics: utilization and power over ``--window``, the detectors' idle share.

    The window statistics are summarized from the window's points as of this evaluation on first use:
    only a scrape reads them, and at 15 s scrapes 14 evaluations in 15 would summarize for nothing."""

    window: Sequence[GpuPoint] = field(default=(), repr=False, compare=False)  # the points over --window
    idle_fraction: float | None = None
    verdicts: dict[str, KindState] = field(default_factory=dict)
    ledger: dict[str, float] = field(default_factory=dict)  # state -> seconds of this GPU's time so far
    held_back_s: float = 0.0  # seconds it kept peers of its job waiting in a collective
    workload: Workload = UNKNOWN  # the class its time is judged as, and what decided it

    @cached_property
    def util_window(self) -> Stats | None:
        return summarize([p.util for p in self.window if p.util is not None])

    @cached_property
    def power_window(self) -> Stats | None:
        return summarize([p.power_w for p in self.window if p.power_w is not None])


@dataclass(frozen=True)
class Result:
    gpus: dict[str, GpuStats]
    host_window: dict[str, Stats]
    events: list[VerdictEvent]


def analyze(analyzer: Analyzer, now: float, up: Iterable[str], window_s: float) -> Result:
    """Evaluate the GPUs that are up at ``now`` and gather every GPU's exported statistics."""
    verdicts, events = analyzer.evaluate(now, up)
    cutoff = now - window_s
    gpus = {}
    for gpu in analyzer.gpus():
        gpus[gpu] = GpuStats(
            window=analyzer.window(gpu).since(cutoff),
            idle_fraction=analyzer.features(gpu).idle_fraction,
            verdicts=verdicts.get(gpu, {}),
            ledger=dict(analyzer.ledger(gpu).totals),
            held_back_s=analyzer.ledger(gpu).held_back_s,
            workload=analyzer.workload(gpu),
        )
    host_recent = analyzer.host_window.since(cutoff)
    host = {
        name: stats
        for name in HOST_STATS
        if (stats := summarize([v for p in host_recent if (v := getattr(p, name)) is not None])) is not None
    }
    return Result(gpus, host, events)
