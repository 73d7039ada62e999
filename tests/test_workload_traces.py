"""The synthetic workload traces are what their generator makes, and replay judges them by their shape."""

from __future__ import annotations

import json

from devtools import workload_traces
from exporter.offline.replay import replay, workload_lines, workload_summary
from tests.conftest import REPO, assert_generated

FOLDER = REPO / "examples" / "traces" / "workloads"


def test_the_checked_in_traces_are_the_generators_output(tmp_path):
    assert_generated(workload_traces.main, FOLDER, tmp_path)


def test_a_serving_gpu_idle_between_requests_is_idle_capacity_not_starvation():
    result = replay(FOLDER / "w02_l4_serving_busy.csv.gz")
    assert not result.episodes
    ledger = result.ledger["0"]
    assert ledger["input_wait"] < 0.02 * sum(ledger.values()) < ledger["idle"]
    assert result.classes["0"][("serving", "shape")] > 0.8 * sum(result.classes["0"].values())


def test_a_server_with_requests_queued_is_starved():
    result = replay(FOLDER / "w03_h100_serving_queued_cpu.csv.gz")
    assert {e.kind for e in result.episodes} == {"data_starvation"}


def _classed(result, gpu: str, workload: str) -> float:
    """The share of ``gpu``'s judged time its class was ``workload``."""
    seen = result.classes[gpu]
    return sum(s for (c, _), s in seen.items() if c == workload) / sum(seen.values())


def test_a_pipeline_is_named_and_never_starved():
    """The stages' turns are the parallelism the job chose: its class says so, the turns are booked idle,
    and no verdict stands on them."""
    for name in ("w06_a100x4_pipeline_1s", "w07_a100x4_pipeline_100ms"):
        result = replay(FOLDER / f"{name}.csv.gz")
        assert not result.episodes, name
        for gpu in ("0", "1", "2", "3"):
            assert _classed(result, gpu, "pipeline") > 0.9, (name, gpu)
            ledger = result.ledger[gpu]
            assert ledger["input_wait"] < 0.05 * sum(ledger.values()) < ledger["idle"], (name, gpu)


def test_a_notebook_is_known_by_its_irregular_stretches_and_the_flag_says_it_from_the_start():
    """By shape once four irregular stretches came (no starvation before: too few to tell); --workload
    says it from the first second."""
    labels = json.loads((FOLDER / "w08_l4_notebook.labels.json").read_text())
    assert labels["workload"] == "interactive"
    for flag in ("", "interactive"):
        result = replay(FOLDER / "w08_l4_notebook.csv.gz", workload=flag)
        assert {e.kind for e in result.episodes} == {"idle_allocated"}, flag
        assert all(e.cause == "notebook" for e in result.episodes)
        summary = workload_summary(result)["0"]
        assert (summary["class"], summary["source"]) == ("interactive", "shape" if not flag else "flag")


def test_the_summary_names_the_class_decided_not_the_undecided_start():
    """A pipeline's turns show after its model loaded: the summary says pipeline, and for what share."""
    result = replay(
        REPO / "examples" / "traces" / "real_inference" / "s01_a100x4_llama70b_layer_split_pipeline.csv.gz"
    )
    summary = workload_summary(result)
    assert {(w["class"], w["source"]) for w in summary.values()} == {("pipeline", "shape")}
    assert all(0 < float(w["share"]) < 1 for w in summary.values())  # type: ignore[arg-type]
    assert "of its time, undecided before" in "\n".join(workload_lines(result))


def test_a_server_read_from_utilization_and_power_alone_is_not_paged_and_the_replay_says_why():
    """A real vLLM replay without memory.total or a board name: its bursts follow the arrivals, so the
    log cannot tell it from a starved loop; the waits stay in the ledger and the summary says what would
    decide it."""
    from exporter.offline.replay import human, summary

    result = replay(REPO / "examples" / "traces" / "real_inference" / "s05_a100_vllm_burstgpt_replay.csv.gz")
    assert not result.episodes
    assert result.ledger["0"]["input_wait"] > 0
    text = human(result)
    assert "GPU 0: data_starvation not paged:" in text and "--workload training|serving" in text
    assert [u["kind"] for u in summary(result)["unsure"]] == ["data_starvation"]  # type: ignore[index]
    assert not replay(
        REPO / "examples" / "traces" / "real_inference" / "s05_a100_vllm_burstgpt_replay.csv.gz",
        workload="training",
    ).unsure  # the user's word decides: it pages as starvation


def test_a_starvation_verdict_says_the_signals_it_stood_on():
    from exporter.offline.replay import summary

    result = replay(REPO / "examples" / "traces" / "real2" / "n07_a30_yolo_loader_bound.csv.gz")
    verdicts = [v for v in summary(result)["verdicts"] if v["kind"] == "data_starvation"]  # type: ignore[union-attr]
    assert verdicts and all({"utilization", "memory"} <= set(v["signals"]) for v in verdicts)


def test_a_layer_split_is_never_called_starved_in_its_first_turns():
    """Mixtral-8x7B over three A100s: the turns start after the load, and the class is decided before a
    starvation verdict could start on them."""
    result = replay(
        REPO / "examples" / "traces" / "real_inference" / "s12_a100x3_mixtral8x7b_layer_split_pipeline.csv.gz"
    )
    assert not result.episodes
    assert all(_classed(result, gpu, "pipeline") > 0.5 for gpu in ("0", "1", "2"))


def test_an_operators_power_cap_is_a_power_verdict_without_reasons_default_or_name():
    result = replay(FOLDER / "w10_4gpu_training_operator_power_cap.csv.gz")
    assert {(e.kind, e.cause) for e in result.episodes} == {("power_throttle", "cap_below_default")}
    assert all("300 W limit" in e.detail and "SM clock at 60%" in e.detail for e in result.episodes)
