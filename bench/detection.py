"""Detection quality on labelled traces, judged as paging, against a naive baseline.

    python bench/detection.py [TRACES_DIR ...]  # default: examples/traces and examples/traces/real

For every trace (``NAME.csv`` or ``NAME.csv.gz``) with a ``NAME.labels.json`` beside it: replays it
through the exporter's analysis and judges every labelled episode end to end, as the on-call person
would see it. A verdict *matches* a label when it is on the label's GPU and of a kind the label accepts
(its ``"kinds"`` list, else its ``"kind"``). For each label:

- detected: a matching verdict overlaps the label;
- paged: a matching verdict overlapping the label stayed on unbroken for its kind's alert ``for``
  (``KINDS[kind].policy.for_``), or, where the label ends before that, until the label's end (a label
  is cut at the trace's last sample);
- held share: the fraction of the label's [start, end] covered by matching verdicts;
- time to detect: the first matching firing minus the label's start (0 if earlier);
- time to page: the paging verdict's firing + ``for`` minus the label's start (0 if earlier);
- time to resolve: for a label that ends before the trace does, the end of the last matching verdict
  on it minus the label's end (0 if earlier; a verdict still on at the trace's end counts to that end);
- onset error: when the first matching verdict says its loss began, minus the label's start (signed:
  negative is early); the naive rules say nothing of an onset, so theirs is when they fired;
- end error: for a label that ends before the trace does, when the last matching verdict says its loss
  stopped (the trace's end while it is still on), minus the label's end (signed).

A false verdict is a verdict episode that overlaps no label accepting its kind on its GPU (on a healthy
trace, every verdict); a false page is a false verdict that stayed on for its alert's ``for``.

Then the ledger: per trace, the worst |share - truth| over GPUs and ledger states, in points, against the
labels' ``ledger_truth``. Then the same paging table for a naive baseline: the classic threshold
table written as plain Prometheus-style alert rules over 15-second scrapes (``avg util over 5m < 95 %
for 10m``, ``temperature > 80 for 5m``, ...) whose alerts page with the same ``for`` as the kind's.

Then every trace again at two lower signal levels, as the logs most teams keep carry them: ``plain`` (the
plain ``nvidia-smi --query-gpu`` columns: timestamp, index, name, utilization.gpu and .memory, memory.used
and .total, power.draw and .limit, temperature.gpu, clocks.sm; no clock reasons, no clocks.max.sm, no
default limit, no GPM, traffic or host columns, no server or log signals) and ``util+mem`` (utilization.gpu,
memory.used and .total only). A lower level may lose a page where the signals left cannot tell the causes
apart (docs/detection.md lists those cases); it must never add a false page.

Targets: every episode pages, every held share >= 90 %, no false verdict, ledger within 5 points, and no
false page at a lower signal level. The last line says ``targets met`` (exit status 0) or ``targets
missed`` (exit status 1).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from exporter.analysis.kinds import KINDS, NAMES  # noqa: E402
from exporter.analysis.ledger import STATES  # noqa: E402
from exporter.analysis.points import NO_EXTRA, GpuPoint, HostPoint  # noqa: E402
from exporter.offline.replay import ReplayResult, RowSource, replay  # noqa: E402
from exporter.offline.traces import ReadStats, TraceReader, TraceRow  # noqa: E402
from exporter.policy.thresholds import board_tdp  # noqa: E402

TRACES = REPO / "examples" / "traces"
# synthetic training, real training (two sets), synthetic and real work that is not training
DEFAULT_DIRS = [
    TRACES,
    TRACES / "real",
    TRACES / "real2",
    TRACES / "real3",
    TRACES / "workloads",
    TRACES / "real_inference",
    TRACES / "plain",
]
HELD_TARGET = 0.90  # share of a labelled episode covered by its verdicts
LEDGER_TARGET_POINTS = 5.0  # worst |share - truth| of any GPU and state, in percentage points
LIST_LIMIT = 12


# ---- episodes and verdicts -----------------------------------------------------------------------


@dataclass(frozen=True)
class Label:
    """One labelled episode: what should be reported on which GPU, and when it happened."""

    gpu: str
    kind: str
    start: float
    end: float
    kinds: tuple[str, ...] = ()  # kinds accepted besides (or instead of) ``kind``; empty: only ``kind``

    @classmethod
    def from_json(cls, raw: dict) -> Label:
        kinds = tuple(raw.get("kinds") or ())
        kind = raw.get("kind") or kinds[0]
        return cls(str(raw["gpu"]), kind, float(raw["start"]), float(raw["end"]), kinds)

    @property
    def accepted(self) -> tuple[str, ...]:
        return self.kinds or (self.kind,)

    def __str__(self) -> str:
        return f"GPU {self.gpu} {self.kind} {self.start:.0f}-{self.end:.0f} s"


@dataclass(frozen=True)
class Verdict:
    """One verdict episode, from firing to resolved; ``end`` None: still on when the trace ended. What it
    says of its loss: ``onset`` when it began and ``stop`` when it stopped (None: when it fired, and
    resolved; ``stop`` may come while it is still on, when the trace ends before it resolves)."""

    gpu: str
    kind: str
    start: float
    end: float | None = None
    onset: float | None = None
    stop: float | None = None

    @property
    def began(self) -> float:
        return self.start if self.onset is None else self.onset

    def stopped(self, trace_end: float) -> float:
        """When it says its loss stopped: where it does not say, when it resolved (or the trace ended)."""
        return on_until(self, trace_end) if self.stop is None else self.stop


def on_until(verdict: Verdict, trace_end: float) -> float:
    return verdict.end if verdict.end is not None else max(trace_end, verdict.start)


def matches(verdict: Verdict, label: Label) -> bool:
    return verdict.gpu == label.gpu and verdict.kind in label.accepted


def overlaps(verdict: Verdict, label: Label, trace_end: float) -> bool:
    return verdict.start <= label.end and on_until(verdict, trace_end) >= label.start


def label_end(label: Label, trace_end: float) -> float:
    """A label can outlast the recording by a sample: what was not recorded cannot be held."""
    return max(label.start, min(label.end, trace_end))


def alert_for() -> dict[str, float]:
    """Each kind's alert ``for`` in seconds, from the verdict registry."""
    return {name: float(kind.policy.for_.value) for name, kind in KINDS.items()}


