"""``replay``: the live analysis over a recorded trace, on a virtual clock.

Rows are fed in file order; every second of trace time the analyzer is evaluated exactly as the
sampler evaluates it live. Output: verdict events as they happen, then a summary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from exporter.analysis.engine import HOLDS_PEERS_BACK, Analyzer, VerdictEvent
from exporter.analysis.envelope import Envelope
from exporter.analysis.kinds import KINDS, NAMES
from exporter.analysis.ledger import LOST_STATES, STATES
from exporter.analysis.workload import Workload
from exporter.offline.traceformats import NVIDIA_SMI_CSV
from exporter.offline.traces import ReadStats, TraceError, TraceReader, TraceRow, gap_seconds
from exporter.podlogs.workload import process_hint
from exporter.policy.cost import DEFAULT as DEFAULT_PRICES
from exporter.policy.cost import Prices
from exporter.policy.thresholds import COVERAGE_SHARE, EVAL_INTERVAL, HOLDUP_SHARE

HOUR_S = 3600.0
# a GPU's episodes of one kind are listed one by one up to this many; more (a history of days) are one
# line with their count and the longest (all of them in --json and the --report page)
EPISODES_LISTED = 3
WAITING = "waiting"  # a rank whose collective time was a wait for a paged peer
WORK_STATES = frozenset(("computing", "throttled"))  # the rest of STATES is time lost or not held
# Replay's work is a GPU evaluated once (a GPU-second at replay's step of one second): a trace sampled
# every second costs one per row, one sampled every minute sixty. Past GPU_SECONDS_FREE, a file whose rows
# would cost more than MAX_GPU_SECONDS_PER_ROW each on average (or twice its --period) is refused in one
# line: many GPUs kept alive by a row every few minutes, whose work would grow with its GPUs times its
# seconds, not with what it holds.
MAX_GPU_SECONDS_PER_ROW = 120.0
GPU_SECONDS_FREE = 100_000.0


class RowSource(Protocol):
    """Rows read from somewhere other than a file, in time order, with their reading's stats."""

    stats: ReadStats

    def __iter__(self) -> Iterator[TraceRow]: ...


@dataclass
class Episode:
    """One verdict, told by when its loss happened: ``start`` when the loss began (the onset of the
    evidence that fired it), ``end`` when it stopped (its evidence cleared); beside them, when the verdict
    fired and resolved (its hold and resolve times later)."""

    gpu: str
    kind: str
    start: float
    end: float | None = None  # None: still on when the trace ended
    cause: str = ""
    peak: float = 0.0
    related: tuple[str, ...] = ()
    fired: float | None = None  # None: when it began (a verdict read back from a Prometheus)
    resolved: float | None = None  # None: still firing when the trace ended
    detail: str = ""  # what the evidence said beside the cause (a power cap: the cap, clock, board draw)
    signals: tuple[str, ...] = ()  # the signals its evidence stood on (utilization, power, memory, ...)
    # seconds each cause held while it fired (coarse steps: the episode's cause is the best-supported)
    support: dict[str, float] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.fired is None:
            self.fired = self.start
        if self.resolved is None and self.end is not None:
            self.resolved = self.end

    @property
    def fired_at(self) -> float:
        return self.start if self.fired is None else self.fired


@dataclass
class ReplayResult:
    path: Path
    stats: ReadStats
    seconds: float
    sampled_seconds: float = 0.0  # the segments' spans added: ``seconds`` less the gaps
    gpu_seconds: float = 0.0  # the GPUs evaluated, added over the evaluations (replay's work)
    events: list[VerdictEvent] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    jobs: list[dict[str, object]] = field(default_factory=list)
    silent: dict[str, str] = field(default_factory=dict)
    ledger: dict[str, dict[str, float]] = field(default_factory=dict)  # gpu -> state -> seconds
    held_back: dict[str, float] = field(default_factory=dict)  # gpu -> seconds its job's peers waited for it
    envelopes: dict[str, Envelope] = field(default_factory=dict)  # gpu -> its power envelope, as learned
    job_ledger: dict[str, dict[str, float]] = field(default_factory=dict)  # job (group) -> state -> seconds
    prices: Prices | None = None  # what a GPU-hour costs (--price); None: no cost
    models: dict[str, str] = field(default_factory=dict)  # gpu -> its board name, as the log gives it
    cost: dict[str, dict[str, float]] = field(default_factory=dict)  # gpu -> state -> what its time cost
    job_cost: dict[str, dict[str, float]] = field(default_factory=dict)  # job (group) -> state -> cost
    workload: str = ""  # --workload: the class the user says the trace is ("": judged by its shape)
    process_hint: str = ""  # what the log's process tables said of the class ("": nothing)
    # gpu -> (class, source) -> seconds judged so, and the latest evidence of each
    classes: dict[str, dict[tuple[str, str], float]] = field(default_factory=dict)
    class_evidence: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # (gpu, kind) -> a loss seen that the log's signals could not tell from benign work, and what would
    # decide it: the time is in the ledger, no page stood on it
    unsure: dict[tuple[str, str], str] = field(default_factory=dict)
    # replay --prometheus: how the history was read and the roll-up by namespace (promhistory/rollup.py)
    fleet: dict[str, object] | None = None
    # at a given step (replay --prometheus): of each job's throttled seconds, the share of the clock the
    # cap or the heat took (throttled time computes, at the clocks it was left)
    job_throttle_lost: dict[str, float] = field(default_factory=dict)
    # what the job says of its class short of --workload (a tracker's run name or config)
    hint: Workload | None = None
    # replay of a tracker's run: the run, its step, what its progress said (offline/trackers)
    tracker: dict[str, object] | None = None


