"""A starvation page stands on evidence that tells a loop waiting for its input from a server between
requests: the job's word, its ranks, memory no KV cache fills, or a loop's rhythm. Where the log shows
none of them, the time stays in the ledger and the analyzer says what would decide it."""

from __future__ import annotations

import random

from exporter.analysis.engine import Analyzer
from exporter.analysis.points import GpuPoint
from exporter.analysis.workload import Workload
from tests.analysis.synth import GIB, Shape, alternating, run, steady

BUSY = GpuPoint(t=0.0, util=0.95)  # a log with utilization alone
IDLE = GpuPoint(t=0.0, util=0.0)


def arrivals(load: float, service_s: float, seed: int = 7) -> Shape:
    """A server's work: a burst of ``service_s`` per request, requests arriving as a Poisson process at
    ``load`` of the GPU's time (exponential gaps: they vary as much as their mean)."""
    rng = random.Random(seed)
    busy: list[tuple[float, float]] = []
    t = 0.0
    while t < 2000:
        t += rng.expovariate(load / service_s)
        busy.append((t, t + service_s))
        t += service_s

    def shape(at: float) -> GpuPoint:
        return BUSY if any(a <= at < b for a, b in busy if a <= at) else IDLE

    return shape


def _starvation(result) -> list:
    return result.fired("data_starvation")


def test_utilization_alone_cannot_page_a_server_between_its_arrivals_and_says_what_would_decide():
    result = run({"0": arrivals(0.25, 0.6)}, 400, dt=0.5, host=None)
    assert not _starvation(result)
    _, _, slow = result.analyzer.ledger("0").shares(400)
    assert slow.get("input_wait") > 0.2  # the time still goes to the ledger
    why = result.analyzer.unsure[("0", "data_starvation")]
    assert "--workload" in why and "cycles vary" in why


def test_a_loop_waiting_for_its_input_pages_on_its_rhythm_from_utilization_alone():
    """Cycles alike (a step and its wait): a loop's, not arrivals'."""
    result = run({"0": alternating(busy_s=1.0, idle_s=1.5, busy=BUSY, idle=IDLE)}, 400, dt=0.5, host=None)
    assert _starvation(result)
    assert ("0", "data_starvation") not in result.analyzer.unsure  # the rhythm decided it since


def test_a_steady_share_of_compute_is_a_loop_whose_steps_are_finer_than_the_samples():
    result = run({"0": lambda t: GpuPoint(t=t, util=0.4 + 0.05 * ((t * 7) % 1))}, 400, dt=0.5, host=None)
    assert _starvation(result)


def test_the_jobs_word_pages_what_its_shape_cannot_tell():
    analyzer = Analyzer()
    analyzer.set_workload("node", Workload("training", "flag", "--workload training"))
    result = run({"0": arrivals(0.25, 0.6)}, 400, dt=0.5, host=None, analyzer=analyzer)
    assert _starvation(result)


def test_memory_no_kv_cache_fills_tells_a_loop_from_a_server_whatever_its_rhythm():
    def with_memory(used: float) -> Shape:
        """The arrivals with memory and power: without power a lone GPU's irregular dips could be a job
        between its runs (the analyzer says so rather than page)."""
        server = arrivals(0.25, 0.6)

        def shape(t: float) -> GpuPoint:
            util = server(t).util
            power = 300.0 if util else 70.0
            return GpuPoint(
                t=t,
                util=util,
                mem_used_bytes=used,
                mem_total_bytes=80 * GIB,
                power_w=power,
                power_limit_w=400.0,
            )

        return shape

    loop = run({"0": with_memory(20 * GIB)}, 400, dt=0.5, host=None)
    assert _starvation(loop)
    server = run({"0": with_memory(72 * GIB)}, 400, dt=0.5, host=None)
    assert not _starvation(server)
    why = server.analyzer.unsure.get(("0", "data_starvation"), "")
    assert "KV cache" in why or server.analyzer.workload("0").kind == "serving"


def test_dips_that_keep_drawing_the_busy_power_are_work_not_waits():
    """A regular rhythm (3 s full, 2 s at a third) whose dips draw 80 % of the busy power: a lighter
    phase of an evaluation's steps, not a GPU waiting for its host."""

    def shape(t: float) -> GpuPoint:
        busy = (t % 5) < 3
        return GpuPoint(t=t, util=0.98 if busy else 0.3, power_w=125.0 if busy else 100.0)

    idle_first = lambda t: GpuPoint(t=t, util=0.0, power_w=15.0) if t < 20 else shape(t)  # noqa: E731
    result = run({"0": idle_first}, 400, dt=1.0, host=None)
    assert not _starvation(result)
    assert "lighter phase" in result.analyzer.unsure[("0", "data_starvation")]


def test_ranks_of_one_job_are_a_loops_evidence():
    shapes = {str(g): arrivals(0.25, 0.6, seed=3) for g in range(2)}
    result = run(shapes, 400, dt=0.5, host=None)
    assert _starvation(result)


