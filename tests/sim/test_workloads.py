"""The simulated workloads beside training (serving, a starved server, evaluation, a pipeline-split model, a
notebook) behave as their physics says, seen from outside: the driver's samples, the counters, the host and
the pod's log."""

from __future__ import annotations

import itertools
import re
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from exporter.sim import SimulatedNode, parse_scenario
from exporter.sim.physics import (
    EVAL_READY_S,
    SERVE_READY_S,
    DriverSample,
    NodeModel,
    Pipeline,
    Serving,
)
from exporter.sim.scenarios import SCENARIOS, TOURS, WORKLOADS, ScenarioError, scenario_names
from tests.conftest import ManualClock

TDP_MW = 700_000


@dataclass
class Run:
    """A model driven second by second: every driver sample, and each GPU's state after each second."""

    model: NodeModel
    samples: dict[int, list[DriverSample]] = field(default_factory=dict)
    memory: dict[int, list[float]] = field(default_factory=dict)  # share of the framebuffer, per second
    gpm_sm: dict[int, list[float]] = field(default_factory=dict)  # SM activity integral, per second
    jiffies: list[list[float]] = field(default_factory=list)  # the host's cores at the start

    def core_busy(self) -> list[float]:
        """Each host core's busy share since the start."""
        now = self.model.host.jiffies
        deltas = [
            [a - b for a, b in zip(c, c0, strict=True)] for c, c0 in zip(now, self.jiffies, strict=True)
        ]
        return [(d[0] + d[2]) / sum(d) for d in deltas]

    def t(self, s: DriverSample) -> float:
        return s.ts_us / 1e6


def drive(scenario: str, seconds: float, n_gpus: int = 2) -> Run:
    clock = ManualClock()
    model = NodeModel(parse_scenario(scenario), n_gpus=n_gpus, clock=clock)
    run = Run(model, *({g: [] for g in range(n_gpus)} for _ in range(3)))
    run.jiffies = [list(core) for core in model.host.jiffies]
    seen = dict.fromkeys(range(n_gpus), 0)
    for _ in range(int(seconds)):
        clock.advance(1.0)
        model.advance()
        for g in model.gpus:
            fresh = [s for s in g.samples if s.ts_us > seen[g.index]]
            seen[g.index] = g.samples[-1].ts_us
            run.samples[g.index] += fresh
            run.memory[g.index].append(g.mem_used_bytes / g.board.mem_total_bytes)
            run.gpm_sm[g.index].append(g.gpm_integrals[1])
    return run


def after(run: Run, g: int, offset_s: float) -> list[DriverSample]:
    """GPU g's samples from ``offset_s`` after the start on."""
    return [s for s in run.samples[g] if run.t(s) - run.model.start >= offset_s]


def serving(run: Run) -> Serving:
    work = run.model.workload(run.model.t)
    assert isinstance(work, Serving)
    return work


# ---- the scenarios are offered like the others ------------------------------------------------------------


def test_the_workloads_are_listed_with_their_parameters_and_stay_out_of_the_tours():
    assert set(WORKLOADS) <= set(SCENARIOS) and set(WORKLOADS) <= set(scenario_names())
    assert all(SCENARIOS[name][0] for name in WORKLOADS)
    toured = {name for tour in TOURS.values() for name, _ in tour}
    assert not toured & WORKLOADS
    assert parse_scenario("serving:rate=0.2").effective_rate() == 0.2
    assert parse_scenario("serving").effective_rate() == 0.125
    assert parse_scenario("serving_starved").effective_rate() == 0.5
    assert parse_scenario("pipeline").affected(8) == (0, 1, 2, 3)
    for bad in ("serving:rate=0", "serving:rate=-1", "serving:rate=nan", "serving:rate=fast"):
        with pytest.raises(ScenarioError, match="rate"):
            parse_scenario(bad)


@pytest.mark.parametrize("scenario", sorted(WORKLOADS))
def test_every_workload_is_the_same_in_every_run(scenario):
    a, b = drive(scenario, 90), drive(scenario, 90)
    for g in range(2):
        assert [(s.util, s.power_mw, s.mem_util) for s in a.samples[g]] == [
            (s.util, s.power_mw, s.mem_util) for s in b.samples[g]
        ]
    assert a.model.host.jiffies == b.model.host.jiffies


