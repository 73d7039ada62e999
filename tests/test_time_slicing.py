"""A GPU shared by pods through the device plugin's time-slicing replicas (the simulator's time_slicing):
each pod's share is judged apart, its ledger booked at its share of the GPU's wall time, and the starving
pod is named; the pure parts: which pods share a GPU and what each one's point is."""

from __future__ import annotations

import dataclasses
import time

import pytest

from exporter.analysis.engine import KindState
from exporter.analysis.pods import PodUse, gpu_owners, pod_uses, share_point, sharing_pods
from exporter.policy.thresholds import SERIES_BUDGET
from exporter.serve.metrics import UNOWNED, Renderer
from exporter.sources.kubelet import Assignment, PodRef
from exporter.sources.processes import ProcessOwner
from exporter.sources.readings import GpuProcess
from tests.conftest import step
from tests.test_series_budget import own_and_runtime, samples, series_per_family

STARVING = "shared-starving"
BUSY = ("shared-busy-a", "shared-busy-b")


def _owner(pid: int, pod: str) -> ProcessOwner:
    return ProcessOwner(pid, "python", "c" * 64, "containerd", "uid", "research", pod, "worker")


def test_replicas_map_to_their_gpu_and_name_the_pods_sharing_it():
    refs = [PodRef("research", name, "worker") for name in ("a", "b")]
    found = [Assignment("nvidia.com/gpu", f"GPU-1::{k}", ref) for k, ref in enumerate(refs)]
    owners, held = gpu_owners(found, [(0, "GPU-1", ())])
    assert 0 not in owners  # two pods: nobody holds it whole
    assert sharing_pods(held[0]) == [("research", "a"), ("research", "b")]
    alone, _ = gpu_owners(found[:1], [(0, "GPU-1", ())])
    assert alone[0] == refs[0]  # one pod holding a replica holds the GPU


def test_a_pods_point_is_its_use_of_its_own_slice():
    procs = (
        GpuProcess(1, 20 << 30, sm_util=0.30),
        GpuProcess(2, 4 << 30, sm_util=0.10),
        GpuProcess(3, 1 << 30),
    )
    owners = {1: _owner(1, "a"), 2: _owner(2, "a"), 3: _owner(3, "b")}
    uses = pod_uses(procs, owners, [("research", "a"), ("research", "b"), ("research", "c")])
    assert uses == [
        PodUse("research", "a", pytest.approx(0.40), 24 << 30),
        PodUse("research", "b", 0.0, 1 << 30),  # no sample since the last read: no kernel ran
        PodUse("research", "c", 0.0, 0),  # no process on the GPU
    ]
    point = share_point(5.0, uses[0], 3, 80 << 30)
    assert point.util == 1.0  # 40 % of the GPU is more than its third: all of its slice
    assert share_point(5.0, PodUse("research", "x", 0.05, 1), 3, None).util == pytest.approx(0.15)
    assert point.power_w is None and point.temp_c is None and point.sm_clock_hz is None


