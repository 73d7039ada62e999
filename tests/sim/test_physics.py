"""The simulated node behaves like the failure it claims to show."""

from __future__ import annotations

import statistics

import pytest

from exporter.sim import ScenarioError, parse_scenario
from exporter.sim.physics import GPU_IDLE, HW_THERMAL, SW_THERMAL, NodeModel
from tests.conftest import ManualClock


def run(scenario: str, seconds: float = 60.0, n_gpus: int = 8) -> NodeModel:
    clock = ManualClock()
    model = NodeModel(parse_scenario(scenario), n_gpus=n_gpus, clock=clock)
    clock.advance(seconds)
    model.advance()
    return model


def utils(model: NodeModel, gpu: int) -> list[int]:
    return [s.util for s in model.gpus[gpu].samples]


def powers(model: NodeModel, gpu: int) -> list[float]:
    return [s.power_mw / 1000 for s in model.gpus[gpu].samples]


def test_healthy_training_is_busy_at_steady_power():
    m = run("healthy")
    for g in range(8):
        assert statistics.mean(utils(m, g)) > 90
        p = powers(m, g)
        assert 480 < statistics.mean(p) < 620 and statistics.pstdev(p) < 60
        assert 55 < m.gpus[g].temp_c < 80


def test_starved_rank_alternates_and_its_peers_wait_in_nccl():
    m = run("data_starvation")
    starved = utils(m, 3)
    idle = sum(1 for u in starved if u < 10) / len(starved)
    assert 0.35 < idle < 0.6
    assert max(powers(m, 3)) > 450 and min(powers(m, 3)) < 120  # power waves with the work
    for peer in (0, 7):
        assert min(utils(m, peer)) > 50 and statistics.mean(utils(m, peer)) > 95  # they spin in NCCL
        sm = m.gpus[peer].gpm_integrals
        assert sm[1] / sm[0] < 0.6  # ...but their SMs are mostly waiting
    assert m.host.psi_avg10["cpu"] > 0.3


def test_all_ranks_starve_on_slow_storage():
    m = run("data_starvation_all")
    for g in range(8):
        assert 0.3 < sum(1 for u in utils(m, g) if u < 10) / len(utils(m, g)) < 0.6
    assert m.host.psi_avg10["io"] > 0.3


def test_hang_pins_util_at_idle_power_without_traffic():
    m = run("comm_hang", seconds=30)
    before = [list(g.link_tx) for g in m.gpus]
    m.clock.advance(10)  # type: ignore[attr-defined]
    m.advance()
    for g in m.gpus:
        assert all(s.util == 100 for s in g.samples)
        assert 120 < g.power_w < 180
        assert g.link_tx == before[g.index]


def test_thermal_throttle_heats_one_gpu_and_lowers_its_clock():
    m = run("thermal_throttle", seconds=240)
    hot = m.gpus[5]
    assert hot.temp_c > 85
    assert hot.reasons & (SW_THERMAL | HW_THERMAL)
    assert hot.sm_clock_mhz < 1980 * 0.97
    assert m.gpus[0].temp_c < 80 and not m.gpus[0].reasons & SW_THERMAL


def test_power_cap_holds_power_at_the_limit():
    m = run("power_cap")
    g = m.gpus[0]
    assert g.power_limit_w == 450
    assert max(powers(m, 0)) <= 450 * 1.0 + 1
    assert g.throttle_ns["sw_power_cap"] > 0.5 * 60e9  # capped whenever it computes


def test_shm_fills_then_the_job_dies():
    m = run("shm_exhaustion:fill=100", seconds=50)
    assert 0.4 < m.host.shm_used / m.host.shm_size < 0.65
    m.clock.advance(60)  # type: ignore[attr-defined]
    m.advance()
    assert m.host.shm_used == m.host.shm_size
    assert all(g.util == 0 and g.processes == 0 for g in m.gpus)


def test_idle_allocated_holds_memory_and_does_nothing():
    m = run("idle_allocated")
    g = m.gpus[4]
    assert g.util == 0 and g.mem_used_bytes > 10 << 30 and g.reasons & GPU_IDLE and g.sm_clock_mhz == 345


def test_nvlink_down_takes_one_gpu_off_the_fabric():
    m = run("nvlink_down")
    assert not any(m.gpus[2].link_up) and m.gpus[2].fabric_state == 1
    assert all(m.gpus[0].link_up) and not m.p2p_ok(0, 2) and m.p2p_ok(0, 1)
    assert m.gpus[2].link_errors[0]["replay"] > 0


def test_onset_delays_the_fault():
    m = run("comm_hang:onset=100", seconds=50)
    assert statistics.mean(powers(m, 0)) > 400


def test_tour_moves_through_scenarios():
    m = run("tour", seconds=1)
    assert m.scenario_at(m.start + 10).name == "healthy"
    assert m.scenario_at(m.start + 100).name == "data_starvation"


def test_long_gaps_are_fast_forwarded():
    m = run("healthy", seconds=3600)
    assert len(m.gpus[0].samples) == 100  # the driver buffer stays bounded
    assert m.gpus[0].energy_mj > 3600 * 400 * 1000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nope", "unknown scenario"),
        ("comm_hang:onset", "not key=value"),
        ("comm_hang:onset=soon", "bad value"),
        ("data_starvation:cause=disk", "cause must be one of"),
        ("healthy:colour=red", "unknown scenario parameter"),
        ("serving:pod=Model_API", "pod must be a lowercase name"),
        ("serving:pod=" + "a" * 41, "pod must be a lowercase name"),
        ("serving:pod=api-", "pod must be a lowercase name"),
    ],
)
def test_bad_scenarios_say_what_is_wrong(text, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(text)


def test_scenario_parameters():
    s = parse_scenario("data_starvation:gpus=1+2,cause=io,onset=30")
    assert s.gpus == (1, 2) and s.cause == "io" and s.onset_s == 30
    assert parse_scenario("serving:pod=model-api").pod_name == "model-api"
