"""The workload class from the telemetry's shape: a server's reserved memory, a pipeline's turns."""

from __future__ import annotations

import bisect
import random
from dataclasses import replace

from exporter.analysis.workload import ServingShape, Turns, Workload, decide
from tests.analysis.synth import GIB, IDLE, NCCL_SPIN, WORKING, alternating, run, steady, switch

RESERVED = 72 * GIB  # 90 % of an 80 GB board, as vLLM reserves it


def _quiet(shape: ServingShape, t0: float, quiet_s: int, busy_s: int = 3, used: float = RESERVED) -> float:
    """Feed ``busy_s`` seconds of work, then ``quiet_s`` without; return the time after them."""
    t = t0
    for k in range(busy_s + quiet_s):
        shape.see(t, used, 80 * GIB, stopped=k >= busy_s, span=1.0)
        t += 1.0
    return t


def test_a_server_is_known_by_quiet_stretches_that_come_like_arrivals_not_by_its_memory_alone():
    shape = ServingShape()
    t = _quiet(shape, 0.0, 0, busy_s=300)  # five minutes of flat-out work on reserved memory
    t = _quiet(shape, t, 15)
    assert shape.workload() is None  # one quiet stretch after minutes of work: a job that stopped
    assert not shape.pending(t)  # ...and nothing holds its verdicts back
    for gap in (22, 13, 40):  # quiet stretches at irregular intervals: arrivals
        t = _quiet(shape, t, gap)
    t = _quiet(shape, t, 0, busy_s=2)
    assert shape.workload() is not None and shape.workload().kind == "serving"
    assert "irregular" in shape.workload().evidence
    shape.see(t, RESERVED + 2 * GIB, 80 * GIB, stopped=False, span=1.0)  # memory moved: a new reservation
    assert shape.workload() is None
    shape.see(t + 1, 40 * GIB, 80 * GIB, stopped=True, span=1.0)
    assert shape.workload() is None and shape.since is None


def test_a_loops_regular_saves_on_flat_memory_are_no_server():
    shape = ServingShape()
    t = 0.0
    for _ in range(6):  # a save of 20 s every five minutes, memory flat: training's shape
        t = _quiet(shape, t, 20, busy_s=280)
    assert shape.workload() is None


def test_a_reservation_made_at_the_start_and_quiet_at_once_is_a_server():
    shape = ServingShape()
    shape.see(0.0, 4 * GIB, 80 * GIB, stopped=True, span=1.0)  # the weights load...
    _quiet(shape, 1.0, 60, busy_s=5)  # ...the KV cache is reserved and no request comes
    w = shape.workload()
    assert w is not None and w.kind == "serving" and "at its start" in w.evidence


def test_a_gpu_that_stops_while_its_peers_wait_in_a_collective_is_a_rank():
    shape = ServingShape()
    shape.see(0.0, 4 * GIB, 80 * GIB, stopped=True, span=1.0)
    for t in range(1, 60):  # reserved at its start and quiet at once, but its peers wait for it
        shape.see(float(t), RESERVED, 80 * GIB, stopped=True, span=1.0, peers_wait=True)
    w = shape.workload()
    assert w is not None and w.kind == "training" and "rank" in w.evidence
    assert not shape.pending(60.0)


def _second(turns: Turns, t: float, utils: dict[str, float], busy: dict[str, tuple[float, ...]]) -> None:
    turns.see(t, utils, busy, samples=10)


def test_stages_taking_turns_are_a_pipeline_and_ranks_moving_together_are_not():
    stages, ranks = Turns(), Turns()
    for k in range(130):
        t = float(k)
        # four stages, one busy per tenth of a second in turn; four ranks busy in the same tenths
        own = {str(g): tuple(t + i / 10 for i in range(10) if i % 4 == g) for g in range(4)}
        same = {str(g): tuple(t + i / 10 for i in range(10) if i % 4 == 0) for g in range(4)}
        _second(stages, t + 1, {g: 0.25 for g in own}, own)
        _second(ranks, t + 1, {g: 0.25 for g in same}, same)
        if k == 30:
            assert stages.pending() and stages.workload() is None
    assert stages.workload() is not None and stages.workload().kind == "pipeline"
    assert ranks.workload() is None and not ranks.pending()


