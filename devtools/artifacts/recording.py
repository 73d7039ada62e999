"""Recording rules, generated beside the alert rules (the same file, the same Helm PrometheusRule).

Analysis stops at the node: an exporter sees its own GPUs only. Across nodes the data meets in
Prometheus, so that is where a job is reasoned about: the rules below join the GPUs' series to the job
their pod belongs to (kube-state-metrics' ``kube_pod_labels``, through a configurable list of pod labels),
then record per node and per job what the fleet and job dashboards draw (verdict counts, ledger shares,
power share) and what the job alerts read (a straggler pod, a hung job). The dashboards read these
recorded series, which stay small at 1,000 nodes: one per node or job and state, not one per GPU.

Names follow the ``level:metric:operations`` convention; every per-pod and per-job series carries
``job_name`` (``job`` is Prometheus' scrape job).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.analysis.kinds import KINDS
from exporter.policy import thresholds as th
from exporter.policy.kube_labels import ksm_label

# Two groups, so that a sharded setup can run them in different places: GROUP's rules read one node's
# series (a Prometheus shard holding that node can evaluate them), JOB_GROUP's join pods across nodes to
# their jobs and need every shard's recorded series (a global ruler over the shards: docs/scale.md).
GROUP = "gpu-bottleneck-recording"
JOB_GROUP = "gpu-bottleneck-job-recording"
JOB_LABEL = "job_name"

# Pod labels that name the job a pod belongs to, most specific first: the first one a pod carries wins.
# kube-state-metrics exports a pod label only when its --metric-labels-allowlist names it
# (``pods=[training.kubeflow.org/job-name,...]``); the chart value prometheusRule.jobLabels overrides it.
JOB_LABELS: tuple[str, ...] = (
    "training.kubeflow.org/job-name",
    "jobset.sigs.k8s.io/jobset-name",
    "batch.kubernetes.io/job-name",
    "app.kubernetes.io/instance",
)

INFO = "namespace_pod:gpu_job:info"
POD_RATE = "node_namespace_pod_state:gpu_time_seconds:rate5m"
# Each GPU's ledger rate by state, held by whom: a GPU shared by pods (time-slicing, MPS) counts through
# its pods' shares (gpu_pod_time_seconds_total), a GPU in MIG mode through its instances
# (gpu_mig_time_seconds_total), each summing to the GPU's wall time, not as one GPU of no pod
LEDGER_RATE = (
    "(\n    rate(gpu_time_seconds_total[${window}])\n"
    "      unless on (instance, gpu) (gpu_pod_time_seconds_total or gpu_mig_time_seconds_total)\n"
    "  )\n  or rate(gpu_pod_time_seconds_total[${window}])\n  or rate(gpu_mig_time_seconds_total[${window}])"
)
JOB_POD_RATE = "namespace_job_pod_state:gpu_time_seconds:rate5m"
JOB_RATE = "namespace_job_state:gpu_time_seconds:rate5m"
NODE_RATE = "node_state:gpu_time_seconds:rate5m"
NODE_SHARE = "node_state:gpu_time:share5m"
NODE_KINDS = "node_kind:gpu_bottleneck:count"
NODE_UTIL = "node:gpu_utilization:mean"
NODE_POWER = "node:gpu_power:tdp_share"
MEAN_POWER = 'gpu_power_window_watts{stat="mean"}'
WORST = "node_namespace_pod_gpu:gpu_bottleneck:worst"
POD_KINDS = "node_namespace_pod_kind:gpu_bottleneck:count"
POD_POWER = "node_namespace_pod:gpu_power_watts:sum"
POD_TDP = "node_namespace_pod:gpu_power_default_limit_watts:sum"
POD_GPUS = "node_namespace_pod:gpu:count"
POD_BY = "node, instance, namespace, pod"
STRAGGLER = "namespace_job_pod:gpu_straggler:lost_share5m"
HUNG = "namespace_job:gpu_hang:stalled_share5m"
HANG_BLAME = "namespace_job_pod:gpu_hang:blamed"
POD_KEYS = "namespace, job_name, pod, node, instance"


def job_info_expr(labels: tuple[str, ...] = JOB_LABELS) -> str:
    """One series per pod naming its job: the first label of ``labels`` the pod carries."""
    parts = [
        f'max by (namespace, pod, {JOB_LABEL}) (label_replace(kube_pod_labels{{{k}!=""}}, "{JOB_LABEL}", '
        f'"$$1", "{k}", "(.+)"))'
        for k in map(ksm_label, labels)
    ]
    return "\nor on (namespace, pod) ".join(parts)


def worst_verdict_expr() -> str:
    """Per GPU, the rank of the most serious verdict holding (the registry's rank; 0 when none): what
    the state timelines draw, recorded so that a fleet's timeline reads one series per GPU, not one per
    GPU and kind."""
    ranked = sorted(KINDS.values(), key=lambda k: -k.rank)
    terms = " or ".join(f'gpu_bottleneck{{kind="{k.name}"}} * {k.rank}' for k in ranked)
    return f"max by (node, instance, namespace, pod, gpu) ({terms})"


def _job(expr: str) -> str:
    """``expr`` (with namespace and pod labels) joined to the job of its pod."""
    return f"{expr} * on (namespace, pod) group_left ({JOB_LABEL}) {INFO}"


def _in_states(rates: str, states: str, by: str) -> str:
    """Per ``by`` group, the rate in the states matching ``states``; 0 for a group that has held time but
    no series in them (a ledger always exports every state, a hand-fed one may not)."""
    held = f'sum by ({by}) ({rates}{{state!="free"}})'
    return f'(sum by ({by}) ({rates}{{state=~"{states}"}}) or 0 * {held})'


def _share(rates: str, states: str, by: str) -> str:
    """Per ``by`` group, the share of held GPU time (all but free) in the states matching ``states``."""
    return f'{_in_states(rates, states, by)}\n  / sum by ({by}) ({rates}{{state!="free"}})'


def _peers_share(states: str) -> str:
    """Per pod of a job, the share of held time the job's GPUs in its *other* pods spend in ``states``:
    the job's sum less the pod's, over the job's held time less the pod's. NaN for one-pod jobs."""
    job = f"namespace, {JOB_LABEL}"
    part = _in_states(JOB_POD_RATE, states, job) + f" - on ({job}) group_right ()\n    "
    held = f'sum by ({job}) ({JOB_POD_RATE}{{state!="free"}}) - on ({job}) group_right ()\n    '
    pod_held = f'sum by ({POD_KEYS}) ({JOB_POD_RATE}{{state!="free"}})'
    return f"({part}{_in_states(JOB_POD_RATE, states, POD_KEYS)})\n  / ({held}{pod_held})"


@dataclass(frozen=True)
class Record:
    record: str
    expr: str  # PromQL with ${window} and threshold ${placeholders} (alerts.PARAMS)
    help: str
    group: str = GROUP  # JOB_GROUP: reads pods of several nodes (the job's), or the cluster's pod labels


RECORDS: tuple[Record, ...] = (
    Record(
        INFO, job_info_expr(), "1 per pod that carries a job label: the pod's job in job_name.", JOB_GROUP
    ),
    Record(
        POD_RATE,
        f"sum by (node, instance, namespace, pod, state) (\n  {LEDGER_RATE}\n)",
        "Seconds per second of GPU time in each ledger state, per pod and node (pod empty: free GPUs; a "
        "shared GPU through its pods' shares).",
    ),
    Record(JOB_POD_RATE, _job(POD_RATE), "The same per pod, with the pod's job.", JOB_GROUP),
    Record(
        JOB_RATE,
        f"sum by (namespace, {JOB_LABEL}, state) ({JOB_POD_RATE})",
        "GPU time per job and state.",
        JOB_GROUP,
    ),
    Record(
        "namespace_job_state:gpu_time:share5m",
        f"{JOB_RATE}\n  / ignoring (state) group_left sum by (namespace, {JOB_LABEL}) ({JOB_RATE})",
        "Share of a job's GPU time in each ledger state; the states add up to 1.",
        JOB_GROUP,
    ),
    Record(NODE_RATE, f"sum by (node, instance, state) ({POD_RATE})", "GPU time per node and state."),
    Record(
        NODE_SHARE,
        f"{NODE_RATE}\n  / ignoring (state) group_left sum by (node, instance) ({NODE_RATE})",
        "Share of a node's GPU time in each ledger state; the states add up to 1.",
    ),
    Record(WORST, worst_verdict_expr(), "Per GPU, the rank of its most serious verdict (0: none)."),
    Record(
        NODE_KINDS,
        "sum by (node, instance, kind) (gpu_bottleneck)",
        "GPUs of a node on which a verdict of the kind holds (0 when none).",
    ),
    Record(
        POD_KINDS,
        f"sum by ({POD_BY}, kind) (gpu_bottleneck)",
        "GPUs of a pod on a node on which a verdict of the kind holds (0 when none).",
    ),
    Record(
        "namespace_job_kind:gpu_bottleneck:count",
        f"sum by (namespace, {JOB_LABEL}, kind) ({_job(POD_KINDS)})",
        "GPUs of a job on which a verdict of the kind holds (0 when none).",
        JOB_GROUP,
    ),
    Record(
        NODE_UTIL,
        'avg by (node, instance) (gpu_utilization_window_ratio{stat="mean"})',
        "Mean utilization of a node's GPUs over the exporter's window.",
    ),
    Record(
        NODE_POWER,
        'sum by (node, instance) (gpu_power_window_watts{stat="mean"})\n'
        "  / sum by (node, instance) (gpu_power_default_limit_watts)",
        "Power a node's GPUs draw (window mean) over their TDP (default power limits).",
    ),
    Record(
        POD_POWER, f"sum by ({POD_BY}) ({MEAN_POWER})", "Power a pod's GPUs on a node draw (window mean)."
    ),
    Record(
        POD_TDP,
        f"sum by ({POD_BY}) (gpu_power_default_limit_watts)",
        "The default power limits (TDP) of a pod's GPUs on a node.",
    ),
    Record(
        "namespace_job:gpu_power:tdp_share",
        f"sum by (namespace, {JOB_LABEL}) ({_job(POD_POWER)})\n"
        f"  / sum by (namespace, {JOB_LABEL}) ({_job(POD_TDP)})",
        "Power a job's GPUs draw over their TDP.",
        JOB_GROUP,
    ),
    Record(POD_GPUS, f"count by ({POD_BY}) (gpu_info)", "GPUs a pod holds whole on a node."),
    Record(
        "namespace_job:gpu:count",
        f"sum by (namespace, {JOB_LABEL}) ({_job(POD_GPUS)})",
        "GPUs a job holds whole.",
        JOB_GROUP,
    ),
    # ---- the job alerts' evidence: who slows the job, who hangs it
    Record(
        "namespace_job_pod:gpu_time_lost:share5m",
        _share(JOB_POD_RATE, "input_wait|throttled", POD_KEYS),
        "Share of a pod's GPU time lost to waiting for input or to throttling.",
        JOB_GROUP,
    ),
    Record(
        "namespace_job_pod:gpu_peers_comm_wait:share5m",
        _peers_share("comm_wait"),
        "Share of the time the job's GPUs in its other pods spend waiting in collectives.",
        JOB_GROUP,
    ),
    Record(
        STRAGGLER,
        "namespace_job_pod:gpu_time_lost:share5m > ${straggler_lost}\n  and on (namespace, job_name, pod)"
        " namespace_job_pod:gpu_peers_comm_wait:share5m > ${straggler_peers_wait}",
        "The straggler: a pod losing its time to input wait or throttling while the job's other pods wait "
        "in collectives (the value: its lost share).",
        JOB_GROUP,
    ),
    Record(
        "namespace_job_pod:gpu_stalled:share5m",
        _share(JOB_POD_RATE, "stalled", POD_KEYS),
        "Share of a pod's GPU time stalled in a collective.",
        JOB_GROUP,
    ),
    Record(
        "namespace_job_pod:gpu_peers_stalled:share5m",
        _peers_share("stalled"),
        "Share of the time the job's GPUs in its other pods spend stalled.",
        JOB_GROUP,
    ),
    Record(
        HUNG,
        _share(JOB_RATE, "stalled", f"namespace, {JOB_LABEL}"),
        "Share of a job's GPU time stalled in a collective.",
        JOB_GROUP,
    ),
    Record(
        HANG_BLAME,
        "namespace_job_pod:gpu_stalled:share5m < ${hang_outside}\n  and on (namespace, job_name, pod)"
        " namespace_job_pod:gpu_peers_stalled:share5m > ${job_hang_stalled}",
        "In a hung job, the pod not stalled while the others are: the rank outside the collective.",
        JOB_GROUP,
    ),
)


def window_text(seconds: float | None = None) -> str:
    value = th.RULES_RATE_WINDOW.value if seconds is None else seconds
    return f"{value / 60:g}m" if value % 60 == 0 else f"{value:g}s"
