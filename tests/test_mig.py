"""A GPU in MIG mode (the simulator's mig_h100): each MIG instance is an entity of its own, its ledger booked
at its compute slices' share of the GPU's wall time, judged for the pod's kinds on its own GPM SM activity
and memory, and labelled on /metrics with the instance and the pod holding it."""

from __future__ import annotations

import pytest

from exporter.analysis.kinds import in_scope
from exporter.analysis.mig import (
    gpu_util,
    instance_point,
    instance_points,
    instance_share,
    split_gpu_instances,
)
from exporter.policy.thresholds import SERIES_BUDGET, SERIES_BUDGET_MIG
from exporter.serve.metrics import Renderer
from exporter.sim.mig import LAYOUT, LAYOUT_1G, LAYOUT_COMPUTE
from exporter.sources.readings import MigReading
from tests.conftest import step
from tests.test_series_budget import own_and_runtime, samples, series_per_family

BUSY, STARVING, IDLE, FREE = (str(s.gi) for s in LAYOUT)


def test_each_instance_is_judged_apart_and_the_starving_one_is_named(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("mig_h100", n_gpus=2), pods=True)
    snap = step(sampler, clock, cycles=400)  # idle_allocated's five minutes of evidence, and more
    gpu = snap.gpus[0]
    assert [(m.instance, m.profile, m.pod) for m in gpu.migs] == [
        (str(s.gi), s.profile, s.pod) for s in LAYOUT
    ]
    by = {m.instance: m for m in gpu.migs}
    # every slice is given out: the instances' ledgers sum to the GPU's wall time (and its cost)
    wall = sum(gpu.ledger.values())
    assert sum(sum(m.ledger.values()) for m in gpu.migs) == pytest.approx(wall, rel=0.03)
    assert sum(by[BUSY].ledger.values()) == pytest.approx(wall * 3 / 7, rel=0.03)
    firing = {(m.instance, k) for m in gpu.migs for k, v in m.verdicts.items() if v.firing}
    # the starving instance, and the one holding memory with no kernels; the busy and the free one nothing
    assert firing == {(STARVING, "data_starvation"), (IDLE, "idle_allocated")}
    assert not [k for k, v in gpu.verdicts.items() if v.firing]  # nor the GPU itself
    assert by[STARVING].verdicts["data_starvation"].cause == "cpu"
    assert by[STARVING].ledger["input_wait"] > by[STARVING].ledger["computing"]
    assert by[BUSY].ledger["computing"] > 0.9 * sum(by[BUSY].ledger.values())
    idle = by[IDLE].ledger
    assert idle["idle"] > 0.9 * sum(idle.values())  # memory held, no kernels
    assert by[FREE].ledger.get("free", 0.0) > 0.9 * sum(by[FREE].ledger.values())

    body, _ = Renderer().render(snap)
    s = samples(body)
    per = {}
    for x in s["gpu_mig_time_seconds_total"]:
        key = (x.labels["mig_instance"], x.labels["mig_profile"], x.labels.get("pod", ""))
        per[key] = per.get(key, 0.0) + x.value
    assert set(per) == {(str(s.gi), s.profile, s.pod) for s in LAYOUT}
    ledger = sum(x.value for x in s["gpu_time_seconds_total"] if x.labels["gpu"] == "0")
    assert sum(per.values()) == pytest.approx(ledger, rel=0.03)
    pages = [
        x.labels for x in s["gpu_bottleneck"] if x.value == 1 and x.labels.get("kind") == "data_starvation"
    ]
    assert [(p["mig_instance"], p["pod"], p["cause"]) for p in pages] == [(STARVING, "mig-starving", "cpu")]
    (idle_page,) = [
        x.labels for x in s["gpu_bottleneck"] if x.value == 1 and x.labels["kind"] == "idle_allocated"
    ]
    assert (idle_page["mig_instance"], idle_page["pod"]) == (IDLE, "mig-idle")
    # what holds it: the instance's pod's process, named on the verdict's own labels for the alert's join
    (holder,) = [x.labels for x in s["gpu_holder_info"]]
    assert (holder["gpu"], holder["mig_instance"], holder["pod"]) == ("0", IDLE, "mig-idle")
    assert holder["pid"].isdigit() and holder["command"]
    own, _ = own_and_runtime(series_per_family(body))
    assert own <= SERIES_BUDGET.value


