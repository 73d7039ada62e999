"""Where GPU time goes in real workloads: slow collectives, checkpoint stalls, host-bound CPU offload.

Each test follows the model tick by tick, reading what NVML would show: the driver's utilization sample
of the tick, GPM integrals (SM activity), power, and the NVLink / PCIe byte counters.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass, field

import pynvml

from exporter.sim import parse_scenario
from exporter.sim.physics import NodeModel
from exporter.sim.scenarios import TOUR_SECONDS
from tests.conftest import ManualClock

TDP_W = 700.0


@dataclass
class Tick:
    dt: float
    util: int  # the driver's utilization sample for this tick
    sm: float  # SM active over the tick, from the GPM integrals
    power_w: float
    nvlink_bytes_s: float
    pcie_bytes_s: float  # rx + tx
    pcie_rx_bytes_s: float
    mem_used: int


@dataclass
class Trace:
    model: NodeModel
    ticks: list[list[Tick]] = field(default_factory=list)  # [tick][gpu]
    disk_write_bytes_s: list[float] = field(default_factory=list)
    core_busy: list[list[float]] = field(default_factory=list)  # [tick][core], share of the tick
    core_iowait: list[list[float]] = field(default_factory=list)

    def gpu(self, g: int) -> list[Tick]:
        return [row[g] for row in self.ticks]


def trace(scenario: str, seconds: float, skip: float = 0.0, n_gpus: int = 8) -> Trace:
    """Run ``skip`` seconds untraced, then ``seconds`` traced one driver tick at a time."""
    clock = ManualClock()
    model = NodeModel(parse_scenario(scenario), n_gpus=n_gpus, clock=clock)
    if skip:
        clock.advance(skip)
        model.advance()
    out = Trace(model)
    for _ in range(round(seconds / model.dt)):
        before = [
            (list(g.gpm_integrals), sum(g.link_tx) + sum(g.link_rx), g.pcie_rx, g.pcie_tx) for g in model.gpus
        ]
        host_before = ([list(j) for j in model.host.jiffies], model.host.disk_write_bytes)
        clock.advance(model.dt)
        model.advance()
        row = []
        for g, (integ, nv, rx, tx) in zip(model.gpus, before, strict=True):
            dt = g.gpm_integrals[0] - integ[0]
            row.append(
                Tick(
                    dt=dt,
                    util=g.samples[-1].util,
                    sm=(g.gpm_integrals[1] - integ[1]) / dt,
                    power_w=g.samples[-1].power_mw / 1000,
                    nvlink_bytes_s=(sum(g.link_tx) + sum(g.link_rx) - nv) / dt,
                    pcie_bytes_s=(g.pcie_rx - rx + g.pcie_tx - tx) / dt,
                    pcie_rx_bytes_s=(g.pcie_rx - rx) / dt,
                    mem_used=g.mem_used_bytes,
                )
            )
        out.ticks.append(row)
        jiffies, written = host_before
        out.disk_write_bytes_s.append((model.host.disk_write_bytes - written) / model.dt)
        busy, iowait = [], []
        for old, new in zip(jiffies, model.host.jiffies, strict=True):
            d = [b - a for a, b in zip(old, new, strict=True)]
            total = sum(d)
            busy.append((d[0] + d[1] + d[2] + d[5] + d[6]) / total)
            iowait.append(d[4] / total)
        out.core_busy.append(busy)
        out.core_iowait.append(iowait)
    return out


def runs(flags: list[bool]) -> list[tuple[int, int]]:
    """(start, length) of every run of True."""
    out, start = [], None
    for i, f in enumerate([*flags, False]):
        if f and start is None:
            start = i
        elif not f and start is not None:
            out.append((start, i - start))
            start = None
    return out


# ---- comm_bound ---------------------------------------------------------------------------------


def test_comm_bound_steps_spend_about_half_their_time_in_a_resident_collective():
    t = trace("comm_bound:onset=20", seconds=60, skip=20)
    for g in range(8):
        ticks = t.gpu(g)
        busy = sum(1 for x in ticks if x.util >= 95) / len(ticks)
        assert busy > 0.8  # util reads busy nearly all the time: the NCCL kernel is resident
        waiting = sum(x.dt for x in ticks if x.sm < 0.25) / sum(x.dt for x in ticks)
        assert 0.35 < waiting < 0.65  # ...but the SMs idle in the collective for about half the wall time
        assert max(x.sm for x in ticks) > 0.7  # and compute properly in between
        comm = [x for x in ticks if x.sm < 0.25]
        compute = [x for x in ticks if x.sm > 0.6]
        # power falls while the collective crawls, and comes back when the step computes
        assert min(x.power_w for x in comm) < 0.35 * TDP_W < 0.7 * TDP_W < max(x.power_w for x in compute)
        assert statistics.mean(x.power_w for x in ticks) < 0.6 * TDP_W


def test_comm_bound_collectives_progress_through_the_nic_not_nvlink():
    t = trace("comm_bound", seconds=60, skip=5)
    for g in range(8):
        ticks = t.gpu(g)
        assert all(x.nvlink_bytes_s > 0 and x.pcie_bytes_s > 0 for x in ticks)  # traffic never stops: no hang
        comm = [x for x in ticks if x.sm < 0.25]
        compute = [x for x in ticks if x.sm > 0.6]
        # the all-reduce goes over PCIe to the NIC at several GB/s, NVLink carries only a trickle then
        pcie_comm = statistics.mean(x.pcie_bytes_s for x in comm)
        assert pcie_comm > 5e9 and pcie_comm > 3 * statistics.mean(x.pcie_bytes_s for x in compute)
        assert statistics.mean(x.nvlink_bytes_s for x in comm) < 0.1 * statistics.mean(
            x.nvlink_bytes_s for x in compute
        )


def test_comm_bound_ranks_move_in_lockstep():
    t = trace("comm_bound", seconds=30, skip=5)
    for row in t.ticks:
        in_collective = {x.sm < 0.25 for x in row}
        assert len(in_collective) == 1  # every rank is in the collective, or none is


def test_comm_bound_waits_for_its_onset():
    before = trace("comm_bound:onset=60", seconds=30)
    assert sum(1 for x in before.gpu(0) if x.sm < 0.25) / len(before.ticks) < 0.1


# ---- checkpoint_stall -----------------------------------------------------------------------------


def test_checkpoint_stall_idles_every_gpu_together_for_tens_of_seconds():
    t = trace("checkpoint_stall:onset=10", seconds=200)
    all_low = [all(x.util < 10 for x in row) for row in t.ticks]
    any_low = [any(x.util < 10 for x in row) for row in t.ticks]
    assert all_low == any_low  # the ranks stall together
    stalls = [(start, n) for start, n in runs(all_low) if n * t.model.dt >= 5]
    assert len(stalls) >= 2
    for start, n in stalls:
        assert 25 <= n * t.model.dt <= 40
        assert start * t.model.dt > 40  # a save comes after a stretch of compute, not at onset
    for (a, n), (b, _) in itertools.pairwise(stalls):
        between = t.ticks[a + n : b]
        assert len(between) * t.model.dt > 40
        for g in range(8):
            assert statistics.mean(row[g].util for row in between) > 90  # normal training between saves


def test_checkpoint_stall_keeps_memory_and_drops_power_and_traffic():
    t = trace("checkpoint_stall", seconds=120)
    all_low = [all(x.util < 10 for x in row) for row in t.ticks]
    (start, n), *_ = [(s, n) for s, n in runs(all_low) if n * t.model.dt >= 25]
    settled = t.ticks[start + 10 : start + n]  # from 2 s into the save
    computing = t.ticks[: start - 5]
    for g in range(8):
        stall = [row[g] for row in settled]
        assert all(x.mem_used > 10 << 30 for x in stall)  # the job still holds its memory
        assert all(x.nvlink_bytes_s == 0 for x in stall)
        assert all(x.sm < 0.05 for x in stall)
        assert statistics.mean(x.power_w for x in stall) < 0.25 * TDP_W  # near idle
        assert statistics.mean(row[g].power_w for row in computing) > 0.6 * TDP_W
    # the host writes the checkpoint: disk writes and iowait rise, modestly
    saving_writes = statistics.mean(t.disk_write_bytes_s[start + 10 : start + n])
    assert saving_writes > 10 * statistics.mean(t.disk_write_bytes_s[: start - 5])
    saving_iowait = statistics.mean(statistics.mean(c) for c in t.core_iowait[start + 10 : start + n])
    assert statistics.mean(statistics.mean(c) for c in t.core_iowait[: start - 5]) < saving_iowait < 0.3


# ---- offload_starvation ---------------------------------------------------------------------------


def test_offload_starvation_keeps_every_gpu_at_low_duty_with_pcie_busy():
    t = trace("offload_starvation", seconds=60)
    for g in range(8):
        ticks = t.gpu(g)
        assert 10 < statistics.mean(x.util for x in ticks) < 35
        assert statistics.mean(x.power_w for x in ticks) < 0.35 * TDP_W
        assert statistics.mean(x.pcie_rx_bytes_s for x in ticks) > 10e9  # parameters stream in from the host
        nvlink = statistics.mean(x.nvlink_bytes_s for x in ticks)
        assert statistics.mean(x.pcie_bytes_s for x in ticks) > 3 * nvlink
        assert sum(1 for x in ticks if x.util <= 12) / len(ticks) > 0.5  # mostly waiting
        bursts = sum(x.dt for x in ticks if x.util >= 60) / sum(x.dt for x in ticks)
        assert 0.1 < bursts < 0.4  # ...with short bursts of compute
        assert max(x.sm for x in ticks) > 0.4


def test_offload_starvation_has_no_clean_rhythm():
    t = trace("offload_starvation", seconds=60)
    utils = [x.util for x in t.gpu(2)]
    bursts = runs([u >= 60 for u in utils])
    assert len(bursts) > 20
    assert max(n for _, n in bursts) * t.model.dt <= 0.6  # bursts are short, not seconds of compute
    gaps = [b - (a + n) for (a, n), (b, _) in itertools.pairwise(bursts)]
    assert statistics.pstdev(gaps) > 0.3 * statistics.mean(gaps)  # ...and irregularly spaced
    assert len(set(utils)) > 10  # partial ticks, not just 0 and 100


def test_offload_starvation_keeps_the_host_busy_but_not_pinned():
    t = trace("offload_starvation", seconds=30)
    busy = [statistics.mean(core) for core in zip(*t.core_busy, strict=True)]
    assert max(busy) < 0.85  # no core pinned: not a CPU-bound data loader
    assert statistics.mean(busy) > 0.2  # the optimizer steps on the host
    assert statistics.mean(statistics.mean(c) for c in t.core_iowait) < 0.05
    assert t.model.host.psi_avg10["io"] < 0.1


def test_offload_bursts_reach_the_nvml_sample_buffer(make_node, clock):
    make_node("offload_starvation")
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock.advance(10.0)
    _, samples = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    values = [s.sampleValue.uiVal for s in samples]
    assert len(values) == 50
    assert min(values) <= 12 and max(values) >= 60


# ---- the tour -------------------------------------------------------------------------------------


def test_tour_shows_the_lost_time_scenarios_between_healthy_stretches():
    clock = ManualClock()
    model = NodeModel(parse_scenario("tour"), clock=clock)
    names = [model.scenario_at(model.start + s).name for s in range(0, round(TOUR_SECONDS), 5)]
    for name in ("comm_bound", "checkpoint_stall", "offload_starvation"):
        stretch = [n == name for n in names]
        assert max(n for _, n in runs(stretch)) * 5 >= 180
    changes = [(a, b) for a, b in itertools.pairwise(names) if a != b]
    assert all("healthy" in pair for pair in changes)  # every fault begins and ends in a healthy stretch
