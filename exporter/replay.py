"""``replay``: the live analysis over a recorded trace, on a virtual clock.

Rows are fed in file order; every second of trace time the analyzer is evaluated exactly as the
sampler evaluates it live. Output: verdict events as they happen, then a summary.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from exporter.analysis.engine import KINDS, Analyzer, VerdictEvent
from exporter.analysis.ledger import STATES
from exporter.thresholds import EVAL_INTERVAL
from exporter.traces import ReadStats, TraceReader, TraceRow

WORK_STATES = frozenset(("computing", "throttled"))  # the rest of STATES is time lost or not held


@dataclass
class Episode:
    gpu: str
    kind: str
    start: float
    end: float | None = None  # None: still firing when the trace ended
    cause: str = ""
    peak: float = 0.0
    related: tuple[str, ...] = ()


@dataclass
class ReplayResult:
    path: Path
    stats: ReadStats
    seconds: float
    events: list[VerdictEvent] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    jobs: list[dict[str, object]] = field(default_factory=list)
    silent: dict[str, str] = field(default_factory=dict)
    ledger: dict[str, dict[str, float]] = field(default_factory=dict)  # gpu -> state -> seconds
    job_ledger: dict[str, dict[str, float]] = field(default_factory=dict)  # job (group) -> state -> seconds


def replay(
    path: str | Path,
    gpus: int | None = None,
    on_event: Callable[[VerdictEvent], None] | None = None,
    on_job: Callable[[dict[str, object]], None] | None = None,
    on_row: Callable[[TraceRow], None] | None = None,
    on_tick: Callable[[float, str, str], None] | None = None,
) -> ReplayResult:
    """Replay a trace. ``on_row`` sees every row read; ``on_tick(t, gpu, state)`` the ledger state that
    took most of each GPU's evaluated second (see ``TickStates``). Both only observe."""
    reader = TraceReader(path, gpus)
    analyzer = Analyzer()
    result = ReplayResult(path=Path(path), stats=reader.stats, seconds=0.0)
    open_episodes: dict[tuple[str, str], Episode] = {}
    in_job: set[tuple[str, str]] = set()
    step = EVAL_INTERVAL.value
    next_eval = step
    named: set[str] = set()
    ticks = TickStates(analyzer, step, on_tick) if on_tick else None

    def evaluate(t: float) -> None:
        states, events = analyzer.evaluate(t)
        if ticks:
            ticks.after(t)
        for event in events:
            result.events.append(event)
            key = (event.gpu, event.kind)
            if event.state == "firing":
                episode = Episode(
                    event.gpu, event.kind, event.t, None, event.cause, event.score, event.related
                )
                open_episodes[key] = episode
                result.episodes.append(episode)
                if event.kind == "comm_hang" and event.related and key not in in_job:
                    job = {
                        "event": "job",
                        "t": round(event.t, 1),
                        "kind": event.kind,
                        "gpus": sorted((event.gpu, *event.related), key=_gpu_order),
                        "cause": event.cause,
                    }
                    result.jobs.append(job)
                    in_job.update((g, event.kind) for g in job["gpus"])  # type: ignore[union-attr]
                    if on_job:
                        on_job(job)
            else:
                episode = open_episodes.pop(key, None)
                if episode is not None:
                    episode.end = event.t
                in_job.discard(key)
            if on_event:
                on_event(event)
        for (gpu, kind), episode in open_episodes.items():  # peak score and latest cause while firing
            state = states.get(gpu, {}).get(kind)
            if state is not None:
                episode.peak = max(episode.peak, state.score)
                episode.cause = state.cause or episode.cause

    last_t = 0.0
    for row in reader:
        while row.t > next_eval:
            evaluate(next_eval)
            next_eval += step
        if row.gpu not in named and row.name:
            analyzer.set_identity(row.gpu, name=row.name)
            named.add(row.gpu)
        if on_row:
            on_row(row)
        analyzer.add_gpu_points(row.gpu, (row.point,))
        if row.host is not None:
            analyzer.add_host_point(row.host)
        last_t = max(last_t, row.t)
    if reader.stats.rows:
        while next_eval <= last_t:
            evaluate(next_eval)
            next_eval += step
    result.seconds = last_t
    analyzer.flush_ledgers()
    if ticks:
        ticks.after(None)
    for gpu in sorted(analyzer.gpus(), key=_gpu_order):
        result.ledger[gpu] = dict(analyzer.ledger(gpu).totals)
        job = result.job_ledger.setdefault(analyzer.group_of(gpu), dict.fromkeys(STATES, 0.0))
        for state, seconds in result.ledger[gpu].items():
            job[state] += seconds
    result.silent = {kind: why for kind, why in analyzer.missing.items() if kind not in analyzer.had_inputs}
    return result


