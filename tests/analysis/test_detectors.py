"""Detectors on constructed windows: each verdict, its cause, and the near-misses that must stay quiet."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from exporter.analysis import detectors as d
from exporter.analysis.engine import Analyzer
from exporter.analysis.features import GpuFeatures, HostFeatures, count_gaps
from exporter.analysis.kinds import KINDS
from exporter.policy.thresholds import EVIDENCE_WINDOW, HANG_FIRE, RANK_STOP, STARVATION_RESOLVE
from tests.analysis.synth import GIB, HOST_OK, IDLE, NCCL_SPIN, WORKING, alternating, run, steady, switch

STARVED = alternating(busy_s=1.0, idle_s=0.9)
STARVING_FOR = KINDS["data_starvation"].policy.for_.value  # the alert's `for`: a verdict on this long pages


# ---- data starvation ---------------------------------------------------------------------------


def test_starving_rank_is_blamed_within_a_minute_and_its_waiting_peers_are_not():
    waiting = alternating(1.0, 0.9, busy=WORKING, idle=replace(NCCL_SPIN, power_w=200.0, nvlink_tx_bps=5e9))
    r = run({"0": switch(60, steady(WORKING), waiting), "3": switch(60, steady(WORKING), STARVED)}, 150)
    assert r.kinds() == {"data_starvation"}
    assert [e.gpu for e in r.fired("data_starvation")] == ["3"]
    assert 60 < r.first("data_starvation") <= 120
    assert r.fired("data_starvation")[0].related == ("0",)  # the peer waits for it in NCCL


def test_a_third_lost_in_step_sized_waits_is_a_verdict_within_forty_seconds():
    """Recurring waits across the evidence window need not wait for two minutes of share to fill."""
    third = alternating(busy_s=2.0, idle_s=1.0)
    r = run({"0": switch(300, steady(WORKING), third)}, 420)
    assert r.kinds() == {"data_starvation"}
    assert 300 < r.first("data_starvation") <= 300 + 40


def test_a_phase_of_recurring_waits_resolves_a_minute_after_its_rhythm_ends():
    """An evaluation loading its next subsets for a while at two-thirds speed: a verdict that entered
    on its rhythm ends with it, not held for minutes by the two-minute share it left behind."""
    phase = switch(400, switch(300, steady(WORKING), alternating(busy_s=2.0, idle_s=1.0)), steady(WORKING))
    r = run({"0": phase}, 700)
    changes = [(e.state, e.t) for e in r.events if e.kind == "data_starvation"]
    assert [state for state, _ in changes] == ["firing", "resolved"]
    assert changes[1][1] <= 400 + EVIDENCE_WINDOW.value + STARVATION_RESOLVE.value


@pytest.mark.parametrize(
    ("host", "cause"),
    [
        (replace(HOST_OK, iowait=0.35, psi_io=0.4, disk_read_bps=100e6), "io"),
        (replace(HOST_OK, core_busy_max=1.0, psi_cpu=0.4), "cpu"),
        (replace(HOST_OK, shm_used_bytes=15.5 * GIB, shm_size_bytes=16 * GIB), "shm"),
        (HOST_OK, "unknown"),
    ],
)
def test_starvation_cause_comes_from_the_node(host, cause):
    r = run({"0": STARVED}, 120, host=lambda t: host)
    assert r.fired("data_starvation")[0].cause == cause


def test_slow_host_to_device_copies_are_host_transfer():
    copying = replace(IDLE, mem_util=0.3, pcie_rx_bps=8e9)  # no kernel, but the copy engines are busy
    r = run({"0": alternating(1.0, 0.9, idle=copying)}, 120)
    assert r.fired("data_starvation")[0].cause == "host_transfer"


def test_coarse_sampling_swing_is_starvation_too():
    """At 1 s samples a 1.2 s step with 0.5 s waits reads as utilization swinging between 50 and 80 %."""

    def swing(t: float):
        odd = int(t) % 2
        return replace(WORKING, util=0.5 if odd else 0.8, power_w=330.0 if odd else 470.0)

    r = run({"0": swing}, 240, dt=1.0)
    assert r.first("data_starvation") is not None


def test_healthy_job_at_85_to_90_percent_with_steady_power_is_not_a_verdict():
    wobble = lambda t: replace(WORKING, util=0.85 + 0.05 * ((t * 5) % 2), power_w=520.0)  # noqa: E731
    r = run({"0": wobble}, 300)
    assert r.kinds() == set()
    assert r.states["0"]["data_starvation"].score < 0.3


def test_logging_dip_every_few_minutes_is_not_a_verdict():
    dip = lambda t: IDLE if (t % 180) < 2 else WORKING  # noqa: E731
    r = run({"0": dip}, 600)
    assert r.kinds() == set()


def test_a_quick_checkpoint_is_not_starvation_idle_or_hang():
    """Rank 0 writes a checkpoint for 40 s (no kernel, memory held) while the others wait at a barrier."""
    pause = lambda t: WORKING if not 100 <= t < 140 else IDLE  # noqa: E731
    waiting = lambda t: WORKING if not 100 <= t < 140 else NCCL_SPIN  # noqa: E731
    r = run({"0": pause, "1": waiting, "2": waiting}, 500)
    assert r.kinds() == set()


def test_one_rank_pausing_is_forgiven_until_it_holds_the_coverage_share_of_five_minutes():
    """A rank-0 save behind a barrier and a rank that stopped look alike while they last: the length
    decides. Under 30 % of five minutes (90 s) no verdict; a three-minute stop fires 90-120 s in."""

    def job(length: float) -> dict:
        pause = lambda t: WORKING if not 400 <= t < 400 + length else IDLE  # noqa: E731
        wait = lambda t: WORKING if not 400 <= t < 400 + length else NCCL_SPIN  # noqa: E731
        return {"0": pause, "1": wait, "2": wait, "3": wait}

    assert run(job(80), 900).kinds() == set()
    stopped = run(job(180), 900)
    assert [e.gpu for e in stopped.fired("data_starvation")] == ["0"]  # the rank, never its waiting peers
    assert 400 + 90 <= stopped.first("data_starvation") <= 400 + 120


def _one_rank_out(rank: str, length: float, at: float = 400.0) -> dict:
    """Four ranks of one job; ``rank`` leaves its kernels for ``length`` seconds from ``at`` while the
    others wait for it in their collective."""
    pause = lambda t: WORKING if not at <= t < at + length else IDLE  # noqa: E731
    wait = lambda t: WORKING if not at <= t < at + length else NCCL_SPIN  # noqa: E731
    return {g: pause if g == rank else wait for g in "0123"}


def _on_unbroken(r, kind: str, gpu: str) -> list[tuple[float, float]]:
    """Each episode of ``kind`` on ``gpu``: (fired, resolved or the end of the run)."""
    spans, fired = [], None
    for e in r.events:
        if e.kind == kind and e.gpu == gpu:
            if e.state == "firing":
                fired = e.t
            elif fired is not None:
                spans.append((fired, e.t))
                fired = None
    if fired is not None:
        spans.append((fired, math.inf))
    return spans


def test_a_rank_other_than_the_first_that_stops_while_its_peers_wait_pages_within_ninety_seconds():
    """Not the first rank (where saves run): its stop fires when it has lasted starvation.rank_stop_seconds,
    cause stopped, naming the ranks that wait; the alert's minute later it pages, inside 90 s."""
    r = run(_one_rank_out("2", 180), 900)
    (fired,) = r.fired("data_starvation")
    assert fired.gpu == "2" and fired.cause == "stopped" and fired.related == ("0", "1", "3")
    assert fired.since is not None and abs(fired.since - 400) <= 2  # its loss began when it stopped
    assert fired.t - 400 <= RANK_STOP.value + 2
    assert fired.t + STARVING_FOR - 400 <= 90
    (span,) = _on_unbroken(r, "data_starvation", "2")
    assert span[1] - span[0] >= STARVING_FOR  # on, unbroken, for the alert's minute: it pages
    assert r.kinds() == {"data_starvation"}  # the peers get nothing of their own