@pytest.mark.parametrize("scenario", ["time_slicing", "mps"])
def test_each_pod_gets_its_share_and_the_starving_one_is_named(make_node, make_sampler, clock, scenario):
    sampler, _ = make_sampler(make_node(scenario), pods=True)
    snap = step(sampler, clock, cycles=240)
    gpu = snap.gpus[0]
    if scenario == "mps":  # the pods' processes are the MPS server's clients; the server is the node's
        kinds = {v.owner.pod or v.owner.command: v.process.kind for v in gpu.processes.processes if v.owner}
        assert kinds == {"nvidia-cuda-mps-server": "compute", **dict.fromkeys((*BUSY, STARVING), "mps")}
        assert not [v for v in gpu.processes.processes if v.unowned]  # the server's memory is not nobody's
    assert [s.pod for s in gpu.shares] == [*BUSY, STARVING]
    wall = sum(gpu.ledger.values())
    assert sum(sum(s.ledger.values()) for s in gpu.shares) == pytest.approx(wall, rel=0.03)
    firing = {(s.pod, k) for s in gpu.shares for k, v in s.verdicts.items() if v.firing}
    assert firing == {(STARVING, "data_starvation")}
    assert not [k for k, v in gpu.verdicts.items() if v.firing]  # the GPU itself pages nothing
    starving = next(s for s in gpu.shares if s.pod == STARVING)
    assert starving.ledger["input_wait"] > starving.ledger["computing"]
    assert all(s.ledger["computing"] > 0.9 * sum(s.ledger.values()) for s in gpu.shares if s.pod in BUSY)

    body, _ = Renderer().render(snap)
    s = samples(body)
    pods = {}
    for x in s["gpu_pod_time_seconds_total"]:
        pods[x.labels["pod"]] = pods.get(x.labels["pod"], 0.0) + x.value
    ledger = sum(x.value for x in s["gpu_time_seconds_total"] if x.labels["gpu"] == "0")
    assert set(pods) == {*BUSY, STARVING} and sum(pods.values()) == pytest.approx(ledger, rel=0.03)
    assert UNOWNED not in s  # nor for the MPS server
    (page,) = [x.labels for x in s["gpu_bottleneck"] if x.value == 1]
    assert (page["kind"], page["namespace"], page["pod"], page["cause"]) == (
        "data_starvation",
        "research",
        STARVING,
        "cpu",
    )
    # series stay bounded: only the split GPU has pod series (a ledger and two verdicts per pod)
    own, _ = own_and_runtime(series_per_family(body))
    assert own <= SERIES_BUDGET.value
    # a pod's share left idle names that pod's own process (not the busy pods' larger ones, nor the server)
    idle = {"idle_allocated": KindState(1.0, True)}
    shares = tuple(dataclasses.replace(x, verdicts=idle) if x.pod == STARVING else x for x in gpu.shares)
    gpus = (dataclasses.replace(gpu, shares=shares), *snap.gpus[1:])
    (holder,) = samples(Renderer().render(dataclasses.replace(snap, gpus=gpus))[0])["gpu_holder_info"]
    mine = {str(v.process.pid) for v in gpu.processes.processes if v.owner and v.owner.pod == STARVING}
    assert holder.labels["pod"] == STARVING and {holder.labels["pid"]} == mine


def test_a_pod_that_leaves_takes_its_share_with_it(make_node, make_sampler, clock):
    node = make_node("time_slicing")
    sampler, _ = make_sampler(node, pods=True)
    step(sampler, clock, cycles=20)
    assert "0/research/shared-busy-b" in sampler.analyzer.gpus()
    node.host.pods_changed([p for p in node.pods if p.name != "shared-busy-b"])
    sampler.poller.delay("kubelet", time.monotonic())  # ask the kubelet now (its interval is monotonic)
    snap = step(sampler, clock, cycles=10)
    assert [s.pod for s in snap.gpus[0].shares] == ["shared-busy-a", STARVING]
    assert "0/research/shared-busy-b" not in sampler.analyzer.gpus()
    assert sampler.analyzer.ledger("0/research/shared-busy-a").share == 0.5


def test_a_failed_read_keeps_the_pods_shares_and_their_ledgers(make_node, make_sampler, clock):
    import pynvml

    node = make_node("time_slicing")
    sampler, _ = make_sampler(node, pods=True)
    step(sampler, clock, cycles=30)
    entity = f"0/research/{STARVING}"
    before = sum(sampler.analyzer.ledger(entity).totals.values())
    assert before > 0
    node.faults.add("*", pynvml.NVML_ERROR_UNKNOWN, gpu=0)  # every read of GPU 0 fails: no reading
    down = step(sampler, clock, cycles=3)
    assert not down.gpus[0].up and entity in sampler.analyzer.gpus()
    node.faults.clear()
    step(sampler, clock, cycles=15)
    assert sum(sampler.analyzer.ledger(entity).totals.values()) > before  # went on, not started again


def test_mps_that_books_the_kernels_to_its_server_leaves_the_gpu_whole(make_node, make_sampler, clock):
    """A driver that samples the MPS server, not its clients (MPS before Volta): every pod would read
    idle, so the GPU is not split, then or later (a read with no kernel at all does not split it again)."""
    node = make_node("mps", n_gpus=2)
    listed = node.model.processes

    def to_server(g):
        procs = listed(g)
        if not g.mps:
            return procs
        server, *clients = procs
        return [server._replace(sm_share=1.0), *(c._replace(sm_share=0.0) for c in clients)]

    node.model.processes = to_server
    sampler, _ = make_sampler(node, pods=True)
    snap = step(sampler, clock, cycles=30)
    assert snap.gpus[0].shares == ()
    node.model.processes = listed
    assert step(sampler, clock, cycles=30).gpus[0].shares == ()
    fresh, _ = make_sampler(node, pods=True)  # with the clients sampled apart, it is split
    assert [s.pod for s in step(fresh, clock, cycles=30).gpus[0].shares] == [*BUSY, STARVING]
