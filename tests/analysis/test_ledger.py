"""The time ledger on constructed telemetry: where each GPU's seconds go, and the verdicts that follow."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.analysis.engine import Analyzer
from exporter.analysis.ledger import STATES, Tick, waiting_part
from tests.analysis.synth import GIB, IDLE, NCCL_SPIN, WORKING, alternating, run, steady, switch

NO_GPM = dict(sm_active=None, tensor_active=None)
NO_TRAFFIC = dict(nvlink_tx_bps=None, nvlink_rx_bps=None, pcie_tx_bps=None, pcie_rx_bps=None)


def shares(r, gpu: str) -> dict[str, float]:
    r.analyzer.flush_ledgers()
    totals = r.analyzer.ledger(gpu).totals
    total = sum(totals.values())
    return {state: seconds / total for state, seconds in totals.items()}


def test_states_sum_to_the_observed_time_within_one_percent():
    starving = switch(100, steady(WORKING), alternating(1.0, 0.9))
    waiting = switch(100, steady(WORKING), alternating(1.0, 0.9, idle=NCCL_SPIN))
    free = steady(replace(IDLE, mem_used_bytes=3 * 2**20))
    hot = steady(replace(WORKING, reasons=0x40, temp_c=88.0, sm_clock_hz=1700e6))
    r = run({"0": starving, "1": waiting, "2": free, "3": hot}, 400, dt=0.3)
    for gpu in "0123":
        ledger = r.analyzer.ledger(gpu)
        assert ledger.observed_s() == pytest.approx(400, rel=0.01)
        r.analyzer.flush_ledgers()
        assert sum(ledger.totals.values()) == pytest.approx(400, rel=0.01)
        assert set(ledger.totals) == set(STATES)


def test_a_hole_in_the_samples_is_not_counted():
    """The GPU answers nothing from 100 s to 200 s (lost, or a gap in a log): those seconds are no state."""
    analyzer = Analyzer()
    r = run({"0": steady(WORKING)}, 100, analyzer=analyzer)
    r = run({"0": steady(WORKING)}, 100, analyzer=analyzer, start=200)
    analyzer.flush_ledgers()
    assert sum(analyzer.ledger("0").totals.values()) == pytest.approx(200, abs=5)
    assert r.kinds() == set()


def test_a_fed_job_computes_all_its_time_even_at_85_to_90_percent():
    wobble = lambda t: replace(WORKING, util=0.85 + 0.05 * ((t * 5) % 2))  # noqa: E731
    r = run({"0": wobble, "1": steady(WORKING)}, 300)
    for gpu in "01":
        assert shares(r, gpu)["computing"] > 0.99
    assert r.kinds() == set()


def test_utilization_is_kernel_time_below_the_busy_line_and_fades_above_it():
    assert waiting_part(0.0) == 1.0
    assert waiting_part(0.2) == pytest.approx(0.8)
    assert waiting_part(0.5) == pytest.approx(0.5)
    assert 0 < waiting_part(0.65) < 0.35
    assert waiting_part(0.85) == 0.0


def test_a_starving_rank_waits_for_input_and_its_peers_wait_in_collectives():
    rank = switch(60, steady(WORKING), alternating(1.0, 0.9))
    peer = switch(60, steady(WORKING), alternating(1.0, 0.9, idle=NCCL_SPIN))
    r = run({"0": peer, "1": peer, "3": rank}, 400)
    idle_share = 0.9 / 1.9
    last_five_minutes = {g: r.analyzer.ledger(g).shares(400)[2] for g in "03"}
    assert last_five_minutes["3"].get("input_wait") == pytest.approx(idle_share, abs=0.05)
    assert last_five_minutes["0"].get("comm_wait") == pytest.approx(idle_share, abs=0.05)
    assert last_five_minutes["0"].get("input_wait") < 0.02
    assert [e.gpu for e in r.fired("data_starvation")] == ["3"]
    assert r.fired("comm_bound") == []  # its peers wait for it: the rank is the problem


@pytest.mark.parametrize(
    "spin",
    [NCCL_SPIN, replace(NCCL_SPIN, mem_util=None, **NO_GPM, **NO_TRAFFIC)],
    ids=["with GPM and traffic", "power only"],
)
def test_a_hang_is_stalled_time_from_its_first_second(spin):
    hung = switch(60, steady(WORKING), steady(spin))
    r = run({str(g): hung for g in range(4)}, 360)
    s = shares(r, "0")
    assert s["stalled"] == pytest.approx(300 / 360, abs=0.02)
    assert s["comm_wait"] < 0.01
    assert {e.gpu for e in r.fired("comm_hang")} == {"0", "1", "2", "3"}


def test_one_gpu_busy_at_low_power_computes_it_has_no_peer_to_wait_for():
    light = replace(WORKING, power_w=150.0, mem_util=None, **NO_GPM, **NO_TRAFFIC)
    r = run({"0": steady(light)}, 200)
    assert shares(r, "0")["computing"] > 0.99
    assert r.kinds() == set()


def test_startup_is_idle_not_waiting_and_no_verdict_while_the_model_loads():
    """Memory fills for 100 s at 0 % (model load), then the job trains at 90 %."""

    def job(t: float):
        if t < 100:
            return replace(IDLE, mem_used_bytes=(0.5 + 0.6 * t) * GIB)
        return replace(WORKING, util=0.9)

    r = run({str(g): job for g in range(4)}, 400)
    s = shares(r, "0")
    assert s["idle"] + s["free"] == pytest.approx(100 / 400, abs=0.02)
    assert s["input_wait"] < 0.01 and s["checkpoint"] < 0.01
    assert r.kinds() == set()


def test_startup_with_warm_up_kernels_and_a_long_first_batch_is_not_a_verdict():
    """Load the model (memory grows), shard it (8 s of kernels), wait 90 s for the loader's first batches
    with memory flat, then train: every rank together, like a torchrun start."""

    def job(t: float):
        if t < 60:
            return replace(IDLE, mem_used_bytes=(1 + t) * GIB)
        if t < 68:
            return replace(WORKING, mem_used_bytes=61 * GIB)
        if t < 158:
            return replace(IDLE, mem_used_bytes=61 * GIB)
        return replace(WORKING, util=0.9, mem_used_bytes=61 * GIB)

    r = run({str(g): job for g in range(4)}, 600)
    assert r.kinds() == set()
    s = shares(r, "0")
    assert s["checkpoint"] == 0.0 and s["input_wait"] < 0.01


def test_a_gpu_nobody_holds_is_free():
    r = run({"0": steady(replace(IDLE, mem_used_bytes=3 * 2**20))}, 120)
    assert shares(r, "0")["free"] > 0.99
    assert r.kinds() == set()


def test_capped_clocks_are_throttled_time_and_heat_is_told_apart():
    capped = replace(WORKING, reasons=0x4, sm_clock_hz=1683e6, power_w=445.0, power_limit_w=450.0)
    hot = replace(WORKING, reasons=0x40, temp_c=88.0, sm_clock_hz=1750e6)
    r = run({"0": steady(capped), "1": steady(hot)}, 200)
    assert shares(r, "0")["throttled"] > 0.99 and shares(r, "1")["throttled"] > 0.99
    _, _, slow = r.analyzer.ledger("1").shares(200)
    assert slow.thermal == pytest.approx(slow.get("throttled"))
    _, _, slow = r.analyzer.ledger("0").shares(200)
    assert slow.thermal == 0.0
    assert r.fired("power_throttle", "0") and r.fired("thermal_throttle", "1")


def test_host_bound_offload_at_10_hz_pages_and_stays_on_while_it_lasts():
    """FSDP CPU offload: short bursts, mostly 0-12 %, no clean rhythm, PCIe busy. From t=60 s."""

    def offload(t: float):
        k = int(t * 10)
        if (k * 7919) % 10 < 3:  # irregular bursts, about 30 % of the samples
            return replace(WORKING, util=0.7 + 0.03 * (k % 10), sm_active=0.5, power_w=210.0)
        return replace(IDLE, util=0.01 * (k % 12), power_w=170.0, pcie_rx_bps=18e9, reasons=0)

    r = run({str(g): switch(60, steady(WORKING), offload) for g in range(4)}, 600, dt=0.1)
    fired = r.fired("data_starvation")
    assert sorted(e.gpu for e in fired) == ["0", "1", "2", "3"]  # once each: it never drops out
    assert max(e.t for e in fired) <= 60 + 90
    assert all(e.cause == "host_transfer" for e in fired)
    assert all(r.states[g]["data_starvation"].firing for g in "0123")
    assert shares(r, "0")["input_wait"] > 0.5


def test_a_cpu_bound_consumer_gpu_at_1_to_15_percent_pages_within_minutes():
    """One RTX 4090 at 1 s sampling, no GPM, no limit column: utilization 1-15 % for ten minutes."""
    analyzer = Analyzer()
    analyzer.set_identity("0", name="NVIDIA GeForce RTX 4090")

    def cpu_bound(t: float):
        k = int(t)
        return replace(
            WORKING,
            util=0.01 + 0.01 * ((k * 37) % 15),
            power_w=70.0,
            power_limit_w=None,
            power_default_w=None,
            mem_util=0.03,
            **NO_GPM,
            **NO_TRAFFIC,
        )

    r = run({"0": cpu_bound}, 600, dt=1.0, host=lambda t: None, analyzer=analyzer)
    fired = r.fired("data_starvation")
    assert len(fired) == 1 and fired[0].t <= 180
    assert r.states["0"]["data_starvation"].firing


def test_slow_collectives_are_comm_bound_on_every_rank_not_starvation():
    """NCCL over sockets: 0.8 s of compute, 1.2 s in an all-reduce that moves data over PCIe."""
    allreduce = replace(NCCL_SPIN, power_w=300.0, nvlink_tx_bps=4e8, pcie_tx_bps=4e9, pcie_rx_bps=5e9)
    step = alternating(0.8, 1.2, busy=WORKING, idle=allreduce)
    r = run({str(g): switch(60, steady(WORKING), step) for g in range(4)}, 400)
    fired = r.fired("comm_bound")
    assert sorted(e.gpu for e in fired) == ["0", "1", "2", "3"]
    assert max(e.t for e in fired) <= 60 + 90
    assert r.fired("data_starvation") == [] and r.fired("comm_hang") == []
    assert shares(r, "0")["comm_wait"] == pytest.approx(0.6 * 340 / 400, abs=0.05)


def test_a_stopped_second_is_one_with_no_work_and_no_data_moved():
    assert Tick(t=1, span=1, gap=0.97, compute=0.03).stopped
    assert Tick(t=1, span=1, comm_quiet=1.0).stopped
    assert not Tick(t=1, span=1, comm_flow=1.0).stopped
    assert not Tick(t=1, span=1, free=1.0).stopped


def test_collectives_shorter_than_the_collection_show_in_memory_utilization():
    """Live, SM activity is averaged over each one-second collection: with 0.8 s compute and 1.2 s of
    all-reduce it reads ~0.4 throughout. The per-sample memory utilization still tells them apart."""
    allreduce = replace(NCCL_SPIN, power_w=300.0, mem_util=0.04, pcie_tx_bps=4e9, pcie_rx_bps=5e9)
    step = alternating(0.8, 1.2, busy=WORKING, idle=allreduce)
    averaged = lambda t: replace(step(t), sm_active=0.4)  # noqa: E731
    r = run({str(g): switch(60, steady(WORKING), averaged) for g in range(4)}, 400)
    assert sorted(e.gpu for e in r.fired("comm_bound")) == ["0", "1", "2", "3"]
    assert shares(r, "0")["comm_wait"] == pytest.approx(0.6 * 340 / 400, abs=0.05)


# ---- real telemetry: no power limit, no board name, bursts, spin-waits at idle power ------------------

BARE = dict(  # what a plain nvidia-smi log of utilization, memory and power has: nothing else
    mem_util=None,
    power_limit_w=None,
    power_default_w=None,
    temp_c=None,
    sm_clock_hz=None,
    sm_clock_max_hz=None,
    reasons=None,
    nvlink_active=None,
    **NO_GPM,
    **NO_TRAFFIC,
)
CLEAN_IDLE = replace(IDLE, util=0.0, power_w=70.0, mem_used_bytes=0.1 * GIB, **BARE)


def _rank_on_the_host(t: float, rank: int):
    """Idle for a minute, then rank 0 works 1 s of every 17 (host work between steps) while its peers spin
    in NCCL at 100 % utilization and 150 W: an H100 node logged without a power limit or board name."""
    if t < 60:
        return CLEAN_IDLE
    held = dict(mem_used_bytes=40 * GIB, **BARE)
    if (t - 60) % 17 < 1:
        return replace(WORKING, util=1.0, power_w=420.0, **held)
    if rank == 0:
        return replace(IDLE, util=0.03, power_w=142.0, **held)
    return replace(NCCL_SPIN, util=1.0, power_w=150.0, **held)


def test_peers_spinning_at_idle_power_wait_for_a_rank_on_the_host_without_a_power_limit():
    """The idle floor the GPUs show before the job (70 W) bounds their ceiling from below (six times it):
    150 W at 100 % utilization is a spin-wait, not compute. Every rank loses its time to the pauses, rank 0
    is named as the one holding the job back and carries the starvation verdict; its peers' time is a wait
    for it in their collective, told as such, not verdicts of their own."""
    r = run({str(g): (lambda t, g=g: _rank_on_the_host(t, g)) for g in range(4)}, 600, dt=0.5)
    envelope = r.analyzer.envelope("1")
    assert envelope.floor_w == pytest.approx(70.0) and envelope.ceiling_w >= 6 * 70.0 - 1
    for gpu in "0123":
        s = shares(r, gpu)
        assert s["computing"] < 0.15, (gpu, s)
        assert s["checkpoint"] + s["input_wait"] + s["comm_wait"] > 0.6, (gpu, s)
        if gpu != "0":
            assert s["comm_wait"] > 0.6, (gpu, s)
    first = r.first("data_starvation", "0")
    assert first is not None and first < 60 + 180, first
    firing = [e for e in r.events if e.kind == "data_starvation" and e.state == "firing"]
    assert {e.gpu for e in firing} == {"0"} and set(firing[0].related) == {"1", "2", "3"}
    assert r.analyzer.ledger("0").held_back_s > 300
    assert all(r.analyzer.ledger(g).held_back_s < 30 for g in "123")


def test_the_board_table_sets_the_envelope_when_a_log_has_only_a_name():
    """An RTX A5000 log with power but no limit: the table's 230 W is the ceiling until a limit shows; the
    idle draw the GPU shows in its own samples (57 W with a context) replaces the table's."""
    analyzer = Analyzer()
    analyzer.set_identity("0", name="NVIDIA RTX A5000")
    assert (analyzer.envelope("0").ceiling_w, analyzer.envelope("0").ceiling_from) == (230.0, "board table")
    assert analyzer.envelope("0").floor_from == "board table"
    held_idle = replace(IDLE, power_w=57.0, mem_used_bytes=8 * GIB, **BARE)
    spin = replace(held_idle, util=0.78, power_w=84.0)  # DataParallel replicas waiting, 78 % resident
    step = replace(held_idle, util=1.0, power_w=200.0)  # ...then a second of compute every 5 s
    training = alternating(1, 4, busy=step, idle=spin)
    r = run({g: switch(60, steady(held_idle), training) for g in "01"}, 300, analyzer=analyzer)
    assert analyzer.envelope("0").floor_w == pytest.approx(57.0)
    assert analyzer.envelope("0").floor_from == "idle samples"
    s = shares(r, "0")
    assert s["comm_wait"] > 0.5 and s["computing"] < 0.3, s


