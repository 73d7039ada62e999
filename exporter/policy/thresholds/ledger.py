"""The time ledger: every second of a GPU goes to one state; and the detectors that read the ledger's
evidence (coverage, starvation, hangs).
"""

from __future__ import annotations

from .classic import AT_CEILING
from .registry import GiB, _t

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
    "waiting or moving data (an NCCL kernel occupies a few SMs), not compute (70-85 % of SMs); a hung "
    "collective's spin kernel, resident all the time, shows it as few SMs active (GPM) at all. Dead at "
    "a quarter on every set, it acts at a half (docs/thresholds.md says how): the examples sit well "
    "clear of it.",
)
LEDGER_COMM_MEM_UTIL = _t(
    "ledger.comm_mem_util_ratio",
    0.10,
    "ratio",
    "Without SM activity: a GPU resident all second whose memory controller is under 10 % busy moves "
    "next to nothing through HBM: a collective spinning or crawling over a slow transport. Training "
    "kernels keep it 20-60 % busy."
    " Dead at a quarter on every set, it acts at a half (docs/thresholds.md says how): the examples "
    "sit well clear of it.",
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
    "by the board, so this split is coarse: SM activity wins where it exists."
    " Dead at a quarter on every set, it acts at a half (docs/thresholds.md says how): the examples "
    "sit well clear of it.",
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
# logs without clock-event reasons: drawing at the enforced limit with lowered clocks is the cap
LEDGER_POWER_AT_LIMIT = AT_CEILING
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
    "window still holds the loss)."
    " Dead on every set, the examples thinned to 30 s included (5 samples are 150 s there, far past "
    "the 30 s window); it guards a 60 s scrape, which no set holds.",
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
    "...and keeps it until the five-minute share (and the two-minute one, for a verdict the fast rule "
    "fired) falls below 20 %: a verdict holds while its condition lasts and does not drop out between two "
    "checkpoints or two slow bursts (a clean stretch shorter than the evidence window and the resolve "
    "time together never breaks it).",
)
COVERAGE_FAST_SHARE = _t(
    "coverage.fast_share",
    0.40,
    "ratio",
    "40 % of the last two minutes lost to one family fires at once. A single pause in those two minutes "
    "is forgiven there (one 45-second save or evaluation is not a pattern); repeated pauses and "
    "step-level waits count in full.",
)
# the two-minute evidence ends below the same share as the five-minute one (one exit line for both)
COVERAGE_FAST_EXIT = COVERAGE_EXIT
COVERAGE_CLEAR = _t(
    "coverage.clear_share",
    0.10,
    "ratio",
    "Half a minute (the evidence window) with under 10 % lost: the condition has ended, and neither the "
    "two- nor the five-minute share holds the verdict any more (they would otherwise linger for minutes "
    "after a fix): with the resolve time the verdict clears about 90 s after recovery. An episode's loss "
    "begins after the last such half-minute and stops with the last, losing faster than 10 % between. "
    "Sharp below (fragile): the last minutes of a loader-bound run (a real object-detection run at batch "
    "96, its final pass after a 97-minute loss) lose a little under a tenth per half-minute; with the line "
    "a tenth lower they stop reading as clear and are paged as a second loss of their own.",
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
    "with a wide spread is the same starvation."
    " Dead on every set: a thinned log keeps single samples, not their blur; it guards utilization "
    "averaged over each step (a recording rule's average), which no set holds.",
)
STARVATION_SWING_SPREAD = _t(
    "starvation.swing_spread",
    0.2,
    "ratio",
    "p95 - p05 of utilization above 0.2 is a swing; a healthy job at 85-90 % stays within a few points."
    " Dead on every set, for the same reason as the swing's mean.",
)
STARVATION_PEER_PACE = _t(
    "starvation.peer_pace_ratio",
    1.5,
    "ratio",
    "A data-parallel job's ranks compute the same steps, so their utilizations agree within a few tens of "
    "percent (real FSDP ranks starved together: 11-16 %), and a rank starved of input reads *under* peers "
    "pinned in their collective. A GPU whose peer computes at one and a half times its utilization or "
    "more, and 15 points more (the starvation share), while that peer is itself neither pinned nor "
    "waiting in a collective, waits for that peer: a later stage of a model split over the GPUs (a real "
    "two-A100 split with CPU offload: 46 % against 17-28 %), or a rank waiting for a straggler over a "
    "host backend. Its idle time is its peer's pace, not its own input: no starvation page stands on it. "
    "Judged on fine samples only: a Prometheus' 15-60 s scrapes read each rank at another instant, and "
    "ranks starving together differ that much by chance.",
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
    "the host link is the pipeline (CPU offload, pageable copies); a fed training step moves under 2 GB/s."
    " Dead on every set, the cause each episode names included: a half either way changes no cause, so "
    "the examples sit far from it or another signal decides; it guards a node in between.",
)
STARVATION_FIRE = _t(
    "starvation.fire_after_seconds",
    15.0,
    "seconds",
    "Evidence held for 15 s (a dozen steps) before the verdict fires: detection within a minute.",
)
VERDICT_RESOLVE = _t(
    "analysis.resolve_after_seconds",
    60.0,
    "seconds",
    "A minute without evidence resolves a verdict of a condition that comes and goes: starvation with the "
    "data pipeline, throttling with temperature (which moves slowly) and the cap, slow collectives, a "
    "degraded fabric. Past the evidence window's half minute, it keeps one clean half-minute between two "
    "slow bursts from ending an episode. A hang (traffic or work ends it at once) and a /dev/shm volume "
    "(freed space is freed) resolve sooner, on their own times. Sharp below (fragile): at 54 s, real "
    "loader-bound runs (object detection on an A30, a CPU-bound run on an RTX 3060 Ti) and examples "
    "thinned to 30 s (one sample standing for half a minute) end one loss between two clusters of waits "
    "and page it again, or too briefly to page: 3 pages lost, 2 false pages added (and 7 removed where a "
    "verdict outlived its label).",
)
# one resolve time for the verdicts of conditions that come and go (each kind's own name kept)
STARVATION_RESOLVE = VERDICT_RESOLVE

