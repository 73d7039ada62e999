"""Whose are a GPU's processes: the pure attribution, and the whole sampler over the simulated node whose
deleted pod left a process behind (zombie_process) and over a healthy one."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.analysis.processes import attribute, holders
from exporter.serve.metrics import Renderer
from exporter.sources.kubelet import Assignment, PodRef
from exporter.sources.processes import ProcessOwner
from exporter.sources.readings import GpuProcess
from tests.conftest import step
from tests.test_series_budget import samples

ANSWER_T = 1000.0  # when the kubelet answered
TRAIN = ("ml", "train-0")


def _owner(pid: int, pod: tuple[str, str] = TRAIN, container: str = "c" * 64, start: float = 900.0):
    return ProcessOwner(pid, "python", container, "containerd", "uid", pod[0], pod[1], "trainer", start)


@pytest.mark.parametrize(
    ("owner", "verdict"),
    [
        (_owner(1), ""),  # its pod holds the GPU
        (_owner(1, ("ml", "other-0")), "other_pod"),  # a pod of the node, not given this GPU
        (_owner(1, ("ml", "gone-0")), "pod_gone"),  # no pod the kubelet lists
        (_owner(1, container=""), "host"),
        (_owner(1, ("", "")), ""),  # a container whose pod nothing names: not judged
        (_owner(1, ("ml", "gone-0"), start=1001.0), ""),  # younger than the kubelet's answer
        (None, ""),  # gone from /proc
        # the node's MPS server: its context serves the pods' clients, on the host or in a daemon's pod
        (ProcessOwner(1, "/usr/bin/nvidia-cuda-mps-server", start_t=900.0), ""),
        (ProcessOwner(1, "nvidia-cuda-mps", start_t=900.0), ""),  # the kernel's name: no cmdline
        (dataclasses.replace(_owner(1, ("nvidia", "mps-daemon")), command="nvidia-cuda-mps-server -d"), ""),
        (ProcessOwner(1, "python nvidia-cuda-mps-server.py", start_t=900.0), "host"),  # not its command
    ],
)
def test_a_process_is_owned_by_the_pod_holding_its_gpu(owner, verdict):
    owners = {1: owner} if owner is not None else {}
    node_pods = {TRAIN, ("ml", "other-0")}
    out = attribute((GpuProcess(1, 1 << 30),), 1 << 30, owners, {TRAIN}, node_pods, ANSWER_T)
    assert [v.unowned for v in out.processes] == [verdict]


def test_nothing_is_judged_without_the_hosts_proc_or_the_kubelet():
    proc = (GpuProcess(1, 1 << 30),)
    assert attribute(proc, 1 << 30, None, set(), set(), ANSWER_T).processes[0].unowned == ""
    assert (
        attribute(proc, 1 << 30, {1: _owner(1, container="")}, set(), set(), None).processes[0].unowned == ""
    )
    assert attribute((), 40 << 30, None, set(), set(), ANSWER_T).no_process_bytes is None


def test_memory_with_no_process_is_nobodys_above_the_idle_line():
    assert attribute((), 40 << 30, {}, set(), set(), ANSWER_T).no_process_bytes == 40 << 30
    assert attribute((), 3 << 20, {}, set(), set(), ANSWER_T).no_process_bytes is None
    assert attribute(None, 40 << 30, {}, set(), set(), ANSWER_T).no_process_bytes is None  # not read


def test_time_slicing_replicas_and_mig_slices_hold_their_gpu():
    ref = PodRef("ml", "a", "c")
    found = [
        Assignment("nvidia.com/gpu", "GPU-1::3", ref),
        Assignment("nvidia.com/mig-1g.10gb", "MIG-x", ref),
    ]
    assert holders(found[:1], ("GPU-1", "1"), "GPU-1") == {("ml", "a")}
    assert holders(found[1:], ("GPU-1", "1", "MIG-x"), "GPU-1") == {("ml", "a")}
    assert holders(found, ("GPU-2", "2"), "GPU-2") == set()


def _unowned(snap) -> list[dict[str, str]]:
    body, _ = Renderer().render(snap)
    return [s.labels for s in samples(body).get("gpu_memory_unowned_bytes", [])]


def test_the_zombie_of_a_deleted_pod_is_reported_with_its_pid_and_last_pod(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("zombie_process"), pods=True)
    snap = step(sampler, clock, cycles=15)
    assert snap.source_up["processes"]
    (found,) = _unowned(snap)
    assert found["gpu"] == "7" and found["pid"] == "4312" and found["reason"] == "pod_gone"
    assert (found["namespace"], found["pod"], found["container"]) == ("ml", "llm-train-prev", "trainer")
    body, _ = Renderer().render(snap)
    per_pod = {(s.labels["gpu"], s.labels["pod"]): s.value for s in samples(body)["gpu_pod_processes"]}
    assert per_pod[("0", "llm-train-0")] == 1 and per_pod[("7", "llm-train-prev")] == 1


def test_a_healthy_node_owns_every_process(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("healthy"), pods=True)
    snap = step(sampler, clock, cycles=15)
    assert _unowned(snap) == []
    body, _ = Renderer(frozenset({"processes"})).render(snap)
    rows = samples(body)["gpu_process_memory_bytes"]
    assert {(r.labels["pid"], r.labels["pod"]) for r in rows} == {
        (str(4242 + 10 * g), "llm-train-0") for g in range(8)
    }


def test_memory_held_with_no_process_listed_is_nobodys(make_node, make_sampler, clock):
    node = make_node("healthy")
    listed = node.model.processes
    node.model.processes = lambda g: [] if g.index == 3 else listed(g)  # a context the driver lost track of
    sampler, _ = make_sampler(node, pods=True)
    (found,) = _unowned(step(sampler, clock, cycles=15))
    assert (found["gpu"], found["reason"], found["pid"]) == ("3", "no_process", "")


def test_each_generation_of_pods_is_owned_by_the_pod_holding_the_gpu_now(make_node, make_sampler, clock):
    """Pod churn: new pods run new processes. A process younger than the kubelet's answer is not judged,
    and one that ended leaves its pod's series (within a cycle: the sources of one cycle run at once)."""
    node = make_node("pod_churn", n_gpus=2)
    sampler, _ = make_sampler(node, pods=True, pod_resources_interval_s=1.0)
    before: set[str] = set()
    for _ in range(8):  # four generations of pods, two collections each
        snap = step(sampler, clock, seconds=5.0)
        now = {p.name for p in node.current_pods()}
        body, _ = Renderer().render(snap)
        shown = {s.labels["pod"] for s in samples(body).get("gpu_pod_processes", [])}
        assert shown <= now | before, (shown, now, before)
        assert _unowned(snap) == []
        before = now


