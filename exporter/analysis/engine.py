"""The analysis engine: windows of points per GPU and for the host, the detectors, job-level reasoning
and the verdict tracks. The same object runs live (fed by the sampler) and in ``replay`` (fed by a
trace on a virtual clock); it never reads a clock or a file itself.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from exporter.analysis import detectors as d
from exporter.analysis.envelope import Envelope, EnvelopeLearner
from exporter.analysis.features import (
    MIN_POINTS,
    GpuFeatures,
    GpuWindow,
    HostFeatures,
    gpu_features,
    host_features,
)
from exporter.analysis.kinds import KINDS, JobCause, JobEvent, Kind, PeerFault, Shared
from exporter.analysis.ledger import (
    GpuLedger,
    Shares,
    Tick,
    holding_back,
    loss_began,
    loss_ended,
    measure,
)
from exporter.analysis.points import GpuPoint, HostPoint
from exporter.analysis.verdicts import Timing, Track, step
from exporter.analysis.window import Window
from exporter.analysis.workload import UNKNOWN, InteractiveShape, ServingShape, Turns, Workload, decide
from exporter.policy.thresholds import (
    COARSE_EVIDENCE_POINTS,
    COVERAGE_CLEAR,
    EVAL_INTERVAL,
    EVIDENCE_WINDOW,
    IDLE_AFTER,
    IDLE_MEMORY,
    LEDGER_BUSY_UTIL,
    LEDGER_FAST_WINDOW,
    LEDGER_STALE,
    LEDGER_STEADY_UTIL,
    LEDGER_WINDOW,
    RANK_STOP,
    SCORE_ENTER,
    SCORE_EXIT,
    SERVING_RESERVED,
    STARVATION_IDLE_FRACTION,
    UTIL_IDLE_LINE,
    VERDICT_INTERVAL,
    WINDOW_POINTS_PER_SECOND,
    board_memory_bytes,
    board_sm_clock_max_hz,
)

_CLEAR = COVERAGE_CLEAR.value
SCORE_DIGITS = 3  # a verdict event carries its score to three decimals: a log line, not a measurement
HOLDS_PEERS_BACK = tuple(k.name for k in KINDS.values() if k.holds_peers_back)
JOB_EVENTS: dict[str, JobEvent] = {k.name: k.job_event for k in KINDS.values() if k.job_event is not None}
# the kinds judged on each scope of entity (see _Gpu.scope); the others get no evidence there
_SCOPES: dict[str, frozenset[str]] = {
    "": frozenset(KINDS),
    **{scope: frozenset(k.name for k in KINDS.values() if k.scope == scope) for scope in ("gpu", "pod")},
}
_NONE = d.Evidence()
# per scope, every kind in the registry's order with its detector, None where it is not judged there
_DETECTORS: dict[str, tuple[tuple[str, Callable[[d.Context], d.Evidence] | None], ...]] = {
    scope: tuple((name, kind.detector if name in judged else None) for name, kind in KINDS.items())
    for scope, judged in _SCOPES.items()
}
# the kinds whose evidence the job's reasoning passes on as it is (``_in_job``): the others' it may drop
_PASSED_ON = frozenset(
    k.name
    for k in KINDS.values()
    if k.job_event is not None
    or k.holds_peers_back
    or (k.explained_by is not JobCause.STRAGGLER and k.peer_fault is None)
)
# each kind in the registry's order: its entry, its enter score, and whether its evidence is passed on
_RULES = tuple((name, kind, kind.timing.enter, name in _PASSED_ON) for name, kind in KINDS.items())
# the kinds that are a loss of time, with the share of the ledger that is theirs: an episode's onset
# and end are read from it
_LOSSES = tuple((name, lost) for name, kind in KINDS.items() if (lost := kind.lost) is not None)
_LOSS = dict(_LOSSES)


@dataclass(slots=True)  # not frozen (never changed): one per kind per GPU per evaluation; frozen costs 3x
class KindState:
    """What a GPU's snapshot says about one verdict kind."""

    score: float
    firing: bool
    cause: str = ""
    since: float | None = None  # while it fires: when its loss began
    seen: str = field(default="", compare=False)  # the cause its evidence names now (``cause`` stays)


@dataclass(frozen=True)
class VerdictEvent:
    t: float
    gpu: str
    kind: str
    state: str  # firing | resolved
    score: float
    cause: str = ""
    related: tuple[str, ...] = ()  # starvation: the peers waiting for this GPU; hang: the GPUs hung with it
    since: float | None = None  # when the loss began (the onset of the evidence that fired it)
    until: float | None = None  # resolved: when the loss stopped (its evidence cleared)

    def describe(self) -> str:
        cause = f", cause {self.cause}" if self.cause else ""
        began = ""
        if self.state == "firing" and self.since is not None and self.since < self.t:
            began = f", its loss began {self.t - self.since:.0f} s ago"
        elif self.until is not None and self.until < self.t:
            began = f", its loss stopped {self.t - self.until:.0f} s ago"
        return f"GPU {self.gpu}: {self.kind} {self.state} (score {self.score:.2f}{cause}{began})"


