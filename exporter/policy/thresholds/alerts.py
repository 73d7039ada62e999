"""Alerts: how long a condition must hold before it pages, and how loud."""

from __future__ import annotations

from dataclasses import dataclass

from .registry import Choice, Threshold, _c, _t

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
    "job (a warm-up, an evaluation pass), so the page comes about two minutes into the loss. A rank that "
    "stopped while its job waits for it fires once the stop has lasted starvation.rank_stop_seconds, so it "
    "pages 80 s in. A job running at a fraction of its speed: a warning, not a wake-up.",
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