def replay(
    path: str | Path,
    gpus: int | None = None,
    on_event: Callable[[VerdictEvent], None] | None = None,
    on_job: Callable[[dict[str, object]], None] | None = None,
    on_row: Callable[[TraceRow], None] | None = None,
    on_tick: Callable[[float, str, str], None] | None = None,
    period: float | None = None,
    start: float | None = None,
    prices: Prices | None = DEFAULT_PRICES,
    columns: list[str] | None = None,
    workload: str = "",
    reader: RowSource | None = None,
    step: float | None = None,
    hint: Workload | None = None,
) -> ReplayResult:
    """Replay a trace. ``on_row`` sees every row read; ``on_tick(t, gpu, state)`` the ledger state that
    took most of each GPU's evaluated second (see ``TickStates``). Both only observe. ``period`` and
    ``start`` place the samples of a log without times, ``columns`` names those of a CSV without a header
    (see ``TraceReader``). ``workload``: the class the user says the trace's job is (``--workload``).

    A gap in the trace (see TRACE_GAP_PERIODS) ends a segment: its verdicts end where its samples end,
    and the rows after the gap are analysed afresh, so the silence is never evaluated second by second.
    ``step``: rows sampled this many seconds apart (a Prometheus' scrapes) are evaluated once per step,
    each standing for its step, rather than every second (None: every second). ``hint``: the class the
    job says of itself below ``--workload`` (a tracker's run name or config)."""
    if reader is None:  # rows from elsewhere (``reader``: replay --prometheus) have no file to read
        reader = TraceReader(path, gpus, period=period, start=start, columns=columns)
    result = ReplayResult(
        path=Path(path), stats=reader.stats, seconds=0.0, prices=prices, workload=workload, hint=hint
    )
    segment: _Segment | None = None
    had_inputs: set[str] = set()
    last_t = 0.0
    stats = reader.stats
    named = 0  # the process names applied as the job's class (the log's process tables)
    for row in reader:
        if segment is None or row.segment != segment.number:
            if segment is not None:
                segment.finish(last_t, had_inputs)
            segment = _Segment(row.segment, row.t, result, on_event, on_job, on_tick, step)
            named = 0
        if getattr(stats, "process_names", 0) != named:
            named = stats.process_names
            segment.processes(stats.processes)
        segment.add(row, on_row)
        last_t = max(last_t, row.t)
    result.seconds = last_t
    if segment is not None:
        segment.finish(last_t, had_inputs)
        missing = segment.analyzer.missing
        result.silent = {kind: why for kind, why in missing.items() if kind not in had_inputs}
    if step is not None and step > EVAL_INTERVAL.value:  # resolutions held back come later: time order
        result.events.sort(key=lambda e: e.t)
    return result