def test_bursty_kernels_at_a_few_percent_are_waiting_for_input_not_an_endless_start_up():
    """A single GPU holding a model runs kernels in short bursts (one sample at 40 % every 4 s, 2-8 % in
    between) for 20 minutes: start-up ends by wall time, the gaps are input wait, and the verdict pages
    within a few minutes and holds."""

    def bursty(t: float):
        util = 0.4 if t % 4 < 0.5 else 0.02 + 0.06 * ((t * 7) % 1)
        return replace(IDLE, util=util, power_w=75.0, mem_used_bytes=3 * GIB, **BARE)

    r = run({"0": bursty}, 1200, dt=0.5)
    s = shares(r, "0")
    assert s["input_wait"] > 0.8 and s["idle"] < 0.1, s
    fired = r.fired("data_starvation", "0")
    assert len(fired) == 1 and fired[0].t < 150
    assert not [e for e in r.events if e.kind == "data_starvation" and e.state == "resolved"]


def test_a_log_that_alternates_from_its_first_row_is_waiting_not_start_up():
    r = run({"0": alternating(2, 2, busy=replace(WORKING, **BARE), idle=replace(IDLE, **BARE))}, 120, dt=1.0)
    s = shares(r, "0")
    assert s["idle"] < 0.06 and s["input_wait"] > 0.4, s
    assert r.first("data_starvation", "0") is not None


def test_one_burst_after_loading_then_nothing_is_idle_not_starvation():
    """A model loaded on every GPU, one generation as a smoke test, then sleep: idle, never starving."""

    def job(t: float):
        if t < 30:
            return replace(IDLE, mem_used_bytes=(0.5 + 0.5 * t) * GIB, power_w=120.0, **BARE)
        if t < 32:
            return replace(WORKING, mem_used_bytes=16 * GIB, **BARE)
        return replace(IDLE, mem_used_bytes=16 * GIB, power_w=120.0, **BARE)

    r = run({str(g): job for g in range(4)}, 500)
    assert "data_starvation" not in r.kinds() and "comm_hang" not in r.kinds()
    assert r.first("idle_allocated") is not None
    assert shares(r, "0")["checkpoint"] + shares(r, "0")["input_wait"] < 0.02


def test_a_starvation_verdict_clears_within_90_s_of_the_recovery():
    starving_then_fed = switch(400, alternating(1, 1), steady(WORKING))
    r = run({"0": starving_then_fed}, 700)
    resolved = [e.t for e in r.events if e.kind == "data_starvation" and e.state == "resolved"]
    assert r.first("data_starvation") is not None and len(resolved) == 1
    assert 400 < resolved[0] <= 400 + 90