class TickStates:
    """The state of each GPU's evaluated second, read from its ledger's counters after each tick: the
    state that took most of what the tick committed. The ledger holds back the seconds of a stopped run
    until it can judge the run (up to the pause allowance), then commits them together: the ticks that
    committed nothing are given, newest first, the lost-time state of the seconds committed in excess of
    one, when that happens. Ticks never committed (no sample) get no state. Observes only."""

    def __init__(self, analyzer: Analyzer, step: float, emit: Callable[[float, str, str], None]) -> None:
        self.analyzer, self.step, self.emit = analyzer, step, emit
        self.before: dict[str, dict[str, float]] = {}
        self.held: dict[str, list[float]] = {}  # per GPU: ticks that committed nothing yet

    def after(self, t: float | None) -> None:
        """After the evaluation at ``t``; ``None`` after the final flush (no tick of its own)."""
        for gpu in self.analyzer.gpus():
            totals = self.analyzer.ledger(gpu).totals
            before = self.before.get(gpu) or dict.fromkeys(STATES, 0.0)
            delta = {s: totals[s] - before.get(s, 0.0) for s in STATES}
            self.before[gpu] = dict(totals)
            held = self.held.setdefault(gpu, [])
            committed = sum(delta.values())
            if committed < 0.05 * self.step:
                if t is not None:
                    held.append(t)
                continue
            own = 0 if t is None else 1
            back = min(len(held), max(0, round(committed / self.step) - own))
            if back:
                lost = {s: v for s, v in delta.items() if s not in WORK_STATES and v > 0}
                state = max(lost or delta, key=lambda s: (lost or delta)[s])
                for held_t in held[len(held) - back :]:
                    self.emit(held_t, gpu, state)
                delta[state] -= back * self.step
            held.clear()
            if t is not None:
                self.emit(t, gpu, max(delta, key=lambda s: delta[s]))


def _gpu_order(gpu: str) -> tuple[int, str]:
    return (int(gpu), gpu) if gpu.isdigit() else (1 << 30, gpu)


def event_json(event: VerdictEvent) -> str:
    record: dict[str, object] = {
        "event": "verdict",
        "t": round(event.t, 1),
        "gpu": event.gpu,
        "kind": event.kind,
        "state": event.state,
        "score": round(event.score, 2),
    }
    if event.cause:
        record["cause"] = event.cause
    return json.dumps(record)


def summary(result: ReplayResult) -> dict[str, object]:
    return {
        "event": "summary",
        "trace": str(result.path),
        "gpus": len(result.stats.gpus),
        "seconds": round(result.seconds, 1),
        "rows": result.stats.rows,
        "skipped_rows": result.stats.skipped,
        "unknown_columns": result.stats.unknown_columns,
        "clipped_values": dict(result.stats.clipped),
        "verdicts": [
            {
                "gpu": e.gpu,
                "kind": e.kind,
                "start": round(e.start, 1),
                "end": round(e.end, 1) if e.end is not None else None,
                "cause": e.cause or None,
                "peak_score": round(e.peak, 2),
            }
            for e in result.episodes
        ],
        "jobs": result.jobs,
        "silent": result.silent,
        "ledger": {gpu: _rounded(states) for gpu, states in result.ledger.items()},
        "job_ledger": {job: _rounded(states) for job, states in result.job_ledger.items()},
    }