@dataclass
class _Gpu:
    window: GpuWindow
    name: str = ""
    slowdown_c: float | None = None
    board_bytes: float | None = None  # the framebuffer its name states, for logs without memory.total
    # the highest SM clock it runs at, for logs without clocks.max.sm: its board's (by name), or the
    # highest it showed under load where that is higher or the board is not known
    clock_top: float | None = None
    group: str = "node"
    idle_since: float | None = None
    idle_known: bool = False
    emptied: bool = False  # a sample without a kernel came while it held memory (or no memory was logged)
    power: EnvelopeLearner = field(default_factory=EnvelopeLearner)  # its idle floor and busy draw
    tracks: dict[str, Track] = field(default_factory=lambda: {kind: Track() for kind in KINDS})
    features: GpuFeatures = field(default_factory=GpuFeatures)
    ledger: GpuLedger = field(default_factory=GpuLedger)
    ticked: float | None = None  # the last second the ledger took
    held: bool = False  # did a job hold it at the last tick
    shares: tuple[Shares, Shares, Shares] = (Shares(), Shares(), Shares())
    active_at: float | None = None  # the last second it worked or sat in a collective
    serving: ServingShape = field(default_factory=ServingShape)
    interactive: InteractiveShape = field(default_factory=InteractiveShape)
    workload: Workload = UNKNOWN
    undecided: bool = False  # it looks like a server or a notebook, not yet for long enough
    turns: bool = False  # its job's GPUs take turns like a pipeline's stages, not yet for long enough
    waiting: float | None = None  # requests its server last reported waiting
    # what it stands for: "" a whole GPU (every kind judged), "gpu" a GPU split between pods (its own
    # kinds only), "pod" one pod's share of a split GPU (the kinds whose loss is the pod's)
    scope: str = ""
    # per kind of loss, the last judgement whose evidence window lost under the clear share to it (the
    # condition had ended), and the last whose window lost that share or more: where its runs begin and end
    clean: dict[str, float] = field(default_factory=dict)
    dirty: dict[str, float] = field(default_factory=dict)
    # its current run off its kernels while the other ranks of its job wait for it in their collective:
    # seconds, ticks with samples, and whether it is the job's first rank (where synchronous saves run)
    stop_run_s: float = 0.0
    stop_ticks: int = 0
    first_rank: bool = False