def test_a_short_stop_of_a_rank_other_than_the_first_never_stays_on_for_the_alerts_minute():
    """A 40 s stop fires, and its verdict ends with the stop: nothing else holds it, so it never pages."""
    r = run(_one_rank_out("3", 40), 900)
    spans = _on_unbroken(r, "data_starvation", "3")
    assert spans and all(end - start < STARVING_FOR for start, end in spans), spans
    assert {e.gpu for e in r.fired("data_starvation")} == {"3"}


def test_the_first_ranks_stop_waits_for_the_coverage_rule_and_says_why():
    """The first rank is where a synchronous save runs: its stop is judged by its length, and while it is
    not paged the analysis says what it saw."""
    analyzer = Analyzer()
    run(_one_rank_out("0", 60), 440, analyzer=analyzer)
    why = analyzer.unsure[("0", "data_starvation")]
    assert "first rank" in why and "GPU 1, 2, 3" in why


def test_one_pause_of_a_single_gpu_job_beside_others_is_judged_by_its_length():
    """A single-GPU job is its own first rank: a one-minute pause (its save) among independent jobs is no
    half-minute of step-level waits and pages nothing; a stop that holds the coverage share still fires."""
    busy = lambda t: WORKING  # noqa: E731

    def node(length: float) -> dict:
        pause = lambda t: WORKING if not 400 <= t < 400 + length else IDLE  # noqa: E731
        return {"0": busy, "1": pause, "2": busy, "3": busy}

    assert run(node(60), 900).kinds() == set()
    assert [e.gpu for e in run(node(120), 900).fired("data_starvation")] == ["1"]