def test_without_gpm_an_instance_has_memory_only_and_utilization_kinds_say_so(make_node, make_sampler, clock):
    from exporter.sim import Capabilities

    sampler, _ = make_sampler(
        make_node("mig_h100", n_gpus=1, capabilities=Capabilities(gpm=False)), pods=True
    )
    snap = step(sampler, clock, cycles=30)
    assert [m.pod for m in snap.gpus[0].migs] == [s.pod for s in LAYOUT]
    assert not any(v.firing for m in snap.gpus[0].migs for v in m.verdicts.values())
    assert "data_starvation" in sampler.analyzer.missing  # needs utilization.gpu: said, not guessed


def test_an_instance_stands_for_its_slices_and_the_gpus_utilization_is_theirs_weighted():
    busy = MigReading("MIG-a", 2, 0, "3g.40gb", 3, 7, 30 << 30, 40 << 30, sm_active=0.9)
    idle = MigReading("MIG-b", 9, 0, "1g.10gb", 1, 7, 7 << 30, 10 << 30, sm_active=0.0)
    blind = MigReading("MIG-c", 10, 0, "", 0, 7)  # slices unknown, no GPM
    assert instance_share(busy, 3) == pytest.approx(3 / 7) and instance_share(blind, 3) == pytest.approx(
        1 / 3
    )
    assert gpu_util([busy, idle]) == pytest.approx(0.9 * 3 / 7)
    assert gpu_util([blind]) is None  # nothing known: no utilization is made up
    point = instance_point(5.0, busy)
    assert (point.util, point.mem_used_bytes, point.mem_total_bytes) == (0.9, 30 << 30, 40 << 30)
    assert point.power_w is None and point.temp_c is None and point.sm_clock_hz is None  # the GPU's


def test_the_source_reads_each_instance_and_nothing_when_mig_mode_is_off(make_node, clock):
    from exporter.sources.errors import ErrorCounter
    from exporter.sources.nvml import NvmlSource

    node = make_node("mig_h100", n_gpus=2)
    source = NvmlSource(node.install(), ErrorCounter(), clock=clock)
    mig, plain = source.open()
    readings = []
    for _ in range(3):
        clock.advance(1.0)
        readings.append(source.collect(mig))
    first, last = readings[0], readings[-1]
    assert [(m.gpu_instance, m.profile, m.slices, m.gpu_slices) for m in last.migs] == [
        (s.gi, s.profile, s.slices, 7) for s in LAYOUT
    ]
    assert [m.mem_used_bytes for m in last.migs] == [s.mem_held for s in LAYOUT]
    assert all(m.sm_active is None for m in first.migs)  # GPM needs two samples: from the second read
    assert last.migs[0].sm_active == pytest.approx(0.93) and last.util is None  # no utilization in MIG mode
    assert last.mig_uuids == tuple(m.uuid for m in last.migs)
    assert source.collect(plain).migs == ()
    source.close([mig, plain])


def test_a_failed_read_keeps_the_instances_ledgers(make_node, make_sampler, clock):
    import pynvml

    node = make_node("mig_h100", n_gpus=1)
    sampler, _ = make_sampler(node, pods=True)
    step(sampler, clock, cycles=20)
    before = sum(sampler.analyzer.ledger("0/mig2").totals.values())
    node.faults.add("*", pynvml.NVML_ERROR_UNKNOWN, gpu=0)  # every read of GPU 0 fails: no reading
    down = step(sampler, clock, cycles=3)
    node.faults.clear()
    step(sampler, clock, cycles=5)
    assert not down.gpus[0].up and [m.instance for m in step(sampler, clock).gpus[0].migs]
    assert "0/mig2" in sampler.analyzer.gpus()
    assert sum(sampler.analyzer.ledger("0/mig2").totals.values()) > before


# ---- a GPU instance split into compute instances (mig_compute_h100) ------------------------------------


