"""The time ledger: every second of every GPU goes to exactly one state. Pure: no clocks, no I/O.

Each evaluation tick (one second, live and in ``replay``) the points that arrived for a GPU are split:

* a utilization sample ``u`` says a kernel was resident for ``u`` of its period. Below the busy line the
  rest is waiting time (``gap``); above the steady line the GPU counts as wholly working (the gaps inside
  are launch overhead); in between the waiting part fades out;
* the resident part is a collective (``comm``) when few SMs are active per unit of utilization (GPM), or,
  without GPM, in proportion to how far the power draw sits below computing power. A GPU with no peer in
  its job cannot wait for one: its resident time is compute;
* compute time is ``throttled`` while thermal reasons hold the clocks, or the power cap lowers them;
* a collective is ``quiet`` when NVLink and PCIe carry next to nothing.

Then the second gets its states from its context (the run of stopped seconds it belongs to and the GPUs of
its job). A second is *stopped* when the GPU did (almost) no work and moved no data. Stopped runs up to the
pause allowance are step-level waits: ``input_wait`` (no kernel) and ``comm_wait`` (in a collective). A
longer run is held back (at most the allowance) and then judged as a whole:

* before the job has trained (or while its memory keeps growing: a model load) it is ``idle``;
* every GPU of the job stopped together, all in a quiet collective: ``stalled`` (a hang);
* every GPU of the job stopped together, someone off-kernel: ``checkpoint`` (the job pauses as one);
* one GPU off-kernel while its peers work or wait: ``input_wait``; a GPU waiting on peers: ``comm_wait``;
* longer than the idle horizon with no kernel: ``idle``.

``free`` is a GPU no job holds (memory under the idle line). Seconds without a sample (a lost GPU, a hole in
a log) are not counted: the states sum to the observed time.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from exporter.analysis.envelope import Envelope
from exporter.analysis.points import GpuPoint
from exporter.policy.nvml_vocab import HW_SLOWDOWN, POWER_CAP_BITS, THERMAL_BITS
from exporter.policy.thresholds import (
    COVERAGE_CLEAR,
    COVERAGE_EXIT,
    COVERAGE_FAST_EXIT,
    COVERAGE_FAST_SHARE,
    COVERAGE_SHARE,
    EVIDENCE_WINDOW,
    FLOOR_DRAW,
    HANG_TRAFFIC,
    IDLE_AFTER,
    IDLE_MEMORY,
    LEDGER_BUSY_UTIL,
    LEDGER_COMM_MEM_UTIL,
    LEDGER_COMM_POWER_HIGH,
    LEDGER_COMM_POWER_LOW,
    LEDGER_COMM_SM,
    LEDGER_FAST_WINDOW,
    LEDGER_LOAD_GROWTH,
    LEDGER_POWER_AT_LIMIT,
    LEDGER_STALE,
    LEDGER_STARTUP_COMPUTE,
    LEDGER_STARTUP_WALL,
    LEDGER_STEADY_UTIL,
    LEDGER_THROTTLE_CLOCK,
    LEDGER_WINDOW,
    STARVATION_GAPS,
    STARVATION_PAUSE,
    TEMP_HOT,
    THERMAL_CLOCK_DROP,
    THERMAL_SLOWDOWN,
    THERMAL_SLOWDOWN_MARGIN,
    UTIL_IDLE_LINE,
)

STATES: tuple[str, ...] = (
    "computing",
    "input_wait",
    "comm_wait",
    "stalled",
    "checkpoint",
    "throttled",
    "idle",
    "free",
)
# what each state means, for the docs and the dashboards
STATE_MEANING: dict[str, str] = {
    "computing": "kernels doing work (the gaps inside a busy sample are launch overhead, counted here)",
    "input_wait": "no kernel, waiting on the host: the data loader, CPU offload, host-to-device copies",
    "comm_wait": "inside a collective (NCCL kernel resident, few SMs active): waiting for peers or moving "
    "data over a slow transport",
    "stalled": "every GPU of the job in a collective with nothing moving for longer than the pause "
    "allowance: a hang",
    "checkpoint": "every GPU of the job paused together for longer than the pause allowance after it "
    "trained: saving a checkpoint (or evaluating on the host)",
    "throttled": "computing with clocks lowered for heat or by the power cap",
    "idle": "memory held, no kernel: start-up (model load, dataset download) or a reserved GPU doing nothing",
    "free": "no job holds the GPU (under the idle memory line)",
}
# where each state's time is lost: one family per verdict kind (computing and free lose nothing)
FAMILIES: dict[str, tuple[str, ...]] = {
    "input": ("input_wait", "checkpoint"),
    "comm": ("comm_wait",),
    "stall": ("stalled",),
    "throttle": ("throttled",),
    "idle": ("idle",),
}
# the states whose GPU time is lost (every verdict family's; computing is work, free is no job's): what
# replay and the cost rules price
LOST_STATES: tuple[str, ...] = tuple(state for states in FAMILIES.values() for state in states)
_INDEX = {state: i for i, state in enumerate(STATES)}
# a stopped run past the pause allowance is a pause once it holds this many samples: at a coarse step
# (15-60 s) one sample caught without a kernel stands for its whole step and may be one step's wait
PAUSE_SAMPLES = 2
# the lines ``measure`` reads for every point, looked up once
_BUSY, _STEADY = LEDGER_BUSY_UTIL.value, LEDGER_STEADY_UTIL.value
_IDLE_LINE, _IDLE_MEMORY = UTIL_IDLE_LINE.value, IDLE_MEMORY.value
# each family's first slot and the others': its share is theirs summed in this order
_FAMILY_SLOTS = {
    name: (_INDEX[states[0]], tuple(_INDEX[state] for state in states[1:]))
    for name, states in FAMILIES.items()
}
_THERMAL = len(STATES)  # one more slot: the part of `throttled` that is for heat (the rest is power)
_FREE, _INPUT_WAIT, _IDLE, _COMM_WAIT, _COMPUTING, _THROTTLED = (
    _INDEX[state] for state in ("free", "input_wait", "idle", "comm_wait", "computing", "throttled")
)
_SLOTS = len(STATES) + 1


# ---- one point, one second ----------------------------------------------------------------------


def waiting_part(util: float) -> float:
    """The share of a sample period spent waiting with no kernel, from its utilization."""
    if util < UTIL_IDLE_LINE.value:
        return 1.0
    steady, busy = LEDGER_STEADY_UTIL.value, LEDGER_BUSY_UTIL.value
    if util >= steady:
        return 0.0
    fade = 1.0 if util <= busy else (steady - util) / (steady - busy)
    return (1.0 - util) * fade


def comm_part(p: GpuPoint, resident_all_tick: bool, tick_intensity: float | None, peers: int) -> float:
    """The share of a point's resident time that is a collective rather than compute. SM activity tells
    per sample. Without it, memory utilization can only tell for a GPU resident the whole second (at low
    duty it reads low because of the gaps); power (board-averaged over about a second) tells through its
    intensity: the share of the envelope's headroom drawn per unit of the second's utilization. Power
    alone calls a wait only in a job with peers to wait for."""
    util = p.util or 0.0
    if util < LEDGER_BUSY_UTIL.value or peers <= 0:
        # a short resident stretch in a waiting sample: too little to call; and a GPU with no peer has no
        # collective to wait in (memory-bound work, decode, keeps few SMs and little power busy too)
        return 0.0
    if p.sm_active is not None and p.sm_active < LEDGER_COMM_SM.value * util:
        return 1.0
    # SM activity is an average over the collection (about a second), memory utilization a driver sample
    # like utilization itself: a collective shorter than the collection shows in the latter only; both
    # speak only for a GPU resident the whole second
    if p.mem_util is not None and resident_all_tick:
        return 1.0 if p.mem_util < LEDGER_COMM_MEM_UTIL.value else 0.0
    if p.sm_active is not None or p.mem_util is not None:
        return 0.0
    if tick_intensity is not None:
        low, high = LEDGER_COMM_POWER_LOW.value, LEDGER_COMM_POWER_HIGH.value
        return min(1.0, max(0.0, (high - tick_intensity) / (high - low)))
    return 0.0


def throttle_reason(p: GpuPoint, slowdown_c: float | None) -> str:
    """``thermal``, ``power`` or "" for compute time at this point."""
    clock = p.sm_clock_hz / p.sm_clock_max_hz if p.sm_clock_hz and p.sm_clock_max_hz else None
    if p.reasons is not None:
        hot = p.temp_c is not None and p.temp_c >= TEMP_HOT.value
        if p.reasons & THERMAL_BITS or (p.reasons & HW_SLOWDOWN and hot):
            return "thermal"
        if p.reasons & POWER_CAP_BITS and (clock is None or clock < LEDGER_THROTTLE_CLOCK.value):
            return "power"
        return ""
    if clock is None:
        return ""
    slowdown = slowdown_c or THERMAL_SLOWDOWN.value
    if (
        p.temp_c is not None
        and p.temp_c >= slowdown - THERMAL_SLOWDOWN_MARGIN.value
        and clock < THERMAL_CLOCK_DROP.value
    ):
        return "thermal"
    at_limit = (
        p.power_w is not None
        and p.power_limit_w
        and p.power_w >= LEDGER_POWER_AT_LIMIT.value * p.power_limit_w
    )
    return "power" if at_limit and clock < LEDGER_THROTTLE_CLOCK.value else ""


def _quiet(p: GpuPoint) -> bool:
    """NVLink and PCIe carry next to nothing (unknown traffic counts as quiet)."""
    return all(
        v is None or v < HANG_TRAFFIC.value
        for v in (
            None if p.nvlink_tx_bps is None else p.nvlink_tx_bps + (p.nvlink_rx_bps or 0.0),
            None if p.pcie_tx_bps is None else p.pcie_tx_bps + (p.pcie_rx_bps or 0.0),
        )
    )


@dataclass(slots=True)  # made for every GPU every evaluation
class Tick:
    """One GPU's second, measured from its points, before its context is known."""

    t: float
    span: float = 0.0
    free: float = 0.0
    gap: float = 0.0
    comm_quiet: float = 0.0
    comm_flow: float = 0.0
    compute: float = 0.0
    throttled: float = 0.0
    thermal: float = 0.0
    mem_bytes: float | None = None
    mem_total: float | None = None
    util: float | None = None  # mean utilization of the second's points
    waiting: float | None = None  # requests its server reported waiting (None: no such report)
    busy_at: tuple[float, ...] = ()  # when its busy points were sampled (a pipeline's turns, or not)
    samples: int = 0  # points in the second
    drawn: float | None = None  # its mean power in the envelope: 0 floor, 1 ceiling (None: not known)

    @property
    def work(self) -> float:
        return self.compute + self.throttled + self.comm_flow

    @property
    def held(self) -> bool:
        return self.free < self.span / 2

    @property
    def stopped(self) -> bool:
        """No work and no data moved: waiting with no kernel or in a quiet collective."""
        return self.held and self.work < UTIL_IDLE_LINE.value * self.span

    @property
    def at_floor(self) -> bool:
        """Held, under the busy line and drawing what the board draws doing nothing: whatever ran was not
        a job's work (a desktop's rendering on a card that drives a display)."""
        return (
            self.held
            and self.drawn is not None
            and self.drawn < FLOOR_DRAW.value
            and (self.util or 0.0) < LEDGER_BUSY_UTIL.value
        )

    @property
    def off_kernel(self) -> bool:
        return self.gap >= self.comm_quiet

    @property
    def on_host(self) -> bool:
        """Held, and most of the second with no kernel: the rank is busy on the host (or waiting on it)."""
        return self.held and self.span > 0 and self.gap >= self.span / 2

    @property
    def in_collective(self) -> bool:
        """Most of the second inside a collective: waiting for a peer (or moving data slowly)."""
        return self.held and self.span > 0 and self.comm_quiet + self.comm_flow >= self.span / 2