def test_frequent_checkpoints_are_starvation_with_cause_checkpoint_on_every_rank_while_they_last():
    """Every rank stalls 30 s of every 50 s from t=200: most of the wall time goes to saving."""
    saving = lambda t: IDLE if t >= 200 and (t - 200) % 50 < 30 else WORKING  # noqa: E731
    r = run({str(g): saving for g in range(4)}, 700)
    fired = r.fired("data_starvation")
    assert sorted(e.gpu for e in fired) == ["0", "1", "2", "3"]  # once each: it never drops out
    assert all(e.cause == "checkpoint" for e in fired)
    assert 200 < r.first("data_starvation") <= 200 + 90
    assert all(r.states[g]["data_starvation"].firing for g in "0123")


def test_no_job_no_starvation():
    empty = replace(IDLE, mem_used_bytes=3 * 2**20)
    r = run({"0": alternating(1.0, 0.9, idle=empty, busy=replace(WORKING, mem_used_bytes=3 * 2**20))}, 60)
    assert r.fired("data_starvation") == []


def test_gap_counting_merges_flicker_inside_one_dip():
    assert count_gaps([1, 0.02, 0.12, 0.03, 0.3, 0.05, 1, 1]) == 1
    assert count_gaps([1, 0.0, 1, 0.0, 1, 0.0]) == 3
    assert count_gaps([0.3, 0.4, 0.2]) == 0  # low but never idle: no gap


# ---- communication hang ------------------------------------------------------------------------


def test_hang_of_every_rank_is_one_job_event_inside_three_minutes():
    hung = switch(60, steady(WORKING), steady(NCCL_SPIN))
    r = run({str(g): hung for g in range(4)}, 300)
    fired = r.fired("comm_hang")
    assert sorted(e.gpu for e in fired) == ["0", "1", "2", "3"]
    assert all(e.cause == "all_ranks" for e in fired)
    assert 60 + HANG_FIRE.value <= r.first("comm_hang") <= 60 + 120
    assert set(fired[0].related) == {"0", "1", "2", "3"} - {fired[0].gpu}