class _Segment:
    """The analysis of one stretch of a trace without a gap: its own analyzer on the trace's clock."""

    def __init__(
        self,
        number: int,
        start: float,
        result: ReplayResult,
        on_event: Callable[[VerdictEvent], None] | None,
        on_job: Callable[[dict[str, object]], None] | None,
        on_tick: Callable[[float, str, str], None] | None,
        step: float | None = None,
    ) -> None:
        self.number, self.result, self.on_event, self.on_job = number, result, on_event, on_job
        self.step = step or EVAL_INTERVAL.value
        self.analyzer = Analyzer(step=self.step)
        if result.workload:  # replay has no pods: the whole trace is one job
            self.analyzer.set_workload(
                "node", Workload(result.workload, "flag", f"--workload {result.workload}")
            )
        elif result.hint is not None:
            self.analyzer.set_workload("node", result.hint)
        self.start = start
        self.next_eval = start + self.step
        self.open_episodes: dict[tuple[str, str], Episode] = {}
        # Coarser than the clock (a Prometheus' scrapes), a loss whose evidence dips for a sample or two is
        # still one loss: a resolution is held back for its alert's ``for`` (an alert whose condition
        # returns within it is still the same page), and a verdict firing again within it continues the
        # episode. Its cause is then the best-supported over the episode's firing time.
        self.coarse = self.step > EVAL_INTERVAL.value
        self.clocked = step is not None  # the throttled seconds' lost share of the clock is kept
        self.throttled: dict[str, float] = {}  # GPU -> its throttled seconds, as last weighed
        self.closing: dict[tuple[str, str], tuple[VerdictEvent, Episode]] = {}
        self.in_job: set[tuple[str, str]] = set()
        self.named: set[str] = set()
        self.ticks = TickStates(self.analyzer, self.step, on_tick) if on_tick else None
        # Each GPU is evaluated while it sends rows: from its first to a gap after its latest. A GPU that
        # sends nothing for longer is left out until it sends again (its silence is a gap of its own),
        # so the work follows the rows, not the GPUs seen times the seconds spanned.
        self.latest: dict[str, float] = {}  # the GPUs evaluated -> the time of each one's latest row
        self.quiet: dict[str, float] = {}  # the GPUs left out -> the time of each one's latest row

    def processes(self, names: dict[str, list[str]]) -> None:
        """The processes the log's tables show on its GPUs name the job's class where they agree on one
        (``--workload`` outranks them): an ``ollama.exe`` or a ``tritonserver`` is a server, a
        ``jupyter-lab`` a notebook, whatever the telemetry's shape; a ``python`` says nothing."""
        hints = {h.kind: h for h in (process_hint(n) for ns in names.values() for n in ns) if h is not None}
        hint = next(iter(hints.values())) if len(hints) == 1 else None
        self.result.process_hint = "" if hint is None else hint.evidence
        if hint is not None and not self.result.workload:
            self.analyzer.set_workload("node", Workload(hint.kind, "process", hint.evidence))

    def add(self, row: TraceRow, on_row: Callable[[TraceRow], None] | None) -> None:
        while row.t > self.next_eval:
            self.evaluate(self.next_eval)
            self.next_eval += self.step
        self.quiet.pop(row.gpu, None)
        self.latest[row.gpu] = row.t
        if row.gpu not in self.named and row.name:
            self.analyzer.set_identity(row.gpu, name=row.name)
            self.named.add(row.gpu)
            self.result.models.setdefault(row.gpu, row.name)
        if on_row:
            on_row(row)
        self.analyzer.add_gpu_points(row.gpu, (row.point,))
        if row.host is not None:
            self.analyzer.add_host_point(row.host)

    def finish(self, last_t: float, had_inputs: set[str]) -> None:
        """Evaluate up to the segment's last sample, then add its ledgers to the result. Episodes still
        firing end there when a gap follows (``end`` stays None only at the end of the trace)."""
        result, analyzer = self.result, self.analyzer
        while self.next_eval <= last_t:
            self.evaluate(self.next_eval)
            self.next_eval += self.step
        analyzer.flush_ledgers()
        self.release(None)
        if self.clocked:
            self.weigh_throttled(list(analyzer.gpus()))
        result.sampled_seconds += last_t - self.start
        if self.ticks:
            self.ticks.after(None)
        for (gpu, kind), episode in self.open_episodes.items():  # a loss that stopped before the verdict
            end = analyzer.loss_end(gpu, kind)
            episode.end = None if end is None else max(episode.start, end)
        if self.number < result.stats.gap_count:
            for episode in self.open_episodes.values():
                episode.resolved = last_t
                episode.end = last_t if episode.end is None else episode.end
        for (gpu, _), episode in self.open_episodes.items():  # a GPU silent since: it ended with its rows
            if gpu in self.quiet:
                episode.resolved = self.quiet[gpu]
                episode.end = self.quiet[gpu] if episode.end is None else min(self.quiet[gpu], episode.end)
        for gpu in sorted(analyzer.gpus(), key=_gpu_order):
            totals = result.ledger.setdefault(gpu, dict.fromkeys(STATES, 0.0))
            job = result.job_ledger.setdefault(analyzer.group_of(gpu), dict.fromkeys(STATES, 0.0))
            for state, seconds in analyzer.ledger(gpu).totals.items():
                totals[state] = totals.get(state, 0.0) + seconds
                job[state] += seconds
            if result.prices is not None:  # each GPU's hours at its model's price
                per_hour = result.prices.of(result.models.get(gpu, "")) / 3600
                cost = result.cost.setdefault(gpu, dict.fromkeys(STATES, 0.0))
                job_cost = result.job_cost.setdefault(analyzer.group_of(gpu), dict.fromkeys(STATES, 0.0))
                for state, seconds in analyzer.ledger(gpu).totals.items():
                    cost[state] = cost.get(state, 0.0) + seconds * per_hour
                    job_cost[state] = job_cost.get(state, 0.0) + seconds * per_hour
            result.held_back[gpu] = result.held_back.get(gpu, 0.0) + analyzer.ledger(gpu).held_back_s
            result.envelopes[gpu] = analyzer.envelope(gpu)
        had_inputs.update(analyzer.had_inputs)

    def sending(self, t: float) -> list[str]:
        """The GPUs to evaluate at ``t``: those with a row within a gap (``gap_seconds``) before it."""
        for gpu in [g for g, latest in self.latest.items() if t - latest > gap_seconds()]:
            self.quiet[gpu] = self.latest.pop(gpu)
        return list(self.latest)

    def evaluate(self, t: float) -> None:
        result = self.result
        gpus = self.sending(t)
        result.gpu_seconds += len(gpus)
        _check_work(result)
        states, events = self.analyzer.evaluate(t, gpus)
        if self.analyzer.unsure:
            result.unsure.update(self.analyzer.unsure)
        if self.ticks:
            self.ticks.after(t, gpus)
        if self.clocked:
            self.weigh_throttled(gpus)
        for gpu in states:
            w = self.analyzer.workload(gpu)
            key = (w.kind, w.source)
            seconds = result.classes.setdefault(gpu, {})
            seconds[key] = seconds.get(key, 0.0) + self.step
            result.class_evidence[(gpu, *key)] = w.evidence
        for event in events:
            key = (event.gpu, event.kind)
            if event.state == "firing":
                if self._continued(key, event):
                    continue
                result.events.append(event)
                self._opened(key, event)
            elif self.coarse and key in self.open_episodes:
                episode = self.open_episodes.pop(key)
                # where it ends, unless it fires again within its alert's ``for``
                episode.end = event.t if event.until is None else event.until
                episode.resolved = event.t
                self.closing[key] = (event, episode)
                continue
            else:
                result.events.append(event)
                episode = self.open_episodes.pop(key, None)
                if episode is not None:
                    episode.end = event.t if event.until is None else event.until
                    episode.resolved = event.t
                self.in_job.discard(key)
            if self.on_event:
                self.on_event(event)
        self.release(t)
        for (gpu, kind), episode in self.open_episodes.items():  # peak score and latest cause while firing
            state = states.get(gpu, {}).get(kind)
            if state is not None:
                episode.peak = max(episode.peak, state.score)
                episode.cause = state.cause or episode.cause
                episode.detail = self.analyzer.details.get((gpu, kind), episode.detail)
                episode.signals = self.analyzer.signals.get((gpu, kind), episode.signals)
                if self.coarse:  # the cause its evidence names at each step it fires
                    cause = state.seen or state.cause or episode.cause
                    episode.support[cause] = episode.support.get(cause, 0.0) + self.step
                    episode.cause = best_supported(episode.support)

    def weigh_throttled(self, gpus: list[str]) -> None:
        """The throttled seconds the ledger took since last time, weighed by the share of the clock taken
        from them (the busy samples' clock against its maximum over the evidence window)."""
        for gpu in gpus:
            seconds = self.analyzer.ledger(gpu).totals.get("throttled", 0.0)
            more = seconds - self.throttled.get(gpu, 0.0)
            if more <= 0:
                continue
            self.throttled[gpu] = seconds
            ratio = self.analyzer.features(gpu).busy_clock_ratio
            taken = 1.0 if ratio is None else min(1.0, max(0.0, 1.0 - ratio))  # unknown: all of it
            job = self.analyzer.group_of(gpu)
            lost = self.result.job_throttle_lost
            lost[job] = lost.get(job, 0.0) + more * taken

    def _opened(self, key: tuple[str, str], event: VerdictEvent) -> None:
        """A new episode, and its job's event when it is the first of its job."""
        result = self.result
        began = event.t if event.since is None else event.since  # when its loss began
        episode = Episode(
            event.gpu, event.kind, began, None, event.cause, event.score, event.related, event.t
        )
        self.open_episodes[key] = episode
        result.episodes.append(episode)
        if KINDS[event.kind].job_event and event.related and key not in self.in_job:
            job = {
                "event": "job",
                "t": round(event.t, 1),
                "kind": event.kind,
                "gpus": sorted((event.gpu, *event.related), key=_gpu_order),
                "cause": event.cause,
            }
            result.jobs.append(job)
            self.in_job.update((g, event.kind) for g in job["gpus"])  # type: ignore[union-attr]
            if self.on_job:
                self.on_job(job)

    def _continued(self, key: tuple[str, str], event: VerdictEvent) -> bool:
        """A verdict firing again within its alert's ``for`` of resolving: the same episode goes on (its
        resolution and this firing are neither said)."""
        held = self.closing.pop(key, None)
        if held is None:
            return False
        _, episode = held
        episode.end = episode.resolved = None
        episode.related = tuple(dict.fromkeys((*episode.related, *event.related)))
        self.open_episodes[key] = episode
        return True

    def release(self, t: float | None) -> None:
        """Say the resolutions held back for their alert's ``for`` (every one at ``None``: the end)."""
        for key, (event, _) in list(self.closing.items()):
            if t is not None and t - event.t < KINDS[event.kind].policy.for_.value:
                continue
            del self.closing[key]
            self.result.events.append(event)
            self.in_job.discard(key)
            if self.on_event:
                self.on_event(event)