def for_of(kind: str, for_s: dict[str, float], fallback: str | None = None) -> float:
    """The ``for`` of a kind; a kind the registry does not know pages like ``fallback`` (or at once)."""
    if kind in for_s:
        return for_s[kind]
    return for_s.get(fallback, 0.0) if fallback else 0.0


# ---- scoring -------------------------------------------------------------------------------------


@dataclass
class EpisodeScore:
    trace: str
    label: Label
    detected: bool = False
    paged: bool = False
    held: float = 0.0
    ttd: float | None = None  # seconds; None: not detected
    ttp: float | None = None  # seconds; None: not paged
    # seconds from the label's end to the end of the last matching verdict on it (a verdict still on when
    # the trace ended counts to the trace's end); None: not detected, or the label lasts to the trace's end
    ttr: float | None = None
    onset_err: float | None = None  # seconds, signed: the reported start minus the label's; None: missed
    end_err: float | None = None  # ...the reported end minus the label's (labels that end before the trace)

    def __str__(self) -> str:
        return f"{self.trace} {self.label}"


@dataclass
class FalseVerdict:
    trace: str
    verdict: Verdict
    paged: bool

    def __str__(self) -> str:
        v = self.verdict
        return f"{self.trace} GPU {v.gpu} {v.kind} at {v.start:.0f} s" + (" (paged)" if self.paged else "")


@dataclass
class TraceScore:
    name: str
    episodes: list[EpisodeScore] = field(default_factory=list)
    false: list[FalseVerdict] = field(default_factory=list)


def pages(verdict: Verdict, label: Label, for_s: float, trace_end: float) -> bool:
    """On unbroken for ``for_s``, or until the label's end (or the trace's) where that comes first."""
    needed = max(0.0, min(for_s, label_end(label, trace_end) - verdict.start))
    return on_until(verdict, trace_end) - verdict.start >= needed