# ---- serving ----------------------------------------------------------------------------------------------


def test_a_server_reserves_its_kv_cache_and_computes_only_while_requests_run():
    run = drive("serving", 180)
    work = serving(run)
    for g in range(2):
        assert all(0.88 < m < 0.92 for m in run.memory[g][30:])  # reserved by 30 s, never given back
        assert run.memory[g][1] < 0.05  # not at the start: loaded, profiled, then the KV cache
        samples = after(run, g, SERVE_READY_S)
        idle = [s for s in samples if not work.engines[g].runs_between(run.t(s) - 0.2, run.t(s))]
        busy = [s for s in samples if _runs_through(work, g, run.t(s) - 0.2, run.t(s))]
        assert len(idle) > 0.5 * len(samples) and len(busy) > 0.1 * len(samples)  # idle most of the time
        assert all(s.util == 0 for s in idle)
        assert all(70 <= s.util <= 100 for s in busy)
        assert all(s.mem_util >= 50 for s in busy)  # decode streams the weights and the KV cache
        steady = [s for s in busy if _runs_through(work, g, run.t(s) - 0.8, run.t(s))]
        assert steady and all(0.4 * TDP_MW <= s.power_mw <= 0.7 * TDP_MW for s in steady)
        quiet = [s for s in idle if not work.engines[g].runs_between(run.t(s) - 1.5, run.t(s))]
        assert quiet and all(s.power_mw < 0.13 * TDP_MW for s in quiet)  # near the idle floor
        assert all(sum(g.link_tx) == 0 for g in run.model.gpus)  # no collectives
    assert run.model.host.psi_avg10["cpu"] < 0.1
    assert max(run.core_busy()) < 0.6  # the engines' loops: light


def _runs_through(work: Serving, g: int, a: float, b: float) -> bool:
    """A request decodes (past its prompt) on GPU g's engine for the whole of [a, b]."""
    return any(r.decode <= a and r.end >= b for r in work.engines[g].runs_between(a, b))


def test_a_decoding_server_keeps_its_sms_half_idle():
    run = drive("serving:rate=2", 90)  # busy almost all the time
    for g in range(2):
        sm = run.gpm_sm[g]
        activity = (sm[-1] - sm[40]) / (len(sm) - 1 - 40)
        assert 0.3 <= activity <= 0.5
        assert statistics.mean(s.util for s in after(run, g, 40)) > 80


def test_the_rate_sets_how_busy_a_server_is():
    def idle(scenario: str) -> float:
        samples = after(drive(scenario, 150, n_gpus=1), 0, SERVE_READY_S)
        return sum(s.util == 0 for s in samples) / len(samples)

    assert idle("serving:rate=0.03") > idle("serving") > idle("serving:rate=0.5")


# ---- the starved server -----------------------------------------------------------------------------------


def test_a_starved_server_queues_requests_while_its_gpus_idle_and_its_cores_are_pinned():
    run = drive("serving_starved", 150)
    work = serving(run)
    start = run.model.start
    for g in range(2):
        waiting = [work.queue(g, start + x)[1] for x in (60, 90, 120, 150)]
        assert waiting == sorted(waiting) and waiting[0] > 0 and waiting[-1] > 10  # growing
        assert all(work.queue(g, start + x)[0] <= 8 for x in range(40, 150, 5))  # few running
        samples = after(run, g, 40)
        assert statistics.mean(s.util for s in samples) < 25  # mostly idle
        assert max(s.power_mw for s in samples) < 0.45 * TDP_MW
    host = run.model.host
    assert host.psi_avg10["cpu"] >= 0.5
    cores = run.core_busy()
    assert sum(share > 0.95 for share in cores) >= 4  # the pod's cores pinned, the rest idle
    assert statistics.median(cores) < 0.1


# ---- the server's log -------------------------------------------------------------------------------------

STATS = re.compile(
    r"^INFO (\d\d-\d\d \d\d:\d\d:\d\d) \[loggers\.py:\d+\] Engine (\d{3}): "
    r".*Running: (\d+) reqs.*Waiting: (\d+) reqs"
)
ACCESS = re.compile(r'^INFO: +10\.0\.3\.\d+:\d+ - "POST /v1/completions HTTP/1\.1" 200 OK$')


