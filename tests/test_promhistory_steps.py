"""replay --prometheus steps at the data's resolution: one evaluation per sample, each standing for its
step in the ledger; a cause the step cannot tell apart is not given; the roll-up by namespace and job."""

from __future__ import annotations

from pathlib import Path

from exporter.analysis.ledger import STATES
from exporter.offline.promhistory.agreement import compare, kinds_of, sampled
from exporter.offline.promhistory.history import Gpu, JobRows, replay_nodes
from exporter.offline.promhistory.rollup import job_of, namespace_of, rollup
from exporter.offline.replay import ReplayResult, human, summary
from exporter.offline.traces import ReadStats, TraceReader
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
