"""replay of real tracked runs: the labelled W&B run files of examples/traces/real_trackers, read by the real
command, each to its labels; the same real stats laid out as an older client's wandb-events.jsonl (with
lines whose _timestamp is gone), as the UI's CSV export of a panel of two runs, and wandb/ with --run."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import pytest

from bench.detection import Judged, Label, Verdict, alert_for, score_trace
from exporter.offline.trackers import wandb_run
from tests.conftest import EXAMPLES, _missing, run_replay

pytestmark = pytest.mark.slow
FOLDER = EXAMPLES / "real_trackers"
RUNS = sorted(FOLDER.glob("*.wandb.gz"))
W01 = FOLDER / "w01_2080tix3_nanogpt_compile_then_thermal.wandb.gz"
W02 = FOLDER / "w02_2080tix3_nanogpt_thermal.wandb.gz"


@pytest.fixture(autouse=True)
def _wandb() -> None:
    try:
        import wandb.proto.wandb_internal_pb2  # noqa: F401
    except ImportError:
        _missing("the wandb package (the wandb extra)")


def _summary(*args: str | Path) -> dict:
    done = run_replay(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _episodes(summary: dict) -> list[tuple[str, str, float]]:
    return sorted((v["gpu"], v["kind"], v["start"]) for v in summary["verdicts"])


def test_the_labelled_set_is_every_run_here():
    assert [p.name for p in RUNS] == [W01.name, W02.name]
    for path in RUNS:
        labels = json.loads((FOLDER / path.name.replace(".wandb.gz", ".labels.json")).read_text())
        assert labels["trace"] == path.name and path.stat().st_size < 64_000


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name.split("_")[0])
def test_each_real_wandb_run_replays_to_its_labels(path):
    """Every labelled episode found, no verdict outside the labels and the allowed stretches; the run
    named from its file, its step counter read, its stats' 30 s step said."""
    raw = json.loads((FOLDER / path.name.replace(".wandb.gz", ".labels.json")).read_text())
    summary = _summary(path)
    ours = [
        Verdict(v["gpu"], v["kind"], v["fired"], v["resolved"], v["start"], v["end"])
        for v in summary["verdicts"]
    ]
    labels = [Label.from_json(x) for x in raw["labels"]]
    judged = Judged(tuple(raw["fp_window"]), (), tuple(Label.from_json(x) for x in raw["allowed"]))
    score = score_trace(path.name, labels, ours, alert_for(), summary["seconds"], judged)
    assert all(e.detected for e in score.episodes), [str(e) for e in score.episodes]
    assert score.false == [], [str(f) for f in score.false]
    assert summary["format"] == "W&B system metrics (run file)" and summary["gpus"] == 3
    tracker = summary["tracker"]
    assert tracker["run"] == "mini-gpt" and tracker["progress_key"] == "iter" and tracker["step_s"] == 30.0
    assert summary["workload"]["0"]["class"] == "training"


def _stats_and_history(path: Path) -> tuple[list[dict], list[dict], dict]:
    """The run file's system stats and history as an older client wrote them as JSON lines (W&B's
    ``system.gpu.N.*`` keys, ``_timestamp`` and ``_runtime``), and its config."""
    from wandb.proto import wandb_internal_pb2 as pb

    stats, history, config, start = [], [], {}, None
    for data in wandb_run.records(path):
        record = pb.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            start = record.run.start_time.seconds + record.run.start_time.nanos / 1e9
            config = {i.key: json.loads(i.value_json) for i in record.run.config.update}
        elif kind == "stats":
            t = record.stats.timestamp.seconds + record.stats.timestamp.nanos / 1e9
            line = {f"system.{i.key}": json.loads(i.value_json) for i in record.stats.item}
            stats.append({**line, "_wandb": True, "_timestamp": t, "_runtime": t - start})
        elif kind == "history":
            history.append({i.key: json.loads(i.value_json) for i in record.history.item})
    return stats, history, config