def test_two_gpus_are_never_called_a_pipeline():
    turns = Turns()
    for k in range(130):
        _second(turns, float(k), {"0": 0.5, "1": 0.5}, {})
    assert turns.workload() is None


def test_the_users_flag_wins_and_the_turns_outrank_the_jobs_own_word():
    flag, log = Workload("serving", "flag", "--workload serving"), Workload("training", "log", "steps")
    pipeline = Workload("pipeline", "shape", "turns")
    assert decide(flag, pipeline, None) is flag
    assert decide(log, pipeline, None) is pipeline
    assert decide(log, None, Workload("serving", "shape", "memory")) is log
    assert decide(None, None, None).kind == ""


def test_a_serving_gpu_idle_between_requests_pages_nothing_and_a_queued_one_starves():
    busy = replace(WORKING, mem_used_bytes=RESERVED, power_w=330.0)
    idle = replace(IDLE, mem_used_bytes=RESERVED)
    bursts = _arrivals(busy, idle)  # a request every 15-30 s, at random
    quiet = run({"0": bursts}, 400, dt=0.5)
    assert not quiet.kinds()
    assert quiet.analyzer.workload("0").kind == "serving"
    # its first cycles are booked as waits until the arrivals show (a class needs its evidence); once
    # known, its quiet time is idle capacity
    _, fast, _ = quiet.analyzer.ledger("0").shares(400)
    assert fast.get("input_wait") < 0.05 < fast.get("idle")

    def queued(t: float):
        return replace(bursts(t), requests_waiting=6.0, requests_running=1.0)

    starved = run({"0": queued}, 400, dt=0.5)
    assert starved.kinds() == {"data_starvation"}


def test_a_lone_gpu_running_memory_bound_work_is_computing_not_in_a_collective():
    """Decode on one GPU: utilization pinned, power at 40 % of the limit, few SMs busy, no peer."""
    decode = replace(
        WORKING, power_w=290.0, sm_active=0.15, mem_util=0.05, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0
    )
    r = run({"0": steady(decode)}, 400)
    assert not r.kinds() - {"comm_hang"} and "comm_bound" not in r.kinds()
    _, _, slow = r.analyzer.ledger("0").shares(400)
    assert slow.get("comm_wait") == 0.0


def test_half_a_node_hung_while_the_other_half_computes_is_a_hang_not_slow_collectives():
    """Replay sees the node as one job: four GPUs sit in a quiet collective, four compute. Nothing moves
    over their links, so it is not comm-bound: the peers are not in the collective."""
    spin = replace(NCCL_SPIN)
    shapes = {str(g): switch(120, steady(WORKING), steady(spin)) for g in range(4)}
    shapes |= {str(g): steady(WORKING) for g in range(4, 8)}
    r = run(shapes, 600)
    assert "comm_bound" not in r.kinds()
    assert {e.gpu for e in r.fired("comm_hang")} == {"0", "1", "2", "3"}


def test_jobs_that_leave_take_their_class_and_turns_with_them():
    """Pods come and go (a new name each time): what the analysis keeps per job stays bounded."""
    from exporter.analysis.engine import Analyzer

    a = Analyzer()
    for k in range(50):
        pod = f"ml/job-{k}"
        for g in range(4):
            a.set_group(str(g), pod)
        a.set_workloads({pod: Workload("serving", "log", "vLLM engine stats")})
        run({str(g): steady(WORKING) for g in range(4)}, 3, analyzer=a, start=3.0 * k)
        assert a.workload("0").kind == "serving"
    assert len(a._hints) == 1 and len(a._turns) == 1


def test_without_the_framebuffers_size_the_class_says_a_server_could_not_be_seen():
    """A log without memory.total cannot show a server's reservation: judged as training, and it says why."""
    unsized = replace(WORKING, mem_total_bytes=None)
    r = run(
        {"0": alternating(busy_s=3.0, idle_s=12.0, busy=unsized, idle=replace(IDLE, mem_total_bytes=None))},
        60,
    )
    w = r.analyzer.workload("0")
    assert w.kind == "" and "memory.total" in w.evidence
    sized = run({"0": steady(WORKING)}, 30).analyzer.workload("0")
    assert sized.kind == "" and sized.evidence == ""


