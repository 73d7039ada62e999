"""Pod attribution end to end: the simulated kubelet (real gRPC), the sampler, the analysis, /metrics."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from exporter.serve.metrics import Renderer
from tests.conftest import step
from tests.timing import assert_within, timed


def series(snapshot) -> dict[str, list]:
    body, _ = Renderer().render(snapshot)
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def test_gpu_series_name_their_pod_and_shm_is_attributed(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("healthy:pods=2"), pods=True)
    s = series(step(sampler, clock, cycles=3))
    util = {x.labels["gpu"]: x.labels for x in s["gpu_utilization_ratio"]}
    assert (util["0"]["namespace"], util["0"]["pod"], util["0"]["container"]) == (
        "ml",
        "llm-train-0",
        "trainer",
    )
    assert (util["7"]["namespace"], util["7"]["pod"]) == ("research", "finetune-0")
    assert len(s["gpu_pod_info"]) == 8 and all(
        x.labels["resource"] == "nvidia.com/gpu" for x in s["gpu_pod_info"]
    )
    verdicts = [x for x in s["gpu_bottleneck"] if x.labels["gpu"] == "7"]
    assert all(x.labels["pod"] == "finetune-0" for x in verdicts)  # verdicts carry the pod too
    default = {(x.labels["namespace"], x.labels["pod"]): x.value for x in s["gpu_pod_shm_default_size"]}
    assert default == {("ml", "llm-train-0"): 0, ("research", "finetune-0"): 1}
    shm = {(x.labels.get("pod", ""), x.labels.get("volume", "")) for x in s["gpu_node_shm_size_bytes"]}
    assert shm == {("", ""), ("llm-train-0", "dshm"), ("llm-train-0", "dev-shm"), ("finetune-0", "dev-shm")}


def test_the_job_is_the_pod_a_starving_rank_blames_only_its_own_peers(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("data_starvation:gpus=5,pods=2"), pods=True)
    fired = []
    for _ in range(60):
        step(sampler, clock)
        fired += [e for e in sampler.events if e.state == "firing"]
    assert [(e.gpu, e.kind) for e in fired] == [("5", "data_starvation")]
    assert set(fired[0].related) == {"4", "6", "7"}  # the other ranks of finetune-0, not llm-train-0's GPUs


def test_a_kubelet_that_hangs_keeps_pod_labels_and_never_stalls_a_cycle(make_node, make_sampler, clock):
    node = make_node("healthy")
    sampler, errors = make_sampler(node, pods=True, pod_resources_interval_s=0.01)
    step(sampler, clock, cycles=2)

    def three_cycles() -> object:
        for _ in range(3):
            time.sleep(0.2)
            snap = step(sampler, clock, wait_s=0.3)
        return snap

    _, answered = timed(three_cycles)  # the kubelet answering: the baseline
    node.kubelet.misbehave(delay_s=float("inf"))
    snap, took = timed(three_cycles)
    # a hung kubelet costs each cycle its wait at most (0.3 s), never the hang
    assert_within(took, answered + 3 * 0.3, 2, "three cycles with a hung kubelet")
    time.sleep(0.6)
    snap = step(sampler, clock, wait_s=0.3)
    # a hiccup: the last assignment holds for the grace period (its end: tests/faults/test_kubelet_faults.py)
    assert all(g.pod is not None and g.pod.pod == "llm-train-0" for g in snap.gpus)
    assert series(snap)["gpu_utilization_ratio"][0].labels["pod"] == "llm-train-0"
    assert errors.snapshot().get(("kubelet", "DeadlineExceeded"), 0) >= 1
    node.kubelet.misbehave()
    for _ in range(4):
        time.sleep(0.1)
        snap = step(sampler, clock, wait_s=1.0)
    assert all(g.pod is not None and g.pod.pod == "llm-train-0" for g in snap.gpus)


def test_mig_slices_are_attributed_through_nvml_mig_uuids(make_node, make_sampler, clock):
    from exporter.sim import Capabilities
    from exporter.sim.kubelet import SimPod

    node = make_node("healthy", n_gpus=2, capabilities=Capabilities(mig={1: ["MIG-aaa", "MIG-bbb"]}))
    node.pods[:] = [
        SimPod("lab", "nb-1", "u1", "s1" * 32, "jupyter", {"nvidia.com/mig-1g.10gb": ["MIG-aaa"]}),
        SimPod("lab", "nb-2", "u2", "s2" * 32, "jupyter", {"nvidia.com/mig-1g.10gb": ["MIG-bbb"]}),
        SimPod("ml", "train", "u3", "s3" * 32, "main", {"nvidia.com/gpu": [node.model.gpus[0].uuid]}),
    ]
    sampler, _ = make_sampler(node, pods=True)
    s = series(step(sampler, clock, cycles=3))
    info = {(x.labels["gpu"], x.labels["pod"], x.labels["mig_uuid"]) for x in s["gpu_pod_info"]}
    assert info == {("0", "train", ""), ("1", "nb-1", "MIG-aaa"), ("1", "nb-2", "MIG-bbb")}
    # (memory, not utilization: the driver gives no utilization of a GPU in MIG mode)
    owners = {x.labels["gpu"]: x.labels.get("pod") for x in s["gpu_memory_used_bytes"]}
    assert owners == {"0": "train", "1": None}  # a GPU shared by two pods names none of them