def holding_back(ticks: dict[str, Tick]) -> list[str]:
    """The GPUs of one job that held it back this second: on the host while a peer waited in a
    collective for them (a rank's own slowness, never its peers')."""
    if not any(t.in_collective for t in ticks.values()):
        return []
    return [gpu for gpu, t in ticks.items() if t.on_host]


def measure(
    points: Sequence[GpuPoint],
    t0: float,
    t1: float,
    peers: int,
    envelope: Envelope,
    slowdown_c: float | None = None,
) -> Tick:
    """Split the second (t0, t1] between the raw parts, each point weighing the same."""
    usable = [p for p in points if p.util is not None]
    if not usable:
        return Tick(t=t1)
    n = len(usable)
    span = t1 - t0
    weight = span / n
    mean_util = sum(p.util or 0.0 for p in usable) / n
    busy_at = tuple(p.t for p in usable if (p.util or 0.0) >= _BUSY)
    resident_all = mean_util >= _STEADY
    # the power's intensity: the share of the envelope's headroom drawn per unit of utilization
    powers = [p.power_w for p in usable if p.power_w is not None]
    power_intensity = drawn = None
    if powers:
        drawn = envelope.position(sum(powers) / len(powers))
        if drawn is not None and mean_util > 0:
            power_intensity = drawn / mean_util
    # the parts, summed point by point in these locals (set on the tick once, at the end)
    free = gap_s = comm_quiet = comm_flow = compute = throttled = thermal = 0.0
    mem_bytes = mem_total = waiting = None
    for p in usable:
        util = p.util or 0.0
        used = p.mem_used_bytes
        mem_bytes = used if used is not None else mem_bytes
        mem_total = p.mem_total_bytes if p.mem_total_bytes is not None else mem_total
        if p.requests_waiting is not None:
            waiting = max(waiting or 0.0, p.requests_waiting)
        if used is not None and used < _IDLE_MEMORY and (util < _IDLE_LINE or _desktop(p, util, envelope)):
            free += weight
            continue
        gap = waiting_part(util)
        resident = (1.0 - gap) * weight
        comm = comm_part(p, resident_all, power_intensity, peers) * resident
        work = resident - comm
        gap_s += gap * weight
        if comm:
            if _quiet(p):
                comm_quiet += comm
            else:
                comm_flow += comm
        reason = throttle_reason(p, slowdown_c) if work > 0 else ""
        if reason:
            throttled += work
            if reason == "thermal":
                thermal += work
        else:
            compute += work
    return Tick(
        t1,
        span,
        free,
        gap_s,
        comm_quiet,
        comm_flow,
        compute,
        throttled,
        thermal,
        mem_bytes,
        mem_total,
        mean_util,
        waiting,
        busy_at,
        n,
        drawn,
    )


