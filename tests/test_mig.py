"""A GPU in MIG mode (the simulator's mig_h100): each MIG instance is an entity of its own, its ledger booked
at its compute slices' share of the GPU's wall time, judged for the pod's kinds on its own GPM SM activity
and memory, and labelled on /metrics with the instance and the pod holding it."""

from __future__ import annotations

import pytest

from exporter.analysis.mig import gpu_util, instance_point, instance_share
from exporter.policy.thresholds import SERIES_BUDGET
from exporter.serve.metrics import Renderer
from exporter.sim.mig import LAYOUT
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
