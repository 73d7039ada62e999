"""Prometheus alert rules, generated from the threshold table.

Each rule's expression names its thresholds as ``${placeholders}``; ``alerts/*.rules.yml`` fills them
with the table's numbers, and the Helm chart fills them with chart values (so a user can override a
threshold, a ``for`` or a severity without editing rules). Conventions of the monitoring mixins:
PascalCase names prefixed ``Gpu``, kebab-case groups, ``severity`` critical/warning/info, ``summary``,
a templated ``description`` (node, GPU, pod when known, value) and a ``runbook_url``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from string import Template

from devtools.artifacts import cost_rules, recording
from exporter.analysis.kinds import KINDS, RUNBOOK_BASE, JobCause, Kind
from exporter.policy import thresholds as th

JOB = "gpu-bottleneck-exporter"

# placeholder -> its threshold (the chart spells the value key in camelCase)
PARAMS: dict[str, th.Threshold] = {
    "util_suspicion": th.UTIL_SUSPICION,
    "util_idle": th.UTIL_IDLE_LINE,
    "busy_util": th.LEDGER_BUSY_UTIL,
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
    "stale_intervals": th.COLLECT_STALE_INTERVALS,
    "collect_errors_per_minute": th.COLLECT_ERROR_RATE,
    "nccl_warnings": th.NCCL_WARNINGS,
    "straggler_lost": th.STRAGGLER_LOST,
    "straggler_peers_wait": th.STRAGGLER_PEERS_WAIT,
    "job_hang_stalled": th.JOB_HANG_STALLED,
    "hang_outside": th.JOB_HANG_OUTSIDE,
}

# the node a series comes from: the chart relabels `node` from the pod's node; else the target
NODE = "{{ with $labels.node }}{{ . }}{{ else }}{{ $labels.instance }}{{ end }}"
GPU = "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on " + NODE
POD = "{{ with $labels.pod }} (pod {{ $labels.namespace }}/{{ . }}){{ end }}"
JOB_POD = "Pod {{ $labels.pod }} on " + NODE + " of job {{ $labels.namespace }}/{{ $labels.job_name }}"
# when the verdict's loss began, from the exporter's series of the verdict's own labels: the page comes
# after the verdict's hold and the alert's `for`, minutes after the loss began
SINCE = "gpu_bottleneck_since_timestamp_seconds"
SINCE_TEXT = (
    f'{{{{ with printf "{SINCE}{{instance=%q, gpu=%q, kind=%q, mig_instance=%q, pod=%q}}" $labels.instance '
    "$labels.gpu $labels.kind $labels.mig_instance $labels.pod | query }}{{ with . | first }} The loss "
    "began at {{ .Value | humanizeTimestamp }}.{{ end }}{{ end }}"
)


@dataclass(frozen=True)
class Alert:
    """One rule. Its ``for`` and severity are the threshold table's (``th.ALERT_POLICIES``)."""

    name: str
    group: str
    expr: str  # PromQL with ${placeholders} from PARAMS and ${job}
    summary: str
    description: str

    @property
    def policy(self) -> th.AlertPolicy:
        return th.ALERT_POLICIES[self.name]

    @property
    def severity(self) -> str:
        return self.policy.severity.value

    @property
    def for_(self) -> str:
        return self.policy.for_text

    def runbook(self, base: str = RUNBOOK_BASE) -> str:
        return f"{base}{self.name}.md"


# ---- verdicts of the analysis: one alert per kind of the registry that pages on its own verdict ------

VERDICT_GROUP = "gpu-bottleneck-verdicts"
# the verdict alerts that join a node's verdict with its job's evidence (JOB_EVIDENCE below): they
# run where the job rules run (a global ruler, when Prometheus is sharded by node)
JOB_VERDICT_GROUP = "gpu-bottleneck-job-verdicts"
JOBS_GROUP = "gpu-bottleneck-jobs"


def verdict_expr(kind: str, cause: str = "") -> str:
    selector = f'kind="{kind}"' + (f', cause="{cause}"' if cause else "")
    return f"gpu_bottleneck{{{selector}}} == 1"