class Analyzer:
    def __init__(
        self,
        window_s: float = EVIDENCE_WINDOW.value,
        evidence_s: float = EVIDENCE_WINDOW.value,
        step: float = EVAL_INTERVAL.value,
    ) -> None:
        # ``step``: the seconds between the samples and between evaluations. Coarser than the clock (a
        # Prometheus' scrapes), each sample stands for its step and the window holds enough of them.
        self.step = step
        self._fine = step <= EVAL_INTERVAL.value  # samples finer than the work's steps (a live node, a log)
        self.stale_s = max(LEDGER_STALE.value, step)
        evidence_s = max(evidence_s, COARSE_EVIDENCE_POINTS.value * step)
        self.window_s = max(window_s, evidence_s)
        self.evidence_s = evidence_s
        # a coarse step with two samples or more to the evidence window's half-minute: the waits of that
        # half-minute must show in two samples (one may be a pause); coarser, it holds one, read as it is
        self._half_minute_samples = EVAL_INTERVAL.value < step <= EVIDENCE_WINDOW.value / d.RECURS
        # Coarser than the clock, a verdict resolves only once its evidence has been absent for a whole
        # evidence window: until then the window still holds the loss's samples, and a sample or two
        # without evidence is one reading of a pattern the step cannot resolve, not the loss's end.
        self._timings = {
            name: _coarse(kind.timing, evidence_s) if step > EVAL_INTERVAL.value else kind.timing
            for name, kind in KINDS.items()
        }
        # points a window holds at most: rows that share one time are never evicted by time
        self.max_points = math.ceil(self.window_s * WINDOW_POINTS_PER_SECOND.value)
        self._gpus: dict[str, _Gpu] = {}
        self._behind: set[str] = set()  # GPUs judged starving behind their waiting peers at this judgement
        self._stopping: set[str] = set()  # ranks judged stopped while their peers wait, at this judgement
        self.host_window: Window[HostPoint] = Window(self.window_s, self.max_points)
        self.host_features = HostFeatures()
        self.missing: dict[str, str] = {}  # kind -> why its detector was silent (while it has been)
        self.had_inputs: set[str] = set()  # kinds whose detector saw its inputs at least once
        # (gpu, kind) -> the last loss seen that the signals present could not tell from benign work, and
        # what would decide it (no page stood on it); kept for the summary, replaced as evidence comes
        self.unsure: dict[tuple[str, str], str] = {}
        self.details: dict[tuple[str, str], str] = {}  # (gpu, kind) -> its evidence's latest detail
        # (gpu, kind) -> the signals its latest evidence at the enter score stood on
        self.signals: dict[tuple[str, str], tuple[str, ...]] = {}
        # the last judgement: when, of which GPUs, and its verdicts (they stand until the next one)
        self._judged_at: float | None = None
        self._judged_gpus: list[str] = []
        self._judged: dict[str, dict[str, KindState]] = {}
        self._hints: dict[str, Workload] = {}  # job -> what it says it is (flag, log, name)
        self._turns: dict[str, Turns] = {}  # job -> its GPUs' utilization second by second

    # ---- input ---------------------------------------------------------------------------------

    def _gpu(self, gpu: str) -> _Gpu:
        state = self._gpus.get(gpu)
        if state is None:
            state = self._gpus[gpu] = _Gpu(
                window=GpuWindow(self.window_s, self.max_points), ledger=GpuLedger(stale_s=self.stale_s)
            )
        return state

    def set_identity(self, gpu: str, name: str = "", slowdown_c: float | None = None) -> None:
        state = self._gpu(gpu)
        state.name, state.slowdown_c = name or state.name, slowdown_c or state.slowdown_c
        state.board_bytes = board_memory_bytes(state.name)
        state.clock_top = max(state.clock_top or 0.0, board_sm_clock_max_hz(state.name) or 0.0) or None

    def set_group(self, gpu: str, group: str) -> None:
        """GPUs of one job (pod); the node is one group until pod labels exist."""
        self._gpu(gpu).group = group

    def set_split(self, gpu: str, split: bool) -> None:
        """A GPU shared by pods (time-slicing) is judged for its own kinds only while split: the pods'
        losses are judged on their shares (``set_share``), so a starving pod pages once, as itself."""
        self._gpu(gpu).scope = "gpu" if split else ""

    def set_share(self, entity: str, share: float, stale_s: float) -> None:
        """``entity`` is one pod's share of a split GPU: ``share`` of its wall time is booked to it, and
        each of its points stands ``stale_s`` (they come with the processes' slow reads)."""
        state = self._gpu(entity)
        state.scope = "pod"
        state.ledger.share, state.ledger.stale_s = share, stale_s

    def forget(self, entity: str) -> None:
        """Drop an entity for good (a pod that left a shared GPU): its ledger and verdicts go with it."""
        if self._gpus.pop(entity, None) is not None:
            self._judged_at = None

    def set_workload(self, group: str, hint: Workload | None) -> None:
        """What a job says it is (``--workload``, its pod's log or name); None: it says nothing."""
        if hint is None or not hint.kind:
            self._hints.pop(group, None)
        else:
            self._hints[group] = hint

    def set_workloads(self, hints: Mapping[str, Workload | None]) -> None:
        """What every job now on the node says it is: jobs gone are forgotten (pods come and go)."""
        self._hints = {group: hint for group, hint in hints.items() if hint is not None and hint.kind}

    def workload(self, gpu: str) -> Workload:
        """The class the GPU's time is judged as, and what decided it."""
        return self._gpu(gpu).workload

    def add_gpu_points(self, gpu: str, points: Iterable[GpuPoint]) -> None:
        state = self._gpu(gpu)
        for p in points:
            if p.sm_clock_hz and not p.sm_clock_max_hz:
                p = self._clock_ceiling(state, p)
            state.window.add(p)
            self._track_idle(state, p)

    @staticmethod
    def _clock_ceiling(state: _Gpu, p: GpuPoint) -> GpuPoint:
        """A point of a log without clocks.max.sm, given its board's highest clock: the table's by its
        name, or the highest it has shown under load (a log that starts capped and names no board reads
        its clocks as full until it shows more)."""
        if (p.util or 0.0) >= LEDGER_BUSY_UTIL.value and p.sm_clock_hz > (state.clock_top or 0.0):
            state.clock_top = p.sm_clock_hz
        return replace(p, sm_clock_max_hz=state.clock_top) if state.clock_top else p

    @staticmethod
    def _track_idle(state: _Gpu, p: GpuPoint) -> None:
        """Idle-with-memory runs outlast the window, so they are followed point by point."""
        if p.util is None:
            return
        if p.util < UTIL_IDLE_LINE.value and (
            p.mem_used_bytes is None or p.mem_used_bytes >= IDLE_MEMORY.value
        ):
            state.emptied = True
        if p.mem_used_bytes is None:
            return
        state.idle_known = True
        if p.util < UTIL_IDLE_LINE.value and p.mem_used_bytes >= IDLE_MEMORY.value:
            if state.idle_since is None:
                state.idle_since = p.t
        else:
            state.idle_since = None

    @staticmethod
    def _see_power(state: _Gpu, f: GpuFeatures) -> None:
        if (f.util_mean or 0.0) >= LEDGER_BUSY_UTIL.value and f.n >= MIN_POINTS and f.power_p95 is not None:
            state.power.see_busy(f.power_p95)

    def envelope(self, gpu: str) -> Envelope:
        """The GPU's power envelope as learned so far."""
        state = self._gpu(gpu)
        return state.power.envelope(state.name)

    def add_host_point(self, point: HostPoint) -> None:
        self.host_window.add(point)

    def reset(self, gpu: str) -> None:
        """Forget a GPU's samples (it came back after being lost); its verdicts resolve."""
        state = self._gpu(gpu)
        state.window.clear()
        state.idle_since = None
        state.ledger.forget_run()
        self._judged_at = None  # judged afresh at the next evaluation

    def window(self, gpu: str) -> Window[GpuPoint]:
        return self._gpu(gpu).window

    def features(self, gpu: str) -> GpuFeatures:
        return self._gpu(gpu).features

    def ledger(self, gpu: str) -> GpuLedger:
        return self._gpu(gpu).ledger

    def flush_ledgers(self) -> None:
        """The end of a trace: commit every held-back second as it stands."""
        for state in self._gpus.values():
            state.ledger.forget_run()

    def gpus(self) -> list[str]:
        return list(self._gpus)

    def group_of(self, gpu: str) -> str:
        return self._gpu(gpu).group

    # ---- the ledger ----------------------------------------------------------------------------

    def _tick_ledgers(self, now: float, chosen: list[str]) -> None:
        """Give each GPU's last second its states: measure every GPU, then judge each in its job."""
        gpus = self._gpus
        ticks: dict[str, Tick] = {}
        groups: dict[str, list[str]] = {}
        for gpu in chosen:
            groups.setdefault(gpus[gpu].group, []).append(gpu)
        for gone in self._turns.keys() - groups.keys():  # a job that left: its turns go with it
            del self._turns[gone]
        recent = now - EVIDENCE_WINDOW.value  # a GPU active since is a peer (``_active``)
        for group, members in groups.items():
            # a collective needs a peer that works or waits in one too: GPUs that only hold memory
            # (a resident model nobody uses) are no peers to wait for
            states = [gpus[g] for g in members]
            active = sum(s.held and s.active_at is not None and s.active_at > recent for s in states)
            job_ticks: dict[str, Tick] = {}  # the members measured, in their order
            for gpu, state in zip(members, states, strict=True):
                tick = self._measure(state, now, active, recent)
                if tick is not None:
                    ticks[gpu] = job_ticks[gpu] = tick
            for gpu in holding_back(job_ticks):
                ledger = gpus[gpu].ledger
                ledger.held_back_s += job_ticks[gpu].span * ledger.share
            held = {g: t for g, t in job_ticks.items() if t.span > 0 and t.held}  # the job's held GPUs
            self._classify(group, now, members, job_ticks, held)
            self._commit_job(now, job_ticks, held)

    def _commit_job(self, now: float, job_ticks: dict[str, Tick], held: dict[str, Tick]) -> None:
        """Commit one job's second to its GPUs' ledgers, each judged with the job's other GPUs."""
        gpus, idle_line = self._gpus, UTIL_IDLE_LINE.value
        job = list(held.values())
        stopped = bool(job) and all(t.stopped for t in job)
        quiet = stopped and not any(t.off_kernel for t in job)
        # ranks in a collective while others are off their kernels wait for those ranks: the pause is
        # theirs (a save, a stall), the collective time a wait, not the job's own pause on every rank
        waited_for = stopped and not quiet and not all(t.off_kernel for t in job)
        alone = len(job) < 2
        # the job's first rank: where a synchronous save runs while the others wait at a barrier
        lead = min(held, key=rank_order) if not alone else None
        first = lead if waited_for else None
        # a second with the shape of a save: the first rank alone off its kernels while the others hold a
        # kernel resident (pinned: at a barrier's all-reduce), so not starving with it (every rank off
        # together reads the same as every rank starving, where samples are coarser than the work)
        pinned = lead is not None and all((t.util or 0.0) >= d.PINNED for g, t in held.items() if g != lead)
        for gpu, tick in job_ticks.items():
            state = gpus[gpu]
            state.held = tick.span > 0 and tick.held
            if tick.work + tick.comm_quiet > idle_line * tick.span:
                state.active_at = now
            out = waited_for and tick.on_host  # off its kernels while its peers wait for it
            _count_stop(state, tick, out, gpu == first)
            # the job's pause is a save on its first rank; any other rank the job waits for stopped on its
            # own: its seconds are its input's, not a checkpoint's
            together = stopped and not (out and gpu != first)
            save = gpu == lead and pinned and tick.on_host
            state.ledger.commit(tick, together, quiet, alone, _idle_gaps(state), waited_for, save)

    def _measure(self, state: _Gpu, now: float, active: int, recent: float) -> Tick | None:
        """The GPU's second up to ``now`` from its new points (None: it was measured up to ``now``);
        ``active``: the GPUs of its job active since ``recent``, itself included."""
        start = state.ticked if state.ticked is not None else now - self.step
        if now <= start:
            return None
        fresh: list[GpuPoint] = []  # the window's points in (start, now], walked back from the newest
        for p in reversed(state.window):
            t = p.t
            if t <= start:
                break
            if t <= now:
                fresh.append(p)
        fresh.reverse()
        if fresh:  # after a hole in the data (a lost GPU, a gap in a log) count from the samples
            start = max(start, fresh[0].t - self.stale_s)
        points = state.ledger.points_for(fresh, now)
        peers = active - (1 if state.held and state.active_at is not None and state.active_at > recent else 0)
        power = state.power
        power.see(points)
        tick = measure(points, start, now, peers, power.envelope(state.name), state.slowdown_c)
        state.ticked = now
        return tick

    @staticmethod
    def _active(state: _Gpu, now: float) -> bool:
        return state.active_at is not None and state.active_at > now - EVIDENCE_WINDOW.value

    def _classify(
        self, group: str, now: float, members: list[str], ticks: dict[str, Tick], held: dict[str, Tick]
    ) -> None:
        """The job's class this second: its word, its turns, each GPU's server shape (``ticks``: its
        members measured this second, ``held``: those of them a job held)."""
        turns = self._turns.setdefault(group, Turns())
        # who is busy when shows only where samples are finer than the work: a history's scrape reads
        # every GPU of a node at one instant, so its samples would meet at every step
        fine = self.step <= EVAL_INTERVAL.value
        turns.see(
            now,
            {g: t.util or 0.0 for g, t in held.items()},
            {g: t.busy_at if fine else () for g, t in held.items()},
            max((t.samples for t in held.values()), default=0),
        )
        pipeline = turns.workload()
        pending = pipeline is None and turns.pending()
        hint = self._hints.get(group)
        in_collective = [g for g, t in held.items() if t.in_collective]
        for gpu in members:
            state, tick = self._gpus[gpu], ticks.get(gpu)
            if tick is not None and tick.span > 0:
                peers_wait = any(g != gpu for g in in_collective)
                total = tick.mem_total or state.board_bytes
                state.serving.see(now, tick.mem_bytes, total, tick.stopped, tick.span, peers_wait)
                alone = tick.held and len(members) == 1
                state.interactive.see(now, tick.stopped, tick.span, alone, tick.drawn, tick.at_floor)
                state.waiting = tick.waiting
            shape = state.serving.workload() or state.interactive.workload(now)
            state.workload = decide(hint, pipeline, shape, state.serving.unknown())
            state.turns = not state.workload.kind and pending
            state.undecided = not state.workload.kind and (
                state.serving.pending(now) or state.interactive.pending(now)
            )

    # ---- evaluation ----------------------------------------------------------------------------

    def evaluate(
        self, now: float, gpus: Iterable[str] | None = None
    ) -> tuple[dict[str, dict[str, KindState]], list[VerdictEvent]]:
        """Verdict states of the given GPUs (default: all) at time ``now``, and the changes. Every call
        takes the ledgers' seconds; the verdicts are judged every VERDICT_INTERVAL, and between two
        judgements the last one's stand (with no changes)."""
        chosen = list(self._gpus) if gpus is None else [g for g in gpus if g in self._gpus]
        self._tick_ledgers(now, chosen)
        if not self._judging_due(now, chosen):  # the verdicts of the last judgement stand
            return self._judged, []
        cutoff = now - self.evidence_s
        self.host_window.evict(now)
        host_points = self.host_window.since(cutoff)
        host = host_features(host_points) if host_points else None
        self.host_features = host or HostFeatures()
        evidence: dict[str, dict[str, d.Evidence]] = {}
        contexts: dict[str, d.Context] = {}
        held: dict[str, int] = {}
        had_inputs = self.had_inputs
        for gpu in chosen:
            state = self._gpus[gpu]
            held[state.group] = held.get(state.group, 0) + state.held
        for gpu in chosen:
            state = self._gpus[gpu]
            state.window.evict(now)
            points = state.window.since(cutoff)
            envelope = state.power.envelope(state.name)
            f = state.features = gpu_features(points, state.name, envelope.ceiling_w, state.window)
            self._see_power(state, f)
            idle_s = (
                (now - state.idle_since if state.idle_since is not None else 0.0)
                if state.idle_known
                else None
            )
            state.shares = state.ledger.shares(now)
            recent, fast, slow = state.shares
            self._mark(state, recent, now)
            pauses, longest_pause, pause_saved = state.ledger.pauses(now)
            paused = (
                state.ledger.paused_since(now - EVIDENCE_WINDOW.value, now) if state.ledger.long_runs else 0.0
            )
            ctx = d.Context(  # positional, in the fields' order: made for every GPU every evaluation
                f,  # f
                host,  # host
                recent,  # recent
                fast,  # fast
                slow,  # slow
                idle_s,  # idle_s
                IDLE_AFTER.value,  # idle_horizon_s
                state.slowdown_c,  # slowdown_c
                pauses,  # pauses
                longest_pause,  # longest_pause_s
                held.get(state.group, 0) - (1 if state.held else 0),  # peers
                _silent(points, now),  # silent_s
                state.workload.kind,  # workload
                _idle_gaps(state),  # idle_gaps
                state.undecided,  # undecided
                _server_memory(f, state.board_bytes),  # server_memory
                envelope.ceiling_from.endswith("idle floor"),  # ceiling_guessed
                state.turns,  # turns
                state.interactive.periodic(),  # loop
                state.emptied,  # emptied
                # observed (a coarse history's samples stand for their steps: a hole leaves the window bare)
                self.step <= EVAL_INTERVAL.value or fast.counted_s >= LEDGER_FAST_WINDOW.value / 2,
                paused,  # paused_recent_s
                _waits_seen(points) if self._half_minute_samples else -1,  # waits_seen
                pause_saved,  # pause_saved
                self.step > EVAL_INTERVAL.value,  # coarse
                state.ledger.run_s if state.ledger.run_save else 0.0,  # saving_s
            )
            contexts[gpu] = ctx
            own = evidence[gpu] = {}
            for kind, detector in _DETECTORS[state.scope]:
                if detector is None:  # not judged on this scope
                    own[kind] = _NONE
                    continue
                ev = own[kind] = detector(ctx)
                if ev.detail:
                    self.details[(gpu, kind)] = ev.detail
                if ev.signals and ev.score >= SCORE_ENTER.value:
                    self.signals[(gpu, kind)] = ev.signals
                if ev.unsure:
                    self.unsure[(gpu, kind)] = ev.unsure
                elif ev.score >= SCORE_ENTER.value:  # evidence that tells it apart came since
                    self.unsure.pop((gpu, kind), None)
                if kind in had_inputs:  # (a kind that had its inputs is never missing)
                    continue
                if ev.missing:
                    self.missing[kind] = ev.missing
                else:
                    had_inputs.add(kind)
                    self.missing.pop(kind, None)
        if self.step > EVAL_INTERVAL.value:
            self._starved_among_peers(now, chosen, contexts, evidence)
        else:  # coarse samples are read at different instants: ranks starving together differ by chance
            self._paced_by_peers(chosen, contexts, evidence)
        self._stopped_ranks(chosen, contexts, evidence)
        verdicts, events = self._decide(now, chosen, evidence)
        self._judged_at, self._judged_gpus, self._judged = now, chosen, verdicts
        return verdicts, events

    def _mark(self, state: _Gpu, recent: Shares, now: float) -> None:
        """Whether each kind's loss held in the evidence window, as the coverage rule judges that its
        condition has ended (under the clear share of half a window or more observed)."""
        if recent.counted_s < EVIDENCE_WINDOW.value / 2:
            return
        clean, dirty, line = state.clean, state.dirty, _CLEAR
        for name, lost in _LOSSES:
            if lost(recent) < line:
                clean[name] = now
            else:
                dirty[name] = now

    def _onset(self, state: _Gpu, kind: str, now: float, track: Track, lasting_s: float) -> float:
        """When a verdict firing at ``now`` began to lose time: the start of its loss's run in the ledger
        (``loss_began``, reaching back at most the ledger window before its evidence) or of the condition
        its detector times (``lasting_s``), or when its evidence reached the enter score where that was
        earlier or neither tells (a forecast, a link down, a filling volume)."""
        began = now if track.pending_since is None else track.pending_since
        if lasting_s > 0:
            began = min(began, now - lasting_s)
        lost = _LOSS.get(kind)
        if lost is not None:
            ledger = state.ledger
            run = loss_began(
                ledger.losses(lost),
                state.clean.get(kind),
                ledger.first_t,
                EVIDENCE_WINDOW.value,
                ledger.working_since,
            )
            if run is not None and run < began:
                # never past the evidence that fired it: the ledger window the detectors read (or, at a
                # coarse step, the evidence window of so many of the source's own steps) before it
                began = max(run, began - max(LEDGER_WINDOW.value, self.evidence_s))
        return began

    def loss_end(self, gpu: str, kind: str) -> float | None:
        """When the loss of a verdict still firing stopped, where its evidence window has since lost under
        the clear share (a trace that ends before the verdict resolves); None: still losing, or not told."""
        state = self._gpus.get(gpu)
        lost = _LOSS.get(kind)
        if state is None or lost is None:
            return None
        clean, dirty = state.clean.get(kind), state.dirty.get(kind)
        if clean is None or dirty is None or clean < dirty:
            return None
        return loss_ended(state.ledger.losses(lost), dirty)

    def _loss_end(self, state: _Gpu, kind: str, now: float, track: Track, clearing: float | None) -> float:
        """When the loss of a verdict resolving at ``now`` stopped: the end of its run in the ledger
        (``loss_ended``), else when its evidence fell under the exit score; never before it began."""
        end = None
        lost = _LOSS.get(kind)
        if lost is not None:
            end = loss_ended(state.ledger.losses(lost), state.dirty.get(kind))
        if end is None or (track.since is not None and end < track.since):
            end = now if clearing is None else clearing
        return min(now, max(end, track.since if track.since is not None else end))

    def _paced_by_peers(
        self, chosen: list[str], contexts: dict[str, d.Context], evidence: dict[str, dict[str, d.Evidence]]
    ) -> None:
        """A GPU held by a job whose peer computes at a pace well above its own, not waiting in a
        collective, waits for that peer (``detectors.paced_by_peer``): its starvation evidence is held
        under the exit score, and replay says what it waits for."""
        held = [g for g in chosen if self._gpus[g].held]
        for members in self._whole_gpu_jobs(held).values():
            for gpu in members:
                starving = [k for k in HOLDS_PEERS_BACK if evidence[gpu][k].score >= SCORE_EXIT.value]
                if len(members) < 2 or not starving:
                    continue
                paced = d.paced_by_peer(contexts[gpu], {g: contexts[g] for g in members if g != gpu})
                for kind in starving if paced else ():
                    ev = evidence[gpu][kind]
                    evidence[gpu][kind] = replace(ev, score=min(ev.score, d.FADED), unsure=paced)
                    self.unsure[(gpu, kind)] = paced

    def _whole_gpu_jobs(self, gpus: list[str]) -> dict[str, list[str]]:
        """``gpus`` by job, whole GPUs only: a pod's share of a GPU has no collective peers."""
        groups: dict[str, list[str]] = {}
        for gpu in gpus:
            if self._gpus[gpu].scope == "":
                groups.setdefault(self._gpus[gpu].group, []).append(gpu)
        return groups

    def _starved_among_peers(
        self,
        now: float,
        chosen: list[str],
        contexts: dict[str, d.Context],
        evidence: dict[str, dict[str, d.Evidence]],
    ) -> None:
        """Coarse samples: a rank of a job whose peers, at least two and most of the others, wait in
        collectives is judged by its utilization against theirs (``detectors.starved_among_peers``)."""
        self._behind.clear()
        for members in self._whole_gpu_jobs(chosen).values():
            waiting = [
                g for g in members if d.waiting_in_collective(contexts[g].f, contexts[g].recent, fine=False)
            ]
            behind: dict[str, float] = {}  # the ranks not waiting, with their peers' mean utilization
            for gpu in members:
                peers = [g for g in waiting if g != gpu]
                if gpu in waiting or len(peers) < 2 or 2 * len(peers) <= len(members) - 1:
                    continue
                behind[gpu] = statistics.fmean(contexts[g].f.util_mean or 0.0 for g in peers)
            deficit = {g: util - (contexts[g].f.util_mean or 0.0) for g, util in behind.items()}
            first = min(members, key=rank_order)
            furthest = max(deficit.values(), default=0.0)
            for gpu, peers_util in behind.items():
                # a synchronous job waits for its slowest ranks: one far less behind is not waited for
                if deficit[gpu] < d.WAITED_FOR * furthest:
                    continue
                under = peers_util - STARVATION_IDLE_FRACTION.value
                points = self._gpus[gpu].window.since(now - self.evidence_s)
                behind = [p.t for p in points if p.util is not None and p.util <= under]
                ledger = self._gpus[gpu].ledger
                if gpu == first and behind and all(ledger.in_save(t) for t in behind):
                    continue  # one pause of the job's first rank (a save): judged by its length, as when fine
                behind_in = len(behind)
                ev = d.starved_among_peers(contexts[gpu], peers_util, behind_in)
                if ev.score >= SCORE_ENTER.value:
                    self._behind.add(gpu)
                for kind in HOLDS_PEERS_BACK:  # the kind whose GPU its peers wait for
                    if ev.score > evidence[gpu][kind].score:
                        evidence[gpu][kind] = ev

    def _stopped_ranks(
        self, chosen: list[str], contexts: dict[str, d.Context], evidence: dict[str, dict[str, d.Evidence]]
    ) -> None:
        """A rank off its kernels for RANK_STOP, in two samples or more, while the other ranks of its job
        wait for it in their collective, has stopped (``detectors.stopped_rank``) unless it is the job's
        first rank: a save there looks the same while it lasts, and the coverage rule judges it (replay
        says so). Never on a class whose gaps are idle capacity."""
        self._stopping.clear()
        jobs: dict[str, list[str]] | None = None  # made when a GPU first needs its job's members
        for gpu in chosen:
            state = self._gpus[gpu]
            run = state.stop_run_s
            if state.scope or run < RANK_STOP.value or state.stop_ticks < d.RECURS:
                continue
            c = contexts[gpu]
            if c.idle_gaps:
                continue  # the class said so (its silenced verdict says why)
            jobs = jobs if jobs is not None else self._whole_gpu_jobs(chosen)
            waiting = tuple(g for g in self._waiting(jobs.get(state.group, [])) if g != gpu)
            if not waiting:
                continue
            if state.first_rank:
                for kind in HOLDS_PEERS_BACK:
                    if evidence[gpu][kind].score < SCORE_ENTER.value:
                        self.unsure[(gpu, kind)] = _first_rank_stop(run, waiting)
                continue
            ev = d.stopped_rank(c, run, waiting)
            self._stopping.add(gpu)
            for kind in HOLDS_PEERS_BACK:
                # its cause says more than a rank behind its peers at a coarse step, whatever that scored
                self.details[(gpu, kind)] = ev.detail
                evidence[gpu][kind] = replace(ev, score=max(ev.score, evidence[gpu][kind].score))

    def _judging_due(self, now: float, chosen: list[str]) -> bool:
        """Verdicts are judged every VERDICT_INTERVAL (steps of EVAL_INTERVAL; half a step of slack for a
        live clock's jitter), and at once when the GPUs judged change or a GPU was reset."""
        last = self._judged_at
        return (
            last is None
            or chosen != self._judged_gpus
            or not last <= now < last + VERDICT_INTERVAL.value - EVAL_INTERVAL.value / 2
        )

    def _decide(
        self, now: float, chosen: list[str], evidence: dict[str, dict[str, d.Evidence]]
    ) -> tuple[dict[str, dict[str, KindState]], list[VerdictEvent]]:
        groups: dict[str, list[str]] = {}
        for gpu in chosen:
            groups.setdefault(self._gpus[gpu].group, []).append(gpu)
        out: dict[str, dict[str, KindState]] = {}
        events: list[VerdictEvent] = []
        for members in groups.values():
            job: _Job | None = None  # the job's reasoning, made when a track first needs it
            for gpu in members:
                tracks, own = self._gpus[gpu].tracks, evidence[gpu]
                states = out[gpu] = {}
                for name, kind, enter, passed_on in _RULES:
                    score, track = own[name].score, tracks[name]
                    if (
                        not track.firing
                        and track.pending_since is None
                        and score < enter
                        and (passed_on or not score)
                    ):
                        # evidence under the enter score on a track at rest, as the job's reasoning would
                        # judge it (it passes it on, or there is none to drop): ``step`` leaves the track
                        # at rest, so the same state without either
                        track.score = score
                        states[name] = KindState(score, False, "")
                        continue
                    if job is None:  # before any track of the job steps: it reads their firing
                        job = self._job(members, evidence)
                    states[name] = self._step(now, gpu, kind, job, events)
        return out, events

    def _job(self, members: list[str], evidence: dict[str, dict[str, d.Evidence]]) -> _Job:
        """The job-level reasoning over one job's evidence (once per job, not per rank)."""
        return _Job(
            members,
            evidence,
            self._holding_back(members, evidence),
            self._waiting(members),
            {kind: _shown(kind, rule, members, evidence) for kind, rule in JOB_EVENTS.items()},
        )

    def _holding_back(self, members: list[str], evidence: dict[str, dict[str, d.Evidence]]) -> list[str]:
        """Ranks off-kernel a good part of the time (a kind that holds its peers back, or still starting
        up): their peers' collective waits are waits for them."""
        return [
            g
            for g in members
            if any(
                evidence[g][k].score >= SCORE_ENTER.value or self._gpus[g].tracks[k].firing
                for k in HOLDS_PEERS_BACK
            )
            or _off_kernel(self._gpus[g].shares[0]) >= STARVATION_IDLE_FRACTION.value
        ]

    def _step(self, now: float, gpu: str, kind: Kind, job: _Job, events: list[VerdictEvent]) -> KindState:
        """One kind's verdict on one GPU, its evidence judged within its job."""
        judged = self._in_job(gpu, kind, job)
        score = judged.evidence.score
        state = self._gpus[gpu]
        track = state.tracks[kind.name]
        clearing = track.clearing_since  # (a resolving step forgets it)
        hold = judged.hold
        if gpu in self._behind and kind.holds_peers_back:
            hold = 0.0  # behind its peers in two samples or more: already held longer than any hold
        resolve = None
        if kind.holds_peers_back:
            if gpu in self._stopping:
                hold = 0.0  # stopped for RANK_STOP already: the run is its hold
            elif track.firing and track.with_condition:
                if score >= kind.timing.enter:
                    track.with_condition = False  # a lasting loss of its own holds it now
                else:
                    score, resolve = 0.0, 0.0  # it stood on the stop alone, and the stop ended
        change = step(track, score, judged.cause, now, self._timings[kind.name], hold, resolve)
        if change == "firing" and kind.holds_peers_back and gpu in self._stopping:
            track.with_condition = True
        if change:
            until = None
            if change == "firing":
                track.since = self._onset(state, kind.name, now, track, judged.evidence.lasting_s)
            else:
                until = self._loss_end(state, kind.name, now, track, clearing)
            rounded = round(score, SCORE_DIGITS)
            events.append(
                VerdictEvent(
                    now, gpu, kind.name, change, rounded, track.cause, judged.related, track.since, until
                )
            )
        if track.firing:
            return KindState(score, True, track.cause, track.since, judged.cause)
        return KindState(score, False, "", None, judged.cause)

    def _in_job(self, gpu: str, kind: Kind, job: _Job) -> _Judged:
        """The GPU's evidence of a kind, seen with its job's (the kind's entry says how)."""
        ev = job.evidence[gpu][kind.name]
        if kind.job_event is not None:
            return _job_event(gpu, kind.name, job)
        if kind.holds_peers_back:  # the peers waiting in collectives wait for this GPU
            return _Judged(ev, ev.cause, related=tuple(g for g in job.waiting if g != gpu))
        if kind.explained_by is JobCause.STRAGGLER:
            culprits = tuple(g for g in job.holding_back if g != gpu)
            if culprits:
                return _Judged(d.Evidence(), ev.cause, related=culprits)
        if kind.peer_fault is not None and ev.cause == kind.peer_fault.cause:
            return self._peer_fault(gpu, kind.name, kind.peer_fault, job)
        return _Judged(ev, ev.cause)

    def _waiting(self, members: list[str]) -> list[str]:
        """The GPUs of a job waiting in collectives: found once per job, not once per GPU it may be for."""
        return [
            g
            for g in members
            if d.waiting_in_collective(self._gpus[g].features, self._gpus[g].shares[0], self._fine)
        ]

    def _peer_fault(self, gpu: str, kind: str, fault: PeerFault, job: _Job) -> _Judged:
        """Not this GPU's fault when peers with the explaining causes account for all it involves."""
        ev = job.evidence[gpu][kind]
        broken = tuple(
            g for g in job.members if g != gpu and job.evidence[g][kind].cause in fault.peer_causes
        )
        if broken and len(broken) >= (fault.involved(self._gpus[gpu].features) or 0):
            return _Judged(d.Evidence(), "", related=broken)
        return _Judged(ev, ev.cause)