def _capped(limit_w: float, clock_hz: float, default_w: float | None = None) -> Shape:
    """A busy board drawing its enforced limit, from a log without clock-event reasons."""
    return lambda t: GpuPoint(
        t=t,
        util=0.99,
        power_w=limit_w * 0.99,
        power_limit_w=limit_w,
        power_default_w=default_w,
        sm_clock_hz=clock_hz,
        sm_clock_max_hz=1980e6,
        mem_used_bytes=60 * GIB,
        mem_total_bytes=80 * GIB,
    )


def test_a_board_at_an_operators_cap_with_its_clock_cut_is_a_power_verdict_without_a_default_limit():
    result = run({"0": _capped(350.0, 1150e6)}, 200, dt=1.0, host=None)
    fired = result.fired("power_throttle")
    assert fired and fired[0].cause == "cap_below_default"
    detail = result.analyzer.details[("0", "power_throttle")]
    assert "350 W limit" in detail and "1150 of 1980 MHz" in detail and "not in the log" in detail


def test_at_the_default_limit_with_the_clock_near_its_maximum_the_cap_is_routine():
    for clock in (1750e6, 1400e6):  # heavy kernels at the board's own limit: its TDP management
        result = run({"0": _capped(700.0, clock, default_w=700.0)}, 200, dt=1.0, host=None)
        assert not result.fired("power_throttle")
    capped = run({"0": _capped(350.0, 1150e6, default_w=700.0)}, 200, dt=1.0, host=None)
    assert "the board could draw 700 W" in capped.analyzer.details[("0", "power_throttle")]


def test_a_layer_split_is_a_pipeline_from_its_first_turns_and_never_pages_starvation():
    """Four stages taking 1 s turns from the first second, utilization alone: the class is decided within
    a minute, and no starvation verdict starts before or after."""

    def stage(g: int) -> Shape:
        return lambda t: GpuPoint(t=t, util=0.97 if int(t) % 4 == g else 0.0)

    analyzer = Analyzer()
    decided_at = None
    shapes = {str(g): stage(g) for g in range(4)}
    for second in range(1, 241):
        result = run(shapes, 1, dt=0.2, host=None, analyzer=analyzer, start=second - 1)
        assert not _starvation(result), second
        if decided_at is None and analyzer.workload("0").kind == "pipeline":
            decided_at = second
    assert decided_at is not None and decided_at <= 60


def _slow_loop(period_s: float, seed: int = 5) -> Shape:
    """A loop whose steps take ``period_s``: a 1 s burst of compute each, then a wait for its input. The
    burst starts anywhere in the first 2 s of the step, so a log sampled every 2 s catches about half of
    them (utilization is the share of a sample's window a kernel ran)."""
    rng = random.Random(seed)
    starts = [k * period_s + rng.uniform(0.0, 2.0) for k in range(400)]

    def shape(t: float) -> GpuPoint:
        k = int(t // period_s)
        start = starts[k] if k < len(starts) else -1.0
        return BUSY if start <= t < start + 1.0 else IDLE

    return shape


def test_a_slow_loop_whose_bursts_fall_between_the_samples_pages_on_its_period():
    """Cycles of 20, 40 and 60 s between the bursts seen: whole multiples of one step, a loop's."""
    result = run({"0": _slow_loop(20.0)}, 1500, dt=2.0, host=None)
    assert _starvation(result)
    assert ("0", "data_starvation") not in result.analyzer.unsure


def test_a_server_whose_requests_come_tens_of_seconds_apart_is_not_paged_from_utilization_alone():
    result = run({"0": arrivals(0.05, 1.0, seed=11)}, 1500, dt=2.0, host=None)
    assert not _starvation(result)


def test_whole_multiples_of_one_period_and_arrivals():
    from exporter.analysis.workload import whole_multiples

    assert whole_multiples([20, 40, 20, 21, 60, 19, 20, 40, 22, 20, 18, 41, 39, 20, 61, 21])
    assert not whole_multiples([20, 40, 20, 21, 60, 19, 20, 40, 22, 20, 18])  # too few cycles to tell
    rng = random.Random(3)
    poisson = [[rng.expovariate(1 / 20) for _ in range(40)] for _ in range(50)]
    assert sum(whole_multiples(gaps) for gaps in poisson) == 0


def test_a_gpu_paced_by_its_busier_peer_is_a_later_stage_not_starved():
    """Two GPUs of a model split: GPU 0 computes at 46 %, GPU 1 at 20 %, neither waiting in a collective.
    GPU 1 waits for GPU 0, not for input: no starvation page on it, and the analyzer says so. A rank
    under peers pinned in their collective is the starved one, as before."""

    def share(level: float) -> Shape:
        return lambda t: GpuPoint(t=t, util=level + 0.03 * ((t * 7) % 1))

    split = run({"0": share(0.46), "1": share(0.2)}, 400, dt=0.5, host=None)
    assert "1" not in {e.gpu for e in _starvation(split)}
    assert "waits for GPU 0" in split.analyzer.unsure[("1", "data_starvation")]
    ranks = run({"0": steady(GpuPoint(t=0.0, util=0.99)), "1": share(0.2)}, 400, dt=0.5, host=None)
    assert "1" in {e.gpu for e in _starvation(ranks)}
