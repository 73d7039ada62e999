"""Detectors: features in, evidence out. One pure function per verdict kind.

A score is the strength of the evidence, 0-1 (``gpu_bottleneck_score``); the verdict machine turns
scores into verdicts with hysteresis. A detector whose inputs are missing returns ``missing`` (why) and
a zero score: it stays silent rather than guess.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.analysis.features import MIN_POINTS, GpuFeatures, HostFeatures, UtilStats
from exporter.analysis.ledger import Shares, coverage
from exporter.policy.thresholds import (
    CORE_PINNED,
    HANG_POWER,
    HANG_SM,
    HANG_TRAFFIC,
    HANG_UTIL,
    IDLE_MEMORY,
    IOWAIT_HIGH,
    LEDGER_COMM_MEM_UTIL,
    LEDGER_POWER_AT_LIMIT,
    LEDGER_THROTTLE_CLOCK,
    LOOP_CYCLE_CV,
    LOOP_MIN_CYCLES,
    LOOP_STEADY_CV,
    NVLINK_ERROR_RATE,
    PCIE_BUSY,
    POWER_CAP_BELOW_DEFAULT,
    POWER_CAP_CLOCK_CUT,
    POWER_CAP_SHARE,
    POWER_LOW,
    PROGRESS_SILENCE,
    PSI_CPU_HIGH,
    PSI_IO_HIGH,
    RECENT_WAIT_SHARE,
    SCORE_ENTER,
    SCORE_EXIT,
    SHM_EARLY,
    SHM_FILL_HORIZON,
    SHM_WARNING,
    STARVATION_BUSY_FRACTION,
    STARVATION_GAPS,
    STARVATION_HEAVY,
    STARVATION_IDLE_FRACTION,
    STARVATION_PAUSE,
    STARVATION_PEER_PACE,
    STARVATION_SUSTAINED,
    STARVATION_SWING_MEAN,
    STARVATION_SWING_SPREAD,
    TEMP_HOT,
    THERMAL_CLOCK_DROP,
    THERMAL_HORIZON,
    THERMAL_REASON_SHARE,
    THERMAL_RISE,
    THERMAL_SLOWDOWN,
    THERMAL_SLOWDOWN_MARGIN,
)

# Shape constants: where a detector's ramps start and end, and how strong a fact is. Policy numbers (what
# counts as starving, hot, hung...) live in the threshold table; these only shape the scores around them.
BELOW_ENTER = 0.45  # suggestive evidence: capped just under the enter score, never a verdict alone
PAUSE_SCORE = 0.25  # a pause: under the exit score, so a firing verdict starts to resolve
FADED = 0.25  # a loss no longer large or lasting enough to page: under the exit score, it resolves
FORECAST = 0.6  # a forecast (heading for the slowdown point): fires, but weaker than a fact
FIRM = 0.8  # a fact the driver reports (links down, P2P failing)
STRONG = 0.9  # a fact that breaks collectives outright (fabric not ready), or clocks already cut
CONFIRM_WEIGHT = 0.4  # how much power confirms or weakens utilization evidence
RAMP_WIDTH = 0.1  # the width of a ramp around a threshold, in the threshold's ratio units
FED_POWER = 0.75  # a fed GPU draws 75 %+ of what it may draw: no power evidence of starving
WAVES_CV = (0.05, 0.15)  # power's coefficient of variation: steady below, wave-like above
FLAT_CV = (0.12, 0.05)  # ...and the flat power of a spinning kernel: wavy above 0.12, flat below 0.05
MIN_HALF_IDLE = 0.05  # each half of the window must idle at least this much for a sustained rhythm
SWING_ABOVE = 0.07  # a swing starts counting this far above the swing line...
SWING_BELOW = 0.15  # ...and counts fully this far below it
SHM_CAUSE_FROM = 0.8  # a filling shm starts to explain starvation at 80 %...
SHM_CAUSE_WEIGHT = 1.2  # ...and, when it does, it outranks iowait (a full shm makes I/O look slow too)
COPY_UTIL = (0.05, 0.15)  # memory-controller utilization in the gaps: copies while no kernel runs
UNDER_LOAD = 0.3  # a GPU busy in under 30 % of its samples is not under load: nothing to throttle
PINNED = 0.9  # a rank waiting in a collective keeps utilization at 90 %+ with no idle sample
CLOCK_MARGIN = 0.02  # clock evidence starts 2 points above the throttled-clock line
CAP_DEPTH = 0.3  # a cap 30 points further below the default limit is as deep as it gets
MEGA = 1e6  # hertz per megahertz, for the clocks a verdict names
STALLED_SHARE = 0.5  # half of the evidence window in the ledger's stalled state: hang evidence
RECURS = 2  # a wait seen in this many samples of a window recurs; in one, it may be a single pause
WAITED_FOR = 0.5  # a rank at least half as far behind its waiting peers as the furthest is waited for too
FLOWING = 0.2  # the job's log still moves: under the exit score, so a hang verdict never holds on


@dataclass(slots=True)  # not frozen: every kind's for every GPU every evaluation (frozen costs 3x)
class Evidence:
    score: float = 0.0
    cause: str = ""
    missing: str = ""
    # the signals that carried the score (utilization, power, memory, peers, rhythm, clocks...)
    signals: tuple[str, ...] = ()
    # a loss seen that the signals present cannot tell from benign work: what was seen, and what would
    # decide it (the score was held under the exit score: no page)
    unsure: str = ""
    detail: str = ""  # what a verdict's reader needs beside its cause (the cap, the clock, the board's draw)
    lasting_s: float = 0.0  # how long its condition has held unbroken, where the detector knows (idle)


@dataclass(slots=True)  # not frozen: made for every GPU every evaluation, and frozen costs 6x to make
class Context:
    """Everything a kind's detector may look at for one GPU at one evaluation."""

    f: GpuFeatures
    host: HostFeatures | None = None
    recent: Shares = field(default_factory=Shares)  # the ledger over the evidence window
    fast: Shares = field(default_factory=Shares)  # ...over the fast window
    slow: Shares = field(default_factory=Shares)  # ...over the ledger window
    idle_s: float | None = None  # how long the GPU has held memory without a kernel (None: unknown)
    idle_horizon_s: float = 0.0
    slowdown_c: float | None = None
    pauses: int = 0  # stopped runs longer than the pause allowance within the fast window...
    longest_pause_s: float = 0.0  # ...and the longest of them
    peers: int = 0  # other GPUs held by the same job
    silent_s: float | None = None  # seconds since the job's last log line or progress report
    workload: str = ""  # the job's class (exporter/analysis/workload.py; "" judged as training)
    idle_gaps: bool = False  # its no-kernel time is idle capacity, not a wait for input
    undecided: bool = False  # it may be a server or a notebook: not yet known
    # its job holds the framebuffer like a server's KV cache (None: the log has no memory size or use)
    server_memory: bool | None = None
    ceiling_guessed: bool = False  # its power ceiling is a multiple of its idle floor, not a measure
    turns: bool = False  # its job's GPUs take turns like a pipeline's stages, not yet long enough to decide
    loop: bool = False  # its stretches without work begin at whole multiples of one period (a loop's)
    emptied: bool = True  # it has shown a sample without a kernel while held (a wait can look like that)
    # its fast window holds half its span of samples, where each stands for its step (Prometheus history);
    # False right after a hole in that history: a share of one or two samples is not a lasting loss
    observed: bool = True
    paused_recent_s: float = 0.0  # seconds of the evidence window in pauses (runs past the pause allowance)
    # sampled coarser than the clock, two samples or more to the evidence window's half-minute: how many
    # samples of the evidence window booked waits (-1: fine samples, or one sample to the half-minute)
    waits_seen: int = -1
    pause_saved: bool = False  # the longest pause had the shape of a save (its first rank's, at the barrier)
    coarse: bool = False  # sampled coarser than the clock (a Prometheus history, a tracker's run)
    # seconds it has been stopped now with the shape of a save (its job's first rank, the others at the
    # barrier); 0 when it is not
    saving_s: float = 0.0


