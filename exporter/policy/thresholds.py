"""The threshold table: every number the analysis, the alert rules, the dashboards and the Helm values
use, each with the reason it has that value. Generated artifacts read this module; nothing else types
these numbers again (a test fails when a generated file disagrees with it).

Keys are dotted: ``area.name``. Units: ratio (0-1), celsius, seconds, watts, bytes, bytes_per_second,
count, per_minute. The first block is the classic threshold table (the numbers operators know);
the rest are the detectors' parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GiB = 1 << 30


@dataclass(frozen=True)
class Threshold:
    key: str
    value: float
    unit: str
    reason: str


@dataclass(frozen=True)
class Choice:
    """A policy word rather than a number (an alert's severity), with its reason."""

    key: str
    value: str
    reason: str


_TABLE: dict[str, Threshold] = {}
_CHOICES: dict[str, Choice] = {}


def _t(key: str, value: float, unit: str, reason: str) -> Threshold:
    if key in _TABLE:
        raise ValueError(f"threshold {key} defined twice")
    entry = _TABLE[key] = Threshold(key, value, unit, reason)
    return entry


def _c(key: str, value: str, reason: str) -> Choice:
    if key in _CHOICES or key in _TABLE:
        raise ValueError(f"policy {key} defined twice")
    entry = _CHOICES[key] = Choice(key, value, reason)
    return entry


# ---- the classic table ---------------------------------------------------------------------------

UTIL_SUSPICION = _t(
    "gpu.util_suspicion",
    0.95,
    "ratio",
    "Volatile utilization that stays below 95 % while a job holds the GPU means a data or communication "
    "bottleneck is suspected: a well-fed training step keeps a kernel resident nearly all the time.",
)
UTIL_IDLE_LINE = _t(
    "gpu.util_idle_line",
    0.10,
    "ratio",
    "A driver utilization sample below 10 % means no kernel ran for most of its sample period: the GPU "
    "was waiting, not working. Samples are whole percents over 1/6-1 s periods, so a real gap reads 0-10 %.",
)
POWER_LOW = _t(
    "power.low_ratio",
    0.45,
    "ratio",
    "A busy H100 SXM sitting at 200-300 W of its 700 W TDP (29-43 %) is starving; healthy training holds "
    "steady near TDP (70-95 %). 45 % of the default limit separates the two on any board.",
)
TEMP_HOT = _t(
    "thermal.hot_celsius",
    80.0,
    "celsius",
    "Above about 80 degrees C the GPU is close to lowering its clocks: utilization stays at 100 % while "
    "steps get slower.",
)
SHM_WARNING = _t(
    "shm.warning_ratio",
    0.90,
    "ratio",
    "A /dev/shm (or memory-backed shm volume) 90 % full leaves DataLoader workers one burst of batches "
    "away from dying with 'Bus error'.",
)
SHM_CRITICAL = _t(
    "shm.critical_ratio",
    0.98,
    "ratio",
    "At 98 % the next shared-memory allocation of a worker fails: the job is about to die.",
)
SHM_FULL = _t(
    "shm.full_ratio",
    1.0,
    "ratio",
    "Full: the next shared-memory write fails and DataLoader workers die with 'Bus error'. Dashboards "
    "draw it next to the warning and critical lines.",
)
SHM_DEFAULT_BYTES = _t(
    "shm.kubernetes_default_bytes",
    64 * (1 << 20),
    "bytes",
    "Kubernetes gives a container 64 MiB of /dev/shm unless the pod mounts an emptyDir with medium: "
    "Memory; PyTorch DataLoader workers need far more.",
)
MEMORY_FULL = _t(
    "memory.full_ratio",
    0.97,
    "ratio",
    "A framebuffer 97 % full leaves no room for the allocator's next block: OOM risk.",
)
IOWAIT_HIGH = _t(
    "host.iowait_high_ratio",
    0.10,
    "ratio",
    "One tenth of all CPU time waiting for I/O on a GPU node means the loaders are blocked on storage "
    "(Lustre metadata, network file systems); a healthy node sits at a few percent.",
)
PSI_IO_HIGH = _t(
    "host.psi_io_high_ratio",
    0.20,
    "ratio",
    "Some task stalled on I/O a fifth of the time (PSI io some avg10): storage is the bottleneck.",
)
CORE_PINNED = _t(
    "host.core_pinned_ratio",
    0.95,
    "ratio",
    "A core busy 95 % of the time is pinned: too few loader workers or CPU-bound preprocessing.",
)
PSI_CPU_HIGH = _t(
    "host.psi_cpu_high_ratio",
    0.25,
    "ratio",
    "Runnable tasks waited for a CPU a quarter of the time (PSI cpu some avg10): the node is CPU-starved.",
)

# ---- analysis --------------------------------------------------------------------------------------

EVAL_INTERVAL = _t(
    "analysis.eval_interval_seconds",
    1.0,
    "seconds",
    "The analysis steps every second, live and on the virtual clock of a replay: each GPU's time ledger "
    "takes every second as it passes.",
)
VERDICT_INTERVAL = _t(
    "analysis.verdict_interval_seconds",
    3.0,
    "seconds",
    "Verdicts are judged every third step: their evidence spans 30 s and their alerts hold for 1-5 "
    "minutes, so a 3 s step moves a page by 1-3 s (measured over the example traces against judging "
    "every step: no page lost, none added, none false; every 5 s let one more hold fall under 90 %), "
    "while judging is the larger half of the analysis' CPU at 1 s sampling. A GPU that comes or goes, "
    "or the end of a trace, is judged at once.",
)
EVIDENCE_WINDOW = _t(
    "analysis.evidence_window_seconds",
    30.0,
    "seconds",
    "Half a minute holds 10-30 training steps and, at 0.2-1.5 s sampling, 20-150 samples: enough to see "
    "a busy/idle rhythm, short enough to detect within a minute. The exported idle fraction is the "
    "detectors' own over this window, so the dashboard's starvation line and the detector read one number.",
)
WINDOW_POINTS_PER_SECOND = _t(
    "analysis.window_max_points_per_second",
    100.0,
    "count",
    "A window holds at most 100 points per second of its span (3,000 for the 30 s evidence window): the "
    "fastest collection is 20 a second, NVML keeps at most 6 utilization samples a second and "
    "nvidia-smi -lms 10 logs 100. More are rows that share their times (a log whose rows all carry one "
    "timestamp): the oldest are dropped, so memory stays bounded whatever a trace's times do.",
)
SCORE_ENTER = _t(
    "analysis.score_enter",
    0.5,
    "ratio",
    "A verdict's evidence must reach this score to start counting.",
)
SCORE_EXIT = _t(
    "analysis.score_exit",
    0.3,
    "ratio",
    "...and must fall below this one to start resolving: the gap is the hysteresis that stops flapping.",
)

# ---- the time ledger: every second of a GPU goes to one state ---------------------------------------

LEDGER_STEADY_UTIL = _t(
    "ledger.steady_util_ratio",
    0.80,
    "ratio",
    "A utilization sample at or above 80 % counts as wholly working: the short gaps inside it are kernel "
    "launch and framework overhead of a step (healthy H100 jobs train at 84-91 %), not a wait for input.",
)
LEDGER_BUSY_UTIL = _t(
    "ledger.busy_util_ratio",
    0.50,
    "ratio",
    "At or below 50 % the no-kernel part of a sample is waiting time in full (utilization is the share of "
    "the sample period with a kernel resident); between 50 and 80 % it fades out. Also the line above "
    "which a sample is busy for the detectors' busy/idle rhythm.",
)
LEDGER_COMM_SM = _t(
    "ledger.comm_sm_per_util",
    0.25,
    "ratio",
    "A resident kernel with fewer than a quarter of the SMs active per unit of utilization is a collective "
    "waiting or moving data (an NCCL kernel occupies a few SMs), not compute (70-85 % of SMs).",
)
LEDGER_COMM_MEM_UTIL = _t(
    "ledger.comm_mem_util_ratio",
    0.10,
    "ratio",
    "Without SM activity: a GPU resident all second whose memory controller is under 10 % busy moves "
    "next to nothing through HBM: a collective spinning or crawling over a slow transport. Training "
    "kernels keep it 20-60 % busy.",
)
LEDGER_COMM_POWER_LOW = _t(
    "ledger.comm_power_low_ratio",
    0.25,
    "ratio",
    "Without SM activity or memory utilization, power tells a spin-wait from compute: where the draw sits "
    "between the GPU's idle floor (0) and its ceiling (1), per unit of utilization (a GPU resident 80 % of "
    "a second can only use 80 % of its headroom). Under a quarter of the headroom per resident second is a "
    "kernel polling a flag, not computing: an H100 waiting in NCCL draws 100-150 W (idle 70 W, ceiling "
    "700 W: 0.05-0.13), an RTX A5000 84 W (idle 57 W, 230 W: 0.16), a V100 40-70 W of 300 W (idle 40 W: "
    "under 0.12). Computing at full utilization uses half of the headroom or more on any board.",
)
LEDGER_COMM_POWER_HIGH = _t(
    "ledger.comm_power_high_ratio",
    0.45,
    "ratio",
    "...and above 45 % of the headroom per resident second it is computing (healthy training sits at "
    "0.5-1.0); in between the resident time is split in proportion. Power is averaged over about a second "
    "by the board, so this split is coarse: SM activity wins where it exists.",
)
POWER_FLOOR_TO_CEILING = _t(
    "power.floor_to_ceiling_ratio",
    6.0,
    "ratio",
    "A log with no power limit and no board name still shows the GPU's idle floor (its no-kernel samples). "
    "Boards' default limits are 5-15 times their idle draw (H100 SXM 700/70 W, A100 SXM 400/55 W, V100 "
    "300/40 W, RTX 3060 Ti 200/15 W): six times the floor is a ceiling no board falls short of by much, "
    "so a spin-wait 1-2 times the floor is never taken for compute. A higher busy draw seen in the log "
    "raises it.",
)
LEDGER_THROTTLE_CLOCK = _t(
    "ledger.throttle_clock_ratio",
    0.97,
    "ratio",
    "With the power cap holding the clocks, compute time counts as throttled when the SM clock is more "
    "than 3 % below its maximum: the cap is actually costing speed, not just reported.",
)
LEDGER_POWER_AT_LIMIT = _t(
    "ledger.power_at_limit_ratio",
    0.95,
    "ratio",
    "Logs without clock-event reasons: drawing 95 % of the enforced limit with lowered clocks is the cap.",
)
LEDGER_STALE = _t(
    "ledger.stale_seconds",
    3.0,
    "seconds",
    "A second with no new sample reuses the last one up to 3 s old (two periods of the slowest 1.5 s "
    "sampling); older, the second is not counted (no data), so the states sum to the observed time.",
)
COARSE_EVIDENCE_POINTS = _t(
    "analysis.coarse_evidence_points",
    5.0,
    "count",
    "Data sampled coarser than the 1 s clock (replay --prometheus: one sample per 15-60 s scrape) is judged "
    "once per sample, each standing for its whole step in the ledger, over an evidence window of at least 5 "
    "samples: fewer show no busy level (the features' fewest points), and 30 s would hold only one or two. "
    "A verdict then resolves only once its evidence has been absent for that whole window (until then the "
    "window still holds the loss).",
)
LEDGER_STARTUP_COMPUTE = _t(
    "ledger.startup_compute_seconds",
    30.0,
    "seconds",
    "A job has started training once its GPU has worked in 30 separate seconds: before that, long pauses "
    "are start-up (model load, dataset download, NCCL set-up, sharding the model, the loader's first "
    "batches) and count as idle, not as waiting for input. Initialisation kernels take seconds, not half a "
    "minute; and while memory keeps growing by a GiB within half a minute (a model being loaded) pauses "
    "stay idle whenever they come.",
)
LEDGER_STARTUP_WALL = _t(
    "ledger.startup_wall_seconds",
    60.0,
    "seconds",
    "...or once the job has held the GPU for a minute, its work has come in three or more separate bursts "
    "(a rhythm, as for starvation's gaps), and its memory stopped growing: start-up ends by wall time too. "
    "Loading a model grows memory (and stays start-up however long it takes), downloading a dataset runs "
    "no kernel at all, and NCCL set-up and a warm-up step are one or two bursts; a GPU that holds a loaded "
    "model and runs kernels only in short bursts (a few percent utilization: one core transforming images "
    "for DataParallel, rank 0 doing host work every step) is training slowly, waiting for its input, and "
    "would otherwise never reach the 30 working seconds. Gaps within the pause allowance count as "
    "step-level waits as soon as the rhythm shows.",
)
LEDGER_LOAD_GROWTH = _t(
    "ledger.load_growth_bytes",
    1 * GiB,
    "bytes",
    "Memory grown by a GiB within the evidence window: a model or dataset is being loaded onto the GPU, "
    "and pauses are start-up, whatever came before.",
)
LEDGER_WINDOW = _t(
    "ledger.window_seconds",
    300.0,
    "seconds",
    "Verdicts judge the share of the last five minutes lost to each family of states: long enough to "
    "cover a checkpoint cycle or a slow loader's burst pattern, short enough to follow a job's phases.",
)
LEDGER_FAST_WINDOW = _t(
    "ledger.fast_window_seconds",
    120.0,
    "seconds",
    "...and of the last two minutes, so that heavy losses page quickly.",
)
COVERAGE_SHARE = _t(
    "coverage.share",
    0.30,
    "ratio",
    "The coverage rule: a GPU held by a job that loses 30 % of five minutes to one family (waiting for "
    "input or checkpoints, slow collectives, stalls, throttling) always carries that family's verdict, "
    "whatever shape the loss has. A healthy job loses a few percent to logging and short saves.",
)
COVERAGE_EXIT = _t(
    "coverage.exit_share",
    0.20,
    "ratio",
    "...and keeps it until the five-minute share falls below 20 %: a verdict holds while its condition "
    "lasts and does not drop out between two checkpoints or two slow bursts (a clean stretch shorter than "
    "the evidence window and the resolve time together never breaks it).",
)
COVERAGE_FAST_SHARE = _t(
    "coverage.fast_share",
    0.40,
    "ratio",
    "40 % of the last two minutes lost to one family fires at once. A single pause in those two minutes "
    "is forgiven there (one 45-second save or evaluation is not a pattern); repeated pauses and "
    "step-level waits count in full.",
)
COVERAGE_FAST_EXIT = _t(
    "coverage.fast_exit_share",
    0.25,
    "ratio",
    "...and the two-minute evidence ends below 25 %.",
)
COVERAGE_CLEAR = _t(
    "coverage.clear_share",
    0.10,
    "ratio",
    "Half a minute (the evidence window) with under 10 % lost: the condition has ended, and neither the "
    "two- nor the five-minute share holds the verdict any more (they would otherwise linger for minutes "
    "after a fix): with the resolve time the verdict clears about 90 s after recovery.",
)
RECENT_WAIT_SHARE = _t(
    "coverage.recent_wait_share",
    0.50,
    "ratio",
    "Half of the last half-minute in step-level waits (for input, or inside collectives that move data) "
    "while the job still computes between them: starved or communication-bound now. Long pauses do not "
    "count here (they are checkpoints, stalls or idle time), so a save or an evaluation cannot fire it.",
)

STARVATION_IDLE_FRACTION = _t(
    "starvation.idle_fraction",
    0.15,
    "ratio",
    "A GPU that waits with no kernel for 15 % of its samples in half a minute is waiting for input; a "
    "logging dip of 2 s every few minutes is under 7 %. Sampled every 15-60 s, where the rhythm is lost, "
    "the same share shows as utilization 15 points under that of peers waiting in collectives (they keep "
    "a kernel resident while it has none).",
)
STARVATION_GAPS = _t(
    "starvation.gaps",
    3,
    "count",
    "Starvation is a rhythm (100 -> 0 -> 100): at least three separate idle gaps in the evidence window. "
    "A checkpoint or evaluation pause is one long gap.",
)
STARVATION_BUSY_FRACTION = _t(
    "starvation.busy_fraction",
    0.2,
    "ratio",
    "...and it must still do real work between the gaps (samples above 50 %), or it is idle, not starved.",
)
STARVATION_SWING_MEAN = _t(
    "starvation.swing_util_mean",
    0.85,
    "ratio",
    "With coarse sampling the gaps blur into utilization swinging between 60 and 80 %: a mean below 85 % "
    "with a wide spread is the same starvation.",
)
STARVATION_SWING_SPREAD = _t(
    "starvation.swing_spread",
    0.2,
    "ratio",
    "p95 - p05 of utilization above 0.2 is a swing; a healthy job at 85-90 % stays within a few points.",
)
STARVATION_PAUSE = _t(
    "starvation.pause_seconds",
    10.0,
    "seconds",
    "Input gaps are step-sized (sub-second to a few seconds). An idle stretch reaching the present that is "
    "longer than 10 s is a pause (checkpoint, evaluation, a crashed job), not a starving pipeline.",
)
PCIE_BUSY = _t(
    "starvation.pcie_busy_bytes_per_second",
    5e9,
    "bytes_per_second",
    "PCIe carrying 5 GB/s on average (a fifth of a Gen4 x16 link, a tenth of Gen5) while the GPU waits: "
    "the host link is the pipeline (CPU offload, pageable copies); a fed training step moves under 2 GB/s.",
)
STARVATION_FIRE = _t(
    "starvation.fire_after_seconds",
    15.0,
    "seconds",
    "Evidence held for 15 s (a dozen steps) before the verdict fires: detection within a minute.",
)
STARVATION_RESOLVE = _t(
    "starvation.resolve_after_seconds",
    60.0,
    "seconds",
    "A minute without evidence resolves it: starvation comes and goes with the data pipeline.",
)

HANG_UTIL = _t(
    "hang.util_pinned_ratio",
    0.95,
    "ratio",
    "A hung collective keeps its NCCL kernel resident: 95 % of the samples at or above 95 % utilization.",
)
HANG_POWER = _t(
    "hang.power_ratio",
    0.35,
    "ratio",
    "...while the GPU draws near-idle power: a spinning NCCL kernel uses 20-30 % of TDP, real work 60 %+.",
)
HANG_SM = _t(
    "hang.sm_active_ratio",
    0.25,
    "ratio",
    "...and few SMs are active (GPM): the spin kernel occupies a handful of SMs, training most of them.",
)
HANG_TRAFFIC = _t(
    "hang.traffic_bytes_per_second",
    50e6,
    "bytes_per_second",
    "...and NVLink and PCIe carry almost nothing: a collective in progress moves gigabytes per second.",
)
HANG_FIRE = _t(
    "hang.fire_after_seconds",
    60.0,
    "seconds",
    "A minute more of a pinned, quiet collective on every GPU of the job, nobody off-kernel and nothing "
    "moving, is a hang: no collective waits that long for peers that are all present. Well inside "
    "PyTorch's 600 s NCCL watchdog; the alert's `for` confirms it before paging.",
)
HANG_PEER_FIRE = _t(
    "hang.peer_wait_fire_after_seconds",
    300.0,
    "seconds",
    "When some rank of the job is not in the collective (saving a checkpoint, loading data), the others "
    "wait for it: only five minutes of that is called a hang.",
)
HANG_RESOLVE = _t(
    "hang.resolve_after_seconds",
    10.0,
    "seconds",
    "Traffic or real work for 10 s ends a hang.",
)

# ---- what the training's own log says (pod logs, POST /v1/progress) --------------------------------------
PROGRESS_SILENCE = _t(
    "progress.silence_seconds",
    30.0,
    "seconds",
    "A running rank prints at least every half minute in the usual setups (progress bars refresh every "
    "second, Megatron and DeepSpeed log every few steps). Silence alone never pages: it confirms a hang "
    "only while NVML sees every rank of the job pinned in a quiet collective, the hang operators diagnose "
    "by hand ('the log stopped at 23:08'); a job that logs less often only loses the early page. Lines "
    "newer than this mean the job moves: not a hang (an idle tensor-parallel server logging requests).",
)
HANG_NO_PROGRESS_FIRE = _t(
    "hang.no_progress_fire_after_seconds",
    10.0,
    "seconds",
    "A hang the log confirms (its silence on top of the NVML picture on every rank) needs only 10 s more "
    "to rule out a sampling blip: it fires well before the NVML-only verdict's minute.",
)
PODLOG_POLL = _t(
    "podlogs.poll_seconds",
    1.0,
    "seconds",
    "Pod logs are read once a second, on their own thread: the last line's time is exact to a second and "
    "a scrape never waits for a file.",
)
PODLOG_LINES_PER_SECOND = _t(
    "podlogs.lines_per_second",
    2000.0,
    "count",
    "A training container writes tens of lines a second (a few hundred at NCCL init); above 2,000 a "
    "second per container the oldest lines of a read are skipped (counted), so a chatty pod cannot take "
    "the exporter's core. The newest line still sets the time of the last line.",
)
PODLOG_READ_BYTES = _t(
    "podlogs.read_max_bytes",
    1 << 20,
    "bytes",
    "At most 1 MiB of a container's log is read per poll; a backlog beyond it is skipped (counted).",
)
PODLOG_LINE_BYTES = _t(
    "podlogs.line_max_bytes",
    64 << 10,
    "bytes",
    "The runtime splits lines at 16 KiB (P records); a joined line is kept to 64 KiB, the rest dropped.",
)
PODLOG_TAIL_BYTES = _t(
    "podlogs.tail_bytes",
    64 << 10,
    "bytes",
    "A log found at start is read from its last 64 KiB (the last line's time, the step, the transports), "
    "never whole: warnings and errors are counted from there on.",
)
PODLOG_MAX_CONTAINERS = _t(
    "podlogs.max_containers",
    64.0,
    "count",
    "Containers followed at most: a node's GPU pods have a handful; the bound keeps memory fixed.",
)
NCCL_WARNINGS = _t(
    "nccl.warnings_per_10m",
    3.0,
    "count",
    "NCCL prints a WARN for each fallback or failed call; a few at init happen, more than three in ten "
    "minutes of a running job is a fault repeating (a link flapping, a plugin retrying).",
)
PROGRESS_MAX_PODS = _t(
    "progress.max_pods",
    256.0,
    "count",
    "POST /v1/progress keeps the step of at most 256 pods (a node runs a few); others are refused.",
)
PROGRESS_BODY_BYTES = _t(
    "progress.body_max_bytes",
    1024.0,
    "bytes",
    "A progress report is {namespace, pod, step}: a kilobyte is plenty; larger bodies are refused.",
)

THERMAL_REASON_SHARE = _t(
    "thermal.reason_share",
    0.3,
    "ratio",
    "Thermal clock-event reasons active in 30 % of the busy samples of the last 10 s: the GPU is throttling.",
)
THERMAL_SLOWDOWN = _t(
    "thermal.slowdown_celsius",
    87.0,
    "celsius",
    "Where a log does not say, the slowdown point of an H100 SXM; NVML's own threshold is used live.",
)
THERMAL_SLOWDOWN_MARGIN = _t(
    "thermal.slowdown_margin_celsius",
    3.0,
    "celsius",
    "Within 3 degrees of the slowdown point a GPU counts as at it: under the same load it gets there in "
    "seconds, and the clocks it has already lost are heat's.",
)
THERMAL_RISE = _t(
    "thermal.rise_celsius_per_second",
    0.05,
    "celsius_per_second",
    "Above the hot line and still rising by 3 degrees a minute, heading for the slowdown point: cooling "
    "cannot keep up.",
)
THERMAL_HORIZON = _t(
    "thermal.horizon_seconds",
    120.0,
    "seconds",
    "...reaching the slowdown point within two minutes at that rate.",
)
THERMAL_CLOCK_DROP = _t(
    "thermal.clock_ratio",
    0.95,
    "ratio",
    "SM clocks 5 % below their maximum under load near the slowdown point: throttled without a reason bit "
    "(older logs have none).",
)
THERMAL_FIRE = _t(
    "thermal.fire_after_seconds", 10.0, "seconds", "Ten seconds of throttling evidence fire it."
)
THERMAL_RESOLVE = _t(
    "thermal.resolve_after_seconds",
    60.0,
    "seconds",
    "A cool minute resolves it: temperature moves slowly.",
)

POWER_CAP_SHARE = _t(
    "power.cap_share",
    0.5,
    "ratio",
    "The software power cap held the clocks in half of the busy samples: the GPU runs at its power limit.",
)
POWER_CAP_BELOW_DEFAULT = _t(
    "power.cap_below_default_ratio",
    0.9,
    "ratio",
    "An enforced limit under 90 % of the board's default matters (someone capped it); capping at the "
    "default limit is routine for training at TDP and only scores low.",
)
POWER_FIRE = _t("power.fire_after_seconds", 30.0, "seconds", "Half a minute at a lowered cap fires it.")
POWER_RESOLVE = _t("power.resolve_after_seconds", 60.0, "seconds", "A minute off the cap resolves it.")

SHM_EARLY = _t(
    "shm.early_ratio",
    0.75,
    "ratio",
    "A volume above 75 % that is filling fast may fire before the warning line (see the fill horizon).",
)
SHM_FILL_HORIZON = _t(
    "shm.fill_horizon_seconds",
    60.0,
    "seconds",
    "A volume above 75 % that will be full within a minute at its current fill rate fires early.",
)
SHM_RESOLVE_RATIO = _t(
    "shm.resolve_ratio",
    0.85,
    "ratio",
    "Below 85 % the shm verdict starts resolving.",
)
SHM_RESOLVE = _t("shm.resolve_after_seconds", 30.0, "seconds", "Thirty seconds below it resolves.")

IDLE_AFTER = _t(
    "idle.after_seconds",
    300.0,
    "seconds",
    "Memory resident and no kernel for five minutes: longer than any checkpoint, evaluation or restart "
    "pause, the GPU is reserved and doing nothing.",
)
IDLE_MEMORY = _t(
    "idle.memory_bytes",
    512 * (1 << 20),
    "bytes",
    "A process holds the GPU once 512 MiB of framebuffer are used: a CUDA context alone takes 300-550 MiB, "
    "a model more; a GPU no process uses shows a few MiB (a desktop's display server a few hundred). Small "
    "jobs on small boards (a LibTorch model at 0.8 GiB on an 8 GiB card) hold less than a GiB.",
)

NVLINK_ERROR_RATE = _t(
    "nvlink.error_rate_per_minute",
    10.0,
    "per_minute",
    "More than ten replay, recovery or CRC errors a minute on a GPU's links: the link is degrading.",
)
NVLINK_FIRE = _t("nvlink.fire_after_seconds", 30.0, "seconds", "Half a minute of a degraded fabric fires it.")
NVLINK_RESOLVE = _t("nvlink.resolve_after_seconds", 60.0, "seconds", "A healthy minute resolves it.")

COMM_BOUND_FIRE = _t(
    "comm_bound.fire_after_seconds",
    30.0,
    "seconds",
    "Half a minute of steps dominated by collectives fires it: slow transports do not come and go.",
)
COMM_BOUND_RESOLVE = _t(
    "comm_bound.resolve_after_seconds",
    60.0,
    "seconds",
    "A minute of fast collectives resolves it.",
)

# ---- the workload class: what a GPU's idle time means depends on what the job is -------------------

STARVATION_SUSTAINED = _t(
    "starvation.sustained_share",
    0.2,
    "ratio",
    "A starvation verdict starts only while a fifth of the last two minutes went to input waits, or a "
    "fifth of the last half minute in waits that recur across it (three or more, in both its halves: "
    "step-sized waits, not one pause): a job at 86 % utilization with a 5-10 s pause every minute or two "
    "(evaluation scoring, the next subset loading) books 5-15 % in single pauses and runs at nearly full "
    "speed, nothing a person should be woken for (a real evaluation on a 4090 paged twice at 15 %), "
    "while a job losing a third of its time in step-sized waits shows it within half a minute...",
)
STARVATION_HEAVY = _t(
    "starvation.heavy_share",
    0.3,
    "ratio",
    "...and, past the half minute's rhythm, a fifth of the last five minutes too unless the last two "
    "lost 30 % or more: a minute at half speed in a 48-minute evaluation (a real one on a 4090 dipped "
    "to 50 % for a minute while it loaded a subset, a fifth of two minutes but a tenth of five) is a "
    "phase. The gate holds a firing verdict too: when neither the rhythm nor the shares carry it any "
    "more, it resolves instead of riding the two minutes' share it left behind.",
)
SERVING_RESERVED = _t(
    "workload.serving_reserved_ratio",
    0.85,
    "ratio",
    "An inference server reserves its KV cache up front (vLLM: 90 % of the framebuffer by default; TGI, "
    "SGLang likewise) and never gives it back: 85 % or more of the framebuffer held...",
)
SERVING_FLAT = _t(
    "workload.serving_memory_flat_ratio",
    0.01,
    "ratio",
    "...unchanged within 1 % of the framebuffer while it is held (a pre-allocated pool, not a caching "
    "allocator growing with batches)...",
)
SERVING_QUIET = _t(
    "workload.serving_quiet_seconds",
    10.0,
    "seconds",
    "...and the GPU idle for longer than a step-level wait at least once while holding it (no request "
    "came): a server, by its shape. A training job waits for its input in step-sized gaps; a save "
    "usually grows or frees memory. In replay `--workload` says it for certain, live the pod's log does.",
)
SERVING_PENDING = _t(
    "workload.serving_pending_seconds",
    120.0,
    "seconds",
    "A GPU whose framebuffer was reserved flat at that share is not called starved in its first two "
    "minutes unless it keeps working: a server goes quiet between its first requests within seconds "
    "(a real vLLM replay paged starvation at 49 s before its shape was known), a training job that "
    "starves keeps its rhythm and pages at most two minutes later; a reservation older than that "
    "changes nothing.",
)
SERVER_LOAD_FRESH = _t(
    "workload.server_load_fresh_seconds",
    30.0,
    "seconds",
    "An inference server's load line (vLLM's engine stats every 5-10 s, SGLang's per batch) says how "
    "many requests wait only while it is recent: servers stop printing when idle, so a line older than "
    "half a minute says nothing about now.",
)
PIPELINE_TURNS_SUM = _t(
    "workload.pipeline_sum_ratio",
    0.5,
    "ratio",
    "A model split layer-wise over several GPUs computes on one stage at a time: the job's utilizations "
    "sum to about one GPU's (real 3- and 4-stage splits of 40B and 70B models: 0.88-0.99). Between half "
    "a GPU...",
)
PIPELINE_TURNS_SUM_MAX = _t(
    "workload.pipeline_sum_max_ratio",
    1.25,
    "ratio",
    "...and a quarter more than one (a hand-over keeps two stages busy for a moment). Eight ranks "
    "starving on host offload at a fifth each sum to 1.5, and are no pipeline.",
)
PIPELINE_TURNS_CV = _t(
    "workload.pipeline_sum_cv",
    0.5,
    "ratio",
    "...and that sum steady, its coefficient of variation second to second under 0.5: someone is always "
    "busy. Data-parallel ranks starving together move as one (the sum swings from none to all: 1-2 on "
    "real offload and loader-bound traces), so they never look like turns.",
)
PIPELINE_STAGE_MAX = _t(
    "workload.pipeline_stage_util_ratio",
    0.6,
    "ratio",
    "Each stage busy well under full, at most 60 % of the time on average (a 2-stage split at 50 %, a "
    "4-stage one at 16-27 %).",
)
PIPELINE_MIN_STAGES = _t(
    "workload.pipeline_min_gpus",
    3.0,
    "count",
    "Turns are called on three GPUs of a job or more. Two ranks of a data-parallel job waiting together "
    "on a slow all-reduce read like two stages at 1 s (a real gloo-bound pair sits at 24 % each, summing "
    "to half a GPU, steadily); three or more ranks moving together make their sum swing, three stages "
    "taking turns keep it level. A two-stage split is judged as training.",
)
PIPELINE_TOGETHER = _t(
    "workload.pipeline_together_ratio",
    0.75,
    "ratio",
    "Where samples are finer than the work (0.1 s logs, the driver's own samples), who is busy when "
    "shows: ranks of one job compute at the same moments, so nearly all of a rank's busy samples meet "
    "another GPU busy (a synthetic 10 Hz offload job: all of them); stages hand over, and meet another "
    "busy only where a sample period straddles a hand-over (a real 3-stage Falcon-40B split at 0.1 s: "
    "about half). More than three quarters together: ranks, not turns.",
)
INTERACTIVE_IDLE_SHARE = _t(
    "workload.interactive_idle_share",
    0.5,
    "ratio",
    "A GPU alone in its job is interactive by its shape when stretches without work, each longer than a "
    "step-level wait (the pause allowance), hold half its time or more since the first of them began: a "
    "notebook computes for tens of seconds per cell and waits minutes for its user. A training job's "
    "saves, even frequent ones, are a fraction of its time...",
)
INTERACTIVE_STRETCHES = _t(
    "workload.interactive_stretches",
    4,
    "count",
    "...and four such stretches have come (three cycles: fewer cannot show how they vary); until then no "
    "starvation verdict starts on it...",
)
FLOOR_DRAW = _t(
    "workload.floor_draw",
    0.1,
    "ratio",
    "A second of a GPU held alone that stays under the busy line and draws within a tenth of its power "
    "envelope's headroom above the idle floor did no work of its job, whatever the utilization reads: a "
    "card that drives a display shows its desktop's rendering (a compositor, a browser tab) as 10-45 % "
    "utilization at a few watts over idle, and a job's kernels at that duty draw past a tenth. Such seconds "
    "count as stretches without work for the interactive shape once the job's work has drawn half its "
    "headroom (below).",
)
LIFTED_DRAW = _t(
    "workload.lifted_draw",
    0.5,
    "ratio",
    "A GPU held alone whose work has drawn half its power envelope's headroom or more computes in bursts "
    "(a cell, an image generated): the seconds at the idle floor between them are the job waiting, not "
    "its work. A loop starved by its host never lifts its draw that far, and its low duty stays work.",
)
INTERACTIVE_IRREGULAR = _t(
    "workload.interactive_irregularity",
    0.3,
    "ratio",
    "...and their lengths or the cycles between them vary by 30 % or more (coefficient of variation): a "
    "person's thinking between cells varies by half or more, a training loop saves every so many steps, "
    "its cycles alike within a few percent and its saves within a fifth (a shared filesystem's write time "
    "varies). Stretches that came alike mark the GPU as a loop for as long as its job holds it.",
)
INTERACTIVE_WINDOW = _t(
    "workload.interactive_window_seconds",
    900.0,
    "seconds",
    "The stretches counted are those of the last quarter hour: a person's cells and the thinking between "
    "them come every one to five minutes.",
)
PIPELINE_HOLD = _t(
    "workload.pipeline_hold_seconds",
    120.0,
    "seconds",
    "The turns must hold over two minutes of the job (the fast window) before the class is decided: a "
    "warm-up or one slow batch is not a parallelism choice.",
)
PIPELINE_FIRE = _t(
    "pipeline.fire_after_seconds",
    60.0,
    "seconds",
    "A minute of stages taking turns on top of the two minutes that decided the class fires the "
    "informational verdict.",
)
PIPELINE_RESOLVE = _t(
    "pipeline.resolve_after_seconds",
    60.0,
    "seconds",
    "A minute without turns resolves it.",
)
# the exporter's own health, for the alert rules
COLLECT_STALE = _t(
    "exporter.stale_seconds",
    30.0,
    "seconds",
    "Thirty seconds without a successful collection at 1 s sampling: the exporter is stuck or NVML hangs.",
)
COLLECT_STALE_INTERVALS = _t(
    "exporter.stale_intervals",
    3.0,
    "count",
    "A source is stale once its last success is older than exporter.stale_seconds plus three of its own "
    "intervals: a source read every minute or hour is not stuck 30 s after its last read, and three missed "
    "rounds are not one slow one.",
)
COLLECT_ERROR_RATE = _t(
    "exporter.collect_errors_per_minute",
    1.0,
    "per_minute",
    "More than one collection error a minute (the one-time probes of unsupported calls aside) is a source "
    "failing again and again, not a hiccup.",
)

# the exporter's behaviour under faults: how a refused signal comes back, how long pod labels survive
SIGNAL_RETRY_INITIAL = _t(
    "nvml.signal_retry_initial_seconds",
    5.0,
    "seconds",
    "An NVML call refused for a reason other than a confirmed NotSupported/FunctionNotFound "
    "(NoPermission, InvalidArgument, a Python error) is retried after five seconds: a permission being "
    "fixed or a driver call recovering shows within a few collections, and one extra call is noise.",
)
SIGNAL_RETRY_MAX = _t(
    "nvml.signal_retry_max_seconds",
    60.0,
    "seconds",
    "The retry delay doubles up to one minute, the analysis window: a signal whose fault has cleared is "
    "back before a window has passed, and a signal that stays refused costs one call and one counted "
    "error a minute per GPU.",
)
SAMPLE_CARRY = _t(
    "nvml.sample_carry_seconds",
    10.0,
    "seconds",
    "A utilization or power value is carried over collections that brought no new driver sample (the "
    "buffer fills every 1/6-1 s, so a collection now and then finds none) for at most ten seconds; a "
    "buffer silent for longer is a frozen driver, and its last value is no longer reported as current.",
)
POD_LABEL_GRACE = _t(
    "kubelet.pod_label_grace_seconds",
    120.0,
    "seconds",
    "When the kubelet does not answer, the last pod assignment it gave is kept for two minutes: that "
    "outlasts a kubelet restart (10-60 s) and a few missed 10 s polls, so series keep their pod labels "
    "instead of churning. While the kubelet is down no new pod can start on the node, so a held "
    "assignment can only be wrong about a pod that ended, and only for this long.",
)
KUBELET_SOCKET_WATCH = _t(
    "kubelet.socket_watch_seconds",
    1.0,
    "seconds",
    "While the PodResources socket is missing its path is looked at every second (a stat, no RPC): pod "
    "labels come back within a second or two of the kubelet's return instead of at the next slow retry.",
)
KUBELET_SOCKET_RECOUNT = _t(
    "kubelet.missing_socket_recount_seconds",
    60.0,
    "seconds",
    "A missing socket is counted as a SocketNotFound error once a minute, not at every look: a node "
    "without a kubelet stays under the collection-error alert's rate of one a minute.",
)
# replay: a pause in a trace
TRACE_GAP_PERIODS = _t(
    "replay.gap_periods",
    300.0,
    "count",
    "A trace that pauses for more than 300 sample periods of the analysis (5 minutes at 1 s) has outlived "
    "the ledger's window, the longest of the analysis: nothing before the pause can count after it, so "
    "replay starts a new segment there and reports the gap instead of evaluating the silence second by "
    "second (a 30-day gap took 7 minutes).",
)
# replay --report: which GPUs share one section
REPORT_ALIKE_SHARE = _t(
    "replay.report_alike_share",
    0.05,
    "ratio",
    "The report draws GPUs with the same board, the same verdicts (kind and cause) and every ledger state's "
    "share of their time within 5 points of each other as one section: in the example traces the ranks of "
    "one data-parallel job differ by a point or two (where each sample falls in the step), while a starved "
    "or straggling rank differs from its peers by ten points or more and keeps a section of its own.",
)

# the command line
CLI_SUGGESTION_SIMILARITY = _t(
    "cli.suggestion_similarity",
    0.8,
    "ratio",
    "A mistyped flag or command is answered with the one it resembles when their similarity (difflib's "
    "ratio) is at least 0.8: a swapped or dropped letter in a short flag (--reprot, --jsno, --gpu) still "
    "scores over 0.8, while unrelated short flags sharing a few letters (--out and --port: 0.73) do not.",
)

# replay: the physical bounds of a trace cell. A value outside is a corrupt or mis-scaled cell (1e30 MiB of
# memory, bytes in a MiB column, a counter gone negative): it is read as missing, never fed to the
# detectors, and counted per column (one line each, ``clipped_values`` in the summary).
TRACE_TEMP_MIN = _t(
    "replay.bound.temperature_min_celsius",
    -40.0,
    "celsius",
    "No GPU is stored, let alone run, below -40 °C (the industrial storage limit).",
)
TRACE_TEMP_MAX = _t(
    "replay.bound.temperature_max_celsius",
    150.0,
    "celsius",
    "Every GPU shuts down well below 150 °C (slowdown near 90, shutdown near 100 on data-center boards).",
)
TRACE_POWER_MAX = _t(
    "replay.bound.power_max_watts",
    5000.0,
    "watts",
    "No board draws more than 5 kW: that is a whole 8-GPU tray (one B200 draws 1 kW); a limit or a draw "
    "above is a mis-scaled cell (milliwatts in a W column).",
)
TRACE_CLOCK_MAX = _t(
    "replay.bound.clock_max_hertz",
    1e10,
    "hertz",
    "No GPU clocks above a few GHz (an H100's SM clock tops at 1.98 GHz); 10 GHz and beyond is a cell in "
    "Hz read as MHz.",
)
TRACE_GPU_MEMORY_MAX = _t(
    "replay.bound.gpu_memory_max_bytes",
    float(4 << 40),
    "bytes",
    "The largest GPUs hold 288 GB (B300); 4 TiB is over ten times that. Above it a memory.used or "
    "memory.total cell is corrupt or in the wrong unit (bytes in a MiB column).",
)
TRACE_HOST_MEMORY_MAX = _t(
    "replay.bound.host_memory_max_bytes",
    float(64 << 40),
    "bytes",
    "/dev/shm lives in the node's memory, and the largest single machines hold 32 TiB: a shm cell above "
    "64 TiB is corrupt.",
)
TRACE_NVLINK_MAX = _t(
    "replay.bound.nvlink_max_bytes_per_second",
    1e13,
    "bytes_per_second",
    "NVLink 5 moves 900 GB/s each way per GPU (18 links); 10 TB/s one way is beyond any GPU's links.",
)
TRACE_PCIE_MAX = _t(
    "replay.bound.pcie_max_bytes_per_second",
    1e12,
    "bytes_per_second",
    "A PCIe 6.0 x16 link moves 128 GB/s each way; 1 TB/s is beyond any GPU's host link.",
)
TRACE_DISK_MAX = _t(
    "replay.bound.disk_read_max_bytes_per_second",
    1e12,
    "bytes_per_second",
    "A node's NVMe drives together read a few hundred GB/s at most (16 Gen5 drives at 14 GB/s); 1 TB/s is "
    "beyond any node.",
)
TRACE_LINKS_MAX = _t(
    "replay.bound.nvlinks_max",
    64.0,
    "count",
    "NVML knows at most 18 NVLinks per GPU (NVML_NVLINK_MAX_LINKS); 64 leaves room for boards to come. "
    "More links up or expected is a corrupt cell.",
)
TRACE_PEERS_MAX = _t(
    "replay.bound.p2p_peers_max",
    1023.0,
    "count",
    "A GPU's peers are the other GPUs of its node, and a trace holds at most 1,024 GPUs: more failing "
    "peer pairs than that is a corrupt cell.",
)
TRACE_COUNTER_MAX = _t(
    "replay.bound.counter_max",
    float(1 << 64),
    "count",
    "NVML's error counters (ECC, NVLink) are 64-bit and never negative: a count outside 0..2^64 is a "
    "corrupt cell.",
)
TRACE_REQUESTS_MAX = _t(
    "replay.bound.requests_max",
    1e7,
    "count",
    "An inference server's running or waiting requests, from its log: ten million in one server's queue "
    "is a corrupt cell, not a load.",
)
TRACE_SILENCE_MAX = _t(
    "replay.bound.log_silence_max_seconds",
    10 * 366 * 86400.0,
    "seconds",
    "A job's log silence is time since its last line: a container silent for more than ten years is a "
    "corrupt cell, not a hang.",
)

# HTTP: what one client may hold of the server
HTTP_MAX_CONNECTIONS = _t(
    "http.max_connections",
    1024.0,
    "count",
    "Prometheus holds one connection per scraper; 1024 open connections (a few MiB of buffers) let "
    "hundreds of slow clients wait out their header deadline without closing anyone early. Past it "
    "(or past the process's descriptor limit less a reserve), the oldest connection that has not sent "
    "a request yet is closed for the new one.",
)
HTTP_HEADER_TIMEOUT = _t(
    "http.header_timeout_seconds",
    5.0,
    "seconds",
    "A scraper sends its whole request (and finishes a TLS handshake) within milliseconds; a connection "
    "without a complete request header after 5 s is a slow or half-open client and is closed.",
)
HTTP_KEEPALIVE = _t(
    "http.keepalive_seconds",
    30.0,
    "seconds",
    "An idle kept-alive connection is closed after 30 s: longer than the usual 15-30 s scrape interval "
    "would be held idle for nothing; shorter ones reuse the connection.",
)
# --web.config.file: what the file may be, what a login may cost
WEB_MAX_FILE_BYTES = _t(
    "web.max_file_bytes",
    float(1 << 20),
    "bytes",
    "A web config is a few hundred bytes (a certificate's paths, a few users' 60-byte hashes); 1 MiB only "
    "keeps a wrong path (a log, a device) from being read whole.",
)
WEB_MAX_DEPTH = _t(
    "web.max_depth",
    10.0,
    "count",
    "The deepest setting of a web config sits 3 mappings down (http_server_config, headers, a header); "
    "10 still names a misplaced block at its line, and keeps the YAML parser far from Python's recursion "
    "limit (a file of 10,000 nested brackets killed the server on SIGHUP).",
)
WEB_BCRYPT_MAX_COST = _t(
    "web.bcrypt_max_cost",
    14.0,
    "count",
    "One bcrypt check at cost 14 takes about 1 s on a server core (cost 10: 60 ms; each step doubles), "
    "and the first scrape after a start or a password change pays one, inside Prometheus' default 10 s "
    "scrape timeout; cost 16 would take 4 s of it, and cost 31 (the format's maximum) about 35 hours, "
    "hanging the start while the dummy hash is made.",
)
WEB_AUTH_CHECKS = _t(
    "web.auth_checks_at_once",
    2.0,
    "count",
    "bcrypt checks run off the event loop, at most 2 at a time: a flood of guesses costs the node at most "
    "2 cores and waits its turn, while the loop keeps answering remembered logins and probes.",
)
WEB_AUTH_WAIT = _t(
    "web.auth_wait_seconds",
    10.0,
    "seconds",
    "A login whose bcrypt check cannot start within 10 s (Prometheus' default scrape timeout) behind "
    "other checks is answered 503 unchecked: its scraper has given up by then, and a flood that stops "
    "leaves at most 10 s of checks behind.",
)
WEB_AUTH_VERIFIED = _t(
    "web.auth_verified_cache",
    64.0,
    "count",
    "The last 64 verified (user, password) pairs are remembered by keyed digest, across a re-read that "
    "leaves the user's hash unchanged: a scraper pays one bcrypt check, not one per scrape, and a flood "
    "of wrong passwords cannot push it out (only verified pairs enter). 64 covers every Prometheus "
    "replica and user a node is scraped by.",
)
WEB_AUTH_FAILED = _t(
    "web.auth_failure_cache",
    4096.0,
    "count",
    "The last 4096 wrong (user, password) pairs are remembered by keyed digest (about 0.5 MiB), so a "
    "client repeating a wrong password (a scraper with a stale secret, a flood of one guess) costs one "
    "bcrypt check, not one per request; each distinct guess still costs one.",
)
HTTP_BODY_TIMEOUT = _t(
    "http.body_timeout_seconds",
    5.0,
    "seconds",
    "A request body here is a progress report under 1 KiB, sent with its header; a body not all there "
    "5 s after its header is a stalled client and its connection is closed (before this deadline one "
    "stalled body held its connection 70 s).",
)
HTTP_MAX_BODY_CONNECTIONS = _t(
    "http.max_body_connections",
    16.0,
    "count",
    "Connections still sending a request body (progress reports; scrapes carry none) share 16 slots: a "
    "node's jobs report from rank 0 every few seconds, each in milliseconds, so 16 at once is already a "
    "flood. Past it the oldest still sending is closed for the new one, and the rest of the connections "
    "stay for scrapes (1,100 stalled reports used to hold all 1,024 and fail every scrape).",
)
HTTP_SEND_TIMEOUT = _t(
    "http.send_timeout_seconds",
    10.0,
    "seconds",
    "An answer is written in 64 KiB pieces as the client takes them; a connection whose client takes "
    "nothing of what waits for it for 10 s (its write buffer stays over asyncio's 64 KiB high-water mark, "
    "or the end of its answer is still in the kernel's send queue) is closed, and what it held is freed. "
    "A scraper takes a 4 MB exposition in milliseconds inside a cluster, and Prometheus gives up on a "
    "scrape after its 10 s scrape_timeout anyway.",
)
HTTP_MAX_STALLED_CONNECTIONS = _t(
    "http.max_stalled_connections",
    256.0,
    "count",
    "A connection not taking its answer holds about 220 KiB of it: up to 128 KiB in the process (the "
    "write buffer's high-water mark and one 64 KiB piece) and the kernel's 128 KiB send buffer. 256 of "
    "them hold about 56 MiB, inside the chart's 256 MiB limit. Past it the oldest is closed for the new "
    "one. Before these bounds 200 clients that never read a 4 MB exposition took the process from 107 "
    "to 595 MiB (437 MiB after they left) and the kernel's socket buffers to 752 MiB; now 100 to 141 "
    "MiB (120 after) and 26 MiB (bench/slow_readers.py).",
)
HTTP_TLS_HANDSHAKE_TIMEOUT = _t(
    "http.tls_handshake_timeout_seconds",
    3.0,
    "seconds",
    "A TLS handshake is two round trips and a signature, milliseconds inside a cluster; one not finished "
    "in 3 s is a stalled client and its connection is closed. The request header must still arrive "
    "within http.header_timeout_seconds of the connection's start.",
)
HTTP_TLS_MAX_CONNECTIONS = _t(
    "http.tls_max_connections",
    1024.0,
    "count",
    "An open TLS connection holds OpenSSL's state and a 16 KiB read buffer, about 40 KiB (1,100 idle TLS "
    "connections took the exporter from 70 to 110 MiB; with asyncio's 256 KiB buffer they took it to 400 "
    "MiB): 1,024 of them keep an 8-GPU node's exporter, about 100 MiB, well under the chart's 256 MiB "
    "memory limit. Past it the oldest TLS connection without a request is closed for the new one; a "
    "lower bound would only make a flood cycle faster, through more handshakes.",
)
HTTP_TLS_HANDSHAKES_PER_TURN = _t(
    "http.tls_handshakes_per_turn",
    8.0,
    "count",
    "Each step of a TLS handshake (the key exchange and signature when the client's hello arrives, then "
    "its Finished) takes about 0.3 ms of the event loop that also answers scrapes. 1,100 clients "
    "connecting at once ran hundreds of steps in a turn: the loop lagged up to 135 ms and answering a "
    "scrape took up to 120 ms. At most 8 steps run per turn (2-3 ms); the rest wait, their reads paused, "
    "for the next turns, newest first (a client that just connected is answered first, the oldest meet the "
    "handshake deadline), so the flood costs the same CPU spread over turns (the same burst: "
    "lag up to 56 ms, a scrape answered within 26 ms, on a loaded 2-core machine). Counted per turn, not "
    "as handshakes in progress: a client stalling before or inside its handshake holds no slot.",
)
LOG_REPEAT_BURST = _t(
    "log.repeat_burst",
    5.0,
    "count",
    "The same log line (same logger and message) is written 5 times per interval, then counted: a flood "
    "of one error (116,000 accept errors in 11 s) says nothing the first lines did not.",
)
LOG_REPEAT_INTERVAL = _t(
    "log.repeat_interval_seconds",
    60.0,
    "seconds",
    "After a minute a repeated line is written again, with how many like it were held back.",
)

SERIES_BUDGET = _t(
    "exporter.series_budget",
    440.0,
    "count",
    "Series of an 8-GPU node at the default detail: about 55 per GPU (with two per pod on each GPU for its "
    "processes and their memory), a few dozen like dcgm-exporter's default set, keeps 1,000 nodes near "
    "0.44 M series, what one Prometheus holds comfortably; per-link, per-pair, per-XID and per-process "
    "series are --detail.",
)
SERIES_BUDGET_MIG = _t(
    "exporter.series_budget_mig",
    1100.0,
    "count",
    "Series of an 8-GPU node at the default detail with every GPU in MIG mode at the finest partition "
    "(7 x 1g.10gb per H100, 56 instances held by 56 pods): 976 on the simulator (mig_all_h100), over "
    "exporter.series_budget by 536 because the series follow the instances and their pods, not the GPUs: "
    "each instance its ledger states (1-3) and its two verdicts, about 3.4 (192), each pod 8 (448: its "
    "device, its processes and their memory, its /dev/shm default, and the used and size of its two shm "
    "mounts), the GPUs and the node the other 336. 1,100 leaves each instance two more ledger states; "
    "1,000 such nodes stay near 1.1 M series, and a node of whole GPUs keeps exporter.series_budget.",
)
PROCESS_TOP_N = _t(
    "processes.top_n",
    8.0,
    "count",
    "Per-process series (--detail processes) of the 8 processes holding the most memory on each GPU: a "
    "GPU runs one process per rank, a few under MPS or time-slicing; a node of thousands of short "
    "processes would otherwise grow without bound. The per-pod totals count every process.",
)
PROCESS_COMMAND_CHARS = _t(
    "processes.command_chars",
    96.0,
    "characters",
    "A process's command line is cut to 96 characters for its label: enough for the interpreter, the "
    "script and its first arguments; arguments can be long (a config as JSON) and a label is kept per "
    "series.",
)
PROCESS_OWNERS_REMEMBERED = _t(
    "processes.owners_remembered",
    256.0,
    "count",
    "The pods of the last 256 containers seen holding a GPU are remembered, so a process whose pod and "
    "runtime bundle are gone still names its last pod; a node runs a few dozen GPU containers a day.",
)


# ---- jobs across nodes: the recording rules and the job alerts (evaluated in Prometheus) ---------------
RULES_RATE_WINDOW = _t(
    "rules.rate_window_seconds",
    300.0,
    "seconds",
    "The recording rules read the time ledger over five minutes: long enough to hold many training steps "
    "(and a slow one's rhythm), short enough that a straggler shows within one alert `for`.",
)
HOLDUP_SHARE = _t(
    "job.holdup_share",
    0.10,
    "ratio",
    "A GPU off-kernel (its rank on the host: loading data, saving, logging) while other GPUs of its job "
    "wait for it in a collective holds the job back; one that does so a tenth of its held time is named as "
    "the rank to look at. Rank 0's routine logging and rare saves stay under it.",
)
STRAGGLER_LOST = _t(
    "job.straggler_lost_ratio",
    0.25,
    "ratio",
    "A pod whose GPUs lose a quarter of their time to input wait or throttling is slowing its job: a "
    "healthy rank loses a few percent between steps.",
)
STRAGGLER_PEERS_WAIT = _t(
    "job.straggler_peers_comm_wait_ratio",
    0.25,
    "ratio",
    "...while the job's GPUs in its other pods spend a quarter of their time waiting in collectives: they "
    "wait for the slow one (healthy collectives take about 15 % of a step, and count as computing).",
)
JOB_HANG_STALLED = _t(
    "job.hang_stalled_ratio",
    0.8,
    "ratio",
    "A job hangs when its GPUs spend 80 % of their time stalled in a collective (util pinned, no "
    "traffic); the rest of the window may still hold the steps before it hung.",
)
JOB_HANG_OUTSIDE = _t(
    "job.hang_outside_ratio",
    0.2,
    "ratio",
    "In a hung job, a pod whose GPUs are stalled less than a fifth of the time is not in the collective "
    "its peers wait in: the rank to blame (crashed loader, stuck host code).",
)

# ---- cost: what a GPU-hour costs, to price the ledger's lost time ---------------------------------------
# Every price below is an EXAMPLE, not a quote: an on-demand figure in the range public clouds listed per
# GPU in 2024-2025, there so that the cost panels show sensible magnitudes out of the box. Set your own
# (reserved, spot or amortized prices differ by several times) with --price or the chart's cost values.
_EXAMPLE = "Example, not a quote: "
COST_CURRENCY = _c(
    "cost.currency",
    "USD",
    "The currency the example prices are in (ISO 4217 code); it labels every price and cost series.",
)
COST_DEFAULT_PRICE = _t(
    "cost.price.default",
    2.0,
    "per_gpu_hour",
    _EXAMPLE + "a GPU whose model matches no entry below is priced like a mid-range data-center GPU, so "
    "that its lost time still counts; set a price for it.",
)
# model (matched in the NVML name, ignoring case, longest match first) -> its price per GPU-hour
GPU_HOUR_PRICES: dict[str, Threshold] = {
    "H100 80GB HBM3": _t(
        "cost.price.h100_sxm",
        4.0,
        "per_gpu_hour",
        _EXAMPLE + "H100 SXM on demand ran from about 2 to over 10 USD a GPU-hour across "
        "clouds; 4 is mid-way.",
    ),
    "H100 NVL": _t(
        "cost.price.h100_nvl", 3.5, "per_gpu_hour", _EXAMPLE + "a little under the SXM board (400 W, PCIe)."
    ),
    "H100 PCIe": _t(
        "cost.price.h100_pcie", 3.0, "per_gpu_hour", _EXAMPLE + "the PCIe H100 lists below the SXM board."
    ),
    "H200": _t(
        "cost.price.h200", 5.0, "per_gpu_hour", _EXAMPLE + "the H200 lists a quarter or so above the H100."
    ),
    "B200": _t(
        "cost.price.b200", 7.0, "per_gpu_hour", _EXAMPLE + "the B200 lists well above the H200 where offered."
    ),
    "A100-SXM4-80GB": _t(
        "cost.price.a100_sxm_80gb", 2.5, "per_gpu_hour", _EXAMPLE + "A100 80GB on demand: about 2-4 USD."
    ),
    "A100-SXM4": _t(
        "cost.price.a100_sxm_40gb", 2.0, "per_gpu_hour", _EXAMPLE + "the 40 GB A100 lists below the 80 GB."
    ),
    "A100 80GB PCIe": _t(
        "cost.price.a100_pcie_80gb", 2.2, "per_gpu_hour", _EXAMPLE + "the PCIe A100 lists below the SXM one."
    ),
    "L40S": _t("cost.price.l40s", 1.5, "per_gpu_hour", _EXAMPLE + "L40S on demand: about 1-2 USD."),
    "A10G": _t("cost.price.a10g", 1.0, "per_gpu_hour", _EXAMPLE + "A10G instances: about 1 USD a GPU-hour."),
    "L40": _t("cost.price.l40", 1.2, "per_gpu_hour", _EXAMPLE + "the L40 lists a little below the L40S."),
    "L4": _t("cost.price.l4", 0.7, "per_gpu_hour", _EXAMPLE + "L4 on demand: well under 1 USD."),
    "T4": _t("cost.price.t4", 0.5, "per_gpu_hour", _EXAMPLE + "T4 on demand: about half a USD."),
    "V100": _t("cost.price.v100", 2.0, "per_gpu_hour", _EXAMPLE + "V100 on demand: about 2-3 USD."),
}
PRICE_MAX = _t(
    "cost.price_max",
    1000.0,
    "per_gpu_hour",
    "A price above 1,000 a GPU-hour is a typo (a monthly figure, a missing decimal point), not a rate: "
    "refused rather than drawn as a cost that dwarfs every other panel.",
)
PRICE_ENTRIES_MAX = _t(
    "cost.price_entries_max",
    64.0,
    "count",
    "--price lists a few GPU models; 64 entries is room for every board a fleet runs while bounding what "
    "a malformed value (a file pasted in) costs to read.",
)
PRICE_MODEL_CHARS_MAX = _t(
    "cost.price_model_chars_max",
    96.0,
    "count",
    "NVML names a board in at most 96 characters (NVML_DEVICE_NAME_V2_BUFFER_SIZE); a longer model name "
    "can never match.",
)

# ---- alerts: how long a condition must hold before it pages, and how loud -----------------------------


@dataclass(frozen=True)
class AlertPolicy:
    for_: Threshold
    severity: Choice

    @property
    def for_text(self) -> str:
        """The ``for`` as Prometheus writes durations (``2m``, ``30s``, ``0s``)."""
        seconds = int(self.for_.value)
        if seconds and seconds % 3600 == 0:
            return f"{seconds // 3600}h"
        if seconds and seconds % 60 == 0:
            return f"{seconds // 60}m"
        return f"{seconds}s"


ALERT_POLICIES: dict[str, AlertPolicy] = {}


SEVERITIES = ("critical", "warning", "info")


def _alert(name: str, for_s: float, severity: str, reason: str) -> AlertPolicy:
    if severity not in SEVERITIES:
        raise ValueError(f"alert {name}: severity {severity!r} is not one of {', '.join(SEVERITIES)}")
    policy = ALERT_POLICIES[name] = AlertPolicy(
        _t(f"alert.{name}.for_seconds", for_s, "seconds", reason),
        _c(f"alert.{name}.severity", severity, reason),
    )
    return policy


_alert(
    "GpuDataStarvation",
    60.0,
    "warning",
    "The verdict already needs 40 % of two minutes lost (or half of the last half-minute in step-level "
    "waits, for 15 s), with a single save or evaluation forgiven; one minute more rules out a phase of the "
    "job (a warm-up, an evaluation pass), so the page comes about two minutes into the loss. A job running "
    "at a fraction of its speed: a warning, not a wake-up.",
)
_alert(
    "GpuCommHang",
    60.0,
    "critical",
    "The verdict already needs a minute of every rank pinned in a quiet collective (five when some rank is "
    "elsewhere); a minute more and the job is hung, still leaving most of the NCCL watchdog's ten minutes "
    "to act: critical.",
)
_alert(
    "GpuCommBound",
    120.0,
    "warning",
    "Slow collectives (NCCL over sockets instead of NVLink/EFA) do not end by themselves; the verdict "
    "already needs 40 % of two minutes in collectives, and two minutes more keep a transient network "
    "slowdown from paging.",
)
_alert(
    "GpuThermalThrottling",
    120.0,
    "warning",
    "Two minutes of heat throttling outlasts a burst: the cooling cannot keep up.",
)
_alert(
    "GpuPowerCapped",
    300.0,
    "warning",
    "A lowered power cap is configuration, not an accident of the moment: five minutes confirms it.",
)
_alert(
    "GpuIdleAllocated",
    300.0,
    "info",
    "A reserved GPU doing nothing is waste, not breakage: the verdict needs five idle minutes (longer than "
    "any save, evaluation or restart), five more make ten idle minutes before an informational page.",
)
_alert(
    "GpuMemoryUnowned",
    600.0,
    "warning",
    "GPU memory held by a process no pod on the node owns (its pod deleted, a host process, another pod's "
    "container) or by no process at all: the device plugin still counts the GPU as allocated or the next "
    "pod fails with out-of-memory. Ten minutes outlast a pod's termination grace period and a restart, so "
    "only memory that will not be freed by itself pages; a warning: capacity is lost, nothing is broken "
    "yet.",
)
_alert(
    "GpuPipelineBubble",
    600.0,
    "info",
    "Stages of a layer-split model waiting for their turn is the parallelism chosen, not a failure: "
    "information for whoever sizes the job (more micro-batches, fewer stages, or tensor parallelism), "
    "after ten minutes so a short run never raises it.",
)
_alert(
    "GpuShmNearlyFull",
    60.0,
    "warning",
    "A filling /dev/shm kills DataLoader workers within minutes: page after one minute above the line.",
)
_alert(
    "GpuNvlinkDown",
    300.0,
    "critical",
    "A link down for five minutes is not a retraining blip: collectives run on slower paths.",
)
_alert(
    "GpuJobStraggler",
    300.0,
    "warning",
    "Five minutes of one pod slowing a multi-node job outlasts a slow shard or a restart; a warning, "
    "since the job still progresses, at the straggler's pace. Its waiting peers page nothing.",
)
_alert(
    "GpuJobHang",
    120.0,
    "critical",
    "Two minutes of a whole job stalled (over a five-minute window that is already mostly stalled) is a "
    "hang: critical, since the NCCL watchdog kills the job at ten.",
)

# the other alerts of the rule file: the classic table's raw signals, the fabric and the exporter itself
_alert(
    "GpuUtilizationLow",
    900.0,
    "info",
    "Low utilization is a suspicion, not a failure: a quarter of an hour below the line (on top of the "
    "10-minute average) keeps evaluations and warm-ups quiet; informational, the verdicts say why.",
)
_alert(
    "GpuPowerFarBelowTdp",
    600.0,
    "warning",
    "Ten minutes of a busy GPU far below its TDP is a pattern, not a slow step: the job runs at a "
    "fraction of its speed.",
)
_alert(
    "GpuTemperatureHigh",
    300.0,
    "warning",
    "Five minutes above the hot line under load outlasts a burst; the clocks are about to drop.",
)
_alert(
    "GpuMemoryNearlyFull",
    600.0,
    "warning",
    "A caching allocator holds on to freed blocks, so a nearly full framebuffer can be normal for a while: "
    "ten minutes at the line is worth a warning (an OOM is likely, not certain).",
)
_alert(
    "GpuShmFull",
    0.0,
    "critical",
    "At the critical line DataLoader workers are dying now: page at once, critical.",
)
_alert(
    "GpuPodShmDefault",
    300.0,
    "warning",
    "A pod on the 64 MiB default /dev/shm fails under load; five minutes skips pods that are being "
    "replaced. A warning: the job may still not use shared memory much.",
)
_alert(
    "GpuIoWaitHighWhileStarving",
    300.0,
    "warning",
    "Five minutes of I/O wait while GPUs starve ties the starvation to storage: a warning that names the "
    "cause, not a new failure.",
)
_alert(
    "GpuP2PUnavailable",
    300.0,
    "critical",
    "Peer-to-peer over NVLink failing for five minutes is not a probe racing a reset: collectives run on "
    "slow paths on a node built for NVLink.",
)
_alert(
    "GpuFabricNotReady",
    300.0,
    "critical",
    "Registration with the NVSwitch fabric takes well under five minutes after boot; longer, the fabric "
    "manager is not running and NCCL cannot use NVLink.",
)
_alert(
    "GpuNvlinkErrors",
    0.0,
    "warning",
    "The rule already averages five minutes of the error counters: it fires at once, as a warning (links "
    "retrain and recover).",
)
_alert(
    "GpuXidCritical",
    0.0,
    "critical",
    "A critical XID is a hardware or driver fault already logged by the kernel: page at once.",
)
_alert(
    "GpuDown",
    120.0,
    "critical",
    "A GPU that has not answered NVML for two minutes while the others do is off the bus or hung, not "
    "timing out once: critical, its job is dead.",
)
_alert(
    "GpuExporterDown",
    300.0,
    "critical",
    "Five minutes of failed scrapes outlast a pod restart or a rollout: a node's GPUs are unmonitored.",
)
_alert(
    "GpuExporterAbsent",
    900.0,
    "critical",
    "No target at all for a quarter of an hour is a removed DaemonSet or a monitor that matches nothing, "
    "not an upgrade: no GPU is monitored.",
)
_alert(
    "GpuExporterCollectionStale",
    300.0,
    "warning",
    "Five minutes of stale collections is a hung driver call, not one slow sample.",
)
_alert(
    "GpuExporterNvmlDown",
    600.0,
    "warning",
    "Ten minutes without NVML outlasts a driver upgrade: GPU metrics are absent.",
)
_alert(
    "GpuExporterCollectErrors",
    900.0,
    "warning",
    "Errors that keep climbing for a quarter of an hour are not a transient driver hiccup; a warning, "
    "the collections that work still report.",
)

# ---- the node doctor (exporter/doctor): bring-up checks, run by `doctor` and live on their own thread ----

DOCTOR_FAST_INTERVAL = _t(
    "doctor.fast_interval_seconds",
    60.0,
    "seconds",
    "The cheap checks (driver, GPU count, ECC, XIDs, NVLink state, fabric, PCIe, host) cost a few NVML "
    "calls per GPU and some small files: once a minute shows a lost link or a dropped fabric promptly.",
)
DOCTOR_SLOW_INTERVAL = _t(
    "doctor.slow_interval_seconds",
    300.0,
    "seconds",
    "The P2P matrix (three calls per ordered GPU pair: 168 on 8 GPUs), the kubelet and the runtime bundles "
    "cost more and change only when pods or the node's setup change: every five minutes.",
)
DOCTOR_NVLINK_ERRORS = _t(
    "doctor.nvlink_errors",
    1000.0,
    "count",
    "Replay, recovery and CRC errors of one link since the driver loaded: a few are links retraining over "
    "weeks; a thousand is a link that keeps failing.",
)
DOCTOR_PCIE_BUSY_UTIL = _t(
    "doctor.pcie_busy_util",
    0.20,
    "ratio",
    "An idle GPU lowers its PCIe link generation to save power; only a GPU above 20 % utilization running "
    "below its maximum generation has a degraded link. The width never changes with load.",
)
DOCTOR_SHM_SMALL = _t(
    "doctor.shm_small_bytes",
    1 * GiB,
    "bytes",
    "A GPU pod's /dev/shm under 1 GiB fills with a few DataLoader workers' batches (training pods commonly "
    "mount 64 GiB); "
    "at the runtime's 64 MiB default it fails outright.",
)
DOCTOR_MEMLOCK_MIN = _t(
    "doctor.memlock_min_bytes",
    1 * GiB,
    "bytes",
    "EFA and GPUDirect RDMA pin the buffers they send from; the EFA installer sets the locked-memory limit "
    "to unlimited, and below 1 GiB libfabric fails to register NCCL's buffers.",
)
DOCTOR_CLOCK_MAX_ERROR = _t(
    "doctor.clock_max_error_seconds",
    0.1,
    "seconds",
    "Past 100 ms of clock error, logs and traces of the ranks on different nodes no longer line up, and "
    "time-based coordination (leases, checkpoints by wall clock) misjudges: a warning, never a failure.",
)

DOCTOR_SEVERITY: dict[str, Choice] = {
    check: _c(f"doctor.{check}.severity", severity, reason)
    for check, severity, reason in (
        ("driver", "critical", "No usable driver on a GPU node: no job can run."),
        ("gpu_count", "critical", "A GPU the driver cannot see is a job that cannot start at its size."),
        ("ecc", "warning", "A pending row remapping or page retirement needs a GPU reset, not a wake-up."),
        ("xid", "warning", "GpuXidCritical already pages on critical XIDs as they happen."),
        ("nvlink", "critical", "A link down slows every collective of the node's jobs."),
        ("fabric", "critical", "Without a registered fabric an NVSwitch node has no NVLink P2P."),
        ("p2p", "critical", "P2P blocked between GPUs sends NCCL to P2P/CUMEM/read, SHM or sockets."),
        ("rdma", "warning", "Without EFA/InfiniBand, multi-node NCCL runs over TCP: slow, not broken."),
        ("pod_shm", "warning", "A pod on a tiny /dev/shm dies with Bus error once it loads data in earnest."),
        ("nccl_env", "warning", "A misguided NCCL variable slows a job; it is its owner's to fix."),
        ("pcie", "warning", "A narrow PCIe link slows host transfers; the GPU still works."),
        ("host", "warning", "Memlock and clock problems degrade, they do not stop a job."),
    )
}

_alert(
    "GpuNodeCheckFailed",
    600.0,
    "critical",
    "A critical bring-up check (driver, GPU count, NVLink, fabric, P2P) failing for ten minutes is the "
    "node's setup, not its boot: the fabric manager registers GPUs and pods start well within that.",
)
_alert(
    "GpuNodeCheckWarning",
    900.0,
    "warning",
    "A warning-level check (ECC, XIDs, EFA, shm, NCCL variables, PCIe, host) failing for a quarter of an "
    "hour outlasts a pod being replaced: a warning to fix in working hours.",
)

# NVLinks each board should have up (its NVLink generation's per-GPU count), for the doctor's link check.
# Matched on the NVML name, longest match first; boards not listed (PCIe cards) are not held to a count.
NVLINKS_BY_BOARD: dict[str, int] = {
    "H100 80GB HBM3": 18,
    "H100 SXM": 18,
    "H200": 18,
    "GH200": 18,
    "B200": 18,
    "A100-SXM4": 12,
    "A100-SXM": 12,
    "V100-SXM2": 6,
}
# Boards built into NVSwitch systems (HGX/DGX): they need a running fabric manager before NVLink P2P works.
NVSWITCH_BOARDS = ("H100 80GB HBM3", "H100 SXM", "H200", "B200", "A100-SXM4", "A100-SXM")


def board_nvlinks(name: str) -> int | None:
    for key in sorted(NVLINKS_BY_BOARD, key=len, reverse=True):
        if key in name:
            return NVLINKS_BY_BOARD[key]
    return None


# what the GPU pods' logs say (--pod-logs)
_alert(
    "GpuNcclNotOnNvlink",
    600.0,
    "warning",
    "A job whose GPUs talk through SHM or NVLink reads on a node built for NVLink writes runs every "
    "collective slower until it is restarted on a fixed node: ten minutes skips a pod being replaced; a "
    "warning, the job still runs.",
)
_alert(
    "GpuNcclSocketsWithRdma",
    600.0,
    "warning",
    "Inter-node traffic on TCP sockets while the node has EFA/IB devices is a plugin or configuration "
    "fault that lasts the job: ten minutes skips a pod being replaced; a warning, the job still runs.",
)
_alert(
    "GpuNcclWarnings",
    0.0,
    "warning",
    "The rule already counts ten minutes of NCCL WARN lines: it fires at once, as a warning.",
)
_alert(
    "GpuPodShmBusError",
    0.0,
    "warning",
    "A DataLoader worker killed by a Bus error has already ended or crippled the job: at once, as a "
    "warning (the fix is the pod's /dev/shm, not the node).",
)
_alert(
    "GpuPodCudaOom",
    0.0,
    "warning",
    "CUDA out of memory has already ended the step or the job: at once, as a warning (the fix is the "
    "job's batch or sharding, not the node).",
)
_alert(
    "GpuNcclCollectiveTimeout",
    0.0,
    "critical",
    "The NCCL watchdog (or a DistBackendError) has already killed the job, usually for a hung or lost "
    "rank: at once, critical, since every GPU of the job sits idle until someone restarts it.",
)
_alert(
    "GpuNcclNetworkError",
    0.0,
    "critical",
    "An RDMA completion error (status 12: retries exceeded) is a link or fabric fault between nodes, and "
    "a peer lost (its connection closed, its remote allocator failed) is a dead rank or a broken path; "
    "either ends the job: at once, critical.",
)

# XID codes that mean trouble with the GPU or its driver rather than with a user's program. Their
# counters are exported from zero, so that increase() sees the first event.
CRITICAL_XIDS: dict[int, str] = {
    46: "GPU stopped processing",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement / row remapping event",
    64: "ECC page retirement / row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}

# What a board draws: its default power limit (TDP) and its idle draw with the driver loaded and no work,
# as nvidia-smi reports them, for logs that carry no power limit column (TDP) and for GPUs seen busy from
# their first sample (idle). Matched on the nvidia-smi name, longest match first. Live, NVML's own default
# limit is used, and the idle floor a GPU shows in its own samples always wins over this table's.
BOARD_POWER_W: dict[str, tuple[float, float | None]] = {
    "H100 80GB HBM3": (700.0, 70.0),
    "H100 SXM": (700.0, 70.0),
    "H100 NVL": (400.0, 60.0),
    "H100 PCIe": (350.0, 50.0),
    "H200": (700.0, 75.0),
    "GH200": (900.0, None),
    "B200": (1000.0, None),
    "A100-SXM4": (400.0, 55.0),
    "A100-SXM": (400.0, 55.0),
    "A100 80GB PCIe": (300.0, 45.0),
    "A100-PCIE-40GB": (250.0, 35.0),
    "A10G": (300.0, 25.0),
    "A30": (165.0, 30.0),
    "A40": (300.0, 30.0),
    "L40S": (350.0, 35.0),
    "L40": (300.0, 35.0),
    "L4": (72.0, 16.0),
    "T4": (70.0, 10.0),
    "V100-SXM2": (300.0, 40.0),
    "V100-SXM3": (350.0, 50.0),
    "V100-PCIE": (250.0, 30.0),
    "V100S": (250.0, 30.0),
    "P100-SXM2": (300.0, 35.0),
    "P100-PCIE": (250.0, 30.0),
    "RTX 4090": (450.0, 25.0),
    "RTX 3090": (350.0, 25.0),
    "RTX 3080": (320.0, 20.0),
    "RTX 3060 Ti": (200.0, 15.0),
    "RTX 2080 Ti": (250.0, 20.0),
    "RTX A6000": (300.0, 25.0),
    "RTX A5000": (230.0, 25.0),
    "RTX A4000": (140.0, 15.0),
    "TITAN X": (250.0, 15.0),
    "TITAN RTX": (280.0, 20.0),
}
BOARD_TDP_W: dict[str, float] = {name: tdp for name, (tdp, _) in BOARD_POWER_W.items()}


def _board(name: str) -> tuple[float, float | None] | None:
    if not name:
        return None
    upper = name.upper()
    for key in sorted(BOARD_POWER_W, key=len, reverse=True):
        if key.upper() in upper:
            return BOARD_POWER_W[key]
    return None


_BOARD_GB = re.compile(r"(?<![0-9])([0-9]{1,3}) ?GB\b", re.IGNORECASE)
GIB = 1 << 30


def board_memory_bytes(name: str) -> float | None:
    """A board's framebuffer from a name that states it (``A100-SXM4-80GB``, ``H100 80GB HBM3``,
    ``Tesla V100-SXM2-32GB``), for logs without memory.total; None where the name does not say (no
    table fills it in: a "Tesla V100-PCIE" came with 16 or 32 GB). The name's GB are the driver's GiB
    within half a percent (an 80GB H100 reports 81,559 MiB, an A100 81,920). A name that states more
    than the GPU's own (GH200 480GB counts its CPU's memory) only lowers the share reserved: never a
    server by mistake."""
    match = _BOARD_GB.search(name or "")
    return float(int(match.group(1)) * GIB) if match else None


def board_tdp(name: str) -> float | None:
    board = _board(name)
    return board[0] if board else None


def board_idle(name: str) -> float | None:
    board = _board(name)
    return board[1] if board else None


def table() -> dict[str, Threshold]:
    """Every threshold, by key."""
    return dict(_TABLE)


def choices() -> dict[str, Choice]:
    """Every policy word (alert severities), by key."""
    return dict(_CHOICES)
