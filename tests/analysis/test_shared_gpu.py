"""A GPU shared by pods (time-slicing): each pod's share of it is an entity of its own, with a ledger
booked at its share of the GPU's wall time and the verdicts whose loss is the pod's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.analysis.engine import Analyzer
from exporter.analysis.kinds import KINDS
from exporter.analysis.ledger import GpuLedger, Tick
from exporter.analysis.points import GpuPoint
from tests.analysis.synth import GIB, HOST_OK, IDLE, alternating

SLOW_S = 10.0  # the processes' slow read: a pod's point every 10 s
STALE_S = 13.0
PODS = {"0/ml/busy-a": 1.0, "0/ml/busy-b": 1.0, "0/ml/starving": 0.15}  # each pod's use of its slice


def pod_point(t: float, util: float) -> GpuPoint:
    """What the sampler makes of a pod's processes: utilization of its slice and its memory, nothing of the
    whole GPU's (power, clocks, temperature, links)."""
    return GpuPoint(t=t, util=util, mem_used_bytes=20 * GIB, mem_total_bytes=80 * GIB)


def shared(seconds: int, dt: float = 0.2) -> tuple[Analyzer, list]:
    """GPU 0 split between three pods, fed like the sampler: the GPU every tick, the pods every 10 s."""
    analyzer, events = Analyzer(), []
    analyzer.set_split("0", True)
    for entity in PODS:
        analyzer.set_share(entity, 1 / len(PODS), STALE_S)
        analyzer.set_group(entity, entity.split("/", 1)[1])
    analyzer.set_group("0", "shared/0")
    physical, per_second = alternating(1.0, 0.9), round(1 / dt)  # the GPU shows a starving rhythm
    for k in range(1, seconds * per_second + 1):
        t = k * dt
        analyzer.add_gpu_points("0", [replace(physical(t), t=t)])
        if k % per_second:
            continue
        if round(t) % SLOW_S == 0:
            for entity, util in PODS.items():
                analyzer.add_gpu_points(entity, [pod_point(t, util)])
        analyzer.add_host_point(replace(HOST_OK, t=t))
        events += analyzer.evaluate(t, ["0", *PODS])[1]
    return analyzer, events


def test_a_ledger_books_its_share_of_each_second():
    whole, third = GpuLedger(), GpuLedger(share=1 / 3)
    for t in range(1, 101):
        tick = Tick(t=float(t), span=1.0, compute=0.4, gap=0.6)
        whole.commit(tick, False, False, alone=True)
        third.commit(tick, False, False, alone=True)
    assert sum(third.totals.values()) == pytest.approx(sum(whole.totals.values()) / 3)
    assert third.observed_s() == pytest.approx(whole.observed_s() / 3)
    # the shares of its windows are ratios: the same as the whole GPU's
    assert third.shares(100.0)[2].by_state == pytest.approx(whole.shares(100.0)[2].by_state)


def test_the_pods_ledgers_sum_to_the_gpus_wall_time():
    analyzer, _ = shared(600)
    analyzer.flush_ledgers()
    gpu = sum(analyzer.ledger("0").totals.values())
    pods = [sum(analyzer.ledger(e).totals.values()) for e in PODS]
    assert gpu == pytest.approx(600, rel=0.01)
    assert sum(pods) == pytest.approx(gpu, rel=0.03)  # the first pod points come at the first slow read
    assert all(p == pytest.approx(gpu / 3, rel=0.03) for p in pods)


def test_the_starving_pod_is_named_and_the_split_gpu_is_not():
    analyzer, events = shared(600)
    fired = {(e.gpu, e.kind) for e in events if e.state == "firing"}
    assert ("0/ml/starving", "data_starvation") in fired
    # the GPU itself shows a starving rhythm, but the loss is its pods': it pages nothing for it; the busy
    # pods page nothing at all
    assert not {f for f in fired if f[0] != "0/ml/starving"}
    ledger = analyzer.ledger("0/ml/starving").totals
    assert ledger["input_wait"] > ledger["computing"]
    busy = analyzer.ledger("0/ml/busy-a").totals
    assert busy["computing"] > 0.9 * sum(busy.values())


def test_a_whole_gpu_with_that_rhythm_starves():
    """The control: the same GPU, not split, gets the verdict itself."""
    analyzer, events = Analyzer(), []
    shape = alternating(1.0, 0.9)
    for k in range(1, 3001):
        t = k * 0.2
        analyzer.add_gpu_points("0", [replace(shape(t), t=t)])
        if k % 5 == 0:
            analyzer.add_host_point(replace(HOST_OK, t=t))
            events += analyzer.evaluate(t, ["0"])[1]
    assert any(e.kind == "data_starvation" and e.state == "firing" for e in events)


def test_pod_kinds_are_judged_on_pods_and_gpu_kinds_on_the_gpu():
    pod_kinds = {k.name for k in KINDS.values() if k.scope == "pod"}
    assert pod_kinds == {"data_starvation", "idle_allocated"}
    # an idle shared GPU: its pods are idle, and only they (each once) get idle_allocated; the GPU does not
    analyzer, events = Analyzer(), []
    analyzer.set_split("0", True)
    for entity in ("0/ml/a", "0/ml/b"):
        analyzer.set_share(entity, 0.5, STALE_S)
        analyzer.set_group(entity, entity[2:])
    for t in range(1, 900):
        analyzer.add_gpu_points("0", [replace(IDLE, t=float(t))])
        if t % SLOW_S == 0:
            for entity in ("0/ml/a", "0/ml/b"):
                analyzer.add_gpu_points(entity, [pod_point(float(t), 0.0)])
        events += analyzer.evaluate(float(t), ["0", "0/ml/a", "0/ml/b"])[1]
    fired = sorted((e.gpu, e.kind) for e in events if e.state == "firing")
    assert fired == [("0/ml/a", "idle_allocated"), ("0/ml/b", "idle_allocated")]


def test_a_pod_that_leaves_is_forgotten():
    analyzer, _ = shared(60)
    analyzer.forget("0/ml/starving")
    assert "0/ml/starving" not in analyzer.gpus()
    analyzer.forget("0/ml/starving")  # twice: nothing to do