def held_share(label: Label, verdicts: Iterable[Verdict], trace_end: float) -> float:
    """Fraction of the label's recorded span covered by the union of the verdicts."""
    end = label_end(label, trace_end)
    spans = sorted(
        (max(v.start, label.start), min(on_until(v, trace_end), end))
        for v in verdicts
        if overlaps(v, label, trace_end)
    )
    if end <= label.start:
        return 1.0 if spans else 0.0
    covered, reach = 0.0, label.start
    for span_start, span_end in spans:
        span_start = max(span_start, reach)
        if span_end > span_start:
            covered += span_end - span_start
            reach = span_end
    return covered / (end - label.start)


def score_label(
    trace: str, label: Label, verdicts: Sequence[Verdict], for_s: dict[str, float], trace_end: float
) -> EpisodeScore:
    hits = sorted(
        (v for v in verdicts if matches(v, label) and overlaps(v, label, trace_end)), key=lambda v: v.start
    )
    score = EpisodeScore(trace, label, detected=bool(hits), held=held_share(label, hits, trace_end))
    if not hits:
        return score
    score.ttd = max(0.0, hits[0].start - label.start)
    score.onset_err = hits[0].began - label.start
    if label.end < trace_end:
        score.ttr = max(0.0, max(on_until(v, trace_end) for v in hits) - label.end)
        score.end_err = max(v.stopped(trace_end) for v in hits) - label.end
    for v in hits:
        wait = for_of(v.kind, for_s, label.kind)
        if pages(v, label, wait, trace_end):
            score.paged, score.ttp = True, max(0.0, v.start + wait - label.start)
            break
    return score


@dataclass(frozen=True)
class Judged:
    """Where a verdict that matches no label counts as false: within ``fp_window`` (seconds; None: the
    whole trace), and never for a kind in ``ignore_kinds`` (real traces whose healthy stretch is, say,
    at the power cap: the routine power verdict is not what they judge)."""

    fp_window: tuple[float, float] | None = None
    ignore_kinds: tuple[str, ...] = ()
    # stretches where the named kinds may fire or not on a GPU (neither missed nor false): a verdict of
    # such a kind whose loss began inside one is not false
    allowed: tuple[Label, ...] = ()

    def counts(self, v: Verdict, trace_end: float) -> bool:
        if v.kind in self.ignore_kinds:
            return False
        if any(matches(v, a) and a.start <= v.began <= a.end for a in self.allowed):
            return False
        if self.fp_window is None:
            return True
        start, end = self.fp_window
        return v.start <= end and on_until(v, trace_end) >= start


def false_verdicts(
    trace: str,
    labels: Sequence[Label],
    verdicts: Sequence[Verdict],
    for_s: dict[str, float],
    trace_end: float,
    judged: Judged = Judged(),
) -> list[FalseVerdict]:
    out = []
    for v in verdicts:
        if any(matches(v, label) and overlaps(v, label, trace_end) for label in labels):
            continue
        if not judged.counts(v, trace_end):
            continue
        out.append(FalseVerdict(trace, v, on_until(v, trace_end) - v.start >= for_of(v.kind, for_s)))
    return out


def score_trace(
    name: str,
    labels: Sequence[Label],
    verdicts: Sequence[Verdict],
    for_s: dict[str, float],
    trace_end: float,
    judged: Judged = Judged(),
) -> TraceScore:
    return TraceScore(
        name,
        [score_label(name, label, verdicts, for_s, trace_end) for label in labels],
        false_verdicts(name, labels, verdicts, for_s, trace_end, judged),
    )


# ---- the ledger ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerError:
    points: float  # worst |share - truth| in percentage points
    gpu: str = ""
    state: str = ""
    share: float = 0.0
    truth: float = 0.0

    def __str__(self) -> str:
        if not self.gpu:
            return f"{self.points:5.1f}"
        return (
            f"{self.points:5.1f}  (GPU {self.gpu} {self.state}: {100 * self.share:.1f} % "
            f"vs {100 * self.truth:.1f} %)"
        )


def shares(seconds: dict[str, float]) -> dict[str, float]:
    total = sum(seconds.values())
    return {state: (seconds.get(state, 0.0) / total if total else 0.0) for state in STATES}