def covered(
    c: Context, pick: Callable[[Shares], float], fast_pick: Callable[[Shares], float] | None = None
) -> float:
    """The coverage rule's score for one share of the ledger."""
    return coverage(c.fast, c.slow, pick, SCORE_ENTER.value, SCORE_EXIT.value, fast_pick, c.recent)


def clamp(x: float) -> float:
    return 0.0 if x < 0 else 1.0 if x > 1 else x


def ramp(x: float, zero: float, one: float) -> float:
    """0 at ``zero``, 1 at ``one``, linear between (either direction)."""
    r = (x - zero) / (one - zero)
    return 0.0 if r < 0 else 1.0 if r > 1 else r  # clamp, inline: ramps run ~20 times per GPU a second


# ---- data starvation ---------------------------------------------------------------------------


def starvation(f: GpuFeatures, h: HostFeatures | None, waiting: float | None = None) -> Evidence:
    """The GPU waits for its input: busy/idle rhythm (or a wide swing), power well under what it could
    draw and wave-like. Peers waiting in NCCL keep a kernel resident, so they never show idle gaps.
    ``waiting``: the ledger's share of the window spent waiting for input; it replaces the raw idle share,
    so that start-up (idle in the ledger) and framework gaps of a busy job are not mistaken for it."""
    if f.util_mean is None:
        return Evidence(missing="needs utilization.gpu")
    if f.n < MIN_POINTS or (f.busy_fraction or 0.0) < STARVATION_BUSY_FRACTION.value:
        return Evidence()
    if f.mem_used_bytes is not None and f.mem_used_bytes < IDLE_MEMORY.value:
        return Evidence()  # no job holds the GPU: nothing can starve
    if f.trailing_idle_s > STARVATION_PAUSE.value:
        return Evidence(score=PAUSE_SCORE)  # a pause, not the rhythm of a starving pipeline
    # sustained: the rhythm shows in both halves of the window (a single dip lives in one half)
    halves = [h for h in f.halves if h is not None]
    rhythm = recurring(f, waiting)
    if waiting is not None and waiting < STARVATION_IDLE_FRACTION.value / 2:
        swing = 0.0  # the ledger sees no waiting: a swing between phases (start-up, evaluation) is not it
    else:
        swing = min((_swing(h) for h in halves), default=0.0)
    util_evidence = max(rhythm, swing)
    score = util_evidence
    ratio = f.power_ratio
    if ratio is not None:
        low = ramp(ratio, FED_POWER, POWER_LOW.value)
        waves = ramp(f.power_cv or 0.0, *WAVES_CV)
        # power confirms; a board whose idle power is high may not drop far, so it only weighs 40 %
        score = util_evidence * (1 - CONFIRM_WEIGHT + CONFIRM_WEIGHT * max(low, waves))
    return Evidence(score=score, cause=starvation_cause(f, h) if score > 0 else "")