def test_compute_instances_of_one_gpu_instance_are_entities_and_series_of_their_own(
    make_node, make_sampler, clock
):
    sampler, _ = make_sampler(make_node("mig_compute_h100", n_gpus=2), pods=True)
    snap = step(sampler, clock, cycles=200)
    gpu = snap.gpus[0]
    assert [(m.instance, m.compute_instance, m.profile, m.pod) for m in gpu.migs] == [
        (str(s.gi), str(s.ci) if s.gi_slices else "", s.profile, s.pod) for s in LAYOUT_COMPUTE
    ]
    assert {"0/mig1.0", "0/mig1.1", "0/mig5", "0/mig13"} <= set(sampler.analyzer.gpus())
    # each compute instance books its own compute slices' share: 2/7 each, and all of them the GPU's time
    wall = sum(gpu.ledger.values())
    for m, spec in zip(gpu.migs, LAYOUT_COMPUTE, strict=True):
        assert sum(m.ledger.values()) == pytest.approx(wall * spec.slices / 7, rel=0.03)
    a, b = gpu.migs[0], gpu.migs[1]
    assert a.ledger["computing"] > 0.9 * sum(a.ledger.values())  # the GPU instance's 93 %, each held one's
    assert b.ledger["computing"] > 0.9 * sum(b.ledger.values())
    firing = {
        (m.instance, m.compute_instance, k) for m in gpu.migs for k, v in m.verdicts.items() if v.firing
    }
    assert firing == {("5", "", "data_starvation")}

    body, _ = Renderer().render(snap)
    s = samples(body)
    per: dict[tuple[str, str, str], float] = {}
    for x in s["gpu_mig_time_seconds_total"]:
        key = (x.labels["mig_instance"], x.labels.get("mig_compute_instance", ""), x.labels.get("pod", ""))
        per[key] = per.get(key, 0.0) + x.value
    # two series sets for GPU instance 1, told apart by the compute instance; none for the unsplit ones
    assert set(per) == {
        ("1", "0", "mig-ci-a"),
        ("1", "1", "mig-ci-b"),
        ("5", "", "mig-starving"),
        ("13", "", ""),
    }
    assert per[("1", "0", "mig-ci-a")] == pytest.approx(per[("5", "", "mig-starving")], rel=0.03)
    ledger = sum(x.value for x in s["gpu_time_seconds_total"] if x.labels["gpu"] == "0")
    assert sum(per.values()) == pytest.approx(ledger, rel=0.03)
    verdict_keys = [
        (x.labels["mig_instance"], x.labels.get("mig_compute_instance"), x.labels["kind"])
        for x in s["gpu_bottleneck"]
        if "mig_instance" in x.labels
    ]
    assert len(verdict_keys) == len(set(verdict_keys))  # no two series with one label set
    assert ("1", "0", "data_starvation") in verdict_keys and ("1", "1", "data_starvation") in verdict_keys