def best_supported(support: dict[str, float]) -> str:
    """The cause that held longest while the episode fired; ``unknown`` when causes tie for it."""
    most = max(support.values(), default=0.0)
    leaders = [cause for cause, seconds in support.items() if seconds == most]
    return leaders[0] if len(leaders) == 1 else "unknown"


def _check_work(result: ReplayResult) -> None:
    """Refuse a file whose rows cost too many GPU-seconds each (MAX_GPU_SECONDS_PER_ROW)."""
    rows = result.stats.rows
    per_row = max(MAX_GPU_SECONDS_PER_ROW, 2 * (result.stats.period or 0.0))  # --period: the user's spacing
    if result.gpu_seconds > GPU_SECONDS_FREE and result.gpu_seconds > per_row * rows:
        raise TraceError(
            f"{result.path}: {rows} rows already cost {result.gpu_seconds:.0f} GPU-seconds of analysis "
            f"(each GPU is evaluated every second until it has sent nothing for {gap_seconds():.0f} s): a "
            f"trace has a row per GPU every {per_row:.0f} s or less on average"
        )


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

    def after(self, t: float | None, gpus: list[str] | None = None) -> None:
        """After the evaluation at ``t`` of ``gpus`` (default: every GPU); ``None`` after the final flush
        (no tick of its own)."""
        for gpu in self.analyzer.gpus() if gpus is None else gpus:
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


def origin(stats: ReadStats) -> float | None:
    """The wall-clock time (Unix seconds) of the trace's second 0; None where the log gave no times
    (samples placed by --period from 0)."""
    first = stats.first_timestamp
    if first is None or (stats.period is not None and first == 0):
        return None
    return first


def wall(at: float | None, t: float | None) -> str | None:
    """Trace second ``t`` on the wall clock, RFC 3339 in UTC (None: no clock, or no time)."""
    if at is None or t is None:
        return None
    seconds, tenths = divmod(round((at + t) * 10), 10)  # to the tenth, as the trace seconds are
    text = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{tenths}Z" if tenths else f"{text}Z"


def _timed(record: dict[str, object], key: str, t: float | None, at: float | None) -> None:
    """``key`` in trace seconds, and ``key``_time on the wall clock where the trace has one."""
    record[key] = None if t is None else round(t, 1)
    record[f"{key}_time"] = wall(at, t)


def event_json(event: VerdictEvent, at: float | None = None) -> str:
    """A verdict event as a JSON line: when it fired or resolved (``t``), when its loss began
    (``since``) and, resolved, when it stopped (``until``); each also on the wall clock from ``at``, the
    time of the trace's second 0 (``origin``)."""
    record: dict[str, object] = {"event": "verdict", "t": round(event.t, 1), "time": wall(at, event.t)}
    record.update(gpu=event.gpu, kind=event.kind, state=event.state, score=_score(event.score))
    if event.cause:
        record["cause"] = event.cause
    _timed(record, "since", event.t if event.since is None else event.since, at)
    if event.state == "resolved":
        _timed(record, "until", event.t if event.until is None else event.until, at)
    return json.dumps(record)


def _score(score: float) -> float | None:
    """A score as JSON: None where it is not known (a verdict read back from a Prometheus)."""
    return None if math.isnan(score) else round(score, 2)


def peak_text(peak: float) -> str:
    return "" if math.isnan(peak) else f", peak score {peak:.2f}"


def episode_record(e: Episode, at: float | None) -> dict[str, object]:
    """One episode for --json: when its loss began and ended (``start``, ``end``), when its verdict fired
    and resolved, in trace seconds and on the wall clock (``*_time``, RFC 3339 UTC; null without one)."""
    record: dict[str, object] = {"gpu": e.gpu, "kind": e.kind}
    _timed(record, "start", e.start, at)
    _timed(record, "end", e.end, at)
    _timed(record, "fired", e.fired_at, at)
    _timed(record, "resolved", e.resolved, at)
    record.update(cause=e.cause or None, peak_score=_score(e.peak), detail=e.detail or None)
    record["signals"] = list(e.signals)
    return record


