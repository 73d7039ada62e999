"""What the training's own log says (pod logs, POST /v1/progress), and the verdicts that read it."""

from __future__ import annotations

from .classic import AT_CEILING
from .ledger import VERDICT_RESOLVE
from .registry import _t

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
PODLOG_PROGRESS_CPU = _t(
    "podlogs.progress_cpu_seconds",
    0.1,
    "seconds",
    "CPU a pass of the pod-log thread may spend trying the progress patterns on the newest lines of all "
    "the containers it follows: a tenth of a core at one pass a second. One accepted user pattern costs "
    "up to tens of milliseconds a line on a hostile line (`step` and a thousand digits), so 64 lines of "
    "64 containers once cost about a minute a pass; past the budget the remaining containers' lines "
    "wait for the next pass (counted, and the wait is gpu_exporter_pod_log_progress_wait_seconds), the "
    "containers taken in turn from the one tried longest ago, so one tenant's costly log delays the "
    "others by a pass, not forever. A pass then overruns the budget by at most one search.",
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
    "Thermal clock-event reasons active in 30 % of the busy samples of the last 10 s: the GPU is throttling."
    " Dead on every set: a half either way changes nothing, so the throttling examples show their "
    "thermal reasons far more often and the others far less; it guards a GPU throttling in bursts.",
)
THERMAL_SLOWDOWN = _t(
    "thermal.slowdown_celsius",
    87.0,
    "celsius",
    "Where a log does not say, the slowdown point of an H100 SXM; NVML's own threshold is used live."
    " Dead at a quarter on every set, it acts at a half (docs/thresholds.md says how): the examples "
    "sit well clear of it.",
)
THERMAL_SLOWDOWN_MARGIN = _t(
    "thermal.slowdown_margin_celsius",
    3.0,
    "celsius",
    "Within 3 degrees of the slowdown point a GPU counts as at it: under the same load it gets there in "
    "seconds, and the clocks it has already lost are heat's."
    " Dead on every set: the throttling examples sit at their slowdown point, none a few degrees under "
    "it.",
)
THERMAL_RISE = _t(
    "thermal.rise_celsius_per_second",
    0.05,
    "celsius_per_second",
    "Above the hot line and still rising by 3 degrees a minute, heading for the slowdown point: cooling "
    "cannot keep up."
    " Dead on every set: no example's verdict turns on the forecast (the thermal examples are judged "
    "by their clocks and reasons); it and the horizon below guard a GPU still climbing toward its "
    "slowdown point.",
)
THERMAL_HORIZON = _t(
    "thermal.horizon_seconds",
    120.0,
    "seconds",
    "...reaching the slowdown point within two minutes at that rate. Dead on every set, as the rise above.",
)
# SM clocks off their ceiling under load near the slowdown point: throttled without a reason bit
THERMAL_CLOCK_DROP = AT_CEILING
THERMAL_FIRE = _t(
    "thermal.fire_after_seconds", 10.0, "seconds", "Ten seconds of throttling evidence fire it."
)
THERMAL_RESOLVE = VERDICT_RESOLVE  # a cool minute: temperature moves slowly

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
POWER_CAP_CLOCK_CUT = _t(
    "power.cap_clock_cut_ratio",
    0.7,
    "ratio",
    "A board held at its enforced limit with its SM clock under 70 % of its maximum is losing speed to a "
    "cap below its default, where the log has no default limit or board name to compare the cap with (an "
    "operator's `nvidia-smi -pl`). At its own default limit a board keeps 70 % of its maximum clock or "
    "more even on its heaviest dense kernels (an H100 SXM on FP32 matmuls at 700 W: 1410 of 1980 MHz, "
    "71 %; training typically 80-95 %), and dynamic power falls with about the cube of the clock, so a "
    "clock under 70 % at the limit is a cap near a third of what the work would draw or less.",
)
POWER_FIRE = _t("power.fire_after_seconds", 30.0, "seconds", "Half a minute at a lowered cap fires it.")
POWER_RESOLVE = VERDICT_RESOLVE  # a minute off the cap

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
    "Below 85 % the shm verdict starts resolving."
    " Dead on every set: no example frees its /dev/shm (each fills it to the end); it guards the "
    "hysteresis of a volume emptied after a page.",
)
SHM_RESOLVE = _t(
    "shm.resolve_after_seconds",
    30.0,
    "seconds",
    "Thirty seconds below it resolves. Dead on every set, as the resolve ratio above.",
)

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
    "jobs on small boards (a LibTorch model at 0.8 GiB on an 8 GiB card) hold less than a GiB. Sharp above "
    "(fragile) by physics: a bare context is as large as the line (a real V100 job holding its GPU while it "
    "made its data on the CPU showed exactly 512 MiB for 25 minutes), so a line a tenth higher calls a held "
    "GPU free and loses its page.",
)

NVLINK_ERROR_RATE = _t(
    "nvlink.error_rate_per_minute",
    10.0,
    "per_minute",
    "More than ten replay, recovery or CRC errors a minute on a GPU's links: the link is degrading."
    " Dead on every set: no example logs NVLink errors (the NVLink scenario's links go down, they do "
    "not degrade).",
)
NVLINK_FIRE = _t("nvlink.fire_after_seconds", 30.0, "seconds", "Half a minute of a degraded fabric fires it.")
NVLINK_RESOLVE = VERDICT_RESOLVE  # a healthy minute

COMM_BOUND_FIRE = _t(
    "comm_bound.fire_after_seconds",
    30.0,
    "seconds",
    "Half a minute of steps dominated by collectives fires it: slow transports do not come and go.",
)
COMM_BOUND_RESOLVE = VERDICT_RESOLVE  # a minute of fast collectives