HANG_UTIL = AT_CEILING  # a hung collective keeps its NCCL kernel resident: utilization at its ceiling
HANG_POWER = _t(
    "hang.power_ratio",
    0.35,
    "ratio",
    "...while the GPU draws near-idle power: a spinning NCCL kernel uses 20-30 % of TDP, real work 60 %+.",
)
HANG_SM = LEDGER_COMM_SM  # ...and few SMs are active (GPM): the spin kernel occupies a handful of them
HANG_TRAFFIC = _t(
    "hang.traffic_bytes_per_second",
    50e6,
    "bytes_per_second",
    "...and NVLink and PCIe carry almost nothing: a collective in progress moves gigabytes per second."
    " Dead on every set: the hangs carry nothing and every job moving data carries GB/s, far either "
    "side of it; it guards a hang over links that still trickle (a proxy thread's keep-alives), which "
    "no example has.",
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
    "wait for it: only five minutes of that is called a hang."
    " Dead on every set: no example has a rank outside the collective while the others wait in it "
    "(every hang here has all ranks in).",
)
HANG_RESOLVE = _t(
    "hang.resolve_after_seconds",
    10.0,
    "seconds",
    "Traffic or real work for 10 s ends a hang."
    " Dead on every set: no example hang recovers (each lasts to the trace's end); it guards a "
    "collective that resumes after a retried timeout.",
)
RANK_STOP = _t(
    "starvation.rank_stop_seconds",
    20.0,
    "seconds",
    "A rank of a running job off its kernels for 20 s while the job's other ranks wait for it in their "
    "collective, and it is not the job's first rank, has stopped: its host no longer feeds it (a hung "
    "read, a loader deadlock, a process stuck outside CUDA). A healthy job leaves no such rank out that "
    "long: a garbage-collection pass, a page-cache miss or a loader worker's restart takes seconds (under "
    "the 10 s pause allowance), and a synchronous save runs on the first rank (rank 0 by every "
    "framework's convention: torch.save behind a barrier, the trainers' main process), which is judged "
    "by the coverage rule instead, so that its saves never page. Twice the pause allowance leaves a slow "
    "hiccup its margin; with the alert's minute, a stop pages 80 s in, and the verdict ends with the "
    "stop where nothing else holds it.",
)
