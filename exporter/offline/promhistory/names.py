"""The series replay reads from a Prometheus, one table: which exporter's name becomes which point
attribute, in what unit.

Four sources of GPU series, tried in this order, the first a GPU has winning for each attribute:

- this exporter's own raw series (``gpu_utilization_ratio``...: docs/metrics.md);
- dcgm-exporter since its 4.9 release: the default and profiling fields carry DCGM 4.7's names, and
  eleven of them changed unit (clocks in hertz, utilizations as 0-1 ratios, framebuffer in bytes,
  NVLink throughput in bytes per second);
- dcgm-exporter before 4.9: the long-standing ``DCGM_FI_*`` names (percent, MiB, MHz);
- nvidia_gpu_exporter (``nvidia_smi_*``, base units).

The node's series come from node_exporter (CPU, I/O wait, pressure stall information, the ``/dev/shm``
filesystem) and are computed server-side (``rate`` over the step), as are counters of the GPU sources.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.policy.catalog import MIB

DCGM_LEGACY = "dcgm-exporter (DCGM_FI_* names before 4.9)"
DCGM_49 = "dcgm-exporter 4.9 (DCGM 4.7 names)"
NVIDIA_SMI = "nvidia_gpu_exporter"
OWN = "gpu-bottleneck-exporter"
SCHEMES = (OWN, DCGM_49, DCGM_LEGACY, NVIDIA_SMI)

MHZ = 1e6
PERCENT = 0.01
MB = 1e6  # dcgm's NVLink throughput: MB/s derived from the driver's KiB/s by dividing by 1000


@dataclass(frozen=True)
class Series:
    """One exporter's series for one point attribute: ``value * scale`` is in the attribute's base
    unit. ``labels``: fixed matchers the series needs (``sensor="gpu"``); ``counter``: read as a
    per-second ``rate`` over the step."""

    scheme: str
    metric: str
    attr: str
    scale: float = 1.0
    labels: str = ""
    counter: bool = False


def _s(
    scheme: str, metric: str, attr: str, scale: float = 1.0, labels: str = "", counter: bool = False
) -> Series:
    return Series(scheme, metric, attr, scale, labels, counter)


# Per GPU attribute, the series that carry it. Where one scheme lists two names for an attribute (an
# opt-in field and its fallback), the first present wins.
GPU_SERIES: tuple[Series, ...] = (
    # this exporter (docs/metrics.md): base units already
    _s(OWN, "gpu_utilization_ratio", "util"),
    _s(OWN, "gpu_memory_utilization_ratio", "mem_util"),
    _s(OWN, "gpu_power_watts", "power_w"),
    _s(OWN, "gpu_power_limit_watts", "power_limit_w"),
    _s(OWN, "gpu_power_default_limit_watts", "power_default_w"),
    _s(OWN, "gpu_memory_used_bytes", "mem_used_bytes"),
    _s(OWN, "gpu_memory_total_bytes", "mem_total_bytes"),
    _s(OWN, "gpu_temperature_celsius", "temp_c", labels='sensor="gpu"'),
    _s(OWN, "gpu_temperature_celsius", "temp_mem_c", labels='sensor="memory"'),
    _s(OWN, "gpu_clock_hertz", "sm_clock_hz", labels='clock="sm"'),
    _s(OWN, "gpu_clock_max_hertz", "sm_clock_max_hz", labels='clock="sm"'),
    _s(OWN, "gpu_sm_active_ratio", "sm_active"),
    _s(OWN, "gpu_tensor_active_ratio", "tensor_active"),
    _s(OWN, "gpu_nvlink_traffic_bytes_total", "nvlink_tx_bps", labels='direction="tx"', counter=True),
    _s(OWN, "gpu_nvlink_traffic_bytes_total", "nvlink_rx_bps", labels='direction="rx"', counter=True),
    _s(OWN, "gpu_pcie_bytes_total", "pcie_tx_bps", labels='direction="tx"', counter=True),
    _s(OWN, "gpu_pcie_bytes_total", "pcie_rx_bps", labels='direction="rx"', counter=True),
    _s(OWN, "gpu_nvlink_links_up", "nvlink_active"),
    _s(OWN, "gpu_nvlink_links_expected", "nvlink_links"),
    _s(OWN, "gpu_nvlink_link_errors_total", "nvlink_errors"),
    _s(OWN, "gpu_p2p_failing_pairs", "p2p_failed"),
    _s(OWN, "gpu_fabric_registered", "fabric_ready"),
    # dcgm-exporter 4.9: DCGM 4.7's names, base units
    _s(DCGM_49, "DCGM_FI_DEV_GPU_UTIL_RATIO", "util"),
    _s(DCGM_49, "DCGM_FI_DEV_MEMORY_UTIL_RATIO", "mem_util"),
    _s(DCGM_49, "DCGM_FI_DEV_BOARD_POWER_WATTS", "power_w"),
    _s(DCGM_49, "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS", "power_limit_w"),
    _s(DCGM_49, "DCGM_FI_DEV_FB_USED_BYTES", "mem_used_bytes"),
    _s(DCGM_49, "DCGM_FI_DEV_FB_CAPACITY_BYTES", "mem_total_bytes"),
    _s(DCGM_49, "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "temp_c"),
    _s(DCGM_49, "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", "temp_mem_c"),
    _s(DCGM_49, "DCGM_FI_DEV_SM_CLOCK_HERTZ", "sm_clock_hz"),
    _s(DCGM_49, "DCGM_FI_DEV_MAX_SM_CLOCK_HERTZ", "sm_clock_max_hz"),
    _s(DCGM_49, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "reasons"),
    _s(DCGM_49, "DCGM_FI_PROF_SM_UTIL_RATIO", "sm_active"),
    _s(DCGM_49, "DCGM_FI_PROF_TENSOR_UTIL_RATIO", "tensor_active"),
    _s(DCGM_49, "DCGM_FI_PROF_NVLINK_TX_BYTES", "nvlink_tx_bps"),
    _s(DCGM_49, "DCGM_FI_PROF_NVLINK_RX_BYTES", "nvlink_rx_bps"),
    _s(DCGM_49, "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", "nvlink_tx_bps"),
    _s(DCGM_49, "DCGM_FI_PROF_PCIE_TX_BYTES", "pcie_tx_bps"),
    _s(DCGM_49, "DCGM_FI_PROF_PCIE_RX_BYTES", "pcie_rx_bps"),
    # dcgm-exporter before 4.9: percent, MiB, MHz, MB/s
    _s(DCGM_LEGACY, "DCGM_FI_DEV_GPU_UTIL", "util", PERCENT),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_MEM_COPY_UTIL", "mem_util", PERCENT),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_POWER_USAGE", "power_w"),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "power_limit_w"),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_POWER_MGMT_LIMIT", "power_limit_w"),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_FB_USED", "mem_used_bytes", MIB),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_FB_TOTAL", "mem_total_bytes", MIB),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_GPU_TEMP", "temp_c"),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_MEMORY_TEMP", "temp_mem_c"),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_SM_CLOCK", "sm_clock_hz", MHZ),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_MAX_SM_CLOCK", "sm_clock_max_hz", MHZ),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "reasons"),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "reasons"),
    _s(DCGM_LEGACY, "DCGM_FI_PROF_SM_ACTIVE", "sm_active"),
    _s(DCGM_LEGACY, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor_active"),
    _s(DCGM_LEGACY, "DCGM_FI_PROF_NVLINK_TX_BYTES", "nvlink_tx_bps"),
    _s(DCGM_LEGACY, "DCGM_FI_PROF_NVLINK_RX_BYTES", "nvlink_rx_bps"),
    _s(DCGM_LEGACY, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "nvlink_tx_bps", MB),
    _s(DCGM_LEGACY, "DCGM_FI_PROF_PCIE_TX_BYTES", "pcie_tx_bps"),
    _s(DCGM_LEGACY, "DCGM_FI_PROF_PCIE_RX_BYTES", "pcie_rx_bps"),
    # nvidia_gpu_exporter: nvidia-smi's query fields in base units
    _s(NVIDIA_SMI, "nvidia_smi_utilization_gpu_ratio", "util"),
    _s(NVIDIA_SMI, "nvidia_smi_utilization_memory_ratio", "mem_util"),
    _s(NVIDIA_SMI, "nvidia_smi_power_draw_watts", "power_w"),
    _s(NVIDIA_SMI, "nvidia_smi_enforced_power_limit_watts", "power_limit_w"),
    _s(NVIDIA_SMI, "nvidia_smi_power_default_limit_watts", "power_default_w"),
    _s(NVIDIA_SMI, "nvidia_smi_memory_used_bytes", "mem_used_bytes"),
    _s(NVIDIA_SMI, "nvidia_smi_memory_total_bytes", "mem_total_bytes"),
    _s(NVIDIA_SMI, "nvidia_smi_temperature_gpu", "temp_c"),
    _s(NVIDIA_SMI, "nvidia_smi_temperature_memory", "temp_mem_c"),
    _s(NVIDIA_SMI, "nvidia_smi_clocks_current_sm_clock_hz", "sm_clock_hz"),
    _s(NVIDIA_SMI, "nvidia_smi_clocks_max_sm_clock_hz", "sm_clock_max_hz"),
    _s(NVIDIA_SMI, "nvidia_smi_clocks_event_reasons_active", "reasons"),
    _s(NVIDIA_SMI, "nvidia_smi_clocks_throttle_reasons_active", "reasons"),
)

# dcgm-exporter's profiling fields that stand in for a missing utilization: the share of time the
# graphics engine was busy, averaged over DCGM's sampling interval
UTIL_FALLBACK: tuple[Series, ...] = (
    _s(DCGM_49, "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "util"),
    _s(DCGM_LEGACY, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "util"),
)

# the series that say a GPU exists: a scheme is found by these
PRESENCE = {
    OWN: "gpu_utilization_ratio",
    DCGM_49: "DCGM_FI_DEV_GPU_UTIL_RATIO",
    DCGM_LEGACY: "DCGM_FI_DEV_GPU_UTIL",
    NVIDIA_SMI: "nvidia_smi_utilization_gpu_ratio",
}

# the labels that name a GPU within its node, per scheme (the first present); nvidia_gpu_exporter names
# GPUs by uuid only (its index is on nvidia_smi_gpu_info)
GPU_LABELS = {
    OWN: ("gpu", "uuid"),
    DCGM_49: ("gpu", "UUID"),
    DCGM_LEGACY: ("gpu", "UUID"),
    NVIDIA_SMI: ("uuid",),
}
# the labels that name the board model, per scheme (nvidia_gpu_exporter: on its info series)
MODEL_LABELS = ("modelName", "model", "name")
INFO_SERIES = {NVIDIA_SMI: "nvidia_smi_gpu_info", OWN: "gpu_info"}
# the labels that name the node, first present: dcgm-exporter's own (``hostname`` since 4.8.2), then
# what Kubernetes discovery or relabelling usually adds; else the scrape target's host
NODE_LABELS = ("Hostname", "hostname", "node", "kubernetes_node", "nodename")
# the pod a GPU was allocated to (dcgm-exporter's Kubernetes mapping; older releases' names after)
POD_LABELS = (("namespace", "pod"), ("pod_namespace", "pod_name"))
# A scrape that does not honour the exporter's labels (a ServiceMonitor or PodMonitor with honorLabels:
# false, the GPU Operator's) sets namespace/pod/container to the scrape target's (the exporter's own pod)
# and keeps the exporter's as exported_namespace/exported_pod/exported_container: those name the workload.
RENAMED = "exported_"
WORKLOAD_LABELS = ("namespace", "pod", "container")
# how a series named its workload, for the report
BY_EXPORTED = (
    "exported_namespace/exported_pod (the scrape renamed them: namespace/pod name the exporter's pod)"
)
BY_PLAIN = "namespace/pod"
BY_OLD = "pod_namespace/pod_name"


def renamed(labels: dict[str, str]) -> bool:
    """The series' namespace/pod/container were renamed by its scrape (the workload's are exported_*)."""
    return any(labels.get(RENAMED + name) for name in WORKLOAD_LABELS)


def scrape_target(labels: dict[str, str]) -> set[tuple[str, str]]:
    """What identifies a renaming scrape's series: its job, and the target pod its namespace/pod name."""
    out = {("job", labels["job"])} if labels.get("job") else set()
    if labels.get("pod"):
        out.add(("pod", f"{labels.get('namespace', '')}/{labels['pod']}"))
    return out


