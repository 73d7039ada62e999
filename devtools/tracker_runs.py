"""Experiment-tracker runs over the simulator: what MLflow and Weights & Biases keep of a training run.

    python -m devtools.tracker_runs [OUT_DIR]   # default: a temporary directory, printed

For each scenario (a healthy run, a data-loader starvation, a hung collective, each on two simulated
H100s) one pass of the simulator's clock feeds three records of the same run:

- ``mlruns/``: an MLflow file store written by the ``mlflow`` client. Its system metrics are read by
  MLflow's own GPU monitor (``mlflow.system_metrics``) through nvidia-ml-py over the simulator's fake
  libnvidia-ml, one sample every 10 s (MLflow's default), logged under MLflow's own keys
  (``system/gpu_0_utilization_percentage`` ...). The monitor is driven on the simulator's clock rather
  than its own thread's, so that minutes of a run take seconds; the keys, steps and values are the ones
  its thread logs.
- ``wandb/``: a W&B run written offline by the ``wandb`` package (its own service writes the ``.wandb``
  transaction log). W&B's collector is a compiled binary that opens the real libnvidia-ml, which the
  simulator does not replace, so the GPU records are made here with W&B's own protobuf types
  (``wandb.proto.wandb_internal_pb2.StatsRecord``), the NVML readings averaged over 15 s as W&B's
  collector averages them, under its keys (``gpu.0.gpu``, ``gpu.0.powerWatts`` ...), and handed to the
  run's service like its collector's.
- ``smi-1s.csv``: the same NVML read every second, as ``nvidia-smi --query-gpu ... -l 1`` would log it:
  the 1 s replay the trackers' coarse steps are measured against.
- ``wandb-export-SCENARIO.csv``: the W&B system panel's samples as its UI exports a panel to CSV (Wall
  Time, then each series with its bucket's __MIN and __MAX).

The training loop logs its step, loss and throughput to both trackers every 5 s. It steps at 2 steps a
second times the slowest rank's utilization (a data-parallel step waits for every rank), and not at all
while its collective is stuck (``comm_hang``).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import random
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

T0 = datetime(2026, 11, 18, 9, 0, 0, tzinfo=UTC).timestamp()
GPUS = 2
SECONDS = 540
ONSET_S = 150
SCENARIOS = {
    "healthy": "healthy",
    "starvation": f"data_starvation:onset={ONSET_S}",
    "hang": f"comm_hang:onset={ONSET_S}",
}
# the run's name and config as a person names them: class evidence for replay
RUN_NAMES = {
    "healthy": "llama-8b-pretrain",
    "starvation": "llama-8b-pretrain-s3",
    "hang": "llama-8b-pretrain-ib",
}
SQLITE_SCENARIOS = frozenset({"starvation"})
BASE_RATE = 2.0  # steps a second of the healthy loop
LOG_EVERY_S = 5  # the training loop's own metrics
MLFLOW_INTERVAL_S = 10  # MLflow's default system-metrics sampling interval
WANDB_INTERVAL_S = 15  # W&B's default stats sampling interval
SMI_COLUMNS = (
    "timestamp, index, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
    "memory.total [MiB], power.draw [W], power.limit [W], temperature.gpu, clocks.sm [MHz]"
)


@dataclass
class Reading:
    util: float  # %
    mem_util: float  # %
    mem_used: float  # bytes
    mem_total: float  # bytes
    power_w: float
    limit_w: float
    temp_c: float
    sm_mhz: float


@dataclass
class Made:
    """Where one scenario's records lie."""

    scenario: str
    mlflow_store: Path
    mlflow_run_id: str
    wandb_dir: Path  # the run's directory (run-YYYYmmdd_HHMMSS-ID)
    smi_csv: Path
    onset_s: float | None
    steps: list[tuple[float, float]] = field(default_factory=list)

    @property
    def mlflow_run_dir(self) -> Path:
        """The run as a person names it: ``mlruns/EXP/RUN``, or the SQLite store (its latest run)."""
        if self.mlflow_store.is_file():
            return self.mlflow_store
        return next(self.mlflow_store.glob(f"*/{self.mlflow_run_id}"))


def _read(nvml, handle) -> Reading:  # type: ignore[no-untyped-def]
    util = nvml.nvmlDeviceGetUtilizationRates(handle)
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    return Reading(
        util=float(util.gpu),
        mem_util=float(util.memory),
        mem_used=float(mem.used),
        mem_total=float(mem.total),
        power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1000,
        limit_w=nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
        temp_c=float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        sm_mhz=float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
    )


