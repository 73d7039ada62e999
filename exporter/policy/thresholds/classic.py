"""The classic threshold table: the numbers operators know (utilization, power, temperature, /dev/shm,
framebuffer, host I/O and CPU).
"""

from __future__ import annotations

from .registry import _t

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
    "steady near TDP (70-95 %). 45 % of the default limit separates the two on any board."
    " Dead on every set: power weighs 40 % of a starvation score whose rhythm decides it on every "
    "example; it guards a rhythm just at its line on a board whose idle draw is high, which no "
    "example is.",
)
TEMP_HOT = _t(
    "thermal.hot_celsius",
    80.0,
    "celsius",
    "Above about 80 degrees C the GPU is close to lowering its clocks: utilization stays at 100 % while "
    "steps get slower. Sharp below (fragile): boards healthy at full load run in the 70s, so a line a "
    "tenth lower calls them hot; the line sits above them and under the slowdown point.",
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
    "(Lustre metadata, network file systems); a healthy node sits at a few percent."
    " Dead on every set, the cause each episode names included: a half either way changes no cause, so "
    "the examples sit far from it or another signal decides; it guards a node in between.",
)
PSI_IO_HIGH = _t(
    "host.psi_io_high_ratio",
    0.20,
    "ratio",
    "Some task stalled on I/O a fifth of the time (PSI io some avg10): storage is the bottleneck."
    " Dead on every set, the cause each episode names included: a half either way changes no cause, so "
    "the examples sit far from it or another signal decides; it guards a node in between.",
)
AT_CEILING = _t(
    "analysis.at_ceiling_ratio",
    0.95,
    "ratio",
    "A reading within a twentieth of its ceiling is at it. Each is sampled with a few percent of jitter: "
    "utilization's sample window straddles a kernel's edges, a core's busy share loses ticks to "
    "interrupts, the board averages power over about a second and steps its clocks in bins. So a core "
    "busy 95 % of the time is pinned (too few loader workers, CPU-bound preprocessing); a collective whose "
    "kernel stays resident in 95 % of the samples at 95 % utilization or more is hung there; a board "
    "drawing 95 % of its enforced limit is at the cap; SM clocks under 95 % of their maximum under load "
    "were cut (near the slowdown point: by heat, in logs without clock-event reasons).",
)
CORE_PINNED = AT_CEILING  # a loader's core at its ceiling
PSI_CPU_HIGH = _t(
    "host.psi_cpu_high_ratio",
    0.25,
    "ratio",
    "Runnable tasks waited for a CPU a quarter of the time (PSI cpu some avg10): the node is CPU-starved."
    " Dead on every set, the cause each episode names included: a half either way changes no cause, so "
    "the examples sit far from it or another signal decides; it guards a node in between.",
)