def _desktop(p: GpuPoint, util: float, envelope: Envelope) -> bool:
    """Under the busy line at idle draw: a display's rendering, not a job's kernels."""
    if p.power_w is None or util >= _BUSY:
        return False
    position = envelope.position(p.power_w)
    return position is not None and position < FLOOR_DRAW.value


# ---- rolling shares -----------------------------------------------------------------------------


class _Horizon:
    """Sums of the committed seconds of the last ``span`` seconds."""

    def __init__(self, span: float) -> None:
        self.span = span
        self.items: deque[tuple[float, list[float]]] = deque()
        self.sums = [0.0] * _SLOTS

    def add(self, t: float, vec: list[float]) -> None:
        self.items.append((t, vec))
        self.sums = list(map(operator.add, self.sums, vec))  # slot by slot, without a Python loop

    def evict(self, now: float) -> None:
        cutoff = now - self.span
        while self.items and self.items[0][0] <= cutoff:
            _, vec = self.items.popleft()
            self.sums = list(map(operator.sub, self.sums, vec))


class Shares:
    """Shares of the counted time of one horizon lost to each state (0-1), and how much was counted.

    Held as the horizon's sums per slot of ``STATES`` and what they are shares of: each share is worked
    out when it is read (three are made for every GPU every evaluation, and the detectors read a few of
    their shares); ``by_state`` makes the mapping for whoever wants one."""

    __slots__ = ("_of", "_sums", "counted_s", "thermal")

    def __init__(
        self, counted_s: float = 0.0, by_state: dict[str, float] | None = None, thermal: float = 0.0
    ) -> None:
        self.counted_s = counted_s
        self.thermal = thermal  # the share throttled for heat (part of the throttled share)
        states = by_state or {}
        self._sums: Sequence[float] = [states.get(state, 0.0) for state in STATES]
        self._of = 1.0  # the shares given as they are

    @classmethod
    def _counted(cls, sums: list[float], counted_s: float, of: float, thermal: float) -> Shares:
        """Shares of ``of`` seconds from a horizon's sums (never changed: a horizon replaces its own)."""
        shares = cls.__new__(cls)
        shares._sums, shares._of, shares.counted_s, shares.thermal = sums, of, counted_s, thermal
        return shares

    @property
    def by_state(self) -> dict[str, float]:
        return {state: self.get(state) for state in STATES}

    def family(self, name: str) -> float:
        sums, of = self._sums, self._of
        first, rest = _FAMILY_SLOTS[name]
        v = sums[first]
        total = (v if v > 0.0 else 0.0) / of
        for i in rest:  # each state's share, in the family's order
            v = sums[i]
            total += (v if v > 0.0 else 0.0) / of
        return total

    def get(self, state: str) -> float:
        # `v if v > 0.0 else 0.0` is max(0.0, v) (a rounding residue below zero counts nothing), no call
        v = self._sums[_INDEX[state]]
        return (v if v > 0.0 else 0.0) / self._of

    def __repr__(self) -> str:
        return f"Shares(counted_s={self.counted_s!r}, by_state={self.by_state!r}, thermal={self.thermal!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Shares):
            return NotImplemented
        mine = (self.counted_s, self.by_state, self.thermal)
        return mine == (other.counted_s, other.by_state, other.thermal)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was


