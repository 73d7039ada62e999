"""The cost rules: what each ledger state's GPU time costs, by pod and node, by job and by namespace.

Two rule groups of their own, beside the recording groups: the exporter exposes a price per GPU model
(``gpu_node_price_per_hour{model, currency}``, one series per model on the node, from ``--price``); the
first rule prices each GPU's ledger rate by its model (``gpu_info``) on the node it is scraped from, so it
evaluates wherever that node's series are (GROUP: a shard); the others sum the recorded pod series over a
job's or a namespace's nodes, and the job's needs the cluster's pod labels (JOB_GROUP: a global ruler when
Prometheus is sharded by node). Values are currency per hour: the rate at which each state's time is being
paid for.
"""

from __future__ import annotations

from devtools.artifacts.recording import INFO, JOB_LABEL, LEDGER_RATE, Record
from exporter.analysis.ledger import LOST_STATES

GROUP = "gpu-bottleneck-cost"
JOB_GROUP = "gpu-bottleneck-job-cost"
LOST = "|".join(LOST_STATES)
POD = "node_namespace_pod_state:gpu_cost_per_hour:rate5m"
JOB = "namespace_job_state:gpu_cost_per_hour:rate5m"
NAMESPACE = "namespace_state:gpu_cost_per_hour:rate5m"
# per GPU, its price per hour (labels instance, gpu, model, currency)
GPU_PRICE = (
    "max by (instance, gpu, model) (gpu_info)\n"
    "      * on (instance, model) group_left (currency) gpu_node_price_per_hour"
)

RECORDS: tuple[Record, ...] = (
    Record(
        POD,
        "sum by (node, instance, namespace, pod, state, currency) (\n"
        f"  ({LEDGER_RATE})\n"
        f"    * on (instance, gpu) group_left (currency) (\n      {GPU_PRICE}\n    )\n)",
        "What each ledger state's GPU time costs per hour, per pod and node (pod empty: free GPUs; a shared "
        "GPU's cost follows its pods' shares): the state's GPU-seconds per second times the price of a "
        "GPU-hour of each GPU's model.",
        GROUP,
    ),
    Record(
        JOB,
        f"sum by (namespace, {JOB_LABEL}, state, currency) (\n"
        f"  {POD} * on (namespace, pod) group_left ({JOB_LABEL}) {INFO}\n)",
        "The same per job and state: what the job's time in each state costs per hour.",
        JOB_GROUP,
    ),
    Record(
        NAMESPACE,
        f'sum by (namespace, state, currency) ({POD}{{namespace!=""}})',
        "The same per namespace (team) and state, pods with or without a job label.",
        JOB_GROUP,
    ),
)
