"""replay of experiment trackers' runs: MLflow and W&B runs written by the real libraries (offline) over the
simulator's NVML, for a healthy run, a data-loader starvation and a hung collective (devtools/tracker_runs.py
records them; one set per session). Each replays to its scenario's verdict, dated, against the 1 s replay
of the same run; a W&B CSV export, an MLflow file store, a SQLite store and an MLflow server started here
are read end to end through the real command; without the extras one line names the one to install."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools import tracker_runs
from scripts.stack import free_port, wait_http
from tests.conftest import REPO, _missing, run_replay

pytestmark = pytest.mark.slow


def _need(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        _missing(f"the {module} package (the {module} extra)")


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tracker_runs.Made]:
    _need("mlflow")
    _need("wandb")
    return tracker_runs.make_all(tmp_path_factory.mktemp("tracker-runs"))


def _report(*args: str | Path) -> dict:
    """The real command's JSON lines: its events and its closing summary."""
    done = run_replay(*args, "--json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return {"events": lines[:-1], "summary": lines[-1]}


def test_every_tracker_run_replays_to_its_scenario_within_two_steps(runs):
    """One episode per GPU that lost, of the scenario's kind, its onset within two of the tracker's
    steps of the 1 s replay's; nothing on the healthy run; each run named, each episode dated, the
    run's own step counter read as its progress."""
    rows = tracker_runs.agreement(runs)
    expected = {"healthy": set(), "starvation": {("1", "data_starvation")}}
    expected["hang"] = {("0", "comm_hang"), ("1", "comm_hang")}
    for row in rows:
        assert row.fine == expected[row.scenario], (row.scenario, "1 s replay", row.fine)
        assert row.coarse == expected[row.scenario], (row.scenario, row.tracker, row.coarse)
        assert row.episodes == len(expected[row.scenario]), row.line()
        assert all(abs(e) <= 2 * row.step for e in row.onset_errors), row.line()
    assert {(r.tracker, round(r.step)) for r in rows} == {("MLflow", 10), ("W&B", 15)}
    print("\n" + tracker_runs.AGREEMENT_HEADER + "\n" + "\n".join(r.line() for r in rows))


def test_the_command_reads_a_file_store_and_a_wandb_run_with_their_progress(runs, tmp_path):
    """`replay mlruns/EXP/RUN` and `replay wandb/latest-run`: text, JSON and HTML report as for a GPU log,
    the run named, every episode dated, the stopped step counter confirming the hang."""
    hang = runs["hang"]
    for path in (hang.mlflow_run_dir, hang.wandb_dir.parent / "latest-run"):
        page = tmp_path / f"{path.name}.html"
        text = run_replay(path, "--report", str(page))
        assert text.returncode == 0, text.stderr
        assert "llama-8b-pretrain-ib" in text.stdout
        assert "comm_hang began 2026-11-18 09:02" in text.stdout
        assert "stopped at" in text.stdout and "(confirms it)" in text.stdout
        html = page.read_text()
        assert "<h2>Tracked run</h2>" in html and "llama-8b-pretrain-ib" in html and "stopped at" in html
        summary = _report(path)["summary"]
        assert summary["tracker"]["run"] == "llama-8b-pretrain-ib"
        assert summary["tracker"]["progress_key"].endswith("global_step")
        fired = [e for e in _report(path)["events"] if e.get("state") == "firing"]
        assert {e["gpu"] for e in fired} == {"0", "1"} and all(
            e["time"].startswith("2026-11-18") for e in fired
        )


def test_an_mlflow_experiment_directory_reads_its_latest_run(runs, tmp_path):
    """`replay mlruns/EXP`: that experiment's run, whichever experiment of the store is newer; --run still
    names any run of the store."""
    hang, healthy = runs["hang"], runs["healthy"]
    store = tmp_path / "mlruns"
    for made in (hang, healthy):  # two experiments in one store
        shutil.copytree(made.mlflow_run_dir.parent, store / made.mlflow_run_dir.parent.name)
    assert hang.mlflow_run_dir.parent.name != healthy.mlflow_run_dir.parent.name
    for made, run, kinds in (
        (hang, "llama-8b-pretrain-ib", {("0", "comm_hang"), ("1", "comm_hang")}),
        (healthy, None, set()),
    ):
        summary = _report(store / made.mlflow_run_dir.parent.name)["summary"]
        assert (
            summary["tracker"]["run_id"] == made.mlflow_run_id and summary["tracker"]["kept"] == "file store"
        )
        assert run is None or summary["tracker"]["run"] == run
        assert {(v["gpu"], v["kind"]) for v in summary["verdicts"]} == kinds
    by_id = _report(store / hang.mlflow_run_dir.parent.name, "--run", healthy.mlflow_run_id)["summary"]
    assert by_id["tracker"]["run_id"] == healthy.mlflow_run_id and by_id["verdicts"] == []


def test_a_wandb_export_and_a_sqlite_store_show_the_starvation(runs):
    """The system panel's CSV export (no step counter in it) and MLflow 3's default SQLite store: the
    starving rank, dated; the store's run shows the step rate falling while the GPUs waited."""
    starving = runs["starvation"]
    csv_text = run_replay(starving.smi_csv.parent / "wandb-export-starvation.csv")
    assert csv_text.returncode == 0, csv_text.stderr
    assert "GPU 1: data_starvation from" in csv_text.stdout and "CSV export" in csv_text.stdout
    assert "the run logged no step counter" in csv_text.stdout
    store = run_replay(starving.mlflow_store)
    assert store.returncode == 0, store.stderr
    assert "SQLite store" in store.stdout and "llama-8b-pretrain-s3" in store.stdout
    assert "the loop slowed while the GPUs waited: confirms it" in store.stdout
    assert "judged as training (log: the run's config sets lr)" in store.stdout


def test_an_mlflow_tracking_server_by_run_id(runs, tmp_path):
    """`replay --mlflow http://... --run ID` against a real `mlflow server` over the SQLite store; a run id
    it does not hold is one line."""
    starving = runs["starvation"]
    port = free_port()
    mlflow = Path(sys.executable).parent / "mlflow"
    server = subprocess.Popen(
        [
            str(mlflow),
            "server",
            "--backend-store-uri",
            f"sqlite:///{starving.mlflow_store}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", timeout=90, proc=server)
        done = _report("--mlflow", url, "--run", starving.mlflow_run_id)
        assert done["summary"]["tracker"]["kept"] == "tracking server"
        assert [(e["gpu"], e["kind"]) for e in done["events"] if e.get("state") == "firing"] == [
            ("1", "data_starvation")
        ]
        wrong = run_replay("--mlflow", url, "--run", "0" * 32)
        assert wrong.returncode == 2 and len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
        assert "MLflow could not read the run" in wrong.stderr
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


@pytest.mark.parametrize("package", ["mlflow", "wandb"])
def test_without_the_extra_one_line_names_it(runs, package):
    """Reading a run whose tracker's package is not installed: exit 2 and one line naming the extra."""
    path = runs["hang"].mlflow_run_dir if package == "mlflow" else runs["hang"].wandb_dir
    hide = (
        "import sys\n"
        f"class Hide:\n    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {package!r} or name.startswith({package + '.'!r}):\n"
        f"            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from exporter.cli import main\n"
        f"sys.exit(main(['replay', {str(path)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", hide], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"gpu-bottleneck-exporter: reading this run needs the {package} package: pip install "
        f"'gpu-bottleneck-exporter[{package}]'"
    ]


def test_mlflow_own_monitor_thread_reads_the_simulated_driver(runs, tmp_path):
    """MLflow's system-metrics thread itself, as `mlflow.start_run(log_system_metrics=True)` starts it,
    reads the simulator's NVML through nvidia-ml-py and logs the keys the reader takes."""
    import mlflow

    from exporter.offline.trackers import open_run
    from exporter.sim import SimulatedNode

    node = SimulatedNode("healthy", n_gpus=2)
    node.install()
    settings = {"MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL": "0.3"}
    before = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
        with mlflow.start_run(run_name="monitor-check", log_system_metrics=True) as run:
            deadline = time.monotonic() + 20
            client = mlflow.MlflowClient()
            while time.monotonic() < deadline:
                time.sleep(0.3)
                if len(client.get_metric_history(run.info.run_id, "system/gpu_1_power_usage_watts")) >= 3:
                    break
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        node.uninstall()
        node.close()
    read = open_run(str(tmp_path / "mlruns"))
    assert read.name == "monitor-check" and set(read.samples) == {"0", "1"}
    values = [v for times in read.samples.values() for v in times.values()]
    for v in values:  # every field MLflow's monitor logs, in base units
        assert 0 <= v["util"] <= 1 and 0 < v["power_w"] <= v["power_limit_w"] == pytest.approx(700, rel=0.01)
        assert 0 < v["mem_used_bytes"] < v["mem_total_bytes"] == pytest.approx(80e9, rel=0.1)


def test_a_damaged_run_is_one_line(runs, tmp_path):
    """A .wandb file with a damaged record, an export without its time column: exit 2, one line."""
    good = next(runs["hang"].wandb_dir.glob("*.wandb")).read_bytes()
    damaged = tmp_path / "run-x.wandb"
    damaged.write_bytes(good[:200] + bytes([good[200] ^ 0xFF]) + good[201:])
    no_time = tmp_path / "export.csv"
    no_time.write_text("Step,run - system/gpu.0.gpu\n1,50\n")
    for path, said in ((damaged, "checksum is wrong"), (no_time, "needs a time column")):
        done = run_replay(path)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert said in done.stderr