# A node's GPUs that wait in collectives for a rank on another node look comm-bound (or hung) to their
# own exporter. When the job rules have found the culprit, the waiting nodes' verdict alerts stay silent:
# the job alert names the culprit once instead of one page per waiting node. A kind says which job cause
# explains it (``Kind.explained_by``); this is each cause's evidence.
JOB_EVIDENCE: dict[JobCause, str] = {
    JobCause.STRAGGLER: recording.STRAGGLER,
    JobCause.HANG: f"{recording.HANG_BLAME} or {recording.HUNG} > ${{job_hang_stalled}}",
}


def _unless_explained(kind: Kind) -> str:
    if kind.explained_by is None:
        return ""
    return (
        f"\nunless on (namespace, pod) ({recording.INFO}\n  and on (namespace, {recording.JOB_LABEL}) "
        f"({JOB_EVIDENCE[kind.explained_by]}))"
    )


def _verdict_alerts() -> tuple[Alert, ...]:
    out = []
    for kind in KINDS.values():
        text = kind.text
        if text is None:
            continue  # its alert is a rule on raw signals below (GpuShmNearlyFull, GpuNvlinkDown)
        if text.cause and text.cause not in kind.causes:
            raise ValueError(f"{kind.name} has no cause {text.cause!r}")
        expr = verdict_expr(kind.name, text.cause) + _unless_explained(kind)
        group = JOB_VERDICT_GROUP if kind.explained_by else VERDICT_GROUP
        out.append(Alert(kind.alert, group, expr, text.summary, GPU + POD + text.description + SINCE_TEXT))
    return tuple(out)


def _kind_with_cause(cause: str) -> str:
    """The verdict kind a cause belongs to (each cause is one kind's)."""
    (name,) = (k.name for k in KINDS.values() if cause in k.causes)
    return name


def _busy(series: str = "") -> str:
    return f'gpu_utilization_window_ratio{{stat="mean"{series}}}'


# the classic rules on raw signals read low utilization and low power as a job held back; a GPU whose class
# is known to be other work (a server between requests, memory-bound decode, a notebook, a pipeline's
# stages, an evaluation's pauses) shows both by design: they speak of training, or of nothing decided yet
_TRAINING_ONLY = ' unless on (instance, gpu, uuid) gpu_workload_class{workload!="training"} == 1'


_SHM_DEFAULT = f"{th.SHM_DEFAULT_BYTES.value / (1 << 20):g} MiB"
# a failing node check, with the detail word of its latest result as a label of the page; each alert
# selects the checks whose severity (exporter/policy/thresholds/doctor.py DOCTOR_SEVERITY) is its own
_NODE_CHECK = (
    '(gpu_node_check_failed{{severity="{severity}"}} == 1)'
    " * ignoring (severity, status, detail) group_left (detail) gpu_node_check_info"
)

POD_LOGS_GROUP = "gpu-pod-logs"
_POD_ON = "Pod {{ $labels.namespace }}/{{ $labels.pod }} on " + NODE


def _log_errors(kinds: tuple[str, ...]) -> str:
    from exporter.podlogs.logparse import ERROR_KINDS

    unknown = set(kinds) - set(ERROR_KINDS)
    if unknown:
        raise ValueError(f"error kinds the parser does not have: {sorted(unknown)}")
    return 'increase(gpu_pod_log_errors_total{kind=~"' + "|".join(kinds) + '"}[10m]) > 0'


