"""Prometheus alert rules, generated from the threshold table.

Each rule's expression names its thresholds as ``${placeholders}``; ``alerts/*.rules.yml`` fills them
with the table's numbers, and the Helm chart fills them with chart values (so a user can override a
threshold, a ``for`` or a severity without editing rules). Conventions of the monitoring mixins:
PascalCase names prefixed ``Gpu``, kebab-case groups, ``severity`` critical/warning/info, ``summary``,
a templated ``description`` (node, GPU, pod when known, value) and a ``runbook_url``.
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template

from exporter import thresholds as th

RUNBOOK_BASE = "https://github.com/gpu-bottleneck-exporter/gpu-bottleneck-exporter/blob/main/docs/runbooks/"
JOB = "gpu-bottleneck-exporter"

# placeholder -> (threshold, how the chart spells its value key)
PARAMS: dict[str, th.Threshold] = {
    "util_suspicion": th.UTIL_SUSPICION,
    "util_idle": th.UTIL_IDLE_LINE,
    "power_low": th.POWER_LOW,
    "temp_hot": th.TEMP_HOT,
    "shm_warning": th.SHM_WARNING,
    "shm_critical": th.SHM_CRITICAL,
    "memory_full": th.MEMORY_FULL,
    "iowait_high": th.IOWAIT_HIGH,
    "cap_below_default": th.POWER_CAP_BELOW_DEFAULT,
    "nvlink_errors_per_minute": th.NVLINK_ERROR_RATE,
    "idle_memory_bytes": th.IDLE_MEMORY,
    "stale_seconds": th.COLLECT_STALE,
}

# the node a series comes from: the chart relabels `node` from the pod's node; else the target
NODE = "{{ with $labels.node }}{{ . }}{{ else }}{{ $labels.instance }}{{ end }}"
GPU = "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on " + NODE
POD = "{{ with $labels.pod }} (pod {{ $labels.namespace }}/{{ . }}){{ end }}"


@dataclass(frozen=True)
class Alert:
    name: str
    group: str
    severity: str
    expr: str  # PromQL with ${placeholders} from PARAMS and ${job}
    for_: str
    summary: str
    description: str

    def runbook(self, base: str = RUNBOOK_BASE) -> str:
        return f"{base}{self.name}.md"


def _busy(series: str = "") -> str:
    return f'gpu_utilization_window_ratio{{stat="mean"{series}}}'


ALERTS: tuple[Alert, ...] = (
    # ---- verdicts of the analysis ---------------------------------------------------------------
    Alert(
        "GpuDataStarvation",
        "gpu-bottleneck-verdicts",
        "warning",
        'gpu_bottleneck{kind="data_starvation"} == 1',
        "2m",
        "GPU is starving for input data.",
        GPU + POD + " waits for its input every step (probable cause: {{ $labels.cause }}). Utilization "
        "alternates between busy and idle and power stays far below TDP. See the runbook for the cause.",
    ),
    Alert(
        "GpuCommHang",
        "gpu-bottleneck-verdicts",
        "critical",
        'gpu_bottleneck{kind="comm_hang"} == 1',
        "1m",
        "GPU is stuck in a collective (NCCL hang).",
        GPU + POD + " has kept an NCCL kernel resident for minutes with near-idle power and no NVLink or "
        "PCIe traffic ({{ $labels.cause }}). The job is hung and will hit the NCCL watchdog.",
    ),
    Alert(
        "GpuThermalThrottling",
        "gpu-bottleneck-verdicts",
        "warning",
        'gpu_bottleneck{kind="thermal_throttle"} == 1',
        "2m",
        "GPU is throttling for heat.",
        GPU + POD + " lowers its clocks for heat (or is about to): utilization stays high while steps slow "
        "down.",
    ),
    Alert(
        "GpuPowerCapped",
        "gpu-bottleneck-verdicts",
        "warning",
        'gpu_bottleneck{kind="power_throttle", cause="cap_below_default"} == 1',
        "5m",
        "GPU is held at a power cap below its default limit.",
        GPU + POD + " is held at a power limit below the board's default and its clocks are reduced.",
    ),
    Alert(
        "GpuIdleAllocated",
        "gpu-bottleneck-verdicts",
        "info",
        'gpu_bottleneck{kind="idle_allocated"} == 1',
        "10m",
        "GPU is allocated but idle.",
        GPU + POD + " has held memory without running a kernel for more than 15 minutes.",
    ),
    # ---- the seed table as plain rules ----------------------------------------------------------
    Alert(
        "GpuUtilizationLow",
        "gpu-utilization",
        "info",
        "avg_over_time(" + _busy() + "[10m]) < ${util_suspicion}"
        " and " + _busy() + " > ${util_idle}"
        " and on (instance, gpu, uuid) gpu_memory_used_bytes > ${idle_memory_bytes}",
        "15m",
        "GPU utilization stays below the suspicion line.",
        GPU + POD + " averaged {{ $value | humanizePercentage }} utilization over 10 minutes while a job "
        "holds it: a data or communication bottleneck is suspected.",
    ),
    Alert(
        "GpuPowerFarBelowTdp",
        "gpu-utilization",
        "warning",
        'gpu_power_window_watts{stat="mean"} / ignoring (stat) gpu_power_default_limit_watts'
        " < ${power_low} and on (instance, gpu, uuid) " + _busy() + " > 0.5",
        "10m",
        "Busy GPU draws far less power than its TDP.",
        GPU + POD + " is busy but draws {{ $value | humanizePercentage }} of its default power limit: it is "
        "starved or waiting, not computing.",
    ),
    Alert(
        "GpuTemperatureHigh",
        "gpu-thermal-power",
        "warning",
        'gpu_temperature_celsius{sensor="gpu"} > ${temp_hot}'
        " and on (instance, gpu, uuid) " + _busy() + " > 0.5",
        "5m",
        "GPU runs above the hot line under load.",
        GPU + POD + " is at {{ $value }} °C under load; above the hot line clocks are close to dropping.",
    ),
    Alert(
        "GpuMemoryNearlyFull",
        "gpu-thermal-power",
        "warning",
        "gpu_memory_used_bytes / gpu_memory_total_bytes > ${memory_full}",
        "10m",
        "GPU framebuffer is nearly full.",
        GPU + POD + " uses {{ $value | humanizePercentage }} of its memory: the next allocation may fail "
        "with CUDA out of memory.",
    ),
    Alert(
        "GpuShmNearlyFull",
        "gpu-node-shm-io",
        "warning",
        "gpu_node_shm_used_bytes / gpu_node_shm_size_bytes > ${shm_warning}"
        " and gpu_node_shm_used_bytes / gpu_node_shm_size_bytes <= ${shm_critical}",
        "1m",
        "Shared memory is nearly full.",
        "{{ $labels.mountpoint }} on " + NODE + POD + " is {{ $value | humanizePercentage }} full. "
        "DataLoader workers die with 'Bus error' when it fills.",
    ),
    Alert(
        "GpuShmFull",
        "gpu-node-shm-io",
        "critical",
        "gpu_node_shm_used_bytes / gpu_node_shm_size_bytes > ${shm_critical}",
        "0s",
        "Shared memory is full.",
        "{{ $labels.mountpoint }} on " + NODE + POD + " is {{ $value | humanizePercentage }} full: "
        "DataLoader workers are dying with 'Bus error' now.",
    ),
    Alert(
        "GpuPodShmDefault",
        "gpu-node-shm-io",
        "warning",
        "gpu_pod_shm_default_size == 1",
        "5m",
        "GPU pod runs on the 64 MiB default /dev/shm.",
        "Pod {{ $labels.namespace }}/{{ $labels.pod }} on " + NODE + " holds GPUs but its /dev/shm is the "
        "64 MiB container default: DataLoader workers will die with 'Bus error' under load.",
    ),
    Alert(
        "GpuIoWaitHighWhileStarving",
        "gpu-node-shm-io",
        "warning",
        "gpu_node_cpu_iowait_ratio > ${iowait_high}"
        ' and on (instance) count by (instance) (gpu_bottleneck{kind="data_starvation"} == 1) > 0',
        "5m",
        "Node waits on I/O while its GPUs starve.",
        NODE + " spends {{ $value | humanizePercentage }} of its CPU time in I/O wait while GPUs starve: "
        "storage is too slow for the data loaders.",
    ),
    # ---- interconnect -----------------------------------------------------------------------------
    Alert(
        "GpuNvlinkDown",
        "gpu-fabric",
        "critical",
        "gpu_nvlink_up == 0",
        "5m",
        "NVLink is down.",
        "NVLink {{ $labels.link }} of " + GPU + " is down: NCCL falls back to slower paths.",
    ),
    Alert(
        "GpuP2PUnavailable",
        "gpu-fabric",
        "critical",
        'gpu_p2p_status{capability="nvlink"} == 0'
        " and on (instance, gpu, uuid) (count by (instance, gpu, uuid) (gpu_nvlink_up) > 0)",
        "5m",
        "Peer-to-peer over NVLink is unavailable.",
        GPU + " cannot reach GPU {{ $labels.peer_gpu }} peer-to-peer over NVLink: NCCL uses SHM, "
        "P2P/CUMEM/read or sockets instead.",
    ),
    Alert(
        "GpuFabricNotReady",
        "gpu-fabric",
        "critical",
        'gpu_fabric_state{state="completed"} == 0',
        "5m",
        "GPU is not registered with the NVSwitch fabric.",
        GPU + " has not completed NVSwitch fabric registration: is the fabric manager running?",
    ),
    Alert(
        "GpuNvlinkErrors",
        "gpu-fabric",
        "warning",
        "sum without (link, type) (increase(gpu_nvlink_errors_total[5m])) > 5 * ${nvlink_errors_per_minute}",
        "0s",
        "NVLink errors are climbing.",
        GPU + " logged {{ $value }} NVLink replay/recovery/CRC errors in 5 minutes: a link is degrading.",
    ),
    Alert(
        "GpuXidCritical",
        "gpu-fabric",
        "critical",
        'increase(gpu_xid_errors_total{xid=~"' + "|".join(map(str, th.CRITICAL_XIDS)) + '"}[10m]) > 0',
        "0s",
        "GPU reported a critical XID.",
        GPU + POD + " reported XID {{ $labels.xid }}: a hardware or driver fault. Check `dmesg` and the "
        "runbook's XID table.",
    ),
    Alert(
        "GpuDown",
        "gpu-fabric",
        "critical",
        "gpu_up == 0 and on (instance) gpu_exporter_nvml_up == 1",
        "2m",
        "GPU does not answer.",
        GPU + " does not answer NVML (lost from the bus, timed out, or erroring) while the other GPUs do.",
    ),
    # ---- the exporter itself ----------------------------------------------------------------------
    Alert(
        "GpuExporterDown",
        "gpu-exporter",
        "critical",
        'up{job="${job}"} == 0',
        "5m",
        "gpu-bottleneck-exporter is down.",
        "Prometheus cannot scrape the exporter on {{ $labels.instance }}: that node's GPUs are not "
        "monitored.",
    ),
    Alert(
        "GpuExporterAbsent",
        "gpu-exporter",
        "critical",
        'absent(up{job="${job}"})',
        "15m",
        "No gpu-bottleneck-exporter target exists.",
        "Prometheus has no target for job ${job}: no GPU is monitored (DaemonSet gone, or the "
        "ServiceMonitor/PodMonitor does not match).",
    ),
    Alert(
        "GpuExporterCollectionStale",
        "gpu-exporter",
        "warning",
        "time() - gpu_exporter_last_collect_timestamp_seconds > ${stale_seconds}",
        "5m",
        "gpu-bottleneck-exporter stopped collecting.",
        "The {{ $labels.source }} collection on " + NODE + " last succeeded {{ $value | humanizeDuration }} "
        "ago: metrics are stale (a hung driver call?).",
    ),
    Alert(
        "GpuExporterNvmlDown",
        "gpu-exporter",
        "warning",
        "gpu_exporter_nvml_up == 0",
        "10m",
        "gpu-bottleneck-exporter cannot use NVML.",
        "The exporter on " + NODE + " has no NVML session (driver missing, unloaded or mismatched): GPU "
        "metrics are absent.",
    ),
    Alert(
        "GpuExporterCollectErrors",
        "gpu-exporter",
        "warning",
        'sum by (instance, source, error) (rate(gpu_exporter_collect_errors_total{error!~"NotSupported|'
        'FunctionNotFound"}[10m])) * 60 > 1',
        "15m",
        "gpu-bottleneck-exporter keeps hitting collection errors.",
        "The {{ $labels.source }} collection on " + NODE + " fails with {{ $labels.error }} "
        "{{ $value | humanize }} times a minute.",
    ),
)


def number(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e6 else f"{value:.0f}"


def expression(alert: Alert, values: dict[str, str] | None = None, job: str = JOB) -> str:
    """The alert's PromQL with every placeholder filled (by default from the threshold table)."""
    filled = {key: number(t.value) for key, t in PARAMS.items()} | (values or {})
    return Template(alert.expr).substitute(job=job, **filled)