def summary(result: ReplayResult) -> dict[str, object]:
    at = origin(result.stats)
    return {
        "event": "summary",
        "trace": str(result.path),
        "format": result.stats.format,
        "period": result.stats.period,  # seconds between samples placed by --period; None: the log's times
        "gpus": len(result.stats.gpus),
        "seconds": round(result.seconds, 1),
        "start_time": wall(at, 0.0),  # the trace's second 0 on the wall clock (null: no times in the log)
        "rows": result.stats.rows,
        "skipped_rows": result.stats.skipped,
        "unknown_columns": result.stats.unknown_columns,
        "clipped_values": dict(result.stats.clipped),
        "backward_rows": result.stats.backwards,
        "gap_count": result.stats.gap_count,
        "gaps": [_gap_record(result.stats, line, seconds) for line, seconds in result.stats.gaps],
        "cut_after_line": result.stats.cut_after_line,  # a gzip file cut short: its last line read
        "verdicts": [episode_record(e, at) for e in result.episodes],
        "jobs": [{**job, "time": wall(at, job["t"])} for job in result.jobs],  # type: ignore[arg-type]
        "workload": workload_summary(result),
        "silent": result.silent,
        "unsure": [
            {"gpu": gpu, "kind": kind, "why": why}
            for (gpu, kind), why in sorted(result.unsure.items(), key=lambda kv: _gpu_order(kv[0][0]))
            if not any(e.gpu == gpu and e.kind == kind for e in result.episodes)
        ],
        "ledger": {gpu: _rounded(states) for gpu, states in result.ledger.items()},
        "job_ledger": {job: _rounded(states) for job, states in result.job_ledger.items()},
        "cost": cost_summary(result),
        "holding_back": [
            {"gpu": gpu, "seconds": round(seconds, 1), "share": round(share, 3)}
            for gpu, seconds, share in holdups(result)
        ],
        "power_envelopes": {
            gpu: {
                "idle_w": None if e.floor_w is None else round(e.floor_w, 1),
                "idle_from": e.floor_from or None,
                "ceiling_w": None if e.ceiling_w is None else round(e.ceiling_w, 1),
                "ceiling_from": e.ceiling_from or None,
            }
            for gpu, e in result.envelopes.items()
        },
        **({"fleet": result.fleet} if result.fleet is not None else {}),
        **({"tracker": result.tracker} if result.tracker is not None else {}),
    }


def _gap_record(stats: ReadStats, line: int, seconds: float) -> dict[str, object]:
    """A gap for --json: the line it ends at, or (a history) the time it ends, from the start and on the
    wall clock."""
    if stats.position == "time":
        return {"t": line, "time": wall(stats.first_timestamp, line), "seconds": round(seconds, 1)}
    return {"line": line, "seconds": round(seconds, 1)}


def workload_summary(result: ReplayResult) -> dict[str, dict[str, object]]:
    """Per GPU, the class its time was judged as most, what decided it, and the share of its judged
    seconds. A class something decided outranks ``training`` by default, whatever its share: the
    seconds before a pipeline's turns or a server's quiet showed were undecided, not training."""
    out: dict[str, dict[str, object]] = {}
    for gpu in sorted(result.classes, key=_gpu_order):
        seconds = result.classes[gpu]
        decided = {key: s for key, s in seconds.items() if key[1]} or seconds
        (kind, source), most = max(decided.items(), key=lambda kv: kv[1])
        undecided = sum(s for key, s in seconds.items() if not key[1])
        out[gpu] = {
            "class": kind or "training",
            "source": source or "default",
            "evidence": result.class_evidence.get((gpu, kind, source)) or "nothing said otherwise",
            "share": round(most / sum(seconds.values()), 3),
            "undecided_share": round(undecided / sum(seconds.values()), 3),
        }
    return out


def workload_lines(result: ReplayResult) -> list[str]:
    """The class each GPU was judged as, GPUs alike on one line."""
    alike: dict[tuple[str, str, str, float], list[str]] = {}
    for gpu, w in workload_summary(result).items():
        share, undecided = float(w["share"]), float(w["undecided_share"])  # type: ignore[arg-type]
        key = (str(w["class"]), str(w["source"]), str(w["evidence"]), share, undecided)
        alike.setdefault(key, []).append(gpu)
    lines = []
    for (kind, source, evidence, share, undecided), gpus in alike.items():
        why = f"{source}: {evidence}" if source != "default" else evidence
        part = ""
        if source != "default" and share < 1:
            rest = ", undecided before" if undecided >= 1 - share - 1e-3 else ""  # shares: 3 decimals
            part = f", {share:.0%} of its time{rest}"
        # nothing decided the class: its time is booked as a training job's, and a starvation page still
        # needs a loop's own evidence (the "not paged" lines say where it had none)
        said = f"judged as {kind}" if source != "default" else f"undecided, booked as {kind}"
        lines.append(f"  GPU {_gpu_list(gpus)}: {said} ({why}){part}")
    return ["workload:", *lines] if lines else []


def cost_summary(result: ReplayResult) -> dict[str, object] | None:
    """What each GPU's and each job's time cost, per ledger state, and the lost states' total (None:
    --price off)."""
    if result.prices is None:
        return None

    def money(states: dict[str, float]) -> dict[str, float]:
        return {state: round(amount, 4) for state, amount in states.items()}

    return {
        "currency": result.prices.currency,
        "price_per_gpu_hour": {gpu: result.prices.of(result.models.get(gpu, "")) for gpu in result.cost},
        "gpus": {gpu: money(states) for gpu, states in result.cost.items()},
        "jobs": {job: money(states) for job, states in result.job_cost.items()},
        "total": round(sum(sum(states.values()) for states in result.cost.values()), 4),
        "lost": round(sum(_lost(states) for states in result.cost.values()), 4),
    }