@dataclass(frozen=True)
class _Job:
    """One evaluation of one job's GPUs: their evidence, and the ranks holding the others back."""

    members: list[str]
    evidence: dict[str, dict[str, d.Evidence]]
    holding_back: list[str]
    waiting: list[str]  # the ranks waiting in collectives
    shown: dict[str, tuple[list[str], Shared]]  # job-wide kind -> the ranks showing it, how it is shared


@dataclass(slots=True)  # not frozen: made 64 times a second on 8 GPUs, and frozen costs 3x to make
class _Judged:
    """A GPU's evidence of one kind after the job-level reasoning (never changed once made)."""

    evidence: d.Evidence
    cause: str
    hold: float | None = None  # seconds to hold before firing (None: the kind's own)
    related: tuple[str, ...] = ()  # the GPUs the verdict concerns besides this one


def rank_order(gpu: str) -> tuple[str, int, str]:
    """GPUs in their index order (a rank's device is its index within the job's GPUs), a history's
    ``node/3`` by the index after its node's name."""
    head, _, index = gpu.rpartition("/")
    return (head, int(index), "") if index.isdigit() else (head, -1, index)


def _waits_seen(points: list[GpuPoint]) -> int:
    """The samples that booked some waiting (under the steady line, where the ledger books the rest of
    the sample as a wait)."""
    line = LEDGER_STEADY_UTIL.value
    return sum(1 for p in points if p.util is not None and p.util < line)