_EMPTY = [0.0] * _SLOTS  # the sums of a horizon that counted nothing (never changed)


def _shares(h: _Horizon) -> Shares:
    sums = h.sums
    counted = sum(sums[: len(STATES)])
    if counted <= 0:
        return Shares._counted(_EMPTY, 0.0, 1.0, 0.0)
    thermal = sums[_THERMAL]
    return Shares._counted(sums, counted, counted, (thermal if thermal > 0.0 else 0.0) / counted)


# ---- one GPU's ledger ---------------------------------------------------------------------------


@dataclass(slots=True)
class Pause:
    """A stopped run past the pause allowance (in two samples or more)."""

    first_t: float  # the end of its first second
    start: float
    length: float = 0.0
    save: bool = True  # every second of it had the shape of a save (``GpuLedger.commit``'s ``save``)


@dataclass
class GpuLedger:
    """A GPU's committed seconds per state (the counters), its stopped run and its rolling shares."""

    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STATES, 0.0))
    worked_s: float = 0.0  # seconds with work since the job took the GPU: start-up ends at the allowance
    held_s: float = 0.0  # seconds since the job took the GPU: start-up also ends by wall time...
    bursts: int = 0  # ...once the GPU shows a rhythm: separate stretches of work since the job took it
    held_back_s: float = 0.0  # seconds off-kernel while peers of its job waited for it in a collective
    run_s: float = 0.0  # length of the current stopped run
    run_first: Tick | None = None  # ...its first second
    run_ticks: int = 0  # ...how many seconds (samples, at a coarse step) it holds
    run_counted: bool = False  # ...whether it is counted among the pauses (``long_runs``)
    run_save: bool = True  # ...whether every second of it had the shape of a save (``commit``'s ``save``)
    # (t, memory used) of the last 30 s that no later reading undercuts: the first is the window's least
    memory: deque[tuple[float, float]] = field(default_factory=deque)
    pending: list[tuple[Tick, bool]] = field(default_factory=list)  # held-back run seconds (tick, started)
    last: GpuPoint | None = None
    stale_s: float = LEDGER_STALE.value  # the last point stands this long (a coarse sample: its step)
    # the part of the physical GPU's wall time this ledger stands for: 1 for a GPU, 1/N for one of N pods
    # sharing it (time-slicing): its seconds are booked at that weight, so the pods' ledgers sum to the
    # GPU's wall time and its cost; the shares of its windows are ratios and do not change
    share: float = 1.0
    # recent runs that outgrew the pause allowance, the newest growing while it lasts
    long_runs: deque[Pause] = field(default_factory=deque)
    horizons: tuple[_Horizon, ...] = field(
        default_factory=lambda: tuple(
            _Horizon(s) for s in (EVIDENCE_WINDOW.value, LEDGER_FAST_WINDOW.value, LEDGER_WINDOW.value)
        )
    )
    first_t: float | None = None  # the start of the first second it committed: where its record begins
    working_since: float | None = None  # the start of its first second of work since the job took it

    @property
    def rhythmic(self) -> bool:
        """Work has come in separate bursts: the gaps between them are the job's steps waiting."""
        return self.bursts >= STARVATION_GAPS.value

    @property
    def started(self) -> bool:
        """Start-up is over: the GPU worked 30 seconds, or held memory past the wall-time allowance while
        its work came in bursts (the caller keeps a GPU whose memory is still growing in start-up)."""
        if self.worked_s >= LEDGER_STARTUP_COMPUTE.value:
            return True
        return self.rhythmic and self.held_s >= LEDGER_STARTUP_WALL.value

    def points_for(self, points: list[GpuPoint], t1: float) -> list[GpuPoint]:
        """The points of this second, or the last one while it is fresh."""
        if points:
            self.last = points[-1]
            return points
        if self.last is not None and t1 - self.last.t <= self.stale_s:
            return [self.last]
        return []

    def commit(
        self,
        tick: Tick,
        job_stopped: bool,
        job_quiet: bool,
        alone: bool = False,
        idle_gaps: bool = False,
        waited_for: bool = False,
        save: bool = False,
    ) -> None:
        """Give the second its states, from the run it belongs to and the job's GPUs: ``job_stopped``
        when every GPU of the job stopped this second, ``job_quiet`` when all of them sit in a quiet
        collective, ``alone`` when the job has no other GPU, ``idle_gaps`` when its no-kernel time is idle
        capacity rather than a wait for input (a server without requests, a pipeline stage between turns,
        a notebook waiting for its user: exporter/analysis/workload.py), ``waited_for`` when the job stopped
        with some of its GPUs off their kernels and others in a collective: those wait for these."""
        if tick.span <= 0:
            return
        if self.first_t is None:
            self.first_t = tick.t - tick.span
        if not tick.held:
            self._flush()
            self.worked_s, self.held_s, self.run_s = 0.0, 0.0, 0.0  # no job: the next one starts afresh
            self.bursts = 0
            self.memory.clear()
            self._add(tick.t, _vector(tick, started=False))
            return
        self.held_s += tick.span
        loading = self._loading(tick)
        if not tick.stopped:
            self._flush()
            if self.worked_s == 0:
                self.working_since = tick.t - tick.span
            if self.run_s > 0 or self.worked_s == 0:
                self.bursts += 1
            self.run_s = 0.0
            self.worked_s += tick.span
            self._add(tick.t, _vector(tick, self._stepping(loading) and not idle_gaps))
            return
        if self.run_s == 0.0:
            self.run_first, self.run_ticks, self.run_counted, self.run_save = tick, 0, False, True
        self.run_s += tick.span
        self.run_ticks += 1
        self.run_save = self.run_save and save
        if self.run_s <= STARVATION_PAUSE.value:
            self.pending.append((tick, self._stepping(loading) and not idle_gaps))
            return
        if not self.run_counted and self.run_ticks >= PAUSE_SAMPLES and self.run_first is not None:
            # a pause: past the allowance, in two samples or more (one coarse sample caught without a
            # kernel stands for its whole step, and may be a step's wait)
            first = self.run_first
            self.long_runs.append(Pause(first.t, first.t - first.span))
            self.run_counted = True
        if self.run_counted and self.long_runs:  # (a run across a hole may have left the ledger window)
            pause = self.long_runs[-1]
            pause.length, pause.save = self.run_s, self.run_save
        state_gap, state_comm = self._long_run(loading, job_stopped and not alone, job_quiet, waited_for)
        if idle_gaps:
            state_gap = "idle"
        for held_tick, _ in self.pending:
            self._add(held_tick.t, _vector(held_tick, True, state_gap, state_comm))
        self.pending.clear()
        self._add(tick.t, _vector(tick, True, state_gap, state_comm))

    def _stepping(self, loading: bool) -> bool:
        """Gaps within the pause allowance are step-level waits once work comes in a rhythm (or the job
        has started), start-up or not; only a model being loaded keeps them start-up."""
        return (self.started or self.rhythmic) and not loading

    def _loading(self, tick: Tick) -> bool:
        """Memory grew by a GiB within the evidence window: a model or dataset is loading."""
        if tick.mem_bytes is None:
            return False
        memory = self.memory
        while memory and memory[-1][1] >= tick.mem_bytes:
            memory.pop()  # never the least again: this reading is as low and stays longer
        memory.append((tick.t, tick.mem_bytes))
        while memory[0][0] <= tick.t - EVIDENCE_WINDOW.value:
            memory.popleft()
        return tick.mem_bytes - memory[0][1] >= LEDGER_LOAD_GROWTH.value

    def _long_run(
        self, loading: bool, together: bool, quiet: bool, waited_for: bool = False
    ) -> tuple[str, str]:
        """States of the waiting and of the collective time of a run longer than the pause allowance:
        ``together`` when every GPU of a multi-GPU job stopped, ``quiet`` when all sit in a collective,
        ``waited_for`` when some of them sit in a collective while others are off their kernels: the job's
        pause is the off-kernel ranks' (a save, a stall), the collective time a wait for them.
        In start-up, ranks waiting in a collective for a rank still loading are starting up too; every
        rank in a quiet collective is a hang whenever it happens."""
        startup = not self.started or loading
        if startup or self.run_s > IDLE_AFTER.value:
            gap = "idle"
        elif together:
            gap = "checkpoint"
        else:
            gap = "input_wait"
        if quiet:
            comm = "stalled"
        elif startup:
            comm = "idle"
        else:
            comm = "checkpoint" if together and not waited_for else "comm_wait"
        return gap, comm

    def _flush(self) -> None:
        """A run that ended within the allowance: step-level waits."""
        for tick, started in self.pending:
            self._add(tick.t, _vector(tick, started))
        self.pending.clear()

    def _add(self, t: float, vec: list[float]) -> None:
        share, totals = self.share, self.totals
        for state, seconds in zip(STATES, vec, strict=False):  # (zip leaves out the thermal slot)
            if seconds:  # most slots are 0.0, and adding nothing changes no total
                totals[state] += seconds * share
        for h in self.horizons:
            h.add(t, vec)

    def shares(self, now: float) -> tuple[Shares, Shares, Shares]:
        """Shares over the evidence window, the fast window and the ledger window."""
        out = []
        for h in self.horizons:
            h.evict(now)
            out.append(_shares(h))
        return out[0], out[1], out[2]

    def pauses(self, now: float) -> tuple[int, float, bool]:
        """Stopped runs longer than the pause allowance that began within the fast window: how many, the
        longest one's seconds, and whether it had the shape of a save (``commit``'s ``save``)."""
        runs = self.long_runs
        if not runs:  # (most GPUs, most of the time)
            return 0, 0.0, False
        # kept while they end within the ledger window: a coarse step's evidence window reaches further
        # back than the fast window (five samples of 30 s), and ``paused_since`` reads them there
        while runs and runs[0].start + runs[0].length <= now - LEDGER_WINDOW.value:
            runs.popleft()
        since = now - LEDGER_FAST_WINDOW.value
        began = [(r.length, r.save) for r in runs if r.first_t > since]
        longest, saved = max(began, default=(0.0, False))
        return len(began), longest, saved

    def paused_since(self, since: float, now: float) -> float:
        """Seconds of the runs longer than the pause allowance (within the ledger window) that fall within
        (since, now]: the part of a window that is one pause, not step-level waits."""
        total = 0.0
        for r in self.long_runs:
            overlap = min(r.start + r.length, now) - max(r.start, since)
            if overlap > 0:
                total += overlap
        return total

    def in_save(self, t: float) -> bool:
        """Whether the sample at ``t`` falls within a pause (a run past the pause allowance) the ledger
        still keeps that had the shape of a save."""
        return any(r.save and r.start < t <= r.start + r.length for r in self.long_runs)

    def losses(self, pick: Callable[[Shares], float]) -> list[Lost]:
        """The committed seconds of the ledger window, oldest first, each with its seconds lost to
        ``pick`` (a kind's share of the ledger): what an episode's onset and end are read from."""
        out = []
        for t, vec in self.horizons[-1].items:
            span = sum(vec[:_THERMAL])
            if span > 0:
                one = Shares._counted(vec, span, span, vec[_THERMAL] / span)
                out.append(Lost(t, span, max(0.0, pick(one)) * span))
        return out

    def observed_s(self) -> float:
        """Committed plus held-back seconds (at the ledger's share): what the states must sum to."""
        return sum(self.totals.values()) + self.share * sum(t.span for t, _ in self.pending)

    def forget_run(self) -> None:
        """The GPU was lost or reset: commit what is held back and start a new run."""
        self._flush()
        self.run_s, self.last = 0.0, None