def workload_labels(
    labels: dict[str, str], targets: frozenset[tuple[str, str]] = frozenset()
) -> dict[str, str]:
    """The series' labels with namespace/pod/container naming its workload: the exported_* ones where its
    scrape renamed them, none where its scrape renamed them but the exporter gave none (a GPU no pod
    held, on a target ``targets`` names), as they are otherwise."""
    if not renamed(labels) and not (targets and scrape_target(labels) & targets):
        return labels
    out = {k: v for k, v in labels.items() if k not in WORKLOAD_LABELS}
    for name in WORKLOAD_LABELS:
        if labels.get(RENAMED + name):
            out[name] = labels[RENAMED + name]
    return out


def named_by(labels: dict[str, str], targets: frozenset[tuple[str, str]] = frozenset()) -> str:
    """Which labels named the series' workload ("": none, no pod held its GPU)."""
    if renamed(labels):
        return BY_EXPORTED
    if targets and scrape_target(labels) & targets:
        return ""
    for (_, pod), by in zip(POD_LABELS, (BY_PLAIN, BY_OLD), strict=True):
        if labels.get(pod):
            return by
    return ""


# the node's series (node_exporter), as PromQL over a rate window: HostPoint attribute -> expression.
# ``{sel}`` is the node's matcher, ``{w}`` the rate window. The busiest core: one minus its idle and
# iowait shares; I/O wait: its share of all CPU time.
HOST_SERIES: dict[str, str] = {
    "iowait": 'avg(rate(node_cpu_seconds_total{{mode="iowait",{sel}}}[{w}]))',
    "core_busy_max": (
        'max(1 - sum by (cpu) (rate(node_cpu_seconds_total{{mode=~"idle|iowait",{sel}}}[{w}])))'
    ),
    "psi_io": "rate(node_pressure_io_waiting_seconds_total{{{sel}}}[{w}])",
    "psi_cpu": "rate(node_pressure_cpu_waiting_seconds_total{{{sel}}}[{w}])",
    "psi_memory": "rate(node_pressure_memory_waiting_seconds_total{{{sel}}}[{w}])",
    "shm_size_bytes": 'max(node_filesystem_size_bytes{{mountpoint="/dev/shm",{sel}}})',
    "shm_used_bytes": (
        'max(node_filesystem_size_bytes{{mountpoint="/dev/shm",{sel}}} '
        '- node_filesystem_avail_bytes{{mountpoint="/dev/shm",{sel}}})'
    ),
    "disk_read_bps": "sum(rate(node_disk_read_bytes_total{{{sel}}}[{w}]))",
}
# kube-state-metrics: a pod's labels, for the job it belongs to (as the recording rules read them)
KUBE_POD_LABELS = "kube_pod_labels"
JOB_LABELS = ("label_job_name", "label_training_kubeflow_org_job_name", "label_app_kubernetes_io_instance")


def series_for(scheme: str) -> list[Series]:
    return [s for s in (*GPU_SERIES, *UTIL_FALLBACK) if s.scheme == scheme]


def table() -> list[tuple[str, str, str, str]]:
    """(attribute, dcgm-exporter before 4.9, dcgm-exporter 4.9, nvidia_gpu_exporter) for the docs."""
    attrs = list(dict.fromkeys(s.attr for s in GPU_SERIES))
    rows = []
    for attr in attrs:
        names = {
            scheme: " / ".join(s.metric for s in GPU_SERIES if s.attr == attr and s.scheme == scheme) or "-"
            for scheme in (DCGM_LEGACY, DCGM_49, NVIDIA_SMI)
        }
        rows.append((attr, names[DCGM_LEGACY], names[DCGM_49], names[NVIDIA_SMI]))
    return rows
