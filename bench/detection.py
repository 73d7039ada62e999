"""Detection quality on labelled traces, against a naive baseline.

    python bench/detection.py [TRACES_DIR]      # default: ../shared/traces

For every ``*.csv`` with a ``*.labels.json`` beside it: replays it through the exporter's detectors and
counts labelled episodes detected, false verdicts and time-to-detect. The same table is printed for a
naive baseline: the project's seed threshold table written as plain Prometheus-style alert rules over
15-second scrapes (``avg util over 5m < 95 % for 10m``, ``temperature > 80 for 5m``, ...).

A labelled episode is detected when a verdict of its kind fires on its GPU before the label ends and
is still firing when it starts; time-to-detect is from the label's start to the firing (0 if earlier).
A false verdict is a verdict episode that overlaps no label of its kind on its GPU (on a healthy trace,
every verdict).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from exporter.analysis.detectors import KINDS  # noqa: E402
from exporter.analysis.points import GpuPoint, HostPoint  # noqa: E402
from exporter.replay import replay  # noqa: E402
from exporter.thresholds import board_tdp  # noqa: E402
from exporter.traces import TraceReader  # noqa: E402

TARGETS_S = {"data_starvation": 60.0, "comm_hang": 180.0, "thermal_throttle": 60.0, "idle_allocated": 300.0}


@dataclass
class Found:
    gpu: str
    kind: str
    start: float
    end: float | None


@dataclass
class Score:
    episodes: int = 0
    detected: int = 0
    false: int = 0
    ttd: dict[str, list[float]] = field(default_factory=dict)
    late: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    false_list: list[str] = field(default_factory=list)

    def add(self, other: Score) -> None:
        self.episodes += other.episodes
        self.detected += other.detected
        self.false += other.false
        for kind, values in other.ttd.items():
            self.ttd.setdefault(kind, []).extend(values)
        self.late += other.late
        self.missed += other.missed
        self.false_list += other.false_list


def score(labels: list[dict], found: list[Found], trace_end: float, name: str) -> Score:
    s = Score(episodes=len(labels))
    for label in labels:
        gpu, kind, start, end = str(label["gpu"]), label["kind"], float(label["start"]), float(label["end"])
        hits = [
            f
            for f in found
            if f.gpu == gpu
            and f.kind == kind
            and f.start <= end
            and (f.end if f.end is not None else trace_end) >= start
        ]
        if not hits:
            s.missed.append(f"{name} GPU {gpu} {kind}")
            continue
        s.detected += 1
        ttd = max(0.0, min(f.start for f in hits) - start)
        s.ttd.setdefault(kind, []).append(ttd)
        limit = end - start if kind == "shm_exhaustion" else TARGETS_S.get(kind)
        if limit is not None and ttd > limit:
            s.late.append(f"{name} GPU {gpu} {kind} ({ttd:.0f} s)")
    for f in found:
        matching = [
            lb
            for lb in labels
            if str(lb["gpu"]) == f.gpu
            and lb["kind"] == f.kind
            and f.start <= float(lb["end"])
            and (f.end if f.end is not None else trace_end) >= float(lb["start"])
        ]
        if not matching:
            s.false += 1
            s.false_list.append(f"{name} GPU {f.gpu} {f.kind} at {f.start:.0f} s")
    return s


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


def naive(path: Path, gpus: int | None = None) -> tuple[list[Found], float]:
    """Scrape the trace every 15 s (last value of each gauge), then evaluate the rules like Prometheus."""
    reader = TraceReader(path, gpus)
    rows: dict[str, list[tuple[GpuPoint, HostPoint | None, str]]] = {}
    host: HostPoint | None = None
    last_t = 0.0
    for row in reader:
        host = row.host or host
        rows.setdefault(row.gpu, []).append((row.point, host, row.name))
        last_t = max(last_t, row.t)
    found: list[Found] = []
    for gpu, series in rows.items():
        scrapes = []
        i = 0
        for k in range(int(last_t // 15) + 1):
            t = k * 15.0
            while i + 1 < len(series) and series[i + 1][0].t <= t:
                i += 1
            p, h, name = series[i]
            scrapes.append(
                (
                    t,
                    {
                        "util": p.util,
                        "power": p.power_w,
                        "tdp": p.power_default_w or p.power_limit_w or board_tdp(name),
                        "temp": p.temp_c,
                        "nvlink": None
                        if p.nvlink_tx_bps is None
                        else p.nvlink_tx_bps + (p.nvlink_rx_bps or 0),
                        "iowait": h.iowait if h else None,
                        "core": h.core_busy_max if h else None,
                        "shm_used": h.shm_used_bytes if h else None,
                        "shm_size": h.shm_size_bytes if h else None,
                    },
                )
            )
        for rule in NAIVE_RULES:
            found += _evaluate(rule, gpu, scrapes)
    found.sort(key=lambda f: (f.gpu, f.kind, f.start))
    return _merge(found), last_t


def _evaluate(rule: Rule, gpu: str, scrapes: list[tuple[float, dict[str, float | None]]]) -> list[Found]:
    out: list[Found] = []
    pending: float | None = None
    firing: Found | None = None
    for idx, (t, _) in enumerate(scrapes):
        window = (
            [v for ts, v in scrapes[: idx + 1] if ts > t - rule.avg_s] if rule.avg_s else [scrapes[idx][1]]
        )
        averaged = {key: _avg([w[key] for w in window]) for key in window[-1]}
        holds = rule.condition(averaged)
        if holds:
            pending = t if pending is None else pending
            if firing is None and t - pending >= rule.for_s:
                firing = Found(gpu, rule.kind, t, None)
                out.append(firing)
        else:
            pending = None
            if firing is not None:
                firing.end, firing = t, None
    return out


def _avg(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _merge(found: list[Found]) -> list[Found]:
    """Several rules of one kind firing on one GPU at once are one alert episode."""
    merged: list[Found] = []
    for f in sorted(found, key=lambda f: (f.gpu, f.kind, f.start)):
        prev = merged[-1] if merged else None
        if prev and prev.gpu == f.gpu and prev.kind == f.kind and (prev.end is None or prev.end >= f.start):
            prev.end = None if prev.end is None or f.end is None else max(prev.end, f.end)
        else:
            merged.append(f)
    return merged


# ---- report --------------------------------------------------------------------------------------


def _ttd_text(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.0f}/{sorted(values)[len(values) // 2]:.0f}/{max(values):.0f}"


def table(title: str, per_trace: dict[str, Score]) -> tuple[str, Score]:
    total = Score()
    lines = [
        title,
        f"  {'trace':28s} {'episodes':>8s} {'detected':>8s} {'false':>6s}  time-to-detect min/median/max (s)",
    ]
    for name, s in per_trace.items():
        total.add(s)
        ttd = "; ".join(f"{k} {_ttd_text(v)}" for k, v in s.ttd.items()) or "-"
        lines.append(f"  {name:28s} {s.episodes:8d} {s.detected:8d} {s.false:6d}  {ttd}")
    lines.append(f"  {'TOTAL':28s} {total.episodes:8d} {total.detected:8d} {total.false:6d}")
    for kind in KINDS:
        if kind in total.ttd:
            target = TARGETS_S.get(kind)
            lines.append(
                f"    {kind:18s} time-to-detect {_ttd_text(total.ttd[kind])}"
                + (f" (target <= {target:.0f} s)" if target else "")
            )
    for title_, items in (("missed", total.missed), ("late", total.late), ("false", total.false_list)):
        if items:
            lines.append(
                f"    {title_}: "
                + "; ".join(items[:12])
                + (f" ... (+{len(items) - 12})" if len(items) > 12 else "")
            )
    return "\n".join(lines), total


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO.parent / "shared" / "traces"
    traces = sorted(p for p in folder.glob("*.csv") if p.with_suffix(".labels.json").exists())
    if not traces:
        print(f"no labelled traces in {folder}", file=sys.stderr)
        return 1
    ours: dict[str, Score] = {}
    base: dict[str, Score] = {}
    started = time.monotonic()
    for path in traces:
        labels = json.loads(path.with_suffix(".labels.json").read_text())["labels"]
        result = replay(path)
        found = [Found(e.gpu, e.kind, e.start, e.end) for e in result.episodes]
        ours[path.stem] = score(labels, found, result.seconds, path.stem)
        naive_found, end = naive(path)
        base[path.stem] = score(labels, naive_found, end, path.stem)
    ours_text, ours_total = table("gpu-bottleneck-exporter detectors", ours)
    base_text, _ = table("naive baseline: the seed table as alert rules over 15 s scrapes", base)
    print(ours_text)
    print()
    print(base_text)
    print("\n  naive rules: " + "; ".join(f"{r.kind}: {r.expr}" for r in NAIVE_RULES))
    print(f"\n{len(traces)} traces replayed twice in {time.monotonic() - started:.1f} s")
    ok = ours_total.detected == ours_total.episodes and ours_total.false == 0 and not ours_total.late
    print("all targets met" if ok else "targets missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