def ledger_error(ledger: dict[str, dict[str, float]], truth: dict[str, dict[str, float]]) -> LedgerError:
    """The worst |share - truth| over every GPU of either side and every ledger state."""
    worst = LedgerError(0.0)
    for gpu in sorted(set(ledger) | set(truth)):
        measured = shares(ledger.get(gpu, {}))
        for state in STATES:
            expected = float(truth.get(gpu, {}).get(state, 0.0))
            points = 100 * abs(measured[state] - expected)
            if points > worst.points:
                worst = LedgerError(points, gpu, state, measured[state], expected)
    return worst


# ---- the naive baseline --------------------------------------------------------------------------


@dataclass
class Rule:
    kind: str
    expr: str  # shown in the report
    avg_s: float  # avg_over_time window
    for_s: float
    condition: Callable[[dict[str, float | None]], bool | None]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


NAIVE_RULES = (
    Rule(
        "data_starvation",
        "avg_over_time(util[5m]) < 0.95 for 10m",
        300,
        600,
        lambda v: None if v["util"] is None else v["util"] < 0.95,
    ),
    Rule(
        "data_starvation",
        "avg_over_time(power[5m]) < 0.45 * TDP for 10m",
        300,
        600,
        lambda v: None if _ratio(v["power"], v["tdp"]) is None else _ratio(v["power"], v["tdp"]) < 0.45,
    ),
    Rule(
        "data_starvation",
        "avg_over_time(iowait[5m]) > 0.10 for 5m",
        300,
        300,
        lambda v: None if v["iowait"] is None else v["iowait"] > 0.10,
    ),
    Rule(
        "data_starvation",
        "avg_over_time(busiest_core[5m]) > 0.95 for 5m",
        300,
        300,
        lambda v: None if v["core"] is None else v["core"] > 0.95,
    ),
    Rule(
        "comm_hang",
        "avg_over_time(util[5m]) >= 0.99 and avg_over_time(nvlink[5m]) == 0 for 5m",
        300,
        300,
        lambda v: (
            None if v["util"] is None or v["nvlink"] is None else v["util"] >= 0.99 and v["nvlink"] == 0
        ),
    ),
    Rule(
        "thermal_throttle",
        "temperature > 80 for 5m",
        0,
        300,
        lambda v: None if v["temp"] is None else v["temp"] > 80,
    ),
    Rule(
        "shm_exhaustion",
        "shm_used / shm_size >= 1",
        0,
        0,
        lambda v: (
            None
            if _ratio(v["shm_used"], v["shm_size"]) is None
            else _ratio(v["shm_used"], v["shm_size"]) >= 1
        ),
    ),
)

Scrape = tuple[float, dict[str, float | None]]


def _gauges(p: GpuPoint, h: HostPoint | None, name: str) -> dict[str, float | None]:
    """What a Prometheus scrape of the exporter's gauges would hold for one GPU."""
    return {
        "util": p.util,
        "power": p.power_w,
        "tdp": p.power_default_w or p.power_limit_w or board_tdp(name),
        "temp": p.temp_c,
        "nvlink": None if p.nvlink_tx_bps is None else p.nvlink_tx_bps + (p.nvlink_rx_bps or 0),
        "iowait": h.iowait if h else None,
        "core": h.core_busy_max if h else None,
        "shm_used": h.shm_used_bytes if h else None,
        "shm_size": h.shm_size_bytes if h else None,
    }