def _count_stop(state: _Gpu, tick: Tick, out: bool, first: bool) -> None:
    """Extend or end the GPU's run off its kernels while its job waits for it (after start-up only: a rank
    still loading is not stopped)."""
    if out and state.ledger.started:
        state.stop_run_s += tick.span
        state.stop_ticks += tick.samples > 0
        state.first_rank = first
    else:
        state.stop_run_s, state.stop_ticks = 0.0, 0


def _first_rank_stop(run_s: float, waiting: tuple[str, ...]) -> str:
    """Why a stop of the job's first rank does not page at once."""
    return (
        f"stopped {run_s:.0f} s while GPU {', '.join(waiting)} of its job wait for it in their "
        "collective; it is the job's first rank, where a synchronous checkpoint is written while the others "
        "wait at a barrier, and a save looks the same while it lasts: it pages once the stop holds the "
        "coverage share of five minutes; the job's log (its save lines) tells which"
    )


def _coarse(timing: Timing, evidence_s: float) -> Timing:
    """A kind's hysteresis at a step coarser than the clock (``Analyzer.__init__`` says why)."""
    resolve = max(timing.resolve_after, evidence_s) if timing.resolve_after > 0 else 0.0  # 0: gone with it
    return replace(timing, resolve_after=resolve)


def _job_event(gpu: str, kind: str, job: _Job) -> _Judged:
    """A job-wide kind: its hold and cause from how many ranks show it; related, the others that do."""
    showing, shared = job.shown[kind]
    related = tuple(g for g in showing if g != gpu)
    return _Judged(job.evidence[gpu][kind], shared.cause, shared.fire.value, related)