def follow(scenario: str, seconds: int, n_gpus: int = 2) -> tuple[SimulatedNode, list[str]]:
    """The pod's log after ``seconds`` of the scenario, written second by second as the thread would."""
    clock = ManualClock()
    node = SimulatedNode(scenario, n_gpus=n_gpus, clock=clock)
    root = node.start_logs()
    node.logs._stop.set()  # type: ignore[union-attr] # written here by hand, not by its thread
    for _ in range(seconds):
        clock.advance(1.0)
        node.model.advance()
        node.logs.write(clock())  # type: ignore[union-attr]
    (path,) = Path(root).rglob("0.log")
    texts = [line.split(" ", 3)[3] for line in path.read_text().splitlines()]
    return node, texts


@pytest.mark.parametrize("scenario", ["serving", "serving_starved"])
def test_the_servers_stats_lines_say_what_its_queue_holds(scenario):
    node, texts = follow(scenario, 150)
    try:
        work = node.model.workload(node.model.t)
        assert isinstance(work, Serving)
        year = datetime.fromtimestamp(node.model.start, UTC).year
        stats = [m for m in map(STATS.match, texts) if m]
        assert len(stats) == 2 * len(range(30, 151, 5))  # every 5 s once up, one line per engine
        for m in stats:
            t = datetime.strptime(f"{year}-{m[1]}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
            assert (int(m[3]), int(m[4])) == work.queue(work.ranks[int(m[2])], t)
        if scenario == "serving_starved":
            assert max(int(m[4]) for m in stats) > 5
        finished = sum(
            1
            for g in work.ranks
            for r in work.engines[g].runs_between(node.model.start, node.model.t)
            if r.end <= node.model.t
        )
        assert sum(1 for text in texts if ACCESS.match(text)) == finished > 0
        assert any("Starting vLLM API server on http://0.0.0.0:8000" in text for text in texts)
    finally:
        node.close()


# ---- evaluation -------------------------------------------------------------------------------------------


def test_an_evaluation_computes_near_tdp_and_pauses_between_subsets():
    run = drive("evaluation", 600)
    pause_starts = []
    for g in range(2):
        samples = after(run, g, EVAL_READY_S + 1)
        assert 80 <= statistics.mean(s.util for s in samples) <= 92
        pauses = _idle_stretches(run, samples)
        assert len(pauses) >= 4 and all(4.5 <= end - begin <= 10.5 for begin, end in pauses)
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(pauses)]
        assert all(59 <= gap <= 121 for gap in gaps)
        busy = [s for s in samples if s.util > 0]
        assert statistics.mean(s.util for s in busy) > 93
        assert statistics.median(s.power_mw for s in busy) > 0.8 * TDP_MW
        inside = [s for s in samples if any(a + 1 < run.t(s) - run.model.start < b for a, b in pauses)]
        assert inside and max(s.power_mw for s in inside) < 0.15 * TDP_MW  # power drops while it pauses
        assert run.memory[g][-1] == pytest.approx(0.6, abs=0.01)
        pause_starts.append(pauses[0][0])
    assert pause_starts[0] != pause_starts[1]  # each rank on its own shard, pausing on its own schedule


def _idle_stretches(run: Run, samples: list[DriverSample]) -> list[tuple[float, float]]:
    """(first, last + 0.2) seconds after the start of each run of samples at 0 % utilization."""
    out: list[tuple[float, float]] = []
    for s in samples:
        x = run.t(s) - run.model.start
        if s.util == 0:
            if out and abs(out[-1][1] - (x - 0.2)) < 1e-6:
                out[-1] = (out[-1][0], x)
            else:
                out.append((x - 0.2, x))
    return out


def test_the_evaluations_log_is_a_progress_bar_and_a_line_per_subset():
    node, texts = follow("evaluation", 200)
    node.close()
    bars = [re.match(r"Evaluating: +\d+%\|.{10}\| (\d+)/12000 \[", text) for text in texts]
    counts = [int(m[1]) for m in bars if m]
    assert len(counts) > 20 and counts == sorted(counts) and counts[-1] > 300
    assert any(re.match(r"INFO:evaluate:subset 1 scored: accuracy=0\.\d{4}", text) for text in texts)


# ---- pipeline ---------------------------------------------------------------------------------------------