def recurring(f: GpuFeatures, waiting: float | None = None) -> float:
    """The busy/idle rhythm's score, when it shows in both halves of the evidence window: waits that
    recur (a single dip lives in one half, a pause is one gap)."""
    idle = (f.idle_fraction or 0.0) if waiting is None else waiting
    rhythm = _rhythm(idle, f.gaps)
    halves = [h for h in f.halves if h is not None]
    if len(halves) < 2 or any(h.gaps < 1 or h.idle_fraction < MIN_HALF_IDLE for h in halves):
        rhythm = min(rhythm, BELOW_ENTER)
    return rhythm


def _rhythm(idle: float, gaps: float) -> float:
    """Busy/idle alternation: idle share and the number of separate gaps (per window)."""
    line = STARVATION_IDLE_FRACTION.value
    score = ramp(idle, MIN_HALF_IDLE, line + RAMP_WIDTH) * ramp(gaps, 0, STARVATION_GAPS.value)
    if idle < line or gaps < STARVATION_GAPS.value:
        score = min(score, BELOW_ENTER)
    return score


def _swing(h: UtilStats) -> float:
    """Utilization swinging well below full (coarse sampling blurs the gaps into 60-80 %)."""
    low = ramp(h.mean, STARVATION_SWING_MEAN.value + SWING_ABOVE, STARVATION_SWING_MEAN.value - SWING_BELOW)
    spread = STARVATION_SWING_SPREAD.value
    return low * ramp(h.spread, spread - RAMP_WIDTH, spread + RAMP_WIDTH)


def starvation_cause(f: GpuFeatures, h: HostFeatures | None) -> str:
    """Why the input is late, from the node's signals: the strongest evidence wins."""
    strengths: dict[str, float] = {}
    if h is not None:
        if h.shm_ratio is not None:
            strengths["shm"] = ramp(h.shm_ratio, SHM_CAUSE_FROM, SHM_WARNING.value) * SHM_CAUSE_WEIGHT
        io = [
            x
            for x in (_over(h.iowait, IOWAIT_HIGH.value), _over(h.psi_io, PSI_IO_HIGH.value))
            if x is not None
        ]
        if io:
            strengths["io"] = max(io)
        cpu = [
            x for x in (_over(h.core_busy_max, CORE_PINNED.value), _over(h.psi_cpu, PSI_CPU_HIGH.value)) if x
        ]
        if cpu:
            strengths["cpu"] = max(cpu)
    transfer = []
    if f.mem_util_in_gaps is not None:
        transfer.append(ramp(f.mem_util_in_gaps, *COPY_UTIL))  # copies while no kernel runs
    if f.pcie_bps is not None:
        transfer.append(f.pcie_bps / PCIE_BUSY.value)  # the host link kept busy: offload, pageable copies
    if transfer:
        strengths["host_transfer"] = max(transfer)
    cause, strength = max(strengths.items(), key=lambda kv: kv[1], default=("unknown", 0.0))
    return cause if strength >= 1.0 else "unknown"


def _over(value: float | None, line: float) -> float | None:
    """1.0 at the line, more above it."""
    return None if value is None else value / line


# ---- communication hang ------------------------------------------------------------------------


def comm_hang(f: GpuFeatures) -> Evidence:
    """Stuck in a collective: the NCCL kernel keeps utilization pinned while power, SM activity and
    traffic all say nothing is being computed or moved."""
    if f.util_p05 is None:
        return Evidence(missing="needs utilization.gpu")
    quiet: list[float] = []
    if f.power_ratio is not None:
        idle_power = ramp(f.power_ratio, HANG_POWER.value + RAMP_WIDTH, HANG_POWER.value)
        quiet.append(idle_power * ramp(f.power_cv or 0.0, *FLAT_CV))
    if f.sm_mean is not None:
        quiet.append(ramp(f.sm_mean, HANG_SM.value + RAMP_WIDTH, HANG_SM.value))
    if not quiet:
        return Evidence(missing="needs power.draw with a power limit, or GPM SM activity")
    for traffic in (f.nvlink_bps, f.pcie_bps):
        if traffic is not None:
            quiet.append(ramp(traffic, 2 * HANG_TRAFFIC.value, HANG_TRAFFIC.value))
    if f.mem_util_mean is not None:
        quiet.append(ramp(f.mem_util_mean, LEDGER_COMM_MEM_UTIL.value, LEDGER_COMM_MEM_UTIL.value / 2))
    pinned = ramp(f.util_p05, HANG_UTIL.value - RAMP_WIDTH, HANG_UTIL.value)
    return Evidence(score=pinned * min(quiet))


