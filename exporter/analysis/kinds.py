"""The verdict registry: each kind named once, with everything the rest of the code needs to know about
it: its detector and timing, the ledger family whose loss it reports, the alert that pages for it (name
and text; its `for` and severity are the threshold table's entry of that name), how dashboards draw it,
and its part in the job-level reasoning (whose fault it is when the GPUs of one job wait for each other).
The engine, the alert rules, dashboards, docs and the bench read this; adding a kind is one entry here,
its detector, its thresholds and its runbook."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from exporter.analysis import detectors as d
from exporter.analysis.features import GpuFeatures
from exporter.analysis.ledger import Shares
from exporter.analysis.verdicts import Timing
from exporter.policy.thresholds import (
    ALERT_POLICIES,
    COMM_BOUND_FIRE,
    COMM_BOUND_RESOLVE,
    HANG_FIRE,
    HANG_NO_PROGRESS_FIRE,
    HANG_PEER_FIRE,
    HANG_POWER,
    HANG_RESOLVE,
    IDLE_AFTER,
    IOWAIT_HIGH,
    LOOP_CYCLE_CV,
    NVLINK_ERROR_RATE,
    NVLINK_FIRE,
    NVLINK_RESOLVE,
    PCIE_BUSY,
    POWER_CAP_BELOW_DEFAULT,
    POWER_CAP_CLOCK_CUT,
    POWER_FIRE,
    POWER_RESOLVE,
    RANK_STOP,
    SCORE_ENTER,
    SCORE_EXIT,
    SHM_EARLY,
    SHM_FILL_HORIZON,
    SHM_RESOLVE,
    SHM_RESOLVE_RATIO,
    SHM_WARNING,
    STARVATION_FIRE,
    STARVATION_RESOLVE,
    STARVATION_SUSTAINED,
    TEMP_HOT,
    THERMAL_FIRE,
    THERMAL_RESOLVE,
    AlertPolicy,
    Threshold,
)

# where the runbooks are published (docs/runbooks/<alert>.md of the repository): the alert rules link each
# alert's (`<base><AlertName>.md`), and replay's summary ends with the runbooks of the verdicts it found.
# The one default, for the shipped rules file and the chart (`prometheusRule.runbookBaseUrl`, which
# overrides it); a copy of docs/runbooks/ on a wiki or an internal git server is linked by the chart value,
# or for the plain rules file by `python -m devtools.artifacts.alerts --runbook-base-url URL`
# (docs/alertmanager.md).
RUNBOOK_BASE = "https://github.com/gpu-bottleneck-exporter/gpu-bottleneck-exporter/blob/main/docs/runbooks/"
FULL = 1.0  # a score that is a fraction of a horizon fires when the horizon is reached
# units the texts write numbers in
MINUTE_S = 60
PERCENT = 100
GIGA = 1e9


class JobCause(Enum):
    """What the job rules find across nodes (devtools/artifacts/recording.py records the evidence)."""

    STRAGGLER = "straggler"  # one rank holds its job back: its peers wait for it in collectives
    HANG = "hang"  # the job is hung in a collective


@dataclass(frozen=True)
class AlertText:
    """The verdict alert's annotations."""

    summary: str
    description: str  # follows "GPU <n> (<uuid>) on <node> (pod <namespace>/<pod>)"
    cause: str = ""  # page only for this cause of the kind


# the process holding an idle GPU's memory, from the exporter's gpu_holder_info on the verdict's own labels
# (a pod's share and a MIG instance have theirs); nothing is said where it is not known
HOLDER_TEXT = (
    '{{ with printf "gpu_holder_info{instance=%q, gpu=%q, mig_instance=%q, pod=%q}" $labels.instance '
    "$labels.gpu $labels.mig_instance $labels.pod | query }}{{ with . | first }} Its memory is held by "
    "process {{ .Labels.pid }} ({{ .Labels.command }}).{{ end }}{{ end }}"
)


@dataclass(frozen=True)
class Shared:
    """How long a job-wide verdict must hold, and the cause it carries, in one case of how it is shared."""

    fire: Threshold
    cause: str


@dataclass(frozen=True)
class JobEvent:
    """A kind that is one event of the whole job (a hang): its hold and cause depend on its ranks."""

    every_rank: Shared  # every GPU of the job shows it
    some_ranks: Shared  # some rank is elsewhere (saving, loading): the others wait for it
    confirmed: Shared  # every GPU shows it with this cause of its own (the job's log confirms it)


