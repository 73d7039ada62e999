"""An MLflow run, through the ``mlflow`` client: a file store (``mlruns/EXP/RUN``), a SQLite store
(``mlflow.db``, MLflow 3's default) or a tracking server.

MLflow's system-metrics monitor samples every 10 s by default (``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL``)
and logs each GPU as ``system/gpu_N_utilization_percentage``, ``..._memory_usage_megabytes``,
``..._memory_usage_percentage`` (memory allocated), ``..._power_usage_watts`` and
``..._power_usage_percentage`` (of the enforced limit); with a node id, ``system/NODE/gpu_N_...``. The
run's other metrics are its own: their ``step`` is the training's step counter.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from exporter.offline.trackers.run import (
    TrackerError,
    TrackerRun,
    counter_like,
    missing_extra,
    step_counter,
)
from exporter.policy.thresholds import TRACKER_REQUEST_TIMEOUT

_GPU = re.compile(r"^system/(?:(?P<node>[^/]+)/)?gpu_(?P<gpu>\d+)_(?P<what>[a-z_]+)$")
# MLflow's GPU metric -> (the point's field, scale to base units)
_FIELDS = {
    "utilization_percentage": ("util", 0.01),
    "memory_usage_megabytes": ("mem_used_bytes", 1e6),
    "power_usage_watts": ("power_w", 1.0),
}
_SQLITE_MAGIC = b"SQLite format 3\x00"


def is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(16) == _SQLITE_MAGIC
    except OSError:
        return False


def is_run_dir(path: Path) -> bool:
    """``mlruns/EXP/RUN``: a run's meta.yaml beside its metrics."""
    return (path / "meta.yaml").is_file() and (path / "metrics").is_dir()


def is_experiment_dir(path: Path) -> bool:
    """``mlruns/EXP``: an experiment's meta.yaml beside its runs' directories."""
    return (
        path.is_dir()
        and (path / "meta.yaml").is_file()
        and any(is_run_dir(d) for d in path.iterdir() if d.is_dir())
    )


def is_store_dir(path: Path) -> bool:
    """``mlruns/``: experiments' directories with their meta.yaml."""
    return path.is_dir() and any((d / "meta.yaml").is_file() for d in path.iterdir() if d.name.isdigit())


# MLflow 3 opens a file store only when asked to (reading one is what this is for); a server that does not
# answer is said in one line within a bounded time, not retried for minutes with backoff
_CLIENT_ENV = {
    "MLFLOW_ALLOW_FILE_STORE": "true",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(TRACKER_REQUEST_TIMEOUT.value)),
}


@contextlib.contextmanager
def _client_env() -> Iterator[None]:
    """The client's settings while the run is read, the caller's put back after."""
    before = {key: os.environ.get(key) for key in _CLIENT_ENV}
    os.environ.update(_CLIENT_ENV)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _client(uri: str) -> Any:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise missing_extra("mlflow") from None
    return MlflowClient(tracking_uri=uri)


def read_path(path: Path, run_id: str | None) -> TrackerRun:
    """A run directory, a file store or a SQLite store on disk (``run_id``: which run of a store)."""
    experiment = None
    if is_run_dir(path):
        uri, run_id, kept = path.resolve().parent.parent.as_uri(), path.name, "file store"
    elif is_experiment_dir(path):  # mlruns/EXP: its latest run unless --run names one
        uri, kept, experiment = path.resolve().parent.as_uri(), "file store", path.resolve().name
    elif is_sqlite(path):
        uri, kept = f"sqlite:///{path.resolve()}", "SQLite store"
    else:
        uri, kept = path.resolve().as_uri(), "file store"
    return read(uri, run_id, kept, str(path), experiment)


def read(
    uri: str,
    run_id: str | None,
    kept: str = "tracking server",
    label: str = "",
    experiment: str | None = None,
) -> TrackerRun:
    """The run ``run_id`` (None: the latest, of ``experiment`` when given) of the store or server at
    ``uri``."""
    with _client_env():
        client = _client(uri)
        from mlflow.exceptions import MlflowException

        try:
            return _read(client, run_id or _latest(client, experiment), kept, label or uri)
        except (MlflowException, OSError, ValueError) as exc:  # a server down, a run that is not there
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TrackerError(f"{label or uri}: MLflow could not read the run: {first[:300]}") from None


def _latest(client: Any, experiment: str | None = None) -> str:
    from mlflow.entities import ViewType

    experiments = (
        [experiment]
        if experiment is not None
        else [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    )
    runs = client.search_runs(experiments, order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        raise TrackerError("no run in this store")
    return str(runs[0].info.run_id)


def _read(client: Any, run_id: str, kept: str, label: str) -> TrackerRun:
    found = client.get_run(run_id)
    run = TrackerRun(
        "MLflow", kept, label, name=found.info.run_name or "", run_id=run_id, config=dict(found.data.params)
    )
    own: dict[str, list[tuple[float, float]]] = {}
    steps: list[tuple[float, float]] = []
    for key in sorted(found.data.metrics):
        history = client.get_metric_history(run_id, key)
        match = _GPU.match(key)
        if match is None:
            if key.startswith("system/"):
                continue  # CPU, disk, network: not the GPUs'
            run.count(len(history))
            if counter_like(key):
                own[key] = [(m.timestamp / 1000, float(m.value)) for m in history]
            # each logged point's step and time: the training's progress where no counter is logged
            steps += [(m.timestamp / 1000, float(m.step)) for m in history]
            run.logged += [m.timestamp / 1000 for m in history]
            continue
        gpu = match["gpu"] if not match["node"] else f"{match['node']}/{match['gpu']}"
        for m in history:
            _put(run, gpu, m.timestamp / 1000, match["what"], float(m.value))
    _fill_limits(run)
    run.progress_key, run.progress = step_counter(own)
    if not run.progress and any(v for _, v in steps):  # the logged metrics' own step: the training's
        run.progress_key, run.progress = "the logged metrics' step", sorted(steps)
    if not run.samples:
        raise TrackerError(
            f"{label}: run {run_id} has no GPU system metrics (log_system_metrics=True or "
            "MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING=true records them)"
        )
    return run


def _put(run: TrackerRun, gpu: str, t: float, what: str, value: float) -> None:
    if what in _FIELDS:
        attr, scale = _FIELDS[what]
        run.put(gpu, t, attr, value * scale)
    elif what in ("power_usage_percentage", "memory_usage_percentage"):
        run.put(gpu, t, f"_{what}", value)  # the limit and the total, worked out beside their values


def _fill_limits(run: TrackerRun) -> None:
    """The power limit from the draw and its share of it; the memory total from the used and its share."""
    for times in run.samples.values():
        for values in times.values():
            share = values.pop("_power_usage_percentage", None)
            if share and values.get("power_w"):
                values["power_limit_w"] = values["power_w"] / (share / 100)
            share = values.pop("_memory_usage_percentage", None)
            if share and values.get("mem_used_bytes"):
                values["mem_total_bytes"] = values["mem_used_bytes"] / (share / 100)