def _vector(tick: Tick, started: bool, gap_state: str = "", comm_state: str = "") -> list[float]:
    vec = [0.0] * _SLOTS
    vec[_FREE] += tick.free
    vec[_INDEX[gap_state] if gap_state else _INPUT_WAIT if started else _IDLE] += tick.gap
    vec[_INDEX[comm_state] if comm_state else _COMM_WAIT] += tick.comm_quiet
    vec[_COMM_WAIT] += tick.comm_flow
    vec[_COMPUTING] += tick.compute
    vec[_THROTTLED] += tick.throttled
    vec[_THERMAL] += tick.thermal
    return vec


# ---- when a loss began and ended ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lost:
    """One committed tick: its end, its seconds, and the seconds of it lost to one kind."""

    t: float
    span: float
    lost: float

    @property
    def excess(self) -> float:
        """Its loss beyond the clear share (positive: losing faster than a condition that has ended)."""
        return self.lost - COVERAGE_CLEAR.value * self.span


def loss_began(
    ticks: Sequence[Lost],
    clean_at: float | None,
    first_t: float | None,
    window_s: float,
    floor: float | None = None,
) -> float | None:
    """When the loss running at the newest tick began. ``clean_at``: the last judgement whose evidence
    window lost under the clear share to it (the condition had ended then, as the coverage rule says; None:
    never since the GPU's record began at ``first_t``). The run starts at the first lossy tick after it,
    led in by the lossy ticks just before it that belong to it: the start of the excursion of the loss's
    cumulative excess over the clear share (Page's CUSUM) that is alive at that first lossy tick. Never
    before ``floor`` (the job's first work: the time it lost is time it would have worked). None: the
    ledger shows no loss of it since (the evidence that fired is not a loss of time)."""
    began = _began(ticks, clean_at, first_t, window_s)
    return began if began is None or floor is None else max(began, floor)