def groups(for_override: str | None = None, job: str = JOB, runbook_base: str = RUNBOOK_BASE) -> list[dict]:
    """The rule groups as data (``for_override`` shortens every ``for``: end-to-end tests use it)."""
    out: dict[str, dict] = {}
    for alert in ALERTS:
        rule = {
            "alert": alert.name,
            "expr": expression(alert, job=job),
            "for": for_override if for_override is not None else alert.for_,
            "labels": {"severity": alert.severity},
            "annotations": {
                "summary": alert.summary,
                "description": alert.description.replace("${job}", job),
                "runbook_url": alert.runbook(runbook_base),
            },
        }
        if rule["for"] in ("0s", "0m"):
            del rule["for"]
        out.setdefault(alert.group, {"name": alert.group, "rules": []})["rules"].append(rule)
    return list(out.values())


def render(for_override: str | None = None, job: str = JOB) -> str:
    from exporter.artifacts.yamlout import dump

    header = "# generated from exporter/thresholds.py by `make artifacts`; do not edit\n"
    return header + dump({"groups": groups(for_override, job)})


def render_doc() -> str:
    """docs/alerts.md: every alert, its severity, hold time, expression and runbook."""
    lines = [
        "# Alerts",
        "",
        "<!-- generated from exporter/artifacts/alerts.py by `make artifacts`; do not edit -->",
        "",
        "The rules live in",
        "[`alerts/gpu-bottleneck-exporter.rules.yml`](../alerts/gpu-bottleneck-exporter.rules.yml)",
        "(generated from the [threshold table](thresholds.md)); the Helm chart renders the same rules as",
        "a PrometheusRule. Every alert links a runbook. `promtool test rules alerts/tests/*.test.yml` runs",
        "their unit tests.",
        "",
        "Suggested Alertmanager inhibitions: a critical alert on a GPU silences that GPU's warnings and",
        "infos",
        "(`equal: [instance, gpu]`), and `GpuShmFull` silences `GpuShmNearlyFull` on the same mountpoint.",
        "",
    ]
    for group in dict.fromkeys(a.group for a in ALERTS):
        lines += [f"## {group}", "", "| alert | severity | for | expression |", "|---|---|---|---|"]
        for a in (a for a in ALERTS if a.group == group):
            expr = expression(a).replace("|", "\\|")
            lines.append(f"| [{a.name}](runbooks/{a.name}.md) | {a.severity} | {a.for_} | `{expr}` |")
        lines.append("")
    return "\n".join(lines)
