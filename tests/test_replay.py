"""replay and record, as TRACES.md specifies them, on the labelled traces and on our own recordings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.detection import (
    LEDGER_TARGET_POINTS,
    Verdict,
    alert_for,
    find_traces,
    ledger_error,
    load_labels,
    score_trace,
    trace_name,
)
from exporter.analysis.kinds import KINDS
from exporter.offline.replay import replay
from exporter.offline.traces import TraceWriter
from tests.conftest import EXAMPLES, REPO, step

TRACES = {trace_name(p): p for p in find_traces(EXAMPLES)}


def test_the_labelled_examples_are_in_the_repository():
    assert len(TRACES) >= 13, f"labelled traces missing from {EXAMPLES}"
    assert all(p.name.endswith(".csv.gz") for p in TRACES.values())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TRACES))
def test_labelled_traces_page_without_false_verdicts_and_ledger_right(name):
    """bench/detection.py's judgement of one trace: every episode pages, no false verdict, the ledger
    within its target (the bench also reports the held share of each episode)."""
    labels, truth, judged = load_labels(TRACES[name])
    result = replay(TRACES[name])
    verdicts = [Verdict(e.gpu, e.kind, e.fired_at, e.resolved, e.start, e.end) for e in result.episodes]
    score = score_trace(name, labels, verdicts, alert_for(), result.seconds, judged)
    assert [str(e) for e in score.episodes if not e.paged] == []
    assert [str(f) for f in score.false] == []
    worst = ledger_error(result.ledger, truth)
    assert worst.points <= LEDGER_TARGET_POINTS, str(worst)


REAL = {trace_name(p): p for p in find_traces(EXAMPLES / "real")}


def test_the_real_traces_are_in_the_repository():
    assert len(REAL) >= 10, f"real traces missing from {EXAMPLES / 'real'}"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_traces_page_every_episode_without_a_false_verdict(name):
    """Real public telemetry (no power limit or board name in most, 0.1-1.5 s sampling): every labelled
    wasted-GPU episode pages, and nothing fires where the job is healthy."""
    labels, _, judged = load_labels(REAL[name])
    result = replay(REAL[name])
    verdicts = [Verdict(e.gpu, e.kind, e.fired_at, e.resolved, e.start, e.end) for e in result.episodes]
    score = score_trace(name, labels, verdicts, alert_for(), result.seconds, judged)
    assert [str(e) for e in score.episodes if not e.paged] == []
    assert [str(f) for f in score.false] == []


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_replay_json_lines_on_stdout_and_nothing_else():
    path = TRACES["starvation_h100x8"]
    result = _run("replay", str(path), "--json")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    verdicts = [x for x in lines if x["event"] == "verdict"]
    assert (
        lines[-1]["event"] == "summary"
        and lines[-1]["gpus"] == 8
        and lines[-1]["seconds"] == pytest.approx(900, abs=1)
    )
    assert verdicts[0] == {
        "event": "verdict",
        "t": verdicts[0]["t"],
        "time": verdicts[0]["time"],
        "gpu": "3",
        "kind": "data_starvation",
        "state": "firing",
        "score": verdicts[0]["score"],
        "cause": "cpu",
        "since": verdicts[0]["since"],
        "since_time": verdicts[0]["since_time"],
    }
    assert verdicts[0]["since"] < verdicts[0]["t"]  # the loss began before its verdict held and fired
    times = {"time", "since", "since_time", "until", "until_time"}
    assert all(set(v) <= {"event", "t", "gpu", "kind", "state", "score", "cause", *times} for v in verdicts)
    assert [v["t"] for v in verdicts] == sorted(v["t"] for v in verdicts)
    summary = lines[-1]
    for gpu, states in summary["ledger"].items():  # each GPU's states sum to its observed time
        assert sum(states.values()) == pytest.approx(900, rel=0.01), gpu
    assert summary["ledger"]["3"]["input_wait"] > 0.3 * 900 > summary["ledger"]["0"]["input_wait"]
    assert summary["ledger"]["0"]["comm_wait"] > 0.3 * 900
    assert sum(summary["job_ledger"]["node"].values()) == pytest.approx(8 * 900, rel=0.01)
    assert [h["gpu"] for h in summary["holding_back"]] == ["3"]  # the rank its peers wait for
    assert summary["holding_back"][0]["share"] > 0.2
    assert summary["power_envelopes"]["0"]["ceiling_from"] == "power limit"


@pytest.mark.slow
def test_replay_human_summary_names_the_rank_and_its_waiting_peers():
    path = TRACES["starvation_h100x8"]
    result = _run("replay", str(path))
    assert result.returncode == 0
    assert "GPU 3: data_starvation from" in result.stdout and "cause cpu" in result.stdout
    assert "GPUs 0, 1, 2, 4, 5, 6, 7 wait for it in NCCL" in result.stdout
    assert "GPU 0, 1, 2, 4, 5, 6, 7: no verdict" in result.stdout
    assert "where the time went:" in result.stdout
    assert "GPU 3 (899 s): computing 66%, input_wait 34%" in result.stdout
    assert "GPU 0 (899 s): computing 66%, comm_wait 34%" in result.stdout
    assert "GPU 3 held its job back for" in result.stdout
    assert "GPU 0-7: idle 70 W (board table), ceiling 700 W (power limit)" in result.stdout
    # it ends with what to do next: the runbook of what it found
    assert result.stdout.rstrip().splitlines()[-2:] == [
        "next steps (each runbook says how to confirm the verdict, its likely causes and fixes):",
        "  data_starvation (cause cpu): " + KINDS["data_starvation"].runbook(),
    ]


def test_every_verdict_kinds_next_step_is_a_runbook_in_the_repository():
    for kind in KINDS.values():
        name = kind.runbook().rsplit("/", 1)[1]
        assert kind.runbook().endswith(f"/docs/runbooks/{name}"), kind.runbook()
        page = (REPO / "docs" / "runbooks" / name).read_text()
        assert "## Confirm" in page and "## Likely causes and fixes" in page, name  # what the line promises


def test_a_trace_too_short_to_page_still_says_what_it_saw(tmp_path):
    """45 s of two GPUs pinned in a quiet collective: too short for the hang verdict, not too short to
    see the loss."""
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB], power.draw [W], power.limit [W]"]
    for i in range(45):
        for gpu in (0, 1):
            rows.append(f"2026/03/01 10:00:{i:02d}.000, {gpu}, 100 %, 30000 MiB, 140.00 W, 700.00 W")
    path = tmp_path / "short.csv"
    path.write_text("\n".join(rows) + "\n")
    result = _run("replay", str(path))
    assert result.returncode == 0, result.stderr
    assert "GPU 0, 1: no verdict" in result.stdout
    line = next(x for x in result.stdout.splitlines() if ": yet " in x)
    assert line.startswith("  GPU 0, 1: yet") and "went to stalled" in line  # alike: one line
    assert "next steps" not in result.stdout  # no verdict, no runbook to follow


def test_replay_of_an_unreadable_file_is_a_clear_error(tmp_path):
    result = _run("replay", str(tmp_path / "missing.csv"))
    assert result.returncode == 2 and "cannot read" in result.stderr and "Traceback" not in result.stderr
    empty = tmp_path / "empty.csv"
    empty.write_text("timestamp, utilization.gpu [%]\n")
    result = _run("replay", str(empty))
    assert result.returncode == 2 and "no readable rows" in result.stderr


def test_replay_warns_once_about_unknown_columns(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp, utilization.gpu [%], fan.speed [%]\n" + "".join(f"{i}, 99 %, 40 %\n" for i in range(5))
    )
    result = _run("replay", str(path), "--json")
    assert result.returncode == 0
    assert result.stderr.count("ignoring unknown columns: fan.speed [%]") == 1
    assert json.loads(result.stdout.splitlines()[-1])["unknown_columns"] == ["fan.speed [%]"]


def test_what_is_recorded_live_replays_to_the_same_verdicts(make_node, make_sampler, clock, tmp_path):
    """record writes exactly what the live detectors saw; replaying it gives the same verdicts."""
    sampler, _ = make_sampler(make_node("data_starvation:onset=20"))
    path = tmp_path / "recorded.csv"
    with path.open("w") as stream:
        writer = TraceWriter(stream)
        sampler.gpu_listeners.append(
            lambda ident, pts: [writer.gpu(str(ident.index), ident.name, p) for p in pts]
        )
        sampler.host_listeners.append(writer.host)
        live = []
        for _ in range(100):
            step(sampler, clock)
            live += [(e.gpu, e.kind, e.state, e.cause) for e in sampler.events]
    result = replay(path)
    replayed = [(e.gpu, e.kind, e.state, e.cause) for e in result.events]
    assert live == [("3", "data_starvation", "firing", "cpu")]
    assert replayed == live
    assert result.stats.skipped == 0 and result.stats.unknown_columns == []


@pytest.mark.slow
def test_record_command_writes_a_trace_replay_reads(tmp_path):
    out = tmp_path / "rec.csv"
    result = _run(
        "record",
        "--simulate",
        "comm_hang",
        "--sim-gpus",
        "2",
        "--interval",
        "0.5",
        "--duration",
        "3",
        "--output",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    header = out.read_text().splitlines()[0]
    assert header.startswith("timestamp, index, name, utilization.gpu [%]")
    replayed = _run("replay", str(out), "--json")
    summary = json.loads(replayed.stdout.splitlines()[-1])
    assert replayed.returncode == 0 and summary["gpus"] == 2 and summary["rows"] >= 20


def _priced_trace(tmp_path, name: str = "NVIDIA H100 80GB HBM3"):
    """60 s of two GPUs of one model: GPU 0 computing, GPU 1 holding memory with no kernel (idle)."""
    rows = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB], power.draw [W], power.limit [W]"]
    for i in range(60):
        rows.append(f"2026/03/01 10:00:{i:02d}.000, 0, {name}, 100 %, 30000 MiB, 650.00 W, 700.00 W")
        rows.append(f"2026/03/01 10:00:{i:02d}.000, 1, {name}, 0 %, 30000 MiB, 80.00 W, 700.00 W")
    path = tmp_path / "priced.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_replay_prices_each_state_by_the_gpus_model(tmp_path):
    path = _priced_trace(tmp_path)
    result = _run("replay", str(path), "--json", "--price", "H100 80GB HBM3=3.6", "--currency", "eur")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    cost = summary["cost"]
    assert cost["currency"] == "EUR" and cost["price_per_gpu_hour"] == {"0": 3.6, "1": 3.6}
    for gpu, states in summary["ledger"].items():  # each state's seconds at 3.6 an hour
        for state, seconds in states.items():
            assert cost["gpus"][gpu][state] == pytest.approx(seconds * 3.6 / 3600, abs=2e-4), (gpu, state)
    assert summary["ledger"]["1"]["idle"] > 50  # the idle GPU's time is lost, the busy one's is not
    assert cost["gpus"]["1"]["idle"] == pytest.approx(summary["ledger"]["1"]["idle"] * 0.001, abs=2e-4)
    assert cost["lost"] == pytest.approx(cost["gpus"]["1"]["idle"], abs=2e-3)
    job = cost["jobs"]["node"]
    assert sum(job.values()) == pytest.approx(cost["total"], abs=1e-3)


def test_replay_summary_says_what_the_time_cost(tmp_path):
    path = _priced_trace(tmp_path, name="NVIDIA Future GPU")  # no entry matches: the default price
    result = _run("replay", str(path), "--price", "*=1.8")
    assert result.returncode == 0, result.stderr
    assert "what the time cost (USD;" in result.stdout
    assert "GPU 1 (NVIDIA Future GPU, 1.8/h): " in result.stdout
    idle_line = next(line for line in result.stdout.splitlines() if line.startswith("  GPU 1 (NVIDIA Future"))
    assert ", lost " in idle_line and ": idle " in idle_line
    assert any(line.startswith("  all GPUs: ") for line in result.stdout.splitlines())


def test_replay_price_off_and_bad_prices(tmp_path):
    path = _priced_trace(tmp_path)
    off = _run("replay", str(path), "--json", "--price", "off")
    assert off.returncode == 0 and json.loads(off.stdout.splitlines()[-1])["cost"] is None
    assert "what the time cost" not in _run("replay", str(path), "--price", "off").stdout
    for bad, words in (
        ("H100=cheap", "must be a number"),
        ("H100", "not MODEL=PRICE"),
        ("H100=5000", "0-1000"),
    ):
        result = _run("replay", str(path), "--price", bad)
        assert result.returncode == 2 and words in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    result = _run("replay", str(path), "--currency", "dollars")
    assert result.returncode == 2 and "--currency" in result.stderr
