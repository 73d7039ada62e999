"""The node doctor (exporter/doctor): its checks' numbers and severities, its alerts and the pod logs'
alerts; the critical XID codes.
"""

from __future__ import annotations

from .alerts import _alert
from .registry import Choice, GiB, _c, _t

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
        (
            "sharing",
            "info",
            "Shared GPUs judged whole is a setting (hostPID) chosen for the cluster, not a fault: shown in "
            "the checklist, never paged.",
        ),
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
