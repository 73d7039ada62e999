"""replay --prometheus steps at the data's resolution: one evaluation per sample, each standing for its
step in the ledger; a cause the step cannot tell apart is not given; the roll-up by namespace and job."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from exporter.analysis.ledger import STATES
from exporter.offline.promhistory.agreement import compare, kinds_of, sampled
from exporter.offline.promhistory.history import GAP_STEPS, Gpu, JobRows, replay_nodes
from exporter.offline.promhistory.rollup import job_of, namespace_of, rollup
from exporter.offline.replay import ReplayResult, best_supported, gap_text, human, summary
from exporter.offline.traces import ReadStats, TraceReader, gap_seconds
from exporter.policy.cost import DEFAULT as PRICES
from tests.conftest import REPO

TRACES = REPO / "examples" / "traces"


def _coarse(path: Path, step: float) -> ReplayResult:
    return replay_nodes([sampled(TraceReader(path), step)], {}, step, 0.0, "test", path, prices=None)


def test_one_row_per_sample_and_each_sample_counts_for_its_step():
    step = 30.0
    times = [step * i for i in range(1, 41)]
    gpu = Gpu("n", "0", "NVIDIA H100 80GB HBM3")
    gpu.values = {"util": dict.fromkeys(times, 1.0), "power_w": dict.fromkeys(times, 600.0)}
    rows = list(JobRows("job", [gpu], {gpu.name: times}, {}, step, 0.0, "test"))
    assert [r.t for r in rows] == times  # no one-second repeats
    result = replay_nodes([({"0": gpu}, {})], {}, step, 0.0, "test", Path("p"), prices=None)
    held = sum(result.ledger["n/0"].values())
    assert held == times[-1] - times[0]  # every step after the first sample counted, none twice
    assert result.ledger["n/0"]["computing"] == held


def test_a_hang_of_every_rank_is_still_told_at_30_s():
    compared = compare(TRACES / "hang_h100x8.csv.gz", 30.0)
    assert compared.coarse.get("comm_hang") == {str(g) for g in range(8)}
    assert all(compared.agreed().values()) and not compared.false()


def test_a_checkpoint_stall_is_no_hang_at_15_s_and_the_summary_says_why():
    result = _coarse(TRACES / "real" / "r02_h100x8_ckpt_stall.csv.gz", 15.0)
    assert "comm_hang" not in kinds_of(result)
    assert "data_starvation" in kinds_of(result)
    assert result.fleet is not None and "comm_hang/peer_not_in_collective" in result.fleet["unjudged"]
    assert "peer_not_in_collective" in human(result)


def test_the_roll_up_joins_pods_into_jobs_and_jobs_into_namespaces():
    assert namespace_of("ml/llama (llama-0)") == "ml" and job_of("ml/llama (llama-0)") == "llama"
    assert namespace_of("node-1 (no pod)") == "(no pod)" and job_of("ml/pod-x") == "pod-x"
    hour = dict.fromkeys(STATES, 0.0) | {"computing": 1800.0, "input_wait": 1800.0}
    result = ReplayResult(Path("p"), ReadStats(), 0.0, prices=PRICES)
    result.job_ledger = {"ml/llama (llama-0)": hour, "ml/llama (llama-1)": hour, "web/api-7": hour}
    result.job_cost = {job: {"computing": 1.0, "input_wait": 1.0} for job in result.job_ledger}
    spaces = rollup(result, {"ml/llama (llama-0)": {"data_starvation": 1}})
    assert list(spaces) == ["ml", "web"]  # the costliest first
    ml = spaces["ml"]
    assert ml["gpu_hours"] == 2.0 and ml["lost_gpu_hours"] == 1.0 and ml["lost_share"] == 0.5
    assert ml["cost"] == 4.0 and ml["lost_cost"] == 2.0
    assert ml["verdicts"] == {"data_starvation": 1}
    assert list(ml["jobs"]) == ["llama"]  # two pods, one job
    result.fleet = {"namespaces": spaces}
    assert summary(result)["fleet"]["namespaces"]["web"]["jobs"]["api-7"]["lost_gpu_hours"] == 0.5
    text = human(result)
    assert "namespace ml: 2.0 GPU-h, lost 1.0 (50%): input_wait 1.0" in text
    assert "    job llama:" in text


def test_the_roll_up_prices_only_the_hours_it_counts():
    """A node's GPUs no job held are no one's hours: neither counted nor priced."""
    free = dict.fromkeys(STATES, 0.0) | {"free": 3600.0}
    result = ReplayResult(Path("p"), ReadStats(), 0.0, prices=PRICES)
    result.job_ledger = {"node-1 (no pod)": free}
    result.job_cost = {"node-1 (no pod)": {"free": 4.0}}
    space = rollup(result, {})["(no pod)"]
    assert space["gpu_hours"] == 0.0 and space["cost"] == 0.0 and space["lost_cost"] == 0.0
    result.fleet = {"namespaces": {"(no pod)": space}}
    assert "1.0 GPU-h free (no job on them: neither counted nor priced)" in human(result)


def test_throttled_time_is_lost_only_in_the_share_of_clock_the_cap_took():
    """A power-capped job keeps computing at the clocks the cap leaves it: at 85 % of its clock, 15 % of
    its throttled time is lost, not all of it."""
    result = replay_nodes(
        [sampled(TraceReader(TRACES / "power_cap_h100x8.csv.gz"), 30.0)],
        {"ml/trace": "llama"},
        30.0,
        0.0,
        "test",
        Path("p"),
        prices=PRICES,
    )
    job = result.fleet["namespaces"]["ml"]["jobs"]["llama"]  # type: ignore[index]
    throttled_h = result.job_ledger["ml/llama (trace)"]["throttled"] / 3600
    assert throttled_h > 0.9 * job["gpu_hours"]  # held at the cap nearly all the time...
    assert 0.1 < job["lost_by_state"]["throttled"] / throttled_h < 0.2  # ...losing its clock's 15 %
    assert job["lost_share"] < 0.25 and 0 < job["lost_cost"] < 0.25 * job["cost"]


def test_a_starving_rank_of_eight_is_one_episode_with_one_cause_from_its_averages_at_30_s():
    """Its peers wait in NCCL, busy at low power; it has less utilization than they: one episode, fired
    once (on the second sample it is behind in, within four steps of the 1-second replay's), its cause
    the 1-second replay's; no peer of it, nor rank 0 of a healthy job pausing to save, is blamed."""
    path = TRACES / "starvation_h100x8.csv.gz"
    compared = compare(path, 30.0)
    assert compared.coarse == {"data_starvation": {"3"}} and not compared.false()
    assert compared.fragments() == (1, 1) and compared.causes_agreed() == (1, 1)
    assert all(abs(e) <= 4 * 30.0 for e in compared.onset_errors())
    result = _coarse(path, 30.0)
    assert [e.state for e in result.events] == ["firing"]  # no fragment resolved and fired again
    saving = compare(TRACES / "real" / "r01_h100x8_healthy_ckpt1000.csv.gz", 30.0)
    assert not saving.coarse and not saving.false()


def test_a_causes_best_support_names_the_episode_and_a_tie_is_unknown():
    assert best_supported({"cpu": 300.0, "host_transfer": 60.0}) == "cpu"
    assert best_supported({"cpu": 90.0, "host_transfer": 90.0}) == "unknown"
    assert best_supported({"": 60.0}) == ""  # a kind without causes


def test_a_gap_in_a_history_is_placed_by_its_time_not_a_line():
    step = 30.0
    times = [step * i for i in range(1, 11)] + [step * i for i in range(30, 41)]
    gpu = Gpu("n", "0", "NVIDIA H100 80GB HBM3")
    gpu.values = {"util": dict.fromkeys(times, 1.0)}
    rows = JobRows("job", [gpu], {gpu.name: times}, {}, step, 0.0, "test")
    list(rows)
    assert rows.stats.gap_count == 1 and rows.stats.gap_s == max(gap_seconds(), GAP_STEPS * step)
    assert gap_text(rows.stats) == "600 s before 1970-01-01 00:15:00"  # told by when it ends


def test_the_first_samples_after_a_hole_shorter_than_a_gap_are_no_lasting_loss():
    """An exporter down for almost five minutes (under the gap that splits a history): the windows after
    it hold one or two samples, and one of them at a dip is not half of two minutes lost."""
    node, host = sampled(TraceReader(TRACES / "healthy_h100x8.csv.gz"), 15.0)
    hole = (300.0, 585.0)
    for gpu in node.values():
        gpu.pods = {t: v for t, v in gpu.pods.items() if not hole[0] <= t < hole[1]}
        gpu.values = {
            a: {t: v for t, v in s.items() if not hole[0] <= t < hole[1]} for a, s in gpu.values.items()
        }
    host = {a: {t: v for t, v in s.items() if not hole[0] <= t < hole[1]} for a, s in host.items()}
    result = replay_nodes([(node, host)], {}, 15.0, 0.0, "test", TRACES / "healthy.csv", prices=None)
    assert result.episodes == []


def test_a_layer_split_model_read_at_15_and_30_s_is_a_pipeline_not_starved():
    """A real three-A100 Mixtral split: its stages take turns at every step a history holds; the hold
    window of turns counts each sample for its step (at 15 s it keeps four samples, 45 s apart end to
    end), so the class is decided and the stages' waits are not called starvation."""
    for step in (15.0, 30.0):
        path = TRACES / "real_inference" / "s12_a100x3_mixtral8x7b_layer_split_pipeline.csv.gz"
        result = _coarse(path, step)
        assert result.episodes == [], (step, result.episodes)
        assert "pipeline" in human(result), step


def test_an_evaluations_short_pauses_caught_in_one_sample_each_are_no_starvation_at_15_s():
    """An evaluation pausing 5-10 s every minute or two: at 15 s now and then one sample catches a pause
    and stands for its whole step. One such sample is a pause, not half a minute of waits: nothing pages
    (it paged once, for 90 s). A real starvation read at 15 s still does."""
    assert compare(TRACES / "workloads" / "w04_a100_evaluation_pauses.csv.gz", 15.0).coarse == {}
    assert "data_starvation" in kinds_of(_coarse(TRACES / "starvation_h100x8.csv.gz", 15.0))


def test_a_gap_in_the_trace_is_a_hole_in_the_history_it_stands_for():
    """Evaluation jobs logged with half an hour unlogged between two of them: the history has no samples
    there (the log's last row is not repeated), so the idle half hour is not read as memory held idle."""
    node, _ = sampled(TraceReader(TRACES / "real3" / "u03_rtx8000_eval_jobs.csv.gz"), 15.0)
    (gpu,) = node.values()
    held = sorted(gpu.values["util"])
    assert max(b - a for a, b in pairwise(held)) > 1800
    assert "idle_allocated" not in kinds_of(_coarse(TRACES / "real3" / "u03_rtx8000_eval_jobs.csv.gz", 15.0))