def waiting_in_collective(f: GpuFeatures, recent: Shares | None = None, fine: bool = True) -> bool:
    """A peer of a starved rank: it never idles (a collective kernel stays resident while it waits) and
    draws well under what it may (a kernel polling a flag computes nothing), or the ledger puts a good
    part of its recent time inside collectives."""
    if recent is not None and recent.get("comm_wait") >= STARVATION_IDLE_FRACTION.value:
        return True
    if fine and recent is not None and (f.sm_mean is not None or f.mem_util_mean is not None):
        # the ledger read its SM activity or memory traffic, which tell a collective per sample, and
        # found none: power alone does not outrank them (a memory-bound job of its own draws little too).
        # Sampled coarser than the work (``fine`` False: one sample per 15-60 s), a sample catches a
        # rank's wait by chance, and the averaged power says more.
        return False
    if f.power_ratio is None:
        return False  # pinned utilization without power: computing and spinning read alike
    fed = f.power_ratio >= FED_POWER  # computing: a spinning wait draws little
    return f.util_mean is not None and f.util_mean >= PINNED and not f.idle_fraction and not fed


# ---- thermal -----------------------------------------------------------------------------------


def thermal(f: GpuFeatures, slowdown_c: float | None = None) -> Evidence:
    """Throttling for heat, or about to: thermal reasons in the clock events, clocks cut near the
    slowdown point, or a GPU above the hot line still climbing toward it."""
    if f.thermal_share is None and f.temp_last is None:
        return Evidence(missing="needs clocks_event_reasons.active or temperature.gpu")
    if (f.busy_fraction or 0.0) < UNDER_LOAD:
        return Evidence()  # not under load: a hot idle GPU does not slow anything
    parts = [0.0]
    if f.thermal_share is not None:
        parts.append(ramp(f.thermal_share, 0.0, THERMAL_REASON_SHARE.value))
    if f.temp_last is not None and f.temp_mean is not None:
        slowdown = slowdown_c or THERMAL_SLOWDOWN.value
        capped = (f.cap_share or 0.0) >= POWER_CAP_SHARE.value
        if (
            f.busy_clock_ratio is not None
            and not capped
            and f.temp_mean >= slowdown - THERMAL_SLOWDOWN_MARGIN.value
        ):
            drop = THERMAL_CLOCK_DROP.value
            parts.append(STRONG * ramp(f.busy_clock_ratio, drop + CLOCK_MARGIN, drop))
        rise = f.temp_slope or 0.0
        heading_for_slowdown = (
            rise >= THERMAL_RISE.value and (slowdown - f.temp_last) / rise <= THERMAL_HORIZON.value
        )
        if f.temp_last >= TEMP_HOT.value and heading_for_slowdown:
            parts.append(FORECAST)
        if f.temp_mean >= TEMP_HOT.value:
            parts.append(BELOW_ENTER)  # hot but steady: worth a look, not a verdict
    return Evidence(score=max(parts))


# ---- power cap ---------------------------------------------------------------------------------


def power_throttle(f: GpuFeatures) -> Evidence:
    """Held at the power cap with reduced clocks. Capped at the board's default limit is routine for
    training at TDP and only scores low; a cap well below the default is what matters."""
    if f.cap_share is None and (f.power_mean is None or f.limit_w is None):
        return Evidence(missing="needs clocks_event_reasons.active, or power.draw with power.limit")
    if (f.busy_fraction or 0.0) < UNDER_LOAD:
        return Evidence()
    share = f.cap_share
    if share is None:  # no reasons column: at the limit with clocks below their maximum
        at_limit = f.power_mean >= LEDGER_POWER_AT_LIMIT.value * f.limit_w  # type: ignore[operator]
        slowed = f.busy_clock_ratio is not None and f.busy_clock_ratio < LEDGER_THROTTLE_CLOCK.value
        share = 1.0 if at_limit and slowed else 0.0
    held = ramp(share, 0.0, POWER_CAP_SHARE.value)
    signals = ("clock reasons",) if f.cap_share is not None else ("power", "power limit", "clocks")
    if f.limit_w and f.default_w and f.limit_w < POWER_CAP_BELOW_DEFAULT.value * f.default_w:
        line = POWER_CAP_BELOW_DEFAULT.value
        depth = ramp(f.limit_w / f.default_w, line, line - CAP_DEPTH)
        score = held * (1 - CONFIRM_WEIGHT + CONFIRM_WEIGHT * depth)
        return Evidence(score, "cap_below_default", "", (*signals, "default limit"), detail=_cap_detail(f))
    clock = f.busy_clock_ratio
    if not f.default_w and clock is not None and clock < POWER_CAP_CLOCK_CUT.value:
        # no default limit in the log and no board name: clocks this far under their maximum at the limit
        # say the cap in force is below what the board runs at by default (an operator's `nvidia-smi -pl`)
        cut = POWER_CAP_CLOCK_CUT.value
        depth = ramp(clock, cut, cut - CAP_DEPTH)
        score = held * (1 - CONFIRM_WEIGHT + CONFIRM_WEIGHT * depth)
        return Evidence(score, "cap_below_default", "", (*signals, "clocks"), detail=_cap_detail(f))
    return Evidence(score=SCORE_EXIT.value * held, cause="at_default_limit")  # routine: never fires