def _pod_log_alerts() -> tuple[Alert, ...]:
    from exporter.podlogs.logparse import ERROR_FAMILIES, OFF_NVLINK

    return (
        Alert(
            "GpuNcclNotOnNvlink",
            POD_LOGS_GROUP,
            'gpu_pod_nccl_transport{scope="intra",transport=~"' + "|".join(OFF_NVLINK) + '"} == 1'
            " and on (instance) (count by (instance) (gpu_nvlink_up == 1) > 0)",
            "NCCL does not write over NVLink inside the node.",
            _POD_ON + " runs NCCL channels via {{ $labels.transport }} although the node's GPUs have NVLink: "
            "P2P writes are unavailable (fabric manager not running, P2P disabled or blocked), so every "
            "collective is slower.",
        ),
        Alert(
            "GpuNcclSocketsWithRdma",
            POD_LOGS_GROUP,
            'gpu_pod_nccl_transport{scope="inter",transport="NET/Socket"} == 1'
            " and on (instance) gpu_node_rdma_devices > 0",
            "NCCL talks between nodes over TCP sockets although EFA/IB devices exist.",
            _POD_ON + " sends NCCL traffic between nodes over sockets while the node has RDMA devices: the "
            "network plugin did not load or is disabled.",
        ),
        Alert(
            "GpuNcclWarnings",
            POD_LOGS_GROUP,
            "increase(gpu_pod_nccl_warnings_total[10m]) > ${nccl_warnings}",
            "NCCL warnings are climbing.",
            _POD_ON + " logged {{ $value | humanize }} NCCL WARN lines in 10 minutes: a fallback or a fault "
            "repeating.",
        ),
        Alert(
            "GpuPodShmBusError",
            POD_LOGS_GROUP,
            _log_errors(ERROR_FAMILIES["shm"]),
            "DataLoader workers die (Bus error).",
            _POD_ON
            + " logged DataLoader workers killed ({{ $labels.kind }}): /dev/shm is too small or full.",
        ),
        Alert(
            "GpuPodCudaOom",
            POD_LOGS_GROUP,
            _log_errors(ERROR_FAMILIES["oom"]),
            "A GPU job ran out of GPU memory.",
            _POD_ON + " logged CUDA out of memory: the step or the job failed.",
        ),
        Alert(
            "GpuNcclCollectiveTimeout",
            POD_LOGS_GROUP,
            _log_errors(ERROR_FAMILIES["collective_timeout"]),
            "An NCCL collective timed out and the job failed.",
            _POD_ON + " logged {{ $labels.kind }}: a collective never completed (a hung or lost rank) and "
            "the job was killed.",
        ),
        Alert(
            "GpuNcclNetworkError",
            POD_LOGS_GROUP,
            _log_errors(ERROR_FAMILIES["network"]),
            "NCCL lost a peer or a transfer between nodes failed.",
            _POD_ON + '{{ if eq $labels.kind "peer_lost" }} lost an NCCL peer (a connection closed by the '
            "remote rank, or NCCL's remote allocator failed): a rank died or the path between them broke."
            "{{ else }} logged an NCCL IB/EFA completion error: a link or the fabric between nodes is "
            "failing.{{ end }}",
        ),
    )


POD_LOG_ALERTS = _pod_log_alerts()