def _lost(states: dict[str, float]) -> float:
    return sum(amount for state, amount in states.items() if state in LOST_STATES)


def _money(amount: float) -> str:
    return f"{amount:.2f}" if amount >= 0.1 or amount == 0 else f"{amount:.4f}"


def cost_lines(result: ReplayResult) -> list[str]:
    """What each GPU's and each job's time cost, and what of it was lost, by state, largest first."""
    prices = result.prices
    if prices is None or not result.cost:
        return []

    def line(name: str, states: dict[str, float]) -> str:
        lost = sorted(((s, a) for s, a in states.items() if s in LOST_STATES and a > 0), key=lambda x: -x[1])
        text = f"  {name}: {_money(sum(states.values()))}, lost {_money(_lost(states))}"
        return text + (": " + ", ".join(f"{s} {_money(a)}" for s, a in lost) if lost else "")

    lines = [
        f"what the time cost ({prices.currency}; prices per GPU-hour are examples unless --price sets them):"
    ]
    for gpu, states in result.cost.items():
        model = result.models.get(gpu) or "model unknown"
        lines.append(line(f"GPU {gpu} ({model}, {prices.of(result.models.get(gpu, '')):g}/h)", states))
    lines += [
        line(f"job {job}" if job != "node" else "all GPUs", states) for job, states in result.job_cost.items()
    ]
    return lines


def holdups(result: ReplayResult) -> list[tuple[str, float, float]]:
    """The GPUs that held their job back (off-kernel while peers waited for them in a collective) for at
    least the hold-up share of their held time: (gpu, seconds, share), most first."""
    out = []
    for gpu, seconds in result.held_back.items():
        held = sum(s for state, s in result.ledger.get(gpu, {}).items() if state != "free")
        if held > 0 and seconds / held >= HOLDUP_SHARE.value:
            out.append((gpu, seconds, seconds / held))
    return sorted(out, key=lambda x: -x[1])


def _rounded(states: dict[str, float]) -> dict[str, float]:
    return {state: round(seconds, 1) for state, seconds in states.items()}


def gap_text(stats: ReadStats) -> str:
    """The gaps, for a person: where each starts and how long it is (the first few). A history's gaps
    (``position`` "time": seconds from its start) are told by the date and time they end."""

    def where(line: int) -> str:
        if stats.position == "time":
            return _date_time(stats.first_timestamp or 0.0, line)
        return f"{stats.position} {line}"

    shown = [
        f"{_lasting(seconds, seconds >= HOUR_S)} before {where(line)}"
        if seconds >= 0
        else f"a restart {-seconds:.0f} s back at {where(line)}"
        for line, seconds in stats.gaps[:5]
    ]
    more = stats.gap_count - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


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


def dated(result: ReplayResult) -> bool:
    """Its times need their date: it has a clock and its range reaches into another UTC day."""
    first = origin(result.stats)
    if first is None:
        return False
    day = datetime.fromtimestamp(first, tz=UTC).date()
    return day != datetime.fromtimestamp(first + result.seconds, tz=UTC).date()