def _cap_detail(f: GpuFeatures) -> str:
    """The cap, the clock and what the board could draw, for the verdict's reader."""
    parts = []
    if f.limit_w:
        parts.append(f"held at its {f.limit_w:.0f} W limit")
    clock = f.busy_clock_ratio
    if clock is not None:
        top = f.sm_clock_max_hz
        mhz = f" ({clock * top / MEGA:.0f} of {top / MEGA:.0f} MHz)" if top else ""
        parts.append(f"SM clock at {clock:.0%} of its maximum{mhz}")
    if f.default_w:
        parts.append(f"the board could draw {f.default_w:.0f} W")
    else:
        parts.append("what the board could draw is not in the log (no default limit or board name)")
    return ", ".join(parts)


# ---- shared memory -----------------------------------------------------------------------------


def shm_exhaustion(h: HostFeatures | None) -> Evidence:
    """/dev/shm (or a memory-backed shm volume) nearly full, or filling so fast it will be within a
    minute. The score is the fill ratio itself."""
    if h is None or h.shm_ratio is None:
        return Evidence(missing="needs host.shm.used and host.shm.total")
    score = h.shm_ratio
    if (
        h.shm_ratio >= SHM_EARLY.value
        and h.shm_seconds_to_full is not None
        and h.shm_seconds_to_full <= SHM_FILL_HORIZON.value
    ):
        score = max(score, SHM_WARNING.value)
    return Evidence(score=clamp(score))


# ---- idle but allocated ------------------------------------------------------------------------


def idle_allocated(idle_seconds: float | None, horizon_s: float) -> Evidence:
    """Memory resident and no kernel: the score is the idle time over the horizon (5 minutes)."""
    if idle_seconds is None:
        return Evidence(missing="needs utilization.gpu and memory.used")
    return Evidence(score=clamp(idle_seconds / horizon_s))


# ---- NVLink ------------------------------------------------------------------------------------


def nvlink_degraded(f: GpuFeatures) -> Evidence:
    """Links down, P2P unavailable, fabric manager not ready, NVLink errors climbing."""
    parts: dict[str, float] = {}
    if f.nvlink_links:
        down = (f.nvlink_links - (f.nvlink_active or 0.0)) / f.nvlink_links
        parts["links_down"] = FIRM + (1 - FIRM) * down if down > 0 else 0.0
    if f.p2p_failed is not None:
        parts["p2p"] = FIRM if f.p2p_failed > 0 else 0.0
    if f.fabric_ready is not None:
        parts["fabric"] = 0.0 if f.fabric_ready else STRONG
    if f.nvlink_error_rate is not None:
        parts["errors"] = FORECAST * ramp(f.nvlink_error_rate, 0.0, NVLINK_ERROR_RATE.value)
    if not parts:
        return Evidence(missing="needs NVLink link state, P2P status or fabric state")
    cause, score = max(parts.items(), key=lambda kv: kv[1])
    return Evidence(score=score, cause=cause if score > 0 else "")


# ---- kind detectors: the shapes above and the coverage rule over the ledger -------------------------


def detect_starvation(c: Context) -> Evidence:
    """Waiting for input or for checkpoints: the rhythm in the evidence window, or the coverage rule over
    the ledger's input_wait + checkpoint time. The cause: checkpoint when synchronous long pauses
    dominate, else the node's strongest signal."""
    if c.idle_gaps and c.f.util_mean is not None:  # (without utilization: the shape says what it misses)
        # a server without requests, a stage between turns, a notebook: nothing waits; where that time
        # would have been a loss worth a page for a training job, say the class silenced it
        return Evidence(unsure=_silenced_by_class(c))
    # the ledger's waiting decides the shape's idle share: a save split by bursts of kernels (copying the
    # weights out) is one pause, not a rhythm
    shape = starvation(c.f, c.host, _forgiven(c.recent, c) if c.recent.counted_s else None)
    if shape.missing:
        return shape
    waiting = SCORE_ENTER.value * _step_waits(c) / RECENT_WAIT_SHARE.value
    score = max(
        shape.score,
        clamp(waiting),
        covered(c, lambda s: s.family("input"), lambda s: _forgiven(s, c)),
    )
    if score <= 0:
        return Evidence()
    signals = _starvation_signals(c)
    if not c.workload and score >= SCORE_EXIT.value:
        unsure = _unsure_starvation(c)
        if unsure:  # the time stays in the ledger; the page waits for evidence that tells it apart
            return Evidence(score=min(score, FADED), signals=signals, unsure=unsure)
    if c.turns:
        # the job's GPUs take turns like a pipeline's stages, the class not decided yet (within a minute):
        # under the exit score, so a track that began counting before the turns showed stops too
        score = min(score, FADED)
    if c.undecided:
        # no verdict starts on a GPU that may be a server or a notebook (its first minutes)
        if score >= SCORE_ENTER.value:
            unsure = (
                "its class is not decided yet: it looks like a server (memory reserved, quiet soon after) or "
                "a notebook, with too few quiet cycles to tell arrivals or a person from a loop; --workload "
                "training|serving (live: the pod's name or log) would decide"
            )
            return Evidence(score=min(score, BELOW_ENTER), signals=signals, unsure=unsure)
        score = min(score, BELOW_ENTER)
    if _unsustained(c):
        # a loss too small or too short to page starts no verdict, and one that entered on its rhythm
        # ends with it: a minute of recurring waits (an evaluation loading its next subset) is a phase
        score = min(score, FADED)
    if c.slow.get("checkpoint") >= c.slow.get("input_wait") and c.slow.get("checkpoint") > 0:
        return Evidence(score=score, cause="checkpoint", signals=signals)
    return Evidence(score=score, cause=starvation_cause(c.f, c.host), signals=signals)