ALERTS: tuple[Alert, ...] = (
    *_verdict_alerts(),
    # ---- jobs across nodes (recording.py records the evidence) --------------------------------------
    Alert(
        "GpuJobStraggler",
        JOBS_GROUP,
        recording.STRAGGLER,
        "One pod slows its whole multi-node job.",
        JOB_POD + " loses {{ $value | humanizePercentage }} of its GPU time waiting for input or "
        "throttled, while the job's GPUs on other nodes wait for it in collectives: it is the straggler "
        "(the waiting nodes page nothing). See its GpuDataStarvation or GpuThermalThrottling for the cause.",
    ),
    Alert(
        "GpuJobHang",
        JOBS_GROUP,
        recording.HANG_BLAME
        + "\nor on (namespace, job_name) label_replace("
        + recording.HUNG
        + ' > ${job_hang_stalled}, "pod", "every rank", "", "")',
        "A multi-node job is hung in a collective.",
        "Job {{ $labels.namespace }}/{{ $labels.job_name }} is hung: its GPUs sit stalled in a collective. "
        '{{ if eq $labels.pod "every rank" }}Every rank is in it: look for a network or NCCL fault.'
        "{{ else }}Pod {{ $labels.pod }} on " + NODE + " is not in the collective its peers wait in "
        "(stalled {{ $value | humanizePercentage }} of the time): the rank to look at.{{ end }} The NCCL "
        "watchdog kills the job at ten minutes.",
    ),
    # ---- the classic thresholds as plain rules --------------------------------------------------
    Alert(
        "GpuUtilizationLow",
        "gpu-utilization",
        "(avg_over_time(" + _busy() + "[10m]) < ${util_suspicion}"
        " and " + _busy() + " > ${util_idle}"
        " and on (instance, gpu, uuid) gpu_memory_used_bytes > ${idle_memory_bytes})" + _TRAINING_ONLY,
        "GPU utilization stays below the suspicion line.",
        GPU + POD + " averaged {{ $value | humanizePercentage }} utilization over 10 minutes while a job "
        "holds it: a data or communication bottleneck is suspected (a GPU judged as serving, batch, "
        "evaluation, a notebook or a pipeline is not held to this line).",
    ),
    Alert(
        "GpuPowerFarBelowTdp",
        "gpu-utilization",
        '(gpu_power_window_watts{stat="mean"} / ignoring (stat) gpu_power_default_limit_watts'
        " < ${power_low} and on (instance, gpu, uuid) " + _busy() + " > ${busy_util})" + _TRAINING_ONLY,
        "Busy GPU draws far less power than its TDP.",
        GPU + POD + " is busy but draws {{ $value | humanizePercentage }} of its default power limit: it is "
        "starved or waiting, not computing (memory-bound decode and other work whose class is known are "
        "not held to this line).",
    ),
    Alert(
        "GpuTemperatureHigh",
        "gpu-thermal-power",
        'gpu_temperature_celsius{sensor="gpu"} > ${temp_hot}'
        " and on (instance, gpu, uuid) " + _busy() + " > ${busy_util}",
        "GPU runs above the hot line under load.",
        GPU + POD + " is at {{ $value }} °C under load; above the hot line clocks are close to dropping.",
    ),
    Alert(
        "GpuMemoryNearlyFull",
        "gpu-thermal-power",
        "gpu_memory_used_bytes / gpu_memory_total_bytes > ${memory_full}",
        "GPU framebuffer is nearly full.",
        GPU + POD + " uses {{ $value | humanizePercentage }} of its memory: the next allocation may fail "
        "with CUDA out of memory.",
    ),
    Alert(
        "GpuMemoryUnowned",
        "gpu-thermal-power",
        "gpu_memory_unowned_bytes > 0",
        "GPU memory is held by no pod of the node.",
        GPU + POD + " has {{ $value | humanize1024 }}B of memory held "
        '{{ if eq $labels.reason "no_process" }}with no process listed by the driver'
        "{{ else }}by process {{ $labels.pid }} ({{ $labels.command }}){{ with $labels.container_id }}, "
        "container {{ . }}{{ end }}, which "
        '{{ if eq $labels.reason "pod_gone" }}belongs to no pod the kubelet lists with GPUs '
        "(its pod deleted, or never given one)"
        '{{ else if eq $labels.reason "other_pod" }}runs in a pod not given this GPU'
        "{{ else }}runs outside any container{{ end }}{{ end }}: the memory stays lost until it is ended.",
    ),
    Alert(
        "GpuShmNearlyFull",
        "gpu-node-shm-io",
        "gpu_node_shm_used_bytes / gpu_node_shm_size_bytes > ${shm_warning}"
        " and gpu_node_shm_used_bytes / gpu_node_shm_size_bytes <= ${shm_critical}",
        "Shared memory is nearly full.",
        "{{ $labels.mountpoint }} on " + NODE + POD + " is {{ $value | humanizePercentage }} full. "
        "DataLoader workers die with 'Bus error' when it fills.",
    ),
    Alert(
        "GpuShmFull",
        "gpu-node-shm-io",
        "gpu_node_shm_used_bytes / gpu_node_shm_size_bytes > ${shm_critical}",
        "Shared memory is full.",
        "{{ $labels.mountpoint }} on " + NODE + POD + " is {{ $value | humanizePercentage }} full: "
        "DataLoader workers are dying with 'Bus error' now.",
    ),
    Alert(
        "GpuPodShmDefault",
        "gpu-node-shm-io",
        "gpu_pod_shm_default_size == 1",
        f"GPU pod runs on the {_SHM_DEFAULT} default /dev/shm.",
        "Pod {{ $labels.namespace }}/{{ $labels.pod }} on " + NODE + " holds GPUs but its /dev/shm is the "
        f"{_SHM_DEFAULT} container default: DataLoader workers will die with 'Bus error' under load.",
    ),
    Alert(
        "GpuIoWaitHighWhileStarving",
        "gpu-node-shm-io",
        "gpu_node_cpu_iowait_ratio > ${iowait_high}"
        " and on (instance) count by (instance) (" + verdict_expr(_kind_with_cause("io")) + ") > 0",
        "Node waits on I/O while its GPUs starve.",
        NODE + " spends {{ $value | humanizePercentage }} of its CPU time in I/O wait while GPUs starve: "
        "storage is too slow for the data loaders.",
    ),
    # ---- interconnect -----------------------------------------------------------------------------
    Alert(
        "GpuNvlinkDown",
        "gpu-fabric",
        "gpu_nvlink_links_up < on (instance, gpu, uuid) group_left gpu_nvlink_links_expected",
        "NVLink is down.",
        GPU + " has only {{ $value }} of its NVLinks up: NCCL falls back to slower paths (`--detail "
        "nvlink` names the links).",
    ),
    Alert(
        "GpuP2PUnavailable",
        "gpu-fabric",
        "gpu_p2p_failing_pairs > 0 and on (instance, gpu, uuid) gpu_nvlink_links_expected > 0",
        "Peer-to-peer over NVLink is unavailable.",
        GPU + " cannot reach its peers peer-to-peer ({{ $value }} peer and capability pairs fail): NCCL "
        "uses SHM, P2P/CUMEM/read or sockets instead (`--detail p2p` names the pairs).",
    ),
    Alert(
        "GpuFabricNotReady",
        "gpu-fabric",
        "gpu_fabric_registered == 0",
        "GPU is not registered with the NVSwitch fabric.",
        GPU + " has not completed NVSwitch fabric registration: is the fabric manager running?",
    ),
    Alert(
        "GpuNvlinkErrors",
        "gpu-fabric",
        # errors a minute, averaged over five: the same condition as `increase(...[5m]) > 5 * rate`
        "rate(gpu_nvlink_link_errors_total[5m]) * 60 > ${nvlink_errors_per_minute}",
        "NVLink errors are climbing.",
        GPU + " logs {{ $value | humanize }} NVLink replay/recovery/CRC errors a minute over the last 5 "
        "minutes: a link is degrading.",
    ),
    Alert(
        "GpuXidCritical",
        "gpu-fabric",
        'increase(gpu_xid_errors_by_criticality_total{criticality!="other"}[10m]) > 0',
        "GPU reported a critical XID.",
        GPU + POD + " reported a critical XID: a hardware or driver fault. `dmesg` (or `--detail xid`) "
        "names the code; see the runbook's XID table.",
    ),
    Alert(
        "GpuDown",
        "gpu-fabric",
        "gpu_up == 0 and on (instance) gpu_exporter_nvml_up == 1",
        "GPU does not answer.",
        GPU + " does not answer NVML (lost from the bus, timed out, or erroring) while the other GPUs do.",
    ),
    # ---- the node doctor's checks (exporter/doctor): bring-up faults, with the detail word --------------
    Alert(
        "GpuNodeCheckFailed",
        "gpu-node-checks",
        _NODE_CHECK.format(severity=th.ALERT_POLICIES["GpuNodeCheckFailed"].severity.value),
        "A critical node check fails.",
        "Node check {{ $labels.check }} fails on " + NODE + " ({{ $labels.detail }}). Run "
        "`gpu-bottleneck-exporter doctor` in the exporter's pod on that node for the evidence and the fix.",
    ),
    Alert(
        "GpuNodeCheckWarning",
        "gpu-node-checks",
        _NODE_CHECK.format(severity=th.ALERT_POLICIES["GpuNodeCheckWarning"].severity.value),
        "A node check warns.",
        "Node check {{ $labels.check }} warns on " + NODE + " ({{ $labels.detail }}). Run "
        "`gpu-bottleneck-exporter doctor` in the exporter's pod on that node for the evidence and the fix.",
    ),
    # ---- what the GPU pods' logs say (--pod-logs) --------------------------------------------------
    *POD_LOG_ALERTS,
    # ---- the exporter itself ----------------------------------------------------------------------
    Alert(
        "GpuExporterDown",
        "gpu-exporter",
        'up{job="${job}"} == 0',
        "gpu-bottleneck-exporter is down.",
        "Prometheus cannot scrape the exporter on {{ $labels.instance }}: that node's GPUs are not "
        "monitored.",
    ),
    Alert(
        "GpuExporterAbsent",
        "gpu-exporter",
        'absent(up{job="${job}"})',
        "No gpu-bottleneck-exporter target exists.",
        "Prometheus has no target for job ${job}: no GPU is monitored (DaemonSet gone, or the "
        "ServiceMonitor/PodMonitor does not match).",
    ),
    Alert(
        "GpuExporterCollectionStale",
        "gpu-exporter",
        "time() - gpu_exporter_last_collect_timestamp_seconds > ${stale_seconds} + ${stale_intervals} * "
        "gpu_exporter_source_interval_seconds",
        "gpu-bottleneck-exporter stopped collecting.",
        "The {{ $labels.source }} collection on " + NODE + " last succeeded {{ $value | humanizeDuration }} "
        "ago: metrics are stale (a hung driver call?).",
    ),
    Alert(
        "GpuExporterNvmlDown",
        "gpu-exporter",
        "gpu_exporter_nvml_up == 0",
        "gpu-bottleneck-exporter cannot use NVML.",
        "The exporter on " + NODE + " has no NVML session (driver missing, unloaded or mismatched): GPU "
        "metrics are absent.",
    ),
    Alert(
        "GpuExporterCollectErrors",
        "gpu-exporter",
        'sum by (instance, source, error) (rate(gpu_exporter_collect_errors_total{error!~"NotSupported|'
        'FunctionNotFound"}[10m])) * 60 > ${collect_errors_per_minute}',
        "gpu-bottleneck-exporter keeps hitting collection errors.",
        "The {{ $labels.source }} collection on " + NODE + " fails with {{ $labels.error }} "
        "{{ $value | humanize }} times a minute.",
    ),
)