def _smi_line(t: float, index: int, name: str, r: Reading) -> str:
    stamp = datetime.fromtimestamp(t, tz=UTC).strftime("%Y/%m/%d %H:%M:%S.000")
    mib = 1024 * 1024
    return (
        f"{stamp}, {index}, {name}, {r.util:.0f} %, {r.mem_util:.0f} %, {r.mem_used / mib:.0f} MiB, "
        f"{r.mem_total / mib:.0f} MiB, {r.power_w:.2f} W, {r.limit_w:.2f} W, {r.temp_c:.0f}, "
        f"{r.sm_mhz:.0f} MHz"
    )


def _wandb_stats(window: list[list[Reading]]) -> dict[str, float]:
    """One W&B system sample: each GPU's readings averaged over the interval, under W&B's keys."""
    out: dict[str, float] = {}
    for i in range(len(window[0])):
        rs = [second[i] for second in window]

        def mean(attr: str, rs: list[Reading] = rs) -> float:
            return sum(getattr(r, attr) for r in rs) / len(rs)

        power, limit = mean("power_w"), mean("limit_w")
        used, total = mean("mem_used"), mean("mem_total")
        out |= {
            f"gpu.{i}.gpu": round(mean("util"), 2),
            f"gpu.{i}.memory": round(mean("mem_util"), 2),
            f"gpu.{i}.memoryAllocated": round(used / total * 100, 2),
            f"gpu.{i}.memoryAllocatedBytes": round(used),
            f"gpu.{i}.temp": round(mean("temp_c"), 2),
            f"gpu.{i}.powerWatts": round(power, 3),
            f"gpu.{i}.enforcedPowerLimitWatts": round(limit, 3),
            f"gpu.{i}.powerPercent": round(power / limit * 100, 2),
            f"gpu.{i}.smClock": round(mean("sm_mhz")),
        }
    return out


class _Trackers:
    """The two trackers' runs of one scenario, written as the loop goes."""

    def __init__(self, out: Path, scenario: str, sqlite: bool, experiment: str) -> None:
        import mlflow
        import wandb
        from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor

        self.out = out
        self.client = mlflow.MlflowClient(tracking_uri=mlflow_uri(out, sqlite))
        found = self.client.get_experiment_by_name(experiment)
        exp_id = found.experiment_id if found else self.client.create_experiment(experiment)
        name = RUN_NAMES[scenario]
        run = self.client.create_run(exp_id, start_time=int(T0 * 1000), run_name=name)
        self.run_id = run.info.run_id
        self.config = {
            "model": "llama-8b",
            "batch_size": 32,
            "lr": 3e-4,
            "num_workers": 4,
            "scenario": scenario,
        }
        for key, value in self.config.items():
            self.client.log_param(self.run_id, key, value)
        self.gpu_monitor = GPUMonitor()  # nvmlInit over the fake driver, as MLflow's monitor does
        self.mlflow_step = 0
        self.rng = random.Random(f"mlflow-{scenario}")
        self.next_mlflow = T0 + MLFLOW_INTERVAL_S
        settings = wandb.Settings(
            x_disable_stats=True, x_disable_meta=True, x_start_time=T0, silent=True, console="off"
        )
        with contextlib.redirect_stderr(io.StringIO()):
            self.wandb_run = wandb.init(
                mode="offline",
                dir=str(out),
                project="pretrain",
                name=name,
                config=self.config,
                settings=settings,
            )
        self.window: list[list[Reading]] = []
        self.export: list[tuple[float, dict[str, float]]] = []  # the system panel, as its CSV export has it
        self.name = name

    def mlflow_due(self, before: float) -> float | None:
        """The time of MLflow's next sample if it comes before ``before`` (None: later)."""
        return self.next_mlflow if self.next_mlflow < before else None

    def mlflow_sample(self, t: float) -> None:
        """MLflow's monitor at ``t``: one sample of every GPU, logged as it is (samples_before_logging=1).
        Its loop waits its interval after each sample and then asks the store for the run's status, so
        the next sample comes the interval plus that work later: 50-350 ms here, seeded."""
        from mlflow.entities import Metric

        self.gpu_monitor.collect_metrics()
        metrics = self.gpu_monitor.aggregate_metrics()
        self.gpu_monitor.clear_metrics()
        self.client.log_batch(
            self.run_id,
            [Metric(f"system/{k}", v, int(t * 1000), self.mlflow_step) for k, v in metrics.items()],
        )
        self.mlflow_step += 1
        self.next_mlflow = t + MLFLOW_INTERVAL_S + self.rng.uniform(0.05, 0.35)

    def second(self, t: float, readings: list[Reading], step: float) -> None:
        rel = t - T0
        self.window.append(readings)
        if rel > 0 and rel % WANDB_INTERVAL_S == 0:
            self._wandb_stats(t)
            self.window = []
        if rel > 0 and rel % LOG_EVERY_S == 0:
            self._progress(t, step)

    def _wandb_stats(self, t: float) -> None:
        from wandb.proto import wandb_internal_pb2 as pb

        stats = pb.StatsRecord(stats_type=pb.StatsRecord.StatsType.SYSTEM)
        stats.timestamp.FromMilliseconds(int(t * 1000))
        sample = _wandb_stats(self.window)
        for key, value in sample.items():
            stats.item.add(key=key, value_json=repr(value))
        self.export.append((t, sample))
        interface = self.wandb_run._interface  # the run's own channel to its service
        interface._publish(interface._make_record(stats=stats))

    def _progress(self, t: float, step: float) -> None:
        from mlflow.entities import Metric

        whole = int(step)
        loss = round(2.5 / (1 + whole / 400), 4)
        self.wandb_run.log(
            {"train/loss": loss, "train/global_step": whole, "_timestamp": t}, step=len(self.steps)
        )
        ms = int(t * 1000)
        self.client.log_batch(
            self.run_id, [Metric("loss", loss, ms, whole), Metric("global_step", whole, ms, whole)]
        )
        self.steps.append((t - T0, step))

    steps: list[tuple[float, float]]

    def write_export(self, path: Path) -> None:
        """The system panel's samples as W&B's UI exports a panel to CSV: its x-axis (Wall Time, in ms),
        then per series ``RUN - KEY`` with the ``__MIN`` and ``__MAX`` of its bucket beside it."""
        keys = list(self.export[0][1]) if self.export else []
        header = ["Wall Time"]
        for key in keys:
            series = f"{self.name} - system/{key}"
            header += [series, f"{series}__MIN", f"{series}__MAX"]
        with path.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(header)
            for t, sample in self.export:
                out.writerow([int(t * 1000), *(v for key in keys for v in (sample[key],) * 3)])

    def close(self, t: float) -> None:
        self.client.set_terminated(self.run_id, end_time=int(t * 1000))
        with contextlib.redirect_stderr(io.StringIO()):
            self.wandb_run.finish()