def _step_waits(c: Context) -> float:
    """The evidence window's share of input waits, less a single pause in it: one save, evaluation or
    stop is judged by its length (the coverage rule, or a stopped rank's own rule), never as a half-minute
    of step-level waits; pauses that recur are a pattern and count."""
    if 0 <= c.waits_seen < RECURS:
        # one sample of a coarse history caught without a kernel stands for its whole step: a pause, not a
        # half-minute of waits (the coverage rule and the shape over the evidence window still read it)
        return 0.0
    if c.coarse and c.saving_s > 0 and c.fast.family("input") * c.fast.counted_s <= c.saving_s:
        return 0.0  # a save in progress on the first rank and no other wait: judged by its length
    waits = c.recent.get("input_wait")
    if c.pauses >= 2 or c.paused_recent_s <= 0 or c.recent.counted_s <= 0 or _beside_waits(c):
        return waits
    return max(0.0, waits - c.paused_recent_s / c.recent.counted_s)


def _loop_rhythm(f: GpuFeatures) -> bool:
    """A loop's rhythm: cycles alike, or a steady share of compute (steps finer than the samples)."""
    alike = f.cycle_cv is not None and f.cycles >= LOOP_MIN_CYCLES.value and f.cycle_cv < LOOP_CYCLE_CV.value
    return alike or (f.util_cv is not None and f.util_cv < LOOP_STEADY_CV.value)


def _starvation_signals(c: Context) -> tuple[str, ...]:
    """What a starvation score stands on: utilization always, and what else says it is a loop's wait."""
    signals = ["utilization"]
    if c.f.power_ratio is not None:
        signals.append("power")
    if c.peers > 0:
        signals.append("peers")
    if c.server_memory is False:
        signals.append("memory")
    if _loop_rhythm(c.f) or c.loop:
        signals.append("rhythm")
    return tuple(signals)


_CLASS_IDLE = {
    "serving": "a server's time without requests",
    "interactive": "a session waiting for its user",
    "pipeline": "a stage waiting for its turn",
}


def _silenced_by_class(c: Context) -> str:
    """What a class whose no-kernel time is idle capacity silenced ("": nothing worth a page): a fifth or
    more of the last two minutes without work, after work."""
    idle = c.fast.get("idle")
    if idle < STARVATION_SUSTAINED.value or c.fast.get("computing") + c.fast.get("throttled") <= 0:
        return ""
    return (
        f"{idle:.0%} of the last two minutes without work, booked as {_CLASS_IDLE.get(c.workload, 'idle')} "
        f"(its class: {c.workload}, see workload); if it is a training job, --workload training (live: "
        "the pod's name or log) would judge it as a wait for input"
    )


def _unsure_starvation(c: Context) -> str:
    """Why a job no word or shape has classed cannot be called starved on what the log shows ("": it
    can). A loop waiting for input and a server between requests both hold memory with no kernel; the
    job's ranks, memory that no KV cache fills, or a loop's rhythm tell them apart. Power that stays near
    what the GPU draws busy says the dips are work, not waits."""
    f = c.f
    ratio = f.power_ratio
    if ratio is not None and ratio >= FED_POWER and not c.ceiling_guessed:
        return (
            f"utilization dips while power stays at {ratio:.0%} of what it draws busy: a lighter phase of "
            "work, not a wait; --workload training (or the pod's log) would page it as starvation"
        )
    if ratio is None and c.peers <= 0 and not c.emptied and (f.busy_fraction or 0.0) > 0:
        # utilization alone, busy samples and dips between them but never a sample without a kernel while
        # held: its dips keep one part of the time, where a wait has none, and no power column says whether
        # they drew what the GPU draws busy (a lighter phase of work) or its idle floor (a steady partial
        # share with no busy sample is a loop whose steps are finer than the samples)
        return (
            "its dips keep a kernel part of the time (no sample without one) and no power.draw says "
            "whether they are waits or lighter work; --workload training (or power.draw) would decide"
        )
    if c.peers > 0 or _loop_rhythm(f) or c.loop:
        return ""
    # memory no KV cache fills rules a server out; a lighter phase of work (an evaluation between runs, a
    # session's own pace) still reads like a wait where no power column says what the dips drew
    if c.server_memory is False and ratio is not None:
        return ""
    seen = (
        f"its cycles vary by {f.cycle_cv:.0%}"
        if f.cycle_cv is not None and f.cycles >= LOOP_MIN_CYCLES.value
        else "too few cycles to show a rhythm"
    )
    if c.server_memory is False:
        return (
            f"waits with no kernel without a loop's rhythm ({seen}), alone, and no power.draw to tell a "
            "wait from a lighter phase of work: a starved loop, or a job between its runs; --workload "
            "training (or power.draw) would decide"
        )
    memory = (
        "memory held like a server's KV cache"
        if c.server_memory
        else "no memory.total or board name to tell a server's reservation"
    )
    return (
        f"waits with no kernel without a loop's rhythm ({seen}), alone, with {memory}: a starved loop or a "
        "server between requests; --workload training|serving (or memory.total) would decide"
    )


