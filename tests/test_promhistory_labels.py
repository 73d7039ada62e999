"""How a history's series name their workload and their GPU: a scrape that renamed the exporter's
namespace/pod/container (honorLabels: false) is read by its exported_* labels, its series with none are
no pod's; two boards whose series carry one GPU name are kept apart and said so. Replayed by the real
analysis (the end-to-end test over a real Prometheus: tests/e2e/test_replay_prometheus_operator.py)."""

from __future__ import annotations

from pathlib import Path

from exporter.offline.promhistory import names
from exporter.offline.promhistory.history import _keep, _naming, jobs_of, pod_of, replay_nodes
from exporter.offline.replay import human

OPERATOR = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p", "job": "dcgm"}
UTIL = names.Series(names.DCGM_LEGACY, "DCGM_FI_DEV_GPU_UTIL", "util", names.PERCENT)


def test_a_renaming_scrape_names_the_workload_by_its_exported_labels():
    allocated = {**OPERATOR, "exported_namespace": "ml", "exported_pod": "train-0", "gpu": "0"}
    idle = {**OPERATOR, "gpu": "1"}  # no pod held it: the target's labels only
    other = {"namespace": "ml", "pod": "train-1", "gpu": "0", "job": "own"}  # honorLabels: true
    targets, named_by = _naming([allocated, idle, other])
    assert pod_of(allocated, targets) == "ml/train-0"
    assert pod_of(idle, targets) == ""  # never gpu-operator/nvidia-dcgm-exporter-x7k2p
    assert pod_of(other, targets) == "ml/train-1"
    assert named_by == {names.BY_EXPORTED: 1, names.BY_PLAIN: 1}
    # kube-state-metrics renamed too: its pod's labels are the exported ones
    ksm = {"namespace": "monitoring", "pod": "ksm-0", "exported_namespace": "ml", "exported_pod": "train-0"}
    assert names.workload_labels(ksm)["pod"] == "train-0"


def test_two_boards_under_one_gpu_name_are_kept_apart_and_said_in_one_line():
    gpus: dict = {}
    times = [15.0 * k for k in range(1, 41)]
    for uuid, value in (("GPU-aaaa", 90.0), ("GPU-bbbb", 10.0)):
        labels = {"Hostname": "n0", "gpu": "0", "UUID": uuid, "modelName": "NVIDIA H100 80GB HBM3"}
        _keep(gpus, names.DCGM_LEGACY, UTIL, "n0", labels, times, [value] * len(times))
    assert sorted(g.name for g in gpus.values()) == ["n0/0", "n0/GPU-bbbb"]
    assert set(gpus["GPU-bbbb"].values["util"].values()) == {0.1}  # its own samples, none of the other's
    assert set(jobs_of(gpus, {})) == {"n0 (no pod)"}
    result = replay_nodes([(gpus, {})], {}, 15.0, 0.0, "test", Path("p"), prices=None)
    assert {"n0/0", "n0/GPU-bbbb"} <= set(result.ledger)
    (note,) = result.fleet["notes"]
    assert "GPU 0" in note and "GPU-aaaa" in note and "GPU-bbbb" in note and "\n" not in note
    assert note in human(result)