def _arrivals(busy, idle, seed: int = 7):
    """A server's requests: 2-5 s of work each, 11-30 s apart at random (Poisson-like arrivals)."""
    rng = random.Random(seed)
    edges, t = [], 0.0
    while t < 3600:
        work = rng.uniform(2, 5)
        edges.append((t, t + work))
        t += work + rng.uniform(11, 30)
    starts = [a for a, _ in edges]
    return lambda s: busy if (k := bisect.bisect_right(starts, s) - 1) >= 0 and s < edges[k][1] else idle


def _bursts(stretches: list[tuple[float, float]], busy=WORKING, idle=IDLE):
    """Work, then (idle seconds, work seconds) in turn, the last idle to the end."""
    edges, t = [], 30.0
    for rest, work in stretches:
        edges.append((t + rest, t + rest + work))
        t += rest + work
    return lambda s: busy if s < 30 or any(a <= s < b for a, b in edges) else idle


def test_a_notebooks_irregular_cells_are_interactive_and_its_user_leaving_is_idle_not_starvation():
    cells = [(45, 20), (150, 35), (70, 12), (210, 50), (95, 25), (40, 15)]  # thinking, then a cell
    r = run({"0": _bursts(cells)}, 1600, dt=1.0)
    w = r.analyzer.workload("0")
    assert (w.kind, w.source) == ("interactive", "shape")
    assert "data_starvation" not in r.kinds()
    idle = r.fired("idle_allocated")
    assert idle and idle[-1].cause == "notebook"


def test_a_lone_training_loop_whose_saves_dominate_stays_training_and_pages():
    """Alike stretches every cycle: a loop's saves (its cycles alike), not a person."""
    saves = [(60, 40)] * 12
    r = run({"0": _bursts(saves)}, 1200, dt=1.0)
    assert r.analyzer.workload("0").kind == ""
    assert "data_starvation" in r.kinds()


def test_two_gpus_resting_together_are_never_a_notebook_by_their_shape():
    cells = [(45, 20), (150, 35), (70, 12), (210, 50), (95, 25)]
    r = run({"0": _bursts(cells), "1": _bursts(cells)}, 900, dt=1.0)
    assert r.analyzer.workload("0").kind == ""


def test_a_board_whose_name_states_its_memory_shows_a_servers_reservation_without_memory_total():
    from exporter.analysis.engine import Analyzer
    from exporter.policy.thresholds import board_memory_bytes

    assert board_memory_bytes("NVIDIA A100-SXM4-80GB") == 80 * GIB
    assert board_memory_bytes("NVIDIA GeForce RTX 4090") is None  # the name does not say: no guess
    analyzer = Analyzer()
    analyzer.set_identity("0", "NVIDIA H100 80GB HBM3")
    busy = replace(WORKING, mem_used_bytes=RESERVED, mem_total_bytes=None, power_w=330.0)
    idle = replace(IDLE, mem_used_bytes=RESERVED, mem_total_bytes=None)
    r = run({"0": _arrivals(busy, idle)}, 300, dt=0.5, analyzer=analyzer)
    assert r.analyzer.workload("0").kind == "serving"
    assert not r.kinds()


def test_memory_that_moved_past_the_line_is_no_reservation_made_at_a_start():
    """A training job's caching allocator creeps past the reserved line and moves again; a save's quiet
    soon after is no KV cache waiting for its first request."""
    shape = ServingShape()
    shape.see(0.0, 40 * GIB, 80 * GIB, stopped=False, span=1.0)
    t = _quiet(shape, 1.0, 0, busy_s=30, used=70 * GIB)  # rose past the line while computing...
    t = _quiet(shape, t, 0, busy_s=30, used=73 * GIB)  # ...and moved: a new reservation, not at a start
    t = _quiet(shape, t, 20, busy_s=5, used=73 * GIB)  # a save's quiet
    assert shape.workload() is None