def paced_by_peer(c: Context, peers: dict[str, Context]) -> str:
    """What a GPU of a job waits for when a peer computes at a pace well above its own without waiting in
    a collective (a later stage of a split model): its idle time is that peer's pace, not a wait for
    input ("": no peer paces it)."""
    own = c.f.util_mean
    if own is None:
        return ""
    for gpu, p in sorted(peers.items()):
        util = p.f.util_mean
        if util is None or util >= PINNED or waiting_in_collective(p.f, p.recent):
            continue
        if util >= STARVATION_PEER_PACE.value * own and util - own >= STARVATION_IDLE_FRACTION.value:
            times = f" ({util / own:.1f}x its {own:.0%})" if own > 0 else ""
            return (
                f"waits for GPU {gpu} of its job, which computes at {util:.0%}{times} without waiting in a "
                "collective: a later stage of a model split over the GPUs, paced by its peer rather than "
                "starved of input"
            )
    return ""


def starved_among_peers(c: Context, peers_util: float, behind: int) -> Evidence:
    """Coarse samples (a Prometheus' 15-60 s scrapes) lose a starving rank's busy/idle rhythm, but not
    its averages: while its peers wait in collectives (utilization pinned, power low), the rank they wait
    for has less utilization than they have, by the share of its time it had no kernel while they
    kept one resident (``peers_util``: their mean utilization). ``behind``: the samples of the window in
    which it was that far under them; one may be a single pause (a save, a log flush), more recur. Gated as
    the rhythm is: never on a class whose gaps are idle capacity, nor a loss too small or short to page; a
    fifth of the last two minutes waiting is sustained here as a recurring rhythm is."""
    if c.idle_gaps or c.f.util_mean is None or waiting_in_collective(c.f, c.recent, fine=False):
        return Evidence()
    if (c.f.busy_fraction or 0.0) < STARVATION_BUSY_FRACTION.value:
        return Evidence()  # idle, not starved
    if c.f.mem_used_bytes is not None and c.f.mem_used_bytes < IDLE_MEMORY.value:
        return Evidence()
    line = STARVATION_IDLE_FRACTION.value
    score = ramp(peers_util - c.f.util_mean, line / 2, line + RAMP_WIDTH)
    if score <= 0:
        return Evidence()
    if c.undecided:
        score = min(score, BELOW_ENTER)
    if behind < RECURS or (c.fast.family("input") < STARVATION_SUSTAINED.value and _unsustained(c)):
        score = min(score, FADED)  # a pause, or too small a loss: under the exit score, holding nothing on
    return Evidence(score=score, cause=starvation_cause(c.f, c.host))


def stopped_rank(c: Context, run_s: float, waiting: tuple[str, ...]) -> Evidence:
    """A rank off its kernels for ``run_s`` while ``waiting``, the job's other ranks, sit in their
    collective for it, and not the job's first rank (the engine judges which): its host stopped feeding it.
    Strong at once: no healthy job leaves such a rank out that long (starvation.rank_stop_seconds says
    why), and the time is its whole job's. Its loss began when it stopped."""
    signals = ["utilization", "peers"]
    if c.f.power_ratio is not None:
        signals.insert(1, "power")
    others = ", ".join(waiting)
    return Evidence(
        score=STRONG,
        cause="stopped",
        signals=tuple(signals),
        detail=f"off its kernels for {run_s:.0f} s, GPU {others} of its job waiting for it in a collective",
        lasting_s=run_s,
    )


def _unsustained(c: Context) -> bool:
    """Too small or too short a loss to start a page: under a fifth of the last two minutes, or a fifth
    of them but not of five minutes unless it is heavier (a loss that started within the five minutes
    reaches their fifth late; a heavy one pages at once, a light one must last). A heavy loss that
    recurs at step scale (many separate waits across the evidence window, not one pause) is sustained
    by its shape as soon as the window shows it: waiting for the two minutes to fill would page a
    third lost a minute later than the rhythm tells."""
    if (
        c.recent.family("input") >= STARVATION_SUSTAINED.value
        and recurring(c.f, _forgiven(c.recent, c)) >= SCORE_ENTER.value
    ):
        return False
    if not c.observed:
        return True
    fast, slow = c.fast.family("input"), c.slow.family("input")
    if fast < STARVATION_SUSTAINED.value:
        return True
    return slow < STARVATION_SUSTAINED.value and fast < STARVATION_HEAVY.value