def _events_run(root: Path, path: Path, drop_timestamps: bool) -> Path:
    """``root/wandb/run-DATE-ID/files/`` with the run's wandb-events.jsonl, wandb-history.jsonl and
    config.yaml; every other stats line without its ``_timestamp`` when ``drop_timestamps``."""
    stats, history, config = _stats_and_history(path)
    files = root / "wandb" / "run-20240214_195452-kt2awly2" / "files"
    files.mkdir(parents=True)
    with (files / "wandb-events.jsonl").open("w") as f:
        for i, line in enumerate(stats):
            if drop_timestamps and i % 2:
                line = {k: v for k, v in line.items() if k != "_timestamp"}
            f.write(json.dumps(line) + "\n")
    (files / "wandb-history.jsonl").write_text("".join(json.dumps(line) + "\n" for line in history))
    entries = (f"{key}:\n  desc: null\n  value: {json.dumps(value)}\n" for key, value in config.items())
    (files / "config.yaml").write_text("wandb_version: 1\n" + "".join(entries))
    return root / "wandb"


@pytest.mark.parametrize("drop_timestamps", [False, True], ids=["timestamped", "runtime-only-lines"])
def test_an_older_clients_events_file_replays_as_its_run_file(tmp_path, drop_timestamps):
    """The real run's stats as wandb-events.jsonl under wandb/run-*/files/ (no latest-run link): the
    same verdicts, onsets and step counter as the run file; lines without _timestamp placed by _runtime."""
    run_file = _summary(W01)
    wandb_dir = _events_run(tmp_path, W01, drop_timestamps)
    events = _summary(wandb_dir)
    assert events["format"] == "W&B system metrics (events file)"
    assert _episodes(events) == _episodes(run_file) != []
    assert events["seconds"] == pytest.approx(run_file["seconds"], abs=0.01)
    assert events["tracker"]["progress_key"] == "iter" and events["tracker"]["run_id"] == "kt2awly2"
    assert events["workload"]["0"]["evidence"] == run_file["workload"]["0"]["evidence"]
    text = run_replay(wandb_dir / "run-20240214_195452-kt2awly2" / "files" / "wandb-events.jsonl")
    assert text.returncode == 0 and "thermal_throttle from 330 s" in text.stdout, text.stderr