def _date_time(first: float, t: float) -> str:
    return datetime.fromtimestamp(first + t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _at(result: ReplayResult, t: float) -> str:
    """``t`` s, with its time of day where the trace has one; its date and time (UTC) where the trace
    spans days (a second count from the start, 489345 s, says nothing to a person)."""
    if dated(result):
        return _date_time(origin(result.stats) or 0.0, t)
    clock = _clock(result, t)
    return f"{t:.0f} s ({clock})" if clock else f"{t:.0f} s"


def _lasting(seconds: float, long: bool) -> str:
    """A duration: in seconds, or (``long``: a history of days) in days, hours and minutes from an hour
    up."""
    if not long or seconds < HOUR_S:
        return f"{seconds:.0f} s"
    hours, minutes = divmod(round(seconds / 60), 60)
    days, hours = divmod(hours, 24)
    return (f"{days} d " if days else "") + f"{hours} h {minutes:02d} min"


def _gpu_list(gpus: list[str]) -> str:
    """GPUs for a person: a run of three or more indexes as a range (0-7), a fleet's node by node
    (node-1/0-7, node-2/3)."""
    if any("/" in g for g in gpus):
        by_node: dict[str, list[str]] = {}
        for g in gpus:
            node, _, index = g.rpartition("/")
            by_node.setdefault(node, []).append(index)
        parts = []
        for node in sorted(by_node):
            indexes = _gpu_list(by_node[node])
            if "-" in indexes and indexes.replace("-", "").isdigit():
                parts.append(f"{node}/{indexes}")
            else:
                parts += [f"{node}/{i}" for i in sorted(by_node[node], key=_gpu_order)]
        return ", ".join(parts)
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
    with_episodes = {episode.gpu for episode in result.episodes}
    quiet = [g for g in result.stats.gpus if g not in with_episodes]
    lines = [_headline(result)]
    if result.fleet is not None:  # replay --prometheus: how it was read and the roll-up first
        from exporter.offline.promhistory.rollup import lines as fleet_lines

        lines += fleet_lines(result)
        for node, why in dict(result.fleet.get("failed") or {}).items():  # type: ignore[call-overload]
            lines.append(f"node {node}: NOT READ, left out of everything below ({why})")
        lines.append("per GPU:")
    lines += _episode_lines(result)
    if result.tracker is not None:  # replay of a tracker's run: the run, its step, its progress
        from exporter.offline.trackers.text import lines as tracker_lines

        lines += tracker_lines(result)
    told = unpaged_losses(result, quiet)
    if quiet:
        lines.append(f"  GPU {_gpu_list(quiet)}: no verdict")
    lines += told
    lines += unsure_lines(result)
    lines += _job_lines(result)
    lines += workload_lines(result)
    lines += _reading_lines(result.stats)
    if result.ledger:
        lines += ledger_lines(result)
    lines += _holdup_lines(result)
    lines += cost_lines(result)
    lines += envelope_lines(result)
    lines += next_step_lines(result)
    return "\n".join(lines)


def next_step_lines(result: ReplayResult) -> list[str]:
    """What to do next: the runbook of each verdict kind found (how to confirm it, its likely causes and
    fixes), one line per kind with the causes it carried, in the order the kinds first began."""
    causes: dict[str, list[str]] = {}
    for episode in sorted(result.episodes, key=lambda e: e.start):
        seen = causes.setdefault(episode.kind, [])
        if episode.cause and episode.cause not in seen:
            seen.append(episode.cause)
    if not causes:
        return []
    lines = ["next steps (each runbook says how to confirm the verdict, its likely causes and fixes):"]
    for kind, seen in causes.items():
        named = f"{kind} (cause {', '.join(seen)})" if seen else kind
        lines.append(f"  {named}: {KINDS[kind].runbook()}")
    return lines


def _headline(result: ReplayResult) -> str:
    """The trace, its GPUs, its span and rows, and how it was read."""
    s = result.stats
    span = f"{result.seconds:.1f} s of samples"
    if s.gap_count:
        span = f"{result.sampled_seconds:.1f} s of samples over {result.seconds:.0f} s"
    if dated(result):  # a range of days: read by days and hours
        sampled = _lasting(result.sampled_seconds or result.seconds, True)
        span = f"{sampled} of samples over {_lasting(result.seconds, True)}"
    line = f"{result.path}: {len(s.gpus)} GPU(s), {span}, {s.rows} rows"
    if s.format and s.format != NVIDIA_SMI_CSV:
        line += f" read as {s.format}"
    if s.period is not None:
        line += f" (no times in the log: samples {s.period:g} s apart, --period)"
    if s.first_timestamp is not None and not (s.period is not None and s.first_timestamp == 0):
        start = datetime.fromtimestamp(s.first_timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        line += f", from {start}"
    return line


def episode_groups(result: ReplayResult) -> dict[str, list[list[Episode]]]:
    """Per GPU in GPU order, its episodes by kind (kinds in the order they first began, each kind's in
    the order they began)."""
    by_gpu: dict[str, dict[str, list[Episode]]] = {}
    for episode in sorted(result.episodes, key=lambda e: e.start):
        by_gpu.setdefault(episode.gpu, {}).setdefault(episode.kind, []).append(episode)
    return {gpu: list(by_gpu[gpu].values()) for gpu in sorted(by_gpu, key=_gpu_order)}


def _duration(result: ReplayResult, e: Episode) -> float:
    return (e.end if e.end is not None else result.seconds) - e.start


def worst(result: ReplayResult, episodes: list[Episode]) -> Episode:
    """The episode that lost most time (the first of the longest)."""
    return max(episodes, key=lambda e: _duration(result, e))


def group_line(result: ReplayResult, episodes: list[Episode]) -> str:
    """A GPU's many episodes of one kind in one line: how many, over what time, the time they took, and
    the longest of them told whole."""
    first, last = episodes[0], episodes[-1]
    total = sum(_duration(result, e) for e in episodes)
    ended = _at(result, last.end) if last.end is not None else "the end"
    return (
        f"{len(episodes)} {first.kind} episodes from {_at(result, first.start)} to {ended}, "
        f"{_lasting(total, dated(result))} in all; the longest: "
        + _episode_line(result, worst(result, episodes))
    )


def _episode_lines(result: ReplayResult) -> list[str]:
    """Every GPU's verdict episodes, GPU by GPU in GPU order: a kind's few each on its line, its many
    (more than EPISODES_LISTED: a long history) counted in one line with the longest (every one in
    --json and the --report page)."""
    # GPUs whose episodes read alike (same kind, times, score and cause) share one line
    alike: dict[str, list[str]] = {}
    grouped = False
    for gpu, kinds in episode_groups(result).items():
        for episodes in kinds:
            if len(episodes) > EPISODES_LISTED:
                grouped = True
                alike.setdefault(group_line(result, episodes), []).append(gpu)
                continue
            for e in episodes:
                alike.setdefault(_episode_line(result, e), []).append(gpu)
    lines = [f"  GPU {_gpu_list(gpus)}: {text}" for text, gpus in alike.items()]
    if grouped:
        lines.append(
            f"  (all {len(result.episodes)} episodes one by one: --json's verdicts, or the --report page)"
        )
    return lines


def _episode_line(result: ReplayResult, e: Episode) -> str:
    """One episode, after the GPU it is on."""
    end = e.end if e.end is not None else result.seconds
    until = _at(result, e.end) if e.end is not None else "the end"
    verdict = f"verdict from {_at(result, e.fired_at)}"
    if e.resolved is not None:
        verdict += f" to {_at(result, e.resolved)}"
    text = (
        f"{e.kind} from {_at(result, e.start)} to {until}, "
        f"{_lasting(end - e.start, dated(result))}; {verdict}{peak_text(e.peak)}"
    )
    if e.cause:
        text += f", cause {e.cause}"
    if e.detail:
        text += f" ({e.detail})"
    if KINDS[e.kind].holds_peers_back and e.related:
        waiting = list(e.related)
        many = len(waiting) > 1
        text += f"; GPU{'s' if many else ''} {_gpu_list(waiting)} wait{'' if many else 's'} for it in NCCL"
    return text


def _job_lines(result: ReplayResult) -> list[str]:
    """The job events, and the verdicts this trace cannot give (an input it lacks)."""
    lines = []
    for job in result.jobs:
        gpus = _gpu_list(job["gpus"])  # type: ignore[arg-type]
        when = _at(result, float(job["t"]))  # type: ignore[arg-type]
        lines.append(f"  job event: {job['kind']} on GPUs {gpus} from {when} ({job['cause']})")
    if result.silent:
        lines.append(
            "  silent (inputs missing from this trace): "
            + "; ".join(
                f"{kind} {why}"
                for kind, why in sorted(result.silent.items(), key=lambda kv: NAMES.index(kv[0]))
            )
        )
    return lines


def _reading_lines(s: ReadStats) -> list[str]:
    """What reading the trace left out: unreadable rows, gaps, impossible values."""
    lines = []
    if s.skipped:
        lines.append(f"  {s.skipped} unreadable row(s) skipped")
    if s.gap_count:
        lines.append(f"  {s.gap_count} gap(s) in the samples, each analysed apart: " + gap_text(s))
    if s.clipped:
        lines.append(
            f"  {sum(s.clipped.values())} impossible value(s) read as missing: "
            + ", ".join(f"{column} {count}" for column, count in s.clipped.items())
        )
    return lines


def _holdup_lines(result: ReplayResult) -> list[str]:
    """The GPUs that held their job back, and the GPUs that waited for them."""
    lines = []
    for gpu, seconds, share in holdups(result):
        waiting = [g for g in result.ledger if g != gpu and result.ledger[g].get("comm_wait", 0.0) > 0]
        lines.append(
            f"  GPU {gpu} held its job back for {seconds:.0f} s ({share:.0%} of the time a job was on "
            "it): off-kernel "
            f"while GPUs {_gpu_list(waiting) or 'of its job'} waited for it in collectives"
        )
    return lines


def unpaged_losses(result: ReplayResult, gpus: list[str]) -> list[str]:
    """GPUs without a verdict that still lost the coverage share of their held time to one state (a trace
    too short for a verdict to fire and hold, or a loss spread too thin): say what was seen."""
    # the GPUs each paged rank held back: their collective time was a wait for it, said as such
    waited_for: dict[str, set[str]] = {}
    for e in result.episodes:
        for peer in e.related if e.kind in HOLDS_PEERS_BACK else ():
            waited_for.setdefault(peer, set()).add(e.gpu)
    alike: dict[tuple[str, str], list[tuple[str, float]]] = {}  # GPUs alike on one line
    blamed: dict[tuple[str, str], set[str]] = {}  # ...and the paged GPUs they waited for
    for gpu in sorted(gpus, key=_gpu_order):
        states = result.ledger.get(gpu, {})
        held = sum(s for state, s in states.items() if state != "free")
        lost = {s: v for s, v in states.items() if s not in WORK_STATES and s != "free"}
        if held <= 0 or not lost:
            continue
        state, seconds = max(lost.items(), key=lambda kv: kv[1])
        if seconds / held < COVERAGE_SHARE.value:
            continue
        culprits = waited_for.get(gpu, set()) if state == "comm_wait" else set()
        why = (
            WAITING if culprits else "a verdict needs its evidence to build and hold; see where the time went"
        )
        alike.setdefault((state, why), []).append((gpu, seconds / held))
        blamed.setdefault((state, why), set()).update(culprits)
    lines = []
    for (state, why), members in alike.items():
        if why == WAITING:  # the ranks of every job waiting for their paged peer: one line
            culprits = sorted(blamed[(state, why)], key=_gpu_order)
            why = (
                f"waiting in collectives for GPU {_gpu_list(culprits)}, paged above: not a loss of their own"
            )
        low, high = min(share for _, share in members), max(share for _, share in members)
        share = f"{low:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{low:.0%}-{high:.0%}"
        names = _gpu_list([gpu for gpu, _ in members])
        lines.append(f"  GPU {names}: yet {share} of the time a job was on it went to {state} ({why})")
    return lines


def unsure_lines(result: ReplayResult) -> list[str]:
    """Losses seen that the log's signals could not tell from benign work (no page stood on them): what
    was seen and what would decide it, GPUs alike on one line."""
    paged = {(e.gpu, e.kind) for e in result.episodes}
    alike: dict[tuple[str, str], list[str]] = {}
    for (gpu, kind), why in result.unsure.items():
        if (gpu, kind) in paged:
            continue
        alike.setdefault((kind, why), []).append(gpu)
    return [
        f"  GPU {_gpu_list(gpus)}: {kind} not paged: {why}"
        for (kind, why), gpus in sorted(alike.items(), key=lambda kv: _gpu_order(min(kv[1], key=_gpu_order)))
    ]


def envelope_lines(result: ReplayResult) -> list[str]:
    """Which evidence set each GPU's power envelope (and so how its power reads), GPUs alike grouped."""
    groups: dict[tuple[str, str], list[Envelope]] = {}
    names: dict[tuple[str, str], list[str]] = {}
    for gpu, e in result.envelopes.items():
        key = (e.floor_from, e.ceiling_from)
        groups.setdefault(key, []).append(e)
        names.setdefault(key, []).append(gpu)
    if not groups:
        return []
    lines = ["power envelope (idle floor to ceiling: where power reads as compute or as waiting):"]
    for (floor_from, ceiling_from), envelopes in groups.items():
        ceilings = [e.ceiling_w for e in envelopes if e.ceiling_w]
        if not ceilings:
            gpus = _gpu_list(names[(floor_from, ceiling_from)])
            lines.append(f"  GPU {gpus}: none (no power limit, board name, idle floor or busy draw seen)")
            continue
        floors = [e.floor_w for e in envelopes if e.floor_w is not None]
        floor = f"idle {_watts(floors)} ({floor_from})" if floors else "idle unknown"
        lines.append(
            f"  GPU {_gpu_list(names[(floor_from, ceiling_from)])}: {floor}, "
            f"ceiling {_watts(ceilings)} ({ceiling_from})"
        )
    return lines


def _watts(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.0f} W" if round(low) == round(high) else f"{low:.0f}-{high:.0f} W"