def mlflow_uri(out: Path, sqlite: bool) -> str:
    """Where a scenario's MLflow run is kept: the starvation in MLflow 3's default SQLite store
    (``mlflow.db``), the others in a file store (``mlruns/``, where most existing runs lie)."""
    if sqlite:
        return f"sqlite:///{(out / 'mlflow.db').resolve()}"
    return (out / "mlruns").resolve().as_uri()


def simulate(
    out: Path,
    scenario: str,
    seconds: int = SECONDS,
    gpus: int = GPUS,
    sqlite: bool | None = None,
    experiment: str = "pretrain",
) -> Made:
    """One scenario's run, recorded by both trackers and by a 1 s nvidia-smi log. ``sqlite``: MLflow's
    store (None: SQLITE_SCENARIOS say); ``experiment``: the MLflow experiment's name ("Default": 0)."""
    sqlite = scenario in SQLITE_SCENARIOS if sqlite is None else sqlite
    from exporter.sim import SimulatedNode

    clock = [T0]
    node = SimulatedNode(SCENARIOS[scenario], n_gpus=gpus, clock=lambda: clock[0])
    nvml = node.install()
    out.mkdir(parents=True, exist_ok=True)
    smi = out / f"smi-1s-{scenario}.csv"
    try:
        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(gpus)]
        name = nvml.nvmlDeviceGetName(handles[0])
        trackers = _Trackers(out, scenario, sqlite, experiment)
        trackers.steps = []
        step = 0.0
        hung = scenario == "hang"
        with smi.open("w") as log:
            log.write(SMI_COLUMNS + "\n")
            for s in range(seconds + 1):
                clock[0] = T0 + s
                readings = [_read(nvml, h) for h in handles]
                for i, r in enumerate(readings):
                    log.write(_smi_line(clock[0], i, name, r) + "\n")
                stuck = hung and s >= ONSET_S
                step += 0.0 if stuck else BASE_RATE * min(r.util for r in readings) / 100
                trackers.second(clock[0], readings, step)
                due = trackers.mlflow_due(clock[0] + 1)
                if due is not None:  # MLflow samples between the log's seconds
                    clock[0] = due
                    trackers.mlflow_sample(due)
            trackers.close(clock[0])
        trackers.write_export(out / f"wandb-export-{scenario}.csv")
        nvml.nvmlShutdown()
    finally:
        node.uninstall()
        node.close()
    wandb_dir = _latest_wandb_run(out / "wandb")
    onset = None if scenario == "healthy" else float(ONSET_S)
    store = out / ("mlflow.db" if sqlite else "mlruns")
    return Made(scenario, store, trackers.run_id, wandb_dir, smi, onset, trackers.steps)