def test_an_idle_gpu_names_the_process_holding_its_memory(make_node, make_sampler, clock):
    from exporter.analysis.engine import KindState

    sampler, _ = make_sampler(make_node("healthy"), pods=True)
    snap = step(sampler, clock, cycles=15)
    assert "gpu_holder_info" not in samples(Renderer().render(snap)[0])  # nothing idle: nothing named
    idle = {"idle_allocated": KindState(1.0, True)}
    gpus = tuple(dataclasses.replace(g, verdicts=idle) if g.index == 2 else g for g in snap.gpus)
    body, _ = Renderer().render(dataclasses.replace(snap, gpus=gpus))
    (holder,) = [s.labels for s in samples(body)["gpu_holder_info"]]
    # on the verdict's own labels (the pod holding the GPU), the largest process's host PID and command
    assert (holder["gpu"], holder["pod"], holder["pid"]) == ("2", "llm-train-0", str(4242 + 10 * 2))
    assert holder["command"]


@pytest.mark.parametrize(
    ("scenario", "kind"), [("serving", "serving"), ("evaluation", "evaluation"), ("healthy", "training")]
)
def test_what_a_gpus_process_runs_names_its_class_over_its_pods_name(
    make_node, make_sampler, clock, scenario, kind
):
    """With the process owners read, the command a GPU's process runs (vLLM's server module, an
    evaluation script, a training script) says what the job is: it outranks the pod's name, never its log."""
    sampler, _ = make_sampler(make_node(scenario, n_gpus=2), pods=True)
    step(sampler, clock, cycles=15)
    w = sampler.analyzer.workload("0")
    assert (w.kind, w.source) == (kind, "process"), (scenario, w)