def _began(
    ticks: Sequence[Lost], clean_at: float | None, first_t: float | None, window_s: float
) -> float | None:
    if clean_at is None:
        return first_t if any(x.lost > 0 for x in ticks) else None
    if not ticks:
        return None
    if ticks[0].t - ticks[0].span > clean_at:
        return clean_at  # the seconds around the clean judgement have left the ledger window
    first = next((x for x in ticks if x.t > clean_at and x.lost > 0), None)
    if first is None:
        return None
    excess, begin = 0.0, first.t - first.span
    for x in ticks:
        if x.t <= clean_at - window_s:
            continue
        if excess <= 0:
            begin = x.t - x.span  # an excursion that this tick raises begins with it
        excess = max(0.0, excess + x.excess)
        if x is first:
            break
    return begin if excess > 0 else first.t - first.span


def loss_ended(ticks: Sequence[Lost], dirty_at: float | None) -> float | None:
    """When the loss stopped: the end of its last lossy tick at or before ``dirty_at`` (the last judgement
    whose evidence window still lost the clear share or more), carried on by the lossy ticks after it that
    belong to it: the newest end of the excursion of the cumulative excess, read backwards from the newest
    tick, that is alive at that last lossy tick. None: no loss in the ledger window up to ``dirty_at``."""
    if dirty_at is None:
        return None
    last = next((x for x in reversed(ticks) if x.t <= dirty_at and x.lost > 0), None)
    if last is None:
        return None
    excess, end = 0.0, last.t
    for x in reversed(ticks):
        if x.t < last.t:
            break
        if excess <= 0:
            end = x.t  # read backwards, an excursion that this tick raises ends with it
        excess = max(0.0, excess + x.excess)
    return end if excess > 0 else last.t