def number(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e6 else f"{value:.0f}"


def expression(
    alert: Alert | recording.Record, values: dict[str, str] | None = None, job: str = JOB, window: str = ""
) -> str:
    """The rule's PromQL with every placeholder filled (by default from the threshold table)."""
    filled = {key: number(t.value) for key, t in PARAMS.items()} | (values or {})
    return Template(alert.expr).substitute(job=job, window=window or recording.window_text(), **filled)


# The groups that read several nodes' series (a job's pods, the cluster's pod labels): with Prometheus
# sharded by node they run in a global ruler over every shard; every other group reads one node's
# series and runs on the shard that scrapes it.
GLOBAL_GROUPS: tuple[str, ...] = (recording.JOB_GROUP, cost_rules.JOB_GROUP, JOB_VERDICT_GROUP, JOBS_GROUP)
# the recording groups in the file's order: each after the groups it reads
RECORDING_GROUPS: tuple[str, ...] = (
    recording.GROUP,
    recording.JOB_GROUP,
    cost_rules.GROUP,
    cost_rules.JOB_GROUP,
)
SCOPES = ("all", "node", "global")


def in_scope(group: str, scope: str) -> bool:
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    return scope == "all" or (group in GLOBAL_GROUPS) == (scope == "global")


def groups(
    for_override: str | None = None,
    job: str = JOB,
    runbook_base: str = RUNBOOK_BASE,
    window: str = "",
    scope: str = "all",
    shortened: Collection[str] | None = None,
) -> list[dict]:
    """The rule groups as data: the recording rules, then the alerts (``for_override`` shortens every
    ``for``, or only those of the alerts named in ``shortened``, and ``window`` the recording rules'
    rate window: the demo and end-to-end tests use them); ``scope`` ``node`` or ``global`` keeps the
    groups that run on a shard or in the global ruler."""
    # the node-level records before the job records that read them (promtool evaluates groups in order)
    out: dict[str, dict] = {g: {"name": g, "rules": []} for g in RECORDING_GROUPS}
    for r in recording.RECORDS + cost_rules.RECORDS:
        rule = {"record": r.record, "expr": expression(r, window=window)}
        out[r.group]["rules"].append(rule)
    for alert in ALERTS:
        shorten = for_override is not None and (shortened is None or alert.name in shortened)
        rule = {
            "alert": alert.name,
            "expr": expression(alert, job=job),
            "for": for_override if shorten else alert.for_,
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
    return [g for g in out.values() if in_scope(g["name"], scope)]


def render(
    for_override: str | None = None,
    job: str = JOB,
    window: str = "",
    scope: str = "all",
    shortened: Collection[str] | None = None,
    runbook_base: str = RUNBOOK_BASE,
) -> str:
    from devtools.artifacts.yamlout import dump

    header = "# generated from exporter/policy/thresholds/ by `make artifacts`; do not edit\n"
    rules = groups(for_override, job, runbook_base, window=window, scope=scope, shortened=shortened)
    return header + dump({"groups": rules})


def main(argv: list[str] | None = None) -> int:
    """Print the rules file with the runbook links (and the job) of a site of your own."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m devtools.artifacts.alerts",
        description="Print the alert and recording rules (alerts/gpu-bottleneck-exporter.rules.yml) with "
        "each runbook_url at <runbook-base-url><AlertName>.md.",
    )
    parser.add_argument("--runbook-base-url", default=RUNBOOK_BASE, help="where docs/runbooks/ is served")
    parser.add_argument("--job", default=JOB, help="the job label of the exporter's series")
    args = parser.parse_args(argv)
    if not args.runbook_base_url.endswith("/"):
        parser.error(f"--runbook-base-url must end with '/': {args.runbook_base_url!r}")
    print(render(job=args.job, runbook_base=args.runbook_base_url), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def render_doc() -> str:
    """docs/alerts.md: every alert, its severity, hold time, expression and runbook."""
    lines = [
        "# Alerts",
        "",
        "<!-- generated from devtools/artifacts/alerts.py by `make artifacts`; do not edit -->",
        "",
        "The rules live in",
        "[`alerts/gpu-bottleneck-exporter.rules.yml`](../alerts/gpu-bottleneck-exporter.rules.yml)",
        "(generated from the [threshold table](thresholds.md)); the Helm chart renders the same rules as",
        "a PrometheusRule. Every alert links a runbook. `promtool test rules alerts/tests/*.test.yml` runs",
        "their unit tests.",
        "",
        "Suggested Alertmanager inhibitions: a critical alert on a GPU silences that GPU's warnings and",
        "infos, and `GpuShmFull` silences `GpuShmNearlyFull` on the same mountpoint. The first needs",
        '`gpu != ""` on its source: Alertmanager counts a label that both alerts lack as equal, so without',
        "it a node-level critical alert (`GpuShmFull`, `GpuNodeCheckFailed`) would silence every node-level",
        "warning of its node.",
        "",
        "```yaml",
        "inhibit_rules:",
        "  - source_matchers: [severity = critical, 'gpu != \"\"']",
        "    target_matchers: [severity =~ warning|info]",
        "    equal: [instance, gpu]",
        "  - source_matchers: [alertname = GpuShmFull]",
        "    target_matchers: [alertname = GpuShmNearlyFull]",
        "    equal: [instance, mountpoint]",
        "```",
        "",
    ]
    for group in dict.fromkeys(a.group for a in ALERTS):
        lines += [f"## {group}", "", "| alert | severity | for | expression |", "|---|---|---|---|"]
        for a in (a for a in ALERTS if a.group == group):
            expr = expression(a).replace("|", "\\|")
            lines.append(f"| [{a.name}](runbooks/{a.name}.md) | {a.severity} | {a.for_} | `{expr}` |")
        lines.append("")
    lines += [
        f"## {recording.GROUP} and {recording.JOB_GROUP}",
        "",
        "Recorded before the alerts, in this order; the job rules read kube-state-metrics'",
        f"`kube_pod_labels` (see [scale](scale.md)). The groups marked global ({', '.join(GLOBAL_GROUPS)})",
        "read several nodes' series: with Prometheus sharded by node they run in a global ruler",
        "(chart value `prometheusRule.scope`).",
        "",
        "| record | group | what |",
        "|---|---|---|",
    ]
    lines += [f"| `{r.record}` | {r.group} | {r.help} |" for r in recording.RECORDS]
    lines += [
        "",
        f"## {cost_rules.GROUP} and {cost_rules.JOB_GROUP}",
        "",
        "What the ledger's time costs, from the exporters' `gpu_node_price_per_hour` (see [cost](cost.md)).",
        f"The pod records read one node's series; {cost_rules.JOB_GROUP} sums them by job and namespace and",
        "runs in the global ruler.",
        "",
        "| record | group | what |",
        "|---|---|---|",
    ]
    lines += [f"| `{r.record}` | {r.group} | {r.help} |" for r in cost_rules.RECORDS]
    return "\n".join(lines) + "\n"