def _forgiven(s: Shares, c: Context) -> float:
    """The input family's share of a window, less the pause when the fast window holds only one: a single
    save or evaluation is not a pattern; repeated pauses and step-level waits are."""
    if s.counted_s <= 0:
        return 0.0
    waits = s.family("input")
    if c.pauses >= 2 or _beside_waits(c):
        return waits
    return max(0.0, waits - c.longest_pause_s / s.counted_s)


def _beside_waits(c: Context) -> bool:
    """Sampled coarser than the work (each sample an instant, a loader's rhythm falling between them), a
    pause is forgiven only with the shape of a save (the job's first rank alone off its kernels while the
    others hold one at the barrier) and as the only wait of the fast window: otherwise it is one more wait
    (a starving loader caught idle in samples in a row, every rank of a job starving at once). On fine
    samples a pause is told by its length alone."""
    if not c.coarse:
        return False
    if not c.pause_saved or c.fast.counted_s <= 0:
        return True
    return c.fast.family("input") - c.longest_pause_s / c.fast.counted_s > 0


def detect_comm_bound(c: Context) -> Evidence:
    """Steps dominated by slow collectives: kernels resident, few SMs active, traffic flowing, the job
    still progressing (a quiet, stopped collective is a stall instead)."""
    if c.f.util_mean is None:
        return Evidence(missing="needs utilization.gpu")
    if c.f.sm_mean is None and c.f.power_ratio is None:
        return Evidence(missing="needs GPM SM activity or power.draw with a power limit")
    traffic = [x for x in (c.f.nvlink_bps, c.f.pcie_bps) if x is not None]
    if traffic and max(traffic) < HANG_TRAFFIC.value:
        # nothing moves: a rank waiting for peers that are not in the collective (hung, or elsewhere),
        # which the hang rules judge; slow collectives move data
        return Evidence()
    fast = SCORE_ENTER.value * c.recent.get("comm_wait") / RECENT_WAIT_SHARE.value
    if c.recent.get("computing") + c.recent.get("throttled") <= 0:
        fast = 0.0  # nothing computed between the collectives: not a step pattern
    return Evidence(score=clamp(max(fast, covered(c, lambda s: s.family("comm")))))


def detect_comm_hang(c: Context) -> Evidence:
    ev = comm_hang(c.f)
    if ev.missing:
        return ev
    if c.silent_s is not None:
        return _hang_with_progress(ev, c.silent_s, c)
    return _hang_from_nvml(ev, c)


def _hang_with_progress(ev: Evidence, silent_s: float, c: Context) -> Evidence:
    """The job's own log decides: lines flowing is a job that moves (an idle server at the same NVML
    picture), a log silent past the allowance while the GPU sits in a quiet collective is a hang."""
    if silent_s < PROGRESS_SILENCE.value:
        return Evidence(score=min(_hang_from_nvml(ev, c).score, FLOWING))
    quiet = max(ev.score, SCORE_ENTER.value * c.recent.get("stalled") / STALLED_SHARE)
    if quiet >= SCORE_EXIT.value:
        return Evidence(score=STRONG, cause="no_progress")
    return _hang_from_nvml(ev, c)


def _hang_from_nvml(ev: Evidence, c: Context) -> Evidence:
    if c.peers == 0 and c.f.sm_mean is None and c.f.mem_util_mean is None:
        return Evidence()  # alone, low power at full utilization may be light compute: power cannot tell
    # the ledger's stalled time already means every rank quiet past the pause allowance: half of the
    # evidence window of it is as strong as the raw shape over the whole window
    stalled = SCORE_ENTER.value * c.recent.get("stalled") / STALLED_SHARE
    return Evidence(score=clamp(max(ev.score, stalled, covered(c, lambda s: s.family("stall")))))


def detect_thermal(c: Context) -> Evidence:
    ev = thermal(c.f, c.slowdown_c)
    if ev.missing:
        return ev
    return Evidence(score=max(ev.score, covered(c, lambda s: s.thermal)))


def detect_power(c: Context) -> Evidence:
    ev = power_throttle(c.f)
    if ev.missing or ev.cause != "cap_below_default":
        return ev  # capped at the board's default limit: routine, the ledger's throttled time says how much
    ev.score = max(ev.score, covered(c, lambda s: s.get("throttled") - s.thermal))
    return ev


def detect_shm(c: Context) -> Evidence:
    return shm_exhaustion(c.host)


IDLE_CAUSES = {"serving": "no_requests", "interactive": "notebook"}  # what an idle GPU of each class is


def detect_idle(c: Context) -> Evidence:
    ev = idle_allocated(c.idle_s, c.idle_horizon_s)
    if not ev.score:
        return ev
    return Evidence(ev.score, IDLE_CAUSES.get(c.workload, ""), ev.missing, lasting_s=c.idle_s or 0.0)


def detect_nvlink(c: Context) -> Evidence:
    return nvlink_degraded(c.f)