def test_a_pipeline_split_model_computes_on_one_gpu_at_a_time():
    run = drive("pipeline", 160, n_gpus=4)
    loaded = 45  # every GPU's share of the weights is in by 40 s
    samples = {g: after(run, g, loaded) for g in range(4)}
    means = [statistics.mean(s.util for s in samples[g]) for g in range(4)]
    assert all(16 <= m <= 27 for m in means) and 80 <= sum(means) <= 105  # together about one GPU
    ticks = list(zip(*(samples[g] for g in range(4)), strict=True))
    assert all(sum(s.util for s in tick) <= 100 for tick in ticks)  # never two turns at once
    assert all(sum(s.util > 50 for s in tick) <= 1 for tick in ticks)
    for g in range(4):
        utils = [s.util for s in samples[g]]
        assert max(utils) >= 75 and utils.count(0) > 0.5 * len(utils)  # the driver's samples alternate
        per_second = [statistics.mean(utils[k : k + 5]) for k in range(0, len(utils) - 4, 5)]
        assert all(10 <= u <= 40 for u in per_second)  # at 1 s, steady
        powers = [s.power_mw for s in samples[g]]
        assert max(powers) > 0.45 * TDP_MW and min(powers) < 0.2 * TDP_MW
        assert run.memory[g][-1] == pytest.approx(0.7, abs=0.01)
    gpus = run.model.gpus
    assert all(sum(g.link_tx) == 0 for g in gpus)  # no collectives
    before = [g.pcie_rx for g in gpus]
    run.model.clock.advance(60)  # type: ignore[attr-defined]
    run.model.advance()
    rates = [(g.pcie_rx - b) / 60 for g, b in zip(gpus, before, strict=True)]
    assert all(2e6 < r < 1e8 for r in rates)  # a trickle at each hand-off (a loader's 1 GB/s is far off)


def test_a_pipeline_on_eight_gpus_uses_four_and_a_second_pod_trains_on_the_rest():
    alone = drive("pipeline", 60, n_gpus=8)
    assert all(g.processes == 0 and g.mem_used_bytes < 16 << 20 for g in alone.model.gpus[4:])
    beside = drive("pipeline:pods=2", 60, n_gpus=8)
    assert all(statistics.mean(s.util for s in beside.samples[g]) > 90 for g in range(4, 8))
    work = beside.model.workload(beside.model.t)
    assert isinstance(work, Pipeline) and work.ranks == [0, 1, 2, 3]


# ---- notebook ---------------------------------------------------------------------------------------------


def test_a_notebook_holds_memory_and_computes_only_in_short_cells():
    run = drive("notebook", 2400, n_gpus=1)
    samples = run.samples[0]
    cells = [(a, b) for a, b in _busy_stretches(run, samples)]
    assert len(cells) >= 3
    assert all(9 <= b - a <= 61 for a, b in cells)
    gaps = [c[0] - p[1] for p, c in itertools.pairwise(cells)]
    assert all(gap >= 29 for gap in gaps) and max(gaps) > 120  # idle for minutes
    assert sum(s.util == 0 for s in samples) > 0.7 * len(samples)
    first = int(cells[0][0])
    assert all(m < 0.01 for m in run.memory[0][: first - 1])  # no context before the first cell
    assert all(0.2 <= m <= 0.4 for m in run.memory[0][first + 1 :])
    idle = [s for s in samples if not any(a < run.t(s) - run.model.start < b + 1 for a, b in cells)]
    assert max(s.power_mw for s in idle) < 0.13 * TDP_MW


def _busy_stretches(run: Run, samples: list[DriverSample]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s in samples:
        x = run.t(s) - run.model.start
        if s.util > 0:
            if out and abs(out[-1][1] - (x - 0.2)) < 1e-6:
                out[-1] = (out[-1][0], x)
            else:
                out.append((x - 0.2, x))
    return out


def test_the_notebooks_log_is_the_jupyter_servers():
    node, texts = follow("notebook", 600, n_gpus=1)
    node.close()
    jupyter = re.compile(r"^\[I \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ServerApp\] ")
    assert texts and all(jupyter.match(text) for text in texts)
    assert any(re.search(r"Kernel started: [0-9a-f]{8}-[0-9a-f]{4}-", text) for text in texts)
    assert any(text.endswith("Saving file at /home/jovyan/train.ipynb") for text in texts)