def _scrapes(series: list[tuple[GpuPoint, HostPoint | None, str]], last_t: float) -> list[Scrape]:
    """Every 15 s, the last value of each gauge."""
    out: list[Scrape] = []
    i = 0
    for k in range(int(last_t // 15) + 1):
        t = k * 15.0
        while i + 1 < len(series) and series[i + 1][0].t <= t:
            i += 1
        out.append((t, _gauges(*series[i])))
    return out


def naive(path: Path, gpus: int | None = None) -> tuple[list[Verdict], float]:
    """Scrape the trace every 15 s, then evaluate the rules like Prometheus."""
    rows: dict[str, list[tuple[GpuPoint, HostPoint | None, str]]] = {}
    host: HostPoint | None = None
    last_t = 0.0
    for row in TraceReader(path, gpus):
        host = row.host or host
        rows.setdefault(row.gpu, []).append((row.point, host, row.name))
        last_t = max(last_t, row.t)
    found: list[Verdict] = []
    for gpu, series in rows.items():
        scrapes = _scrapes(series, last_t)
        for rule in NAIVE_RULES:
            found += _evaluate(rule, gpu, scrapes)
    return _merge(found), last_t


def _evaluate(rule: Rule, gpu: str, scrapes: list[Scrape]) -> list[Verdict]:
    out: list[Verdict] = []
    pending: float | None = None
    firing: float | None = None
    for idx, (t, _) in enumerate(scrapes):
        window = (
            [v for ts, v in scrapes[: idx + 1] if ts > t - rule.avg_s] if rule.avg_s else [scrapes[idx][1]]
        )
        averaged = {key: _avg([w[key] for w in window]) for key in window[-1]}
        if rule.condition(averaged):
            pending = t if pending is None else pending
            if firing is None and t - pending >= rule.for_s:
                firing = t
        else:
            pending = None
            if firing is not None:
                out.append(Verdict(gpu, rule.kind, firing, t))
                firing = None
    if firing is not None:
        out.append(Verdict(gpu, rule.kind, firing, None))
    return out


def _avg(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _merge(found: list[Verdict]) -> list[Verdict]:
    """Several rules of one kind firing on one GPU at once are one alert episode."""
    merged: list[Verdict] = []
    for f in sorted(found, key=lambda f: (f.gpu, f.kind, f.start)):
        prev = merged[-1] if merged else None
        if prev and prev.gpu == f.gpu and prev.kind == f.kind and (prev.end is None or prev.end >= f.start):
            end = None if prev.end is None or f.end is None else max(prev.end, f.end)
            merged[-1] = Verdict(prev.gpu, prev.kind, prev.start, end)
        else:
            merged.append(f)
    return merged


# ---- one trace -----------------------------------------------------------------------------------


@dataclass
class TraceResult:
    name: str
    ours: TraceScore
    ledger: LedgerError | None  # None: the trace has no ledger truth (a real trace)
    naive: TraceScore
    workload: str = "training"  # the labels' class of the job (judged by its shape: no --workload)
    levels: dict[str, TraceScore] = field(default_factory=dict)  # ours at the lower signal levels


# ---- signal levels: the columns the logs most teams keep carry -----------------------------------

# the GpuPoint fields each lower level keeps (the rest read as missing), and whether the board's name stays
LEVELS: dict[str, tuple[frozenset[str], bool]] = {
    "plain": (
        frozenset(
            (
                "t",
                "util",
                "mem_util",
                "mem_used_bytes",
                "mem_total_bytes",
                "power_w",
                "power_limit_w",
                "temp_c",
                "sm_clock_hz",
            )
        ),
        True,
    ),
    "util+mem": (frozenset(("t", "util", "mem_used_bytes", "mem_total_bytes")), False),
}
_FIELDS = tuple(GpuPoint.__dataclass_fields__)


def cut_point(p: GpuPoint, keep: frozenset[str]) -> GpuPoint:
    """The point with only the fields ``keep`` names; the others missing, as the log would leave them."""
    values = {name: getattr(p, name) for name in _FIELDS if name in keep}
    return GpuPoint(**values, extra=NO_EXTRA)


class CutRows:
    """A trace's rows at a lower signal level: the fields it keeps, no host columns, no name where the
    level has none."""

    def __init__(self, path: Path, level: str) -> None:
        self.reader = TraceReader(path)
        self.stats: ReadStats = self.reader.stats
        self.keep, self.named = LEVELS[level]

    def __iter__(self) -> Iterator[TraceRow]:
        for row in self.reader:
            name = row.name if self.named else ""
            yield TraceRow(row.line, row.t, row.gpu, cut_point(row.point, self.keep), None, name, row.segment)


def judge_level(path: Path, level: str) -> TraceScore:
    """Ours on one trace cut to a lower signal level."""
    name = trace_name(path)
    labels, _, judged = load_labels(path)
    result = replay(path, reader=CutRows(path, level))
    ours = [Verdict(e.gpu, e.kind, e.fired_at, e.resolved, e.start, e.end) for e in result.episodes]
    return score_trace(name, labels, ours, alert_for(), result.seconds, judged)


def trace_name(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".csv").removesuffix(".log")


def find_traces(folder: Path) -> list[Path]:
    """Traces (``.csv``, ``.log``, gzipped or not) with their labels beside them, by name."""
    candidates = [
        *folder.glob("*.csv"),
        *folder.glob("*.csv.gz"),
        *folder.glob("*.log"),
        *folder.glob("*.log.gz"),
    ]
    labelled = [p for p in candidates if (folder / f"{trace_name(p)}.labels.json").exists()]
    return sorted(labelled, key=trace_name)


def load_labels(path: Path) -> tuple[list[Label], dict[str, dict[str, float]], Judged]:
    raw = json.loads((path.parent / f"{trace_name(path)}.labels.json").read_text())
    window = raw.get("fp_window")
    judged = Judged(
        (float(window[0]), float(window[1])) if window else None,
        tuple(raw.get("ignore_kinds") or ()),
        tuple(Label.from_json(x) for x in raw.get("allowed") or ()),
    )
    return [Label.from_json(x) for x in raw["labels"]], raw.get("ledger_truth", {}), judged


def judge_ours(path: Path, reader: RowSource | None = None) -> tuple[TraceScore, LedgerError | None]:
    """Replay one trace through the analysis; score its verdicts and (where the labels have its truth)
    its ledger. ``reader``: the trace's rows already read (bench/sensitivity.py reads each trace once)."""
    score, ledger, _ = judge_replay(path, reader)
    return score, ledger


def judge_replay(
    path: Path, reader: RowSource | None = None
) -> tuple[TraceScore, LedgerError | None, ReplayResult]:
    """``judge_ours``, with the replay's own result (the causes its episodes name)."""
    name = trace_name(path)
    labels, truth, judged = load_labels(path)
    result = replay(path, reader=reader)
    ours = [Verdict(e.gpu, e.kind, e.fired_at, e.resolved, e.start, e.end) for e in result.episodes]
    score = score_trace(name, labels, ours, alert_for(), result.seconds, judged)
    return score, ledger_error(result.ledger, truth) if truth else None, result


def judge(path: Path) -> TraceResult:
    """Replay one trace through the analysis and through the baseline, and score both."""
    name, for_s = trace_name(path), alert_for()
    labels, _, judged = load_labels(path)
    ours, ledger = judge_ours(path)
    base, base_end = naive(path)
    workload = json.loads((path.parent / f"{name}.labels.json").read_text()).get("workload") or "training"
    levels = {level: judge_level(path, level) for level in LEVELS}
    base_score = score_trace(name, labels, base, for_s, base_end, judged)
    return TraceResult(name, ours, ledger, base_score, workload, levels)


# ---- report --------------------------------------------------------------------------------------


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    low, mid, high = (round(v) for v in (min(values), statistics.median(values), max(values)))
    return f"{low}/{mid}/{high}"  # (rounded first: a signed error of -0.4 s reads 0, not -0)


def _held_text(episodes: list[EpisodeScore]) -> str:
    return f"{100 * min(e.held for e in episodes):.0f} %" if episodes else "-"


def _row(name: str, episodes: list[EpisodeScore], false: list[FalseVerdict]) -> str:
    return (
        f"  {name:28s} {len(episodes):8d} {sum(e.detected for e in episodes):8d} "
        f"{sum(e.paged for e in episodes):5d} {_held_text(episodes):>8s} {len(false):5d} "
        f"{sum(f.paged for f in false):11d}"
    )


def _per_kind(episodes: list[EpisodeScore], for_s: dict[str, float]) -> list[str]:
    lines = []
    present = {e.label.kind for e in episodes}
    for kind in [k for k in NAMES if k in present] + sorted(present - set(NAMES)):
        of_kind = [e for e in episodes if e.label.kind == kind]
        ttd = [e.ttd for e in of_kind if e.ttd is not None]
        ttp = [e.ttp for e in of_kind if e.ttp is not None]
        ttr = [e.ttr for e in of_kind if e.ttr is not None]
        lines.append(
            f"    {kind:18s} time-to-page {_spread(ttp):>13s} s   time-to-detect {_spread(ttd):>11s} s   "
            f"time-to-resolve {_spread(ttr):>11s} s   "
            f"(alert for {for_of(kind, for_s):.0f} s; paged {len(ttp)}/{len(of_kind)})"
        )
        lines.append(f"    {'':18s} {_errors(of_kind)}")
    return lines


def _errors(episodes: list[EpisodeScore]) -> str:
    """Onset and end errors, min/median/max (signed seconds: negative is early)."""
    onset = [e.onset_err for e in episodes if e.onset_err is not None]
    end = [e.end_err for e in episodes if e.end_err is not None]
    return f"onset error {_spread(onset):>13s} s   end error {_spread(end):>13s} s"


def _listing(title: str, items: list[str]) -> list[str]:
    if not items:
        return []
    more = f" ... (+{len(items) - LIST_LIMIT})" if len(items) > LIST_LIMIT else ""
    return [f"    {title}: " + "; ".join(items[:LIST_LIMIT]) + more]


def paging_table(title: str, scores: list[TraceScore], for_s: dict[str, float]) -> str:
    episodes = [e for s in scores for e in s.episodes]
    false = [f for s in scores for f in s.false]
    lines = [
        title,
        f"  {'trace':28s} {'episodes':>8s} {'detected':>8s} {'paged':>5s} {'min held':>8s} {'false':>5s} "
        f"{'false pages':>11s}",
        *(_row(s.name, s.episodes, s.false) for s in scores),
        _row("TOTAL", episodes, false),
        "  per kind, min/median/max:",
        *_per_kind(episodes, for_s),
        *_listing("missed", [str(e) for e in episodes if not e.detected]),
        *_listing("unpaged", [str(e) for e in episodes if e.detected and not e.paged]),
        *_listing(
            f"held < {100 * HELD_TARGET:.0f} %",
            [f"{e} ({100 * e.held:.0f} %)" for e in episodes if e.detected and e.held < HELD_TARGET],
        ),
        *_listing("false", [str(f) for f in false]),
    ]
    return "\n".join(lines)


def ledger_table(results: list[TraceResult]) -> tuple[str, float]:
    known = [(r.name, r.ledger) for r in results if r.ledger is not None]
    if not known:
        return "", 0.0
    lines = [
        f"ledger accuracy: worst |share - truth| over GPUs and states, in points (target <= "
        f"{LEDGER_TARGET_POINTS:.0f})",
        *(f"  {name:28s} {ledger}" for name, ledger in known),
    ]
    name, worst = max(known, key=lambda kv: kv[1].points)
    lines.append(f"  {'OVERALL worst':28s} {worst.points:5.1f}  ({name})")
    return "\n".join(lines), worst.points


def shortfalls(scores: list[TraceScore], ledger_points: float) -> list[str]:
    """What keeps the targets from being met; empty when they are."""
    episodes = [e for s in scores for e in s.episodes]
    false = [f for s in scores for f in s.false]
    out = []
    if unpaged := sum(not e.paged for e in episodes):
        out.append(f"{unpaged} of {len(episodes)} episodes not paged")
    if low := sum(e.held < HELD_TARGET for e in episodes):
        out.append(f"{low} held < {100 * HELD_TARGET:.0f} %")
    if false:
        out.append(f"{len(false)} false verdicts ({sum(f.paged for f in false)} paged)")
    if ledger_points > LEDGER_TARGET_POINTS:
        out.append(f"ledger off by {ledger_points:.1f} points")
    return out


def class_table(results: list[TraceResult]) -> str:
    """Ours per workload class (traces in brackets): the paging columns, then time to page and resolve."""
    header = f"  {'class (traces)':28s} {'episodes':>8s} {'detected':>8s} {'paged':>5s} {'min held':>8s} "
    lines = [
        "per workload class (ours):",
        header + f"{'false':>5s} {'false pages':>11s} {'time-to-page':>13s} {'time-to-resolve':>15s} "
        f"{'onset error':>13s} {'end error':>13s}",
    ]
    for workload in sorted({r.workload for r in results}):
        of = [r.ours for r in results if r.workload == workload]
        episodes = [e for s in of for e in s.episodes]
        ttp = [e.ttp for e in episodes if e.ttp is not None]
        ttr = [e.ttr for e in episodes if e.ttr is not None]
        onset = [e.onset_err for e in episodes if e.onset_err is not None]
        end = [e.end_err for e in episodes if e.end_err is not None]
        row = _row(f"{workload} ({len(of)})", episodes, [f for s in of for f in s.false])
        lines.append(
            f"{row} {_spread(ttp):>13s} {_spread(ttr):>15s} {_spread(onset):>13s} {_spread(end):>13s}"
        )
    return "\n".join(lines)


def _level_row(label: str, scores: list[TraceScore]) -> str:
    episodes = [e for s in scores for e in s.episodes]
    false = [f for s in scores for f in s.false]
    onset = [e.onset_err for e in episodes if e.onset_err is not None]
    ttp = [e.ttp for e in episodes if e.ttp is not None]
    return f"{_row(label, episodes, false)} {_spread(ttp):>13s} {_spread(onset):>13s}"


def level_table(results: list[TraceResult]) -> tuple[str, list[str]]:
    """Ours per signal level and class: the paging columns, time to page and the onset error; then the
    pages each lower level loses and the false pages it adds. Returns the table and its false pages
    added."""
    header = (
        f"  {'level: class (traces)':28s} {'episodes':>8s} {'detected':>8s} {'paged':>5s} {'min held':>8s} "
    )
    lines = [
        "per signal level (ours; all columns, plain nvidia-smi columns, utilization and memory only):",
        header + f"{'false':>5s} {'false pages':>11s} {'time-to-page':>13s} {'onset error':>13s}",
    ]
    added: list[str] = []
    classes = sorted({r.workload for r in results})
    for level in ("full", *LEVELS):
        for workload in classes:
            of = [r for r in results if r.workload == workload]
            scores = [r.ours if level == "full" else r.levels[level] for r in of]
            lines.append(_level_row(f"{level}: {workload} ({len(of)})", scores))
    for level in LEVELS:
        lost, more = [], []
        for r in results:
            full_paged = {str(e.label) for e in r.ours.episodes if e.paged}
            lost += [
                f"{r.name} {e.label}"
                for e in r.levels[level].episodes
                if not e.paged and str(e.label) in full_paged
            ]
            full_false = {(f.verdict.gpu, f.verdict.kind) for f in r.ours.false if f.paged}
            more += [
                str(f)
                for f in r.levels[level].false
                if f.paged and (f.verdict.gpu, f.verdict.kind) not in full_false
            ]
        lines += _listing(f"{level}: pages lost", lost)
        lines += _listing(f"{level}: false pages added", more)
        added += [f"{level}: {m}" for m in more]
    return "\n".join(lines), added


def report(folder: Path, results: list[TraceResult], seconds: float) -> list[str]:
    """Print one set of traces' tables; return what keeps its targets from being met."""
    for_s = alert_for()
    ours = [r.ours for r in results]
    shown = folder.resolve().relative_to(REPO) if folder.resolve().is_relative_to(REPO) else folder
    print(f"==== {shown}: {len(results)} traces")
    title = "gpu-bottleneck-exporter: verdicts judged as pages (alert `for` per kind)"
    print(paging_table(title, ours, for_s))
    print()
    print(class_table(results))
    print()
    levels_text, added = level_table(results)
    print(levels_text)
    print()
    ledger_text, ledger_points = ledger_table(results)
    if ledger_text:
        print(ledger_text)
        print()
    naive_title = "naive baseline: classic thresholds as alert rules on 15 s scrapes, paging after the `for`"
    print(paging_table(naive_title, [r.naive for r in results], for_s))
    print("\n  naive rules: " + "; ".join(f"{r.kind}: {r.expr}" for r in NAIVE_RULES))
    print(f"\n{len(results)} traces from {shown} replayed twice in {seconds:.1f} s")
    missed = shortfalls(ours, ledger_points)
    if added:
        missed.append(f"{len(added)} false pages added at a lower signal level")
    print(f"{shown}: " + ("targets met" if not missed else "targets missed: " + "; ".join(missed)))
    print()
    return [f"{shown}: {m}" for m in missed]


def main(argv: list[str]) -> int:
    folders = [Path(a) for a in argv] if argv else DEFAULT_DIRS
    missed: list[str] = []
    for folder in folders:
        traces = find_traces(folder)
        if not traces:
            print(f"no labelled traces in {folder}", file=sys.stderr)
            return 1
        started = time.monotonic()
        with ProcessPoolExecutor() as pool:
            results = list(pool.map(judge, traces))
        missed += report(folder, results, time.monotonic() - started)
    print("targets met" if not missed else "targets missed: " + "; ".join(missed))
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