def test_compute_instances_share_their_gpu_instances_activity_and_memory():
    def ci(uuid: str, gi: int, c: int, slices: int, sm: float | None, mem: int = 20 << 30) -> MigReading:
        return MigReading(uuid, gi, c, "2c.4g.40gb", slices, 7, mem, 40 << 30, sm_active=sm)

    alone = MigReading("MIG-s", 5, 0, "2g.20gb", 2, 7, 14 << 30, 20 << 30, sm_active=0.4)
    a, b = ci("MIG-a", 1, 0, 2, 0.5), ci("MIG-b", 1, 1, 2, 0.5)  # GPM and memory are GPU instance 1's
    assert split_gpu_instances([a, b, alone]) == {1}
    assert (
        split_gpu_instances(
            [alone, MigReading("MIG-u", -1, -1, "", 0, 7), MigReading("MIG-v", -1, -1, "", 0, 7)]
        )
        == set()
    )
    # both held: each is given the GPU instance's activity (which of them computes is not seen)
    both = instance_points(1.0, [a, b, alone], {"MIG-a", "MIG-b", "MIG-s"})
    assert [p.util for p in both] == [pytest.approx(0.5), pytest.approx(0.5), pytest.approx(0.4)]
    assert [p.mem_used_bytes for p in both] == [20 << 30, 20 << 30, 14 << 30]
    # one held: it alone ran the GPU instance's kernels, on half its SMs; the free one ran and holds nothing
    one = instance_points(1.0, [a, b, alone], {"MIG-a"})
    assert (one[0].util, one[0].mem_used_bytes) == (pytest.approx(1.0), 20 << 30)
    assert (one[1].util, one[1].mem_used_bytes) == (0.0, 0)
    assert one[2].util == pytest.approx(0.4)  # alone in its GPU instance: its own, held or not
    # none held: all of them count (a host process may run there)
    assert [p.util for p in instance_points(1.0, [a, b], set())] == [pytest.approx(0.5)] * 2
    # without GPM nothing is made up; the GPU's utilization stays the slice-weighted sum
    blind = instance_points(1.0, [ci("MIG-a", 1, 0, 2, None), ci("MIG-b", 1, 1, 2, None)], {"MIG-a"})
    assert [p.util for p in blind] == [None, None]
    assert gpu_util([a, b, alone]) == pytest.approx(0.5 * 4 / 7 + 0.4 * 2 / 7)
    assert instance_share(a, 3) == pytest.approx(2 / 7)  # its own compute slices, not its GPU instance's


def test_the_source_reads_each_compute_instance_through_the_real_library(make_node, clock):
    from exporter.sources.errors import ErrorCounter
    from exporter.sources.nvml import NvmlSource

    node = make_node("mig_compute_h100", n_gpus=1)
    source = NvmlSource(node.install(), ErrorCounter(), clock=clock)
    (dev,) = source.open()
    for _ in range(3):
        clock.advance(1.0)
        last = source.collect(dev)
    assert [(m.gpu_instance, m.compute_instance, m.profile, m.slices) for m in last.migs] == [
        (s.gi, s.ci, s.profile, s.slices) for s in LAYOUT_COMPUTE
    ]
    assert len({m.uuid for m in last.migs}) == len(LAYOUT_COMPUTE)  # a MIG device, a UUID each
    a, b = last.migs[0], last.migs[1]
    held = LAYOUT_COMPUTE[0].mem_held + LAYOUT_COMPUTE[1].mem_held
    assert a.mem_used_bytes == b.mem_used_bytes == held  # memory is the GPU instance's
    assert a.mem_total_bytes == b.mem_total_bytes == LAYOUT_COMPUTE[0].mem_total
    assert a.sm_active == b.sm_active == pytest.approx(0.93)  # GPM is the GPU instance's
    source.close([dev])


def test_an_all_mig_node_stays_within_its_series_budget(make_node, make_sampler, clock):
    """Every GPU of an 8 x H100 node in MIG mode at the finest partition, 7 x 1g.10gb each held by a pod
    (mig_all_h100): the series follow the 56 instances and their pods. Over exporter.series_budget (a node of
    whole GPUs), within exporter.series_budget_mig, and bounded per instance and per pod."""
    sampler, _ = make_sampler(make_node("mig_all_h100", n_gpus=8), pods=True)
    snap = step(sampler, clock, cycles=400)  # idle_allocated's evidence: every kind an instance pages for
    assert sum(len(g.migs) for g in snap.gpus) == 8 * len(LAYOUT_1G)
    body, _ = Renderer().render(snap)
    counts = series_per_family(body)
    own, _ = own_and_runtime(counts)
    assert SERIES_BUDGET.value < own <= SERIES_BUDGET_MIG.value, own
    instances = 8 * len(LAYOUT_1G)
    # per instance: its ledger's states so far, one series per kind judged on it, the holder of an idle one
    s = samples(body)
    per_instance = counts["gpu_mig_time_seconds_total"] + len(
        [x for x in s["gpu_bottleneck"] if "mig_instance" in x.labels]
    )
    assert per_instance <= instances * (len(in_scope("pod")) + 3)
    assert counts["gpu_holder_info"] == 8  # the idle instance of each GPU
    assert counts["gpu_pod_info"] == instances  # a device each