def test_ranks_waiting_for_an_absent_peer_hang_only_after_the_long_wait():
    spin = switch(60, steady(WORKING), steady(NCCL_SPIN))
    gone = switch(60, steady(WORKING), steady(IDLE))
    r = run({"0": gone, "1": spin, "2": spin}, 420)
    fired = r.fired("comm_hang")
    assert {e.gpu for e in fired} == {"1", "2"} and all(e.cause == "peer_not_in_collective" for e in fired)
    assert r.first("comm_hang") >= 60 + 300


def test_light_compute_with_memory_traffic_is_not_a_hang():
    light = replace(
        WORKING, power_w=180.0, sm_active=None, mem_util=0.25, nvlink_tx_bps=None, nvlink_rx_bps=None
    )
    r = run({"0": steady(light)}, 300)
    assert r.fired("comm_hang") == []


def test_hang_detector_is_silent_without_power_reference_or_gpm():
    only_util = replace(NCCL_SPIN, power_w=None, sm_active=None, power_limit_w=None, power_default_w=None)
    r = run({"0": steady(only_util)}, 200)
    assert r.fired("comm_hang") == []
    assert "comm_hang" in r.analyzer.missing


def test_hang_detected_from_power_history_when_the_log_has_no_limit():
    bare = dict(power_limit_w=None, power_default_w=None, sm_active=None)
    r = run({"0": switch(60, steady(replace(WORKING, **bare)), steady(replace(NCCL_SPIN, **bare)))}, 260)
    assert r.first("comm_hang") is not None


# ---- thermal -----------------------------------------------------------------------------------


def test_thermal_reasons_fire_fast():
    hot = replace(WORKING, temp_c=88.0, reasons=0x60, sm_clock_hz=1780e6)
    r = run({"0": switch(30, steady(WORKING), steady(hot))}, 90)
    assert r.first("thermal_throttle") <= 30 + 20


def test_rising_past_80_toward_slowdown_fires_before_the_throttle():
    heating = lambda t: replace(WORKING, temp_c=min(70 + 0.3 * max(0, t - 20), 86.0))  # noqa: E731
    r = run({"0": heating}, 90)
    fired_at = r.first("thermal_throttle")
    assert fired_at is not None and fired_at < 20 + (86 - 70) / 0.3 + 10


def test_hot_but_steady_gpu_scores_but_is_not_a_verdict():
    r = run({"0": steady(replace(WORKING, temp_c=82.0))}, 200)
    assert r.fired("thermal_throttle") == []
    assert 0.3 <= r.states["0"]["thermal_throttle"].score < 0.5


def test_clock_cut_near_slowdown_without_reason_bits_is_throttling():
    old_log = replace(WORKING, temp_c=86.0, reasons=None, sm_clock_hz=1700e6)
    r = run({"0": steady(old_log)}, 60)
    assert r.first("thermal_throttle") is not None


def test_hot_idle_gpu_is_not_throttling_anything():
    r = run({"0": steady(replace(IDLE, temp_c=88.0, reasons=0x61))}, 120)
    assert r.fired("thermal_throttle") == []


# ---- power cap ---------------------------------------------------------------------------------


def test_cap_below_default_fires():
    capped = replace(WORKING, power_limit_w=450.0, power_w=441.0, reasons=0x4, sm_clock_hz=1685e6)
    r = run({"0": steady(capped)}, 90)
    event = r.fired("power_throttle")[0]
    assert event.cause == "cap_below_default" and event.score > 0.8


def test_cap_at_the_default_limit_is_routine_and_low():
    at_tdp = replace(WORKING, power_w=690.0, reasons=0x4, sm_clock_hz=1900e6)
    r = run({"0": steady(at_tdp)}, 120)
    assert r.fired("power_throttle") == []
    assert r.states["0"]["power_throttle"].score <= 0.3


# ---- shared memory -----------------------------------------------------------------------------