@dataclass(frozen=True)
class PeerFault:
    """A cause of the kind that may be a peer's fault: not blamed when peers explain all of it."""

    cause: str  # this GPU's cause...
    peer_causes: tuple[str, ...]  # ...is explained by peers of the job with one of these causes...
    involved: Callable[[GpuFeatures], float | None]  # ...when they are at least as many as this counts


@dataclass(frozen=True)
class Inputs:
    """What the detector needs (docs/troubleshooting.md's "A verdict never appears" table)."""

    needs: str
    series: str  # the series behind them on a live node


@dataclass(frozen=True)
class Kind:
    name: str
    detector: Callable[[d.Context], d.Evidence]
    timing: Timing
    alert: str  # the alert that pages for it (its `for` and severity live in the threshold table)
    family: str  # the ledger family whose lost time it reports ("" when it is not a time loss)
    causes: tuple[str, ...]
    meaning: str
    label: str  # dashboards: the state timeline's text...
    colour: str  # ...and colour
    rank: int  # ...and code: the most serious verdict of a GPU is the one shown
    inputs: Inputs
    doc: str  # its paragraph in docs/detection.md ("" when another kind's paragraph covers it)
    text: AlertText | None = None  # None: its alert is a rule on raw signals, not on the verdict
    score: str = ""  # what gpu_bottleneck_score is, when it is not plain evidence
    routine: tuple[str, ...] = ()  # causes of evidence that never fires: never a `cause` label
    # ---- job-level reasoning: the GPUs of one job wait for each other --------------------------------
    holds_peers_back: bool = False  # its GPU's peers wait for it: they get the related verdicts, not it
    explained_by: JobCause | None = None  # silent while the job's cause holds (a peer holding it back)

    job_event: JobEvent | None = None
    peer_fault: PeerFault | None = None
    # whose loss it is on a GPU shared by pods (time-slicing): "pod" kinds are judged on each pod's share
    # of the GPU and not on the GPU, "gpu" kinds (heat, power, links, hangs) on the GPU alone
    scope: str = "gpu"
    # the share of a stretch of the ledger that is its loss, when that is not its family's: where an
    # episode's onset and end are read (None: its family's share; neither: not a loss of time)
    loss: Callable[[Shares], float] | None = None
    # its detector tells how long its condition has held (``Evidence.lasting_s``, an idle stretch): its
    # onset is read from that, not from the ledger (whose idle time a server's gaps share)
    lasting: bool = False

    @property
    def lost(self) -> Callable[[Shares], float] | None:
        """The share of a stretch of the ledger lost to it (None: not read from the ledger)."""
        if self.lasting:
            return None
        if self.loss is not None:
            return self.loss
        family = self.family
        return (lambda s: s.family(family)) if family else None

    @property
    def policy(self) -> AlertPolicy:
        return ALERT_POLICIES[self.alert]

    @property
    def labelled_causes(self) -> tuple[str, ...]:
        """The `cause` label values a verdict of this kind carries."""
        return tuple(c for c in self.causes if c not in self.routine)

    def runbook(self, base: str = RUNBOOK_BASE) -> str:
        """Its alert's runbook: what the verdict means, how to confirm it, its likely causes and fixes."""
        return f"{base}{self.alert}.md"


def _timing(fire: Threshold, resolve: Threshold) -> Timing:
    return Timing(SCORE_ENTER.value, SCORE_EXIT.value, fire.value, resolve.value)


def _minutes(*seconds: Threshold) -> str:
    return f"{sum(t.value for t in seconds) / MINUTE_S:g}"


def _thermal(s: Shares) -> float:
    return s.thermal


def _power_capped(s: Shares) -> float:
    return s.get("throttled") - s.thermal


def _p2p_failed(f: GpuFeatures) -> float | None:
    return f.p2p_failed


IDLE_ALERT = "GpuIdleAllocated"


def _pct(t: Threshold) -> str:
    return f"{t.value * PERCENT:g} %"


def _s(t: Threshold) -> str:
    return f"{t.value:g} s"