def _latest_wandb_run(root: Path) -> Path:
    runs = sorted(p for p in root.glob("offline-run-*") if p.is_dir())
    if not runs:
        raise RuntimeError(f"wandb wrote no run under {root}")
    return runs[-1]


@dataclass(frozen=True)
class Only:
    """One short run instead of the set (the docs' examples)."""

    scenario: str
    seconds: int
    sqlite: bool
    experiment: str = "Default"


def make_all(out: Path, only: Only | None = None) -> dict[str, Made]:
    """Every scenario's runs under ``out`` (one MLflow store, one wandb directory, a log per scenario)."""
    # MLflow 3 writes a file store only when asked to: it is what most existing runs are kept in
    settings = {"WANDB_SILENT": "true", "MLFLOW_ALLOW_FILE_STORE": "true"}
    before = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        if only is not None:
            return {
                only.scenario: simulate(
                    out, only.scenario, only.seconds, sqlite=only.sqlite, experiment=only.experiment
                )
            }
        return {scenario: simulate(out / scenario, scenario) for scenario in SCENARIOS}
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass
class Agreement:
    """One tracker's replay of a scenario against the 1 s replay of the same run."""

    scenario: str
    tracker: str
    step: float
    fine: set[tuple[str, str]]  # (GPU, kind) the 1 s replay gave (the kinds the step can show)
    coarse: set[tuple[str, str]]  # (GPU, kind) the tracker's replay gave
    episodes: int  # the tracker's episodes on the pairs both gave
    onset_errors: list[float]  # seconds its episodes began after the 1 s replay's (negative: before)
    delays: list[float]  # seconds from its episodes' onset to its verdicts

    def line(self) -> str:
        both = self.fine & self.coarse
        onset = ", ".join(f"{e:+.0f}" for e in self.onset_errors) or "-"
        delay = ", ".join(f"{d:.0f}" for d in self.delays) or "-"
        return (
            f"| {self.scenario} | {self.tracker} | {self.step:.0f} s | {len(both)}/{len(self.fine)} | "
            f"{len(self.coarse - self.fine)} | {self.episodes} | {onset} | {delay} |"
        )


AGREEMENT_HEADER = (
    "| scenario | tracker | step | (GPU, kind) found | false | episodes | onset vs 1 s (s) | verdict after "
    "onset (s) |\n|---|---|---|---|---|---|---|---|"
)


def agreement(made: dict[str, Made]) -> list[Agreement]:
    """Each scenario's tracker runs against the 1 s replay of the same simulated run."""
    from exporter.offline.replay import replay
    from exporter.offline.trackers import open_run, replay_run

    out = []
    for scenario, m in made.items():
        fine = replay(m.smi_csv)
        starts = {(e.gpu, e.kind): e.start for e in fine.episodes}
        for tracker, path in (("MLflow", m.mlflow_run_dir), ("W&B", m.wandb_dir)):
            result = replay_run(open_run(str(path)))
            shown = {(e.gpu, e.kind) for e in fine.episodes if e.kind not in result.silent}
            coarse = [e for e in result.episodes]
            offset = (result.stats.first_timestamp or 0.0) - (fine.stats.first_timestamp or 0.0)
            mine = [e for e in coarse if (e.gpu, e.kind) in shown]
            out.append(
                Agreement(
                    scenario,
                    tracker,
                    float(result.tracker["step_s"]),
                    shown,
                    {(e.gpu, e.kind) for e in coarse},
                    len(mine),
                    [e.start + offset - starts[(e.gpu, e.kind)] for e in mine],
                    [e.fired_at - e.start for e in mine],
                )
            )
    return out


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="tracker-runs-"))
    made = make_all(out)
    for scenario, m in made.items():
        print(f"{scenario}: mlflow {m.mlflow_store} run {m.mlflow_run_id}; wandb {m.wandb_dir}; {m.smi_csv}")
    print(AGREEMENT_HEADER)
    for row in agreement(made):
        print(row.line())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