def test_wandb_dir_with_run_picks_the_run_and_a_wrong_id_is_one_line(tmp_path):
    """wandb/ holding two runs (gzipped run files): the newest by default, --run ID the named one; an id
    that is not there, or --run beside one run (its directory or file) of another id: exit 2, one line
    naming the runs or the run's own id."""
    root = tmp_path / "wandb"
    for path, run in ((W01, "run-20240214_195452-kt2awly2"), (W02, "run-20240214_204339-b4efbneh")):
        (root / run).mkdir(parents=True)
        shutil.copy(path, root / run / f"run-{run.rsplit('-', 1)[1]}.wandb.gz")
    assert _summary(root)["tracker"]["run_id"] == "b4efbneh"
    assert _summary(root, "--run", "kt2awly2")["tracker"]["run_id"] == "kt2awly2"
    assert _summary(W02, "--run", "b4efbneh")["tracker"]["run_id"] == "b4efbneh"  # the file's own id
    for args, said in (
        ((root, "--run", "zzzz9999"), "no W&B run zzzz9999 here (its runs: b4efbneh, kt2awly2)"),
        (
            (root / "run-20240214_204339-b4efbneh", "--run", "kt2awly2"),
            "does not name this W&B run (b4efbneh)",
        ),
        ((W02, "--run", "kt2awly2"), "does not name this W&B run (b4efbneh)"),
    ):
        done = run_replay(*args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert said in done.stderr


def _panel_export(path: Path, runs: dict[str, Path]) -> None:
    """A system panel of several runs as the UI exports it: Relative Time (Process) as H:MM:SS, each
    run's series as ``NAME - system/gpu.N.KEY`` with its __MIN and __MAX (a run with no sample at a time
    leaves its cells empty)."""
    series: dict[str, dict[float, dict[str, float]]] = {}
    for name, run_path in runs.items():
        stats, _, _ = _stats_and_history(run_path)
        series[name] = {round(s["_runtime"]): s for s in stats}
    keys = ["system/gpu.0.gpu", "system/gpu.0.powerWatts", "system/gpu.0.temp", "system/gpu.1.gpu"]
    header = ["Relative Time (Process)"]
    for name in runs:
        header += [
            part
            for key in keys
            for part in (f"{name} - {key}", f"{name} - {key}__MIN", f"{name} - {key}__MAX")
        ]
    times = sorted({t for by_time in series.values() for t in by_time})
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(header)
        for t in times:
            row = [f"{t // 3600}:{t // 60 % 60:02d}:{t % 60:02d}"]
            for name in runs:
                line = series[name].get(t)
                for key in keys:
                    value = "" if line is None else line.get(key.replace("/", "."), "")
                    row += [value, value, value]
            out.writerow(row)


def test_a_panel_export_of_two_runs_is_one_runs_replay(tmp_path):
    """Two runs in one export: refused in one line naming them; --run NAME replays that run's GPUs only,
    the thermal onset within one of the stats' 30 s steps of its run file's (the export keeps four of its
    series, not the memory and limits the run file has)."""
    export = tmp_path / "wandb_export.csv"
    _panel_export(export, {"mini-gpt": W01, "Group: thermal": W02})
    done = run_replay(export)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "this export holds 2 runs ('mini-gpt', 'Group: thermal'): name one with --run NAME" in done.stderr
    for name, path in (("mini-gpt", W01), ("thermal", W02)):
        summary = _summary(export, "--run", name)
        assert summary["gpus"] == 2 and summary["tracker"]["run"] == name
        fired = {(v["gpu"], v["kind"]): v["start"] for v in summary["verdicts"]}
        truth = {(g, k): s for g, k, s in _episodes(_summary(path))}
        assert fired[("0", "thermal_throttle")] == pytest.approx(truth[("0", "thermal_throttle")], abs=30)


def test_a_gzipped_run_file_cut_short_reads_to_its_last_whole_record(tmp_path):
    """A gzipped run file whose tail is lost: what was kept before it replays; a damaged gzip is one line."""
    whole = gzip.decompress(W01.read_bytes())
    cut = tmp_path / "run-kt2awly2.wandb.gz"
    cut.write_bytes(gzip.compress(whole)[: len(gzip.compress(whole)) // 2])
    summary = _summary(cut)
    assert 0 < summary["seconds"] < _summary(W01)["seconds"]
    damaged = tmp_path / "run-x.wandb.gz"
    data = bytearray(gzip.compress(whole))
    data[len(data) // 3] ^= 0xFF
    damaged.write_bytes(bytes(data))
    done = run_replay(damaged)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "damaged gzip file" in done.stderr or "checksum is wrong" in done.stderr


def test_a_bad_events_file_is_one_line(tmp_path):
    """An events file with a line past 1 MiB, and one with no GPU stats in it: exit 2, one line."""
    long_line = tmp_path / "long" / "wandb-events.jsonl"
    long_line.parent.mkdir()
    first = json.dumps({"system.gpu.0.gpu": 50, "_timestamp": 1.7e9, "_runtime": 30})
    long_line.write_text(first + "\n" + '{"x": "' + "a" * (2 << 20) + '"}\n')
    no_gpu = tmp_path / "cpu" / "wandb-events.jsonl"
    no_gpu.parent.mkdir()
    no_gpu.write_text(json.dumps({"system.cpu": 12.5, "_timestamp": 1.7e9, "_runtime": 30}) + "\nnot json\n")
    for path, said in ((long_line, "line 2 is longer than 1 MiB"), (no_gpu, "has no GPU system metrics")):
        done = run_replay(path)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert said in done.stderr


def test_the_trimmed_run_files_are_what_the_trimmer_writes(tmp_path):
    """devtools/trim_wandb run again over a kept run gives the same bytes: its framing (records split
    across 32 KiB blocks, a block's short tail zeroed) is the one the reader takes."""
    from devtools import trim_wandb

    for path in RUNS:
        whole = tmp_path / path.name.removesuffix(".gz")
        whole.write_bytes(gzip.decompress(path.read_bytes()))
        again = tmp_path / path.name
        assert trim_wandb.main([str(whole), str(again)]) == 0
        assert gzip.decompress(again.read_bytes()) == whole.read_bytes()
        assert len(whole.read_bytes()) > wandb_run.BLOCK  # the runs do cross blocks