def _shown(
    kind: str, rule: JobEvent, members: list[str], evidence: dict[str, dict[str, d.Evidence]]
) -> tuple[list[str], Shared]:
    """The ranks of a job showing a job-wide kind, and how it is shared: once per job, not per rank."""
    showing = [g for g in members if evidence[g][kind].score >= SCORE_ENTER.value]
    shared = rule.some_ranks
    if len(showing) == len(members):
        confirmed = all(evidence[g][kind].cause == rule.confirmed.cause for g in members)
        shared = rule.confirmed if confirmed else rule.every_rank
    return showing, shared


def _server_memory(f: GpuFeatures, board_bytes: float | None) -> bool | None:
    """Does the job hold the framebuffer like a server's KV cache (None: the log cannot say)?"""
    total = f.mem_total_bytes or board_bytes
    if not total or f.mem_used_bytes is None:
        return None
    return f.mem_used_bytes >= SERVING_RESERVED.value * total


def _silent(points: list[GpuPoint], now: float) -> float | None:
    """Seconds since the job's last sign of progress, from the newest point (None: no log signal)."""
    if not points or points[-1].log_silent_s is None:
        return None
    return points[-1].log_silent_s + max(0.0, now - points[-1].t)


def _off_kernel(recent: Shares) -> float:
    """The share of the recent window a GPU held memory with no kernel: waiting, pausing or starting."""
    return recent.get("input_wait") + recent.get("checkpoint") + recent.get("idle")


def _idle_gaps(state: _Gpu) -> bool:
    """No-kernel time is idle capacity for its class, unless its server says requests are waiting."""
    if not state.workload.idle_gaps:
        return False
    return not (state.workload.kind == "serving" and (state.waiting or 0.0) > 0)