def test_shm_over_90_percent_fires_at_once_and_resolves_below_85():
    full = replace(HOST_OK, shm_used_bytes=14.8 * GIB, shm_size_bytes=16 * GIB)
    r = run({"0": steady(WORKING)}, 120, host=lambda t: full if 20 <= t < 60 else HOST_OK)
    assert 20 <= r.first("shm_exhaustion") <= 22
    resolved = [e for e in r.events if e.kind == "shm_exhaustion" and e.state == "resolved"]
    assert resolved and 60 + 30 <= resolved[0].t <= 60 + 32


def test_shm_filling_fast_fires_before_the_warning_line():
    filling = lambda t: replace(HOST_OK, shm_used_bytes=(0.7 + 0.004 * t) * 16 * GIB, shm_size_bytes=16 * GIB)  # noqa: E731
    r = run({"0": steady(WORKING)}, 60, host=filling)
    fired_at = r.first("shm_exhaustion")
    assert fired_at is not None and 0.7 + 0.004 * fired_at < 0.9


# ---- idle but allocated ------------------------------------------------------------------------


def test_idle_with_memory_fires_at_five_minutes():
    r = run({"0": steady(IDLE)}, 320, dt=1.0)
    assert r.first("idle_allocated") == pytest.approx(301.0, abs=1.0)


def test_idle_without_memory_is_not_idle_allocated():
    r = run({"0": steady(replace(IDLE, mem_used_bytes=3 * 2**20))}, 400, dt=1.0)
    assert r.kinds() == set()


def test_one_kernel_resets_the_idle_clock():
    blip = lambda t: WORKING if 200 <= t < 201 else IDLE  # noqa: E731
    r = run({"0": blip}, 520, dt=1.0)
    firing = [e.t for e in r.events if e.kind == "idle_allocated" and e.state == "firing"]
    assert firing == [pytest.approx(501.0, abs=1.0)]  # never at 300: the kernel at 200 s restarted the clock


# ---- NVLink ------------------------------------------------------------------------------------


def test_links_down_fire_on_the_broken_gpu_only():
    broken = replace(WORKING, nvlink_active=0.0, fabric_ready=False, p2p_failed=3.0)
    peer = replace(WORKING, p2p_failed=1.0)
    r = run({"0": steady(peer), "1": steady(peer), "2": steady(broken), "3": steady(peer)}, 60)
    assert [e.gpu for e in r.fired("nvlink_degraded")] == ["2"]


def test_climbing_nvlink_errors_fire():
    erring = lambda t: replace(WORKING, nvlink_errors=100.0 * t)  # noqa: E731  # 6000 a minute
    r = run({"0": erring}, 90)
    assert r.fired("nvlink_degraded")[0].cause == "errors"


# ---- hysteresis --------------------------------------------------------------------------------


def test_starvation_resolves_within_three_minutes_after_it_ends_and_does_not_flap():
    """The five-minute share would hold it for minutes; two clean minutes release it, one more resolves."""
    shape = switch(120, STARVED, steady(WORKING))
    r = run({"0": shape}, 400)
    changes = [(e.state, e.t) for e in r.events if e.kind == "data_starvation"]
    assert [state for state, _ in changes] == ["firing", "resolved"]
    assert 120 + 60 <= changes[1][1] <= 120 + 180


# ---- pure functions ----------------------------------------------------------------------------


def test_detectors_say_what_is_missing():
    empty, host = GpuFeatures(), HostFeatures()
    assert d.starvation(empty, host).missing
    assert d.comm_hang(empty).missing
    assert d.thermal(empty).missing
    assert d.shm_exhaustion(None).missing
    assert d.idle_allocated(None, 300).missing
    assert d.nvlink_degraded(empty).missing


def test_ramp_and_clamp():
    assert d.ramp(0.5, 0, 1) == 0.5 and d.ramp(2, 0, 1) == 1 and d.ramp(0.2, 0.5, 0.3) == 1
    assert d.clamp(-1) == 0