# ---- coverage ------------------------------------------------------------------------------------


def coverage(
    fast: Shares,
    slow: Shares,
    pick: Callable[[Shares], float],
    enter_score: float,
    exit_score: float,
    fast_pick: Callable[[Shares], float] | None = None,
    recent: Shares | None = None,
) -> float:
    """The coverage rule as a score: at the enter share of either window the score reaches the verdicts'
    enter score, at the exit share their exit score. A window counts once half of it has been observed.
    ``fast_pick`` reads the fast window differently (what may count there), default ``pick``. When the
    ``recent`` evidence window lost next to nothing, the condition has ended: no score."""
    if (
        recent is not None
        and recent.counted_s >= EVIDENCE_WINDOW.value / 2
        and pick(recent) < COVERAGE_CLEAR.value
    ):
        return 0.0
    scores = (enter_score, exit_score)
    fast_read = fast_pick or pick
    fast_score = _one(
        fast, LEDGER_FAST_WINDOW.value, COVERAGE_FAST_SHARE.value, COVERAGE_FAST_EXIT.value, fast_read, scores
    )
    slow_score = _one(slow, LEDGER_WINDOW.value, COVERAGE_SHARE.value, COVERAGE_EXIT.value, pick, scores)
    if fast.counted_s >= LEDGER_FAST_WINDOW.value / 2 and pick(fast) < COVERAGE_CLEAR.value:
        slow_score = 0.0  # nothing lost lately: the condition has ended
    score = max(fast_score, slow_score)
    return min(1.0, max(0.0, score))


def _one(
    s: Shares,
    span: float,
    enter: float,
    exit_: float,
    read: Callable[[Shares], float],
    scores: tuple[float, float],
) -> float:
    """One window's coverage score (``scores``: the verdicts' enter and exit scores)."""
    if s.counted_s < span / 2:
        return 0.0
    enter_score, exit_score = scores
    return exit_score + (enter_score - exit_score) * (read(s) - exit_) / (enter - exit_)


def job_totals(ledgers: Iterable[GpuLedger]) -> dict[str, float]:
    out = dict.fromkeys(STATES, 0.0)
    for ledger in ledgers:
        for state, seconds in ledger.totals.items():
            out[state] += seconds
    return out