_ALL = (
    Kind(
        "data_starvation",
        d.detect_starvation,
        _timing(STARVATION_FIRE, STARVATION_RESOLVE),
        "GpuDataStarvation",
        "input",
        ("io", "cpu", "shm", "host_transfer", "checkpoint", "stopped", "unknown"),
        "the GPU waits for its input (loader, offload, copies) or for checkpoints to be written",
        "starving",
        "red",
        8,
        Inputs(
            "utilization and framebuffer use; its cause needs the host signals",
            "`gpu_utilization_ratio`, `gpu_memory_used_bytes`; causes from `gpu_node_cpu_iowait_ratio`, "
            "`gpu_node_pressure_ratio`, `gpu_node_cpu_core_busy_max_ratio`, `gpu_node_shm_used_bytes`, "
            "`gpu_memory_utilization_ratio`, `gpu_pcie_bytes_total` (`unknown` without them)",
        ),
        "**`data_starvation`**: the GPU waits for its input or for checkpoints. The ledger's `input_wait` "
        "and `checkpoint` time, or the rhythm of a starving loader (utilization 100 -> 0 -> 100, power "
        "well below the limit and wave-like), or half of the last half-minute waiting. The `cause`: "
        "`checkpoint` when synchronous long pauses dominate the waiting; otherwise the node's strongest "
        f"signal: `shm` (the shm volume filling past {_pct(SHM_WARNING)}), `io` (I/O wait over "
        f"{_pct(IOWAIT_HIGH)} or I/O pressure), `cpu` (a core pinned or CPU pressure), `host_transfer` "
        f"(PCIe carrying {PCIE_BUSY.value / GIGA:g} GB/s, or the memory controller busy while no kernel "
        "runs: offload, pageable copies), else `unknown`; `stopped` when the rank stopped while the other "
        f"ranks of its job wait for it in their collective: off its kernels for {_s(RANK_STOP)}, and not "
        "the job's first rank (where synchronous saves run); it fires at once and ends with the stop where "
        "nothing else holds it. *Peers are not blamed*: the other ranks of a "
        "data-parallel job wait for a starved rank inside NCCL (their time is `comm_wait`), and they get "
        "neither this verdict nor `comm_bound`; replay names them next to the starved rank. A verdict "
        f"starts only on a loss that matters ({_pct(STARVATION_SUSTAINED)} of the last half minute in "
        "recurring step-sized waits, or of the last two minutes; see the workload class below), and "
        "never on a server waiting for requests, a notebook or a pipeline stage. A job no word and no "
        "shape has classed pages only on evidence that tells a loop from a server between requests: the "
        "job's other GPUs, memory no KV cache fills (with `memory.total` or a board name), or a loop's "
        f"rhythm (cycles alike within {_pct(LOOP_CYCLE_CV)}, a steady share of compute, or stretches "
        "without work that begin at whole multiples of one period: a slow loop whose bursts fall between "
        "the samples); power near what the GPU draws busy says its dips are work. A GPU whose busier peer "
        "is neither pinned nor in a collective waits for that peer (a later stage of a model split), not "
        "for input. Without such evidence the time stays in the ledger and `replay` says what it saw and "
        "what would decide it (`--workload`, a column).",
        AlertText(
            "GPU is starving for input data.",
            ' {{ if eq $labels.cause "checkpoint" }}stalls with every rank of its job while checkpoints are '
            "written (cause: checkpoint): long pauses with memory resident and no kernel take a large share "
            'of its time.{{ else if eq $labels.cause "stopped" }}has stopped (cause: stopped): it has '
            "had no kernel for a while and the other ranks of its job wait for it in their collective, so "
            "the whole job stands still. Its host no longer feeds it: a hung read, a loader deadlock, a "
            "process stuck outside CUDA.{{ else }}waits for its input every step (probable cause: "
            "{{ $labels.cause }}). "
            "Utilization alternates between busy and idle and power stays far below TDP.{{ end }} See the "
            "runbook for the cause.",
        ),
        holds_peers_back=True,
        scope="pod",
    ),
    Kind(
        "comm_hang",
        d.detect_comm_hang,
        _timing(HANG_FIRE, HANG_RESOLVE),
        "GpuCommHang",
        "stall",
        ("all_ranks", "peer_not_in_collective", "no_progress"),
        "stuck in a collective: util pinned, power near idle, no NVLink/PCIe traffic, for minutes",
        "hung",
        "dark-red",
        9,
        Inputs(
            "utilization; power, SM activity, copy and link traffic as further evidence of a quiet GPU",
            "`gpu_utilization_ratio`; `gpu_power_watts`, `gpu_sm_active_ratio`, "
            "`gpu_memory_utilization_ratio`, `gpu_nvlink_bytes_total`, `gpu_pcie_bytes_total`",
        ),
        "**`comm_hang`**: stuck in a collective: every rank pinned at 100 % with power near idle "
        f"(under {_pct(HANG_POWER)} of the limit) and flat, few SMs active, no NVLink or PCIe traffic. "
        f"When every GPU of the job is stalled it fires after {_s(HANG_FIRE)} more "
        '(`cause="all_ranks"`), well inside PyTorch\'s 10-minute NCCL watchdog; when some rank is not in '
        f"the collective (saving, loading) the others wait for it, and that is a hang after "
        f"{_s(HANG_PEER_FIRE)} (`peer_not_in_collective`). A GPU alone in its job is only called hung "
        "on SM activity or memory utilization, not on power alone.",
        AlertText(
            "GPU is stuck in a collective (NCCL hang).",
            " has kept an NCCL kernel resident for minutes with near-idle power and no NVLink or PCIe "
            "traffic ({{ $labels.cause }}). The job is hung and will hit the NCCL watchdog.",
        ),
        explained_by=JobCause.HANG,
        # a hang is one job event: every rank pinned and quiet. If some rank is not in the collective
        # (checkpointing, loading) the others wait for it: only a long wait counts.
        job_event=JobEvent(
            every_rank=Shared(HANG_FIRE, "all_ranks"),
            some_ranks=Shared(HANG_PEER_FIRE, "peer_not_in_collective"),
            confirmed=Shared(HANG_NO_PROGRESS_FIRE, "no_progress"),
        ),
    ),
    Kind(
        "comm_bound",
        d.detect_comm_bound,
        _timing(COMM_BOUND_FIRE, COMM_BOUND_RESOLVE),
        "GpuCommBound",
        "comm",
        (),
        "steps dominated by slow collectives: kernels resident, few SMs active, traffic flowing",
        "comm-bound",
        "light-red",
        7,
        Inputs(
            "utilization and GPM SM activity, or power with a limit",
            "`gpu_utilization_ratio` and `gpu_sm_active_ratio` (Hopper or newer), or `gpu_power_watts` "
            "with `gpu_power_limit_watts`",
        ),
        "**`comm_bound`**: steps dominated by slow collectives (NCCL over sockets instead of NVLink or EFA, "
        "P2P disabled). The ledger's `comm_wait` time: kernels resident, few SMs active or the memory "
        "controller quiet, traffic flowing, the job still computing between collectives. Not a hang: it "
        "progresses. A collective where nothing moves over NVLink or PCIe (where they are measured) is "
        "no slow transport but a wait for peers that are not in it: the hang rules judge that.",
        AlertText(
            "GPU steps are dominated by slow collectives.",
            " spends much of every step inside collectives: kernels stay resident while few SMs are active "
            "and traffic keeps flowing. NCCL probably runs on a slow transport (sockets/TCP, P2P disabled, "
            "no NVLink or EFA).",
        ),
        # peers waiting for a starved rank: the rank is the problem, not the transport
        explained_by=JobCause.STRAGGLER,
    ),
    Kind(
        "thermal_throttle",
        d.detect_thermal,
        _timing(THERMAL_FIRE, THERMAL_RESOLVE),
        "GpuThermalThrottling",
        "throttle",
        (),
        "clocks lowered for heat, or heading for the slowdown point",
        "thermal",
        "orange",
        4,
        Inputs("clock-event reasons or temperature", "`gpu_clock_event_active`, `gpu_temperature_celsius`"),
        "**`thermal_throttle`** and **`power_throttle`**: the ledger's `throttled` time, split by reason, "
        "plus the thermal shapes (reasons in the last 10 s, clocks cut near the slowdown point, a GPU above "
        f"{TEMP_HOT.value:g} °C climbing toward it). Capping at the board's default limit is routine for "
        f"training at TDP and never fires; a limit under {_pct(POWER_CAP_BELOW_DEFAULT)} of the default "
        f"does (`cap_below_default`), and so does a board held at its limit with its SM clock under "
        f"{_pct(POWER_CAP_CLOCK_CUT)} of its maximum where the log has no default limit or board name (an "
        "operator's cap): the verdict names the cap, the clock and what the board could draw.",
        AlertText(
            "GPU is throttling for heat.",
            " lowers its clocks for heat (or is about to): utilization stays high while steps slow down.",
        ),
        loss=_thermal,
    ),
    Kind(
        "power_throttle",
        d.detect_power,
        _timing(POWER_FIRE, POWER_RESOLVE),
        "GpuPowerCapped",
        "throttle",
        ("cap_below_default", "at_default_limit"),
        "held at a power cap below the board's default limit, clocks reduced",
        "power capped",
        "purple",
        3,
        Inputs(
            "clock-event reasons, or power with its limit; `cap_below_default` also the default limit",
            "`gpu_clock_event_active`, `gpu_power_watts`, `gpu_power_limit_watts`, "
            "`gpu_power_default_limit_watts`",
        ),
        "",  # thermal_throttle's paragraph covers it
        AlertText(
            "GPU is held at a power cap below its default limit.",
            " is held at a power limit below the board's default and its clocks are reduced.",
            cause="cap_below_default",
        ),
        routine=("at_default_limit",),
        loss=_power_capped,
    ),
    Kind(
        "shm_exhaustion",
        d.detect_shm,
        # the score is the fill ratio: fire at the warning line, resolve below the resolve line
        Timing(SHM_WARNING.value, SHM_RESOLVE_RATIO.value, 0.0, SHM_RESOLVE.value),
        "GpuShmNearlyFull",
        "",
        (),
        "/dev/shm or a shm volume nearly full: DataLoader workers about to die with Bus error",
        "shm full",
        "dark-orange",
        6,
        Inputs(
            "shm size and use",
            "`gpu_node_shm_used_bytes` and `gpu_node_shm_size_bytes`: the node's `/dev/shm` needs "
            "`hostMounts.devShm.enabled`, pods' volumes `hostMounts.proc.enabled` and "
            "`hostMounts.kubeletPods.enabled`",
        ),
        f"**`shm_exhaustion`**: `/dev/shm` or a pod's memory-backed shm volume at {_pct(SHM_WARNING)}, "
        f"or above {_pct(SHM_EARLY)} and full within {_s(SHM_FILL_HORIZON)} at its fill rate.",
        score="the fill ratio",
    ),
    Kind(
        "idle_allocated",
        d.detect_idle,
        # the score is idle time over the idle horizon: it fires when that is reached, resolves on work
        Timing(FULL, FULL, 0.0, 0.0),
        IDLE_ALERT,
        "idle",
        ("no_requests", "notebook"),
        "memory resident, no kernel for 5 minutes: a reserved GPU doing nothing",
        "idle allocated",
        "blue",
        2,
        Inputs("utilization and framebuffer use", "`gpu_utilization_ratio`, `gpu_memory_used_bytes`"),
        f"**`idle_allocated`**: memory resident and no kernel for {_s(IDLE_AFTER)}. Start-up (the "
        "ledger's `idle` before the job trains) is not a verdict until it lasts that long. The `cause` says "
        "what kind of job holds it: `no_requests` for an inference server that has had no request (idle "
        "serving capacity: scale it down or share the GPU), `notebook` for an interactive session waiting "
        "for its user; none for a training or batch job.",
        AlertText(
            "GPU is allocated but idle.",
            " has held memory without running a kernel for more than "
            + _minutes(IDLE_AFTER, ALERT_POLICIES[IDLE_ALERT].for_)
            + ' minutes{{ if eq $labels.cause "no_requests" }}: an inference server with no requests (idle '
            'serving capacity){{ else if eq $labels.cause "notebook" }}: a notebook session waiting for its '
            "user{{ end }}." + HOLDER_TEXT,
        ),
        score="idle time over five minutes",
        scope="pod",
        lasting=True,
    ),
    Kind(
        "nvlink_degraded",
        d.detect_nvlink,
        _timing(NVLINK_FIRE, NVLINK_RESOLVE),
        "GpuNvlinkDown",
        "",
        ("links_down", "fabric", "p2p", "errors"),
        "links down, fabric not ready, P2P failing, NVLink errors climbing",
        "NVLink degraded",
        "yellow",
        5,
        Inputs(
            "NVLink link state, P2P status or fabric state",
            "`gpu_nvlink_up`, `gpu_p2p_status`, `gpu_fabric_state` (absent on PCIe GPUs without NVLink: no "
            "verdict there)",
        ),
        "**`nvlink_degraded`**: links down, the NVSwitch fabric not registered, P2P failing, or NVLink "
        f"errors above {NVLINK_ERROR_RATE.value:g} a minute; a GPU whose P2P fails only toward a broken "
        "peer is not blamed.",
        # P2P failing only toward peers that lost their own links or fabric is their fault
        peer_fault=PeerFault("p2p", ("links_down", "fabric"), _p2p_failed),
    ),
)

KINDS: dict[str, Kind] = {k.name: k for k in _ALL}
NAMES: tuple[str, ...] = tuple(KINDS)


def in_scope(scope: str) -> tuple[str, ...]:
    """The kinds judged on a shared GPU's pods and a MIG GPU's instances ("pod"), or on the GPU ("gpu")."""
    return tuple(k.name for k in KINDS.values() if k.scope == scope)