def _rounded(states: dict[str, float]) -> dict[str, float]:
    return {state: round(seconds, 1) for state, seconds in states.items()}


def ledger_lines(result: ReplayResult) -> list[str]:
    """Where each GPU's time went, and each job's: the share of every state that took any."""

    def line(name: str, states: dict[str, float]) -> str:
        total = sum(states.values())
        if total <= 0:
            return f"  {name}: no utilization samples"
        parts = [
            f"{state} {seconds / total:.0%}" for state, seconds in states.items() if seconds / total >= 0.005
        ]
        return f"  {name} ({total:.0f} s): " + ", ".join(parts)

    lines = ["where the time went:"]
    lines += [line(f"GPU {gpu}", states) for gpu, states in result.ledger.items()]
    lines += [
        line(f"job {job}" if job != "node" else "all GPUs", states)
        for job, states in result.job_ledger.items()
    ]
    return lines


def _clock(result: ReplayResult, t: float) -> str:
    first = result.stats.first_timestamp
    if first is None:
        return ""
    return datetime.fromtimestamp(first + t, tz=UTC).strftime("%H:%M:%S")


def _gpu_list(gpus: list[str]) -> str:
    ordered = sorted(gpus, key=_gpu_order)
    if (
        all(g.isdigit() for g in ordered)
        and ordered
        and [int(g) for g in ordered] == list(range(int(ordered[0]), int(ordered[-1]) + 1))
        and len(ordered) > 2
    ):
        return f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(ordered)


def human(result: ReplayResult) -> str:
    """The summary an engineer reads: per GPU, what, when, how long, why."""
    s = result.stats
    lines = [f"{result.path}: {len(s.gpus)} GPU(s), {result.seconds:.1f} s of samples, {s.rows} rows"]
    if s.first_timestamp is not None:
        start = datetime.fromtimestamp(s.first_timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        lines[0] += f", from {start}"
    by_gpu: dict[str, list[Episode]] = {}
    for episode in result.episodes:
        by_gpu.setdefault(episode.gpu, []).append(episode)
    quiet = [g for g in s.gpus if g not in by_gpu]
    for gpu in sorted(by_gpu, key=_gpu_order):
        for e in by_gpu[gpu]:
            end = e.end if e.end is not None else result.seconds
            until = f"{e.end:.0f} s ({_clock(result, e.end)})" if e.end is not None else "the end"
            text = (
                f"  GPU {gpu}: {e.kind} from {e.start:.0f} s ({_clock(result, e.start)}) to {until}, "
                f"{end - e.start:.0f} s, peak score {e.peak:.2f}"
            )
            if e.cause:
                text += f", cause {e.cause}"
            if e.kind == "data_starvation" and e.related:
                text += f"; GPUs {_gpu_list(list(e.related))} wait for it in NCCL"
            lines.append(text)
    if quiet:
        lines.append(f"  GPU {_gpu_list(quiet)}: no verdict")
    for job in result.jobs:
        lines.append(
            f"  job event: {job['kind']} on GPUs {_gpu_list(job['gpus'])} from {job['t']} s ({job['cause']})"
        )  # type: ignore[arg-type]
    if result.silent:
        lines.append(
            "  silent (inputs missing from this trace): "
            + "; ".join(
                f"{kind} {why}"
                for kind, why in sorted(result.silent.items(), key=lambda kv: KINDS.index(kv[0]))
            )
        )
    if s.skipped:
        lines.append(f"  {s.skipped} unreadable row(s) skipped")
    if s.clipped:
        lines.append(
            f"  {sum(s.clipped.values())} impossible value(s) read as missing: "
            + ", ".join(f"{column} {count}" for column, count in s.clipped.items())
        )
    if result.ledger:
        lines += ledger_lines(result)
    return "\n".join(lines)
