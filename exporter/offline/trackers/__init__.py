"""``replay`` of an experiment tracker's run: MLflow (a file store, a SQLite store, a tracking server) and
Weights & Biases (a run's ``.wandb`` file, a CSV export). docs/diagnose.md, "Diagnose your tracked runs".

A tracker's system metrics are one sample per interval (MLflow's monitor every 10 s, an instant; W&B's
collector every 15 s, an average): they are judged like a Prometheus' history, at the run's own step,
and the kinds that step cannot show are said silent (promhistory/resolution.py). The run's own metrics
are the training's word about its progress: its step counter feeds the rows' log silence (a counter
that stops confirms a hang, as a pod's log does live), and its rate across each episode is reported (a
rate that falls while the GPUs wait confirms a starvation). The run's name and config are evidence of
the job's class.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from exporter.analysis.engine import VerdictEvent
from exporter.analysis.workload import Workload
from exporter.offline.traces import ReadStats
from exporter.offline.trackers.run import TrackerError, TrackerRows, TrackerRun, missing_extra, rate
from exporter.policy.thresholds import EVAL_INTERVAL, TRACKER_RATE_DROP

__all__ = ["TrackerError", "TrackerRun", "claims", "missing_extra", "open_run", "replay_run"]

# what the run's config says of its class: a training run sets these
_TRAINING_CONFIG = (
    "lr",
    "learning_rate",
    "optimizer",
    "epochs",
    "num_train_epochs",
    "max_steps",
    "warmup_steps",
)


def claims(path: Path) -> bool:
    """Whether ``path`` is a tracker's run (rather than a GPU log)."""
    from exporter.offline.trackers import mlflow_run, wandb_run

    if path.is_dir():
        return bool(
            wandb_run.run_file(path)
            or wandb_run.run_ids(path)
            or mlflow_run.is_run_dir(path)
            or mlflow_run.is_store_dir(path)
            or mlflow_run.is_experiment_dir(path)
        )
    if not path.is_file():
        # a run lies in regular files: a FIFO, a device or stdin is a GPU log's stream, and sniffing it
        # here would wait for a writer (or read without end) before the trace reader's own bounds apply
        return False
    if wandb_run.is_run_file(path) or wandb_run.is_events_file(path) or mlflow_run.is_sqlite(path):
        return True
    try:
        with path.open(errors="replace") as f:
            return wandb_run.sniff_csv(f.read(8192))
    except OSError:
        return False


def open_run(path: str | None, mlflow: str | None = None, run_id: str | None = None) -> TrackerRun:
    """The run at ``path`` (a directory, a ``.wandb`` file, a SQLite store, a W&B export), or on the
    MLflow tracking server or store ``mlflow`` (``run_id``: which run; default the latest)."""
    from exporter.offline.trackers import mlflow_run, wandb_run

    if mlflow:
        return mlflow_run.read(mlflow, run_id, _kept(mlflow), mlflow)
    assert path is not None
    where = Path(path)
    if where.is_dir() and run_id and wandb_run.run_ids(where):  # wandb/ and the run to read
        return _wandb(where, run_id, path)
    found = wandb_run.run_file(where)
    if found is not None:
        run = (
            wandb_run.read_file(found, path)
            if wandb_run.is_run_file(found)
            else wandb_run.read_events(found, path)
        )
        _same_run(run, run_id)
        return run
    if where.is_dir() or mlflow_run.is_sqlite(where):
        return mlflow_run.read_path(where, run_id)
    return wandb_run.read_csv(where, path, run_id)


def _wandb(root: Path, run_id: str, label: str) -> TrackerRun:
    """The run ``run_id`` of a ``wandb/`` directory (its ``run-*-ID``)."""
    from exporter.offline.trackers import wandb_run

    found = wandb_run.run_file(root, run_id)
    if found is None or wandb_run.file_run_id(found) != run_id:
        ids = wandb_run.run_ids(root)
        shown = ", ".join(ids[-5:]) + (f" (and {len(ids) - 5} earlier)" if len(ids) > 5 else "")
        raise TrackerError(f"{label}: no W&B run {run_id} here (its runs: {shown})")
    if wandb_run.is_run_file(found):
        return wandb_run.read_file(found, label)
    return wandb_run.read_events(found, label)


def _same_run(run: TrackerRun, run_id: str | None) -> None:
    """--run beside one W&B run: it must name that run (another id is a mistake, said in one line)."""
    if run_id and run_id != run.run_id:
        raise TrackerError(
            f"{run.label}: --run {run_id} does not name this W&B run ({run.run_id or 'it has no id'}); "
            "give wandb/ with --run ID to pick a run"
        )


def _kept(uri: str) -> str:
    if uri.startswith("sqlite:"):
        return "SQLite store"
    if uri.startswith(("file:", "/", ".")):
        return "file store"
    return "tracking server"


def replay_run(run: TrackerRun, on_event: Callable[[VerdictEvent], None] | None = None, **kwargs: Any) -> Any:
    """Replay the run at its tracker's step; the kinds that step cannot show are left out and said
    silent. ``kwargs``: replay's (prices, workload, on_row, on_tick, on_job)."""
    from exporter.offline.promhistory.history import stepped
    from exporter.offline.promhistory.resolution import silenced, unjudged_causes
    from exporter.offline.replay import replay

    step = run.step_s()
    coarse = step if step > EVAL_INTERVAL.value else None
    quiet = silenced(step) if coarse else {}
    unjudged = unjudged_causes(step) if coarse else {}

    def shown(kind: str, cause: str) -> bool:
        return kind not in quiet and (kind, cause) not in unjudged

    rows = TrackerRows(run, stepped(ReadStats(format=f"{run.tracker} system metrics ({run.kept})"), step))
    if run.start() is not None and run.start() < 1e8:  # times from the run's start, not dates
        rows.stats.first_timestamp = None
    for unused in ("period", "start", "columns"):
        kwargs.pop(unused, None)
    hint = class_hint(run)
    result = replay(
        Path(run.label),
        on_event=(lambda e: on_event(e) if shown(e.kind, e.cause) else None) if on_event else None,
        reader=rows,
        step=coarse,
        hint=hint,
        **kwargs,
    )
    result.events = [e for e in result.events if shown(e.kind, e.cause)]
    result.episodes = [e for e in result.episodes if shown(e.kind, e.cause)]
    result.jobs = [j for j in result.jobs if shown(str(j.get("kind")), str(j.get("cause", "")))]
    result.silent = {**result.silent, **quiet}
    result.tracker = describe(run, step, result, unjudged)
    return result


def class_hint(run: TrackerRun) -> Workload | None:
    """What the run's name or config says of the job's class (None: nothing)."""
    from exporter.podlogs.workload import name_hint

    hint = name_hint(run.name) if run.name else None
    if hint is not None:
        return Workload(hint.kind, "name", f"run name {run.name!r}: {hint.evidence.split(': ', 1)[-1]}")
    said = [key for key in _TRAINING_CONFIG if key in {k.lower().rsplit(".", 1)[-1] for k in run.config}]
    if said:
        return Workload("training", "log", "the run's config sets " + ", ".join(said))
    return None


def describe(
    run: TrackerRun, step: float, result: Any, unjudged: dict[tuple[str, str], str]
) -> dict[str, Any]:
    """The run, its step, and what its own progress said across each episode (JSON and text)."""
    origin = result.stats.first_timestamp or 0.0
    episodes = []
    for e in result.episodes:
        end = e.end if e.end is not None else result.seconds
        said = progress_word(run, origin + e.start, origin + end, e.kind, step)
        episodes.append(
            {
                "gpu": e.gpu,
                "kind": e.kind,
                "began": _date(origin + e.start) if result.stats.first_timestamp else f"{e.start:.0f} s",
                "progress": said,
            }
        )
    return {
        "tracker": run.tracker,
        "kept": run.kept,
        "run": run.name,
        "run_id": run.run_id,
        "step_s": round(step, 1),
        "progress_key": run.progress_key,
        "config": dict(list(run.config.items())[:20]),
        "unjudged": {f"{kind}/{cause}": why for (kind, cause), why in unjudged.items()},
        "episodes": episodes,
    }


def _date(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _advances(progress: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points where the counter went up."""
    out, top = [], None
    for t, v in progress:
        if top is None or v > top:
            out.append((t, v))
            top = v
    return out


def progress_word(run: TrackerRun, a: float, b: float, kind: str, step: float) -> str:
    """What the run's step counter did across an episode from ``a`` to ``b``, against before it."""
    if not run.progress:
        return "the run logged no step counter"
    first = run.progress[0][0]
    before = rate(run.progress, max(first, a - (b - a) - 60), a)
    during = rate(run.progress, a, b)
    if kind == "comm_hang":  # the counter's last move: at most two samples after the onset
        moves = [t for t, v in _advances(run.progress) if t <= b]
        last = moves[-1] if moves else first
        if last <= a + 2 * step:
            stopped = _at(run.progress, last)
            return (
                f"the step counter ({run.progress_key}) stopped at {stopped:g} at {_date(last)}: no step "
                "after it (confirms it)"
            )
        return f"the step counter ({run.progress_key}) still moved during it (a hang would stop it)"
    if during is None or before is None or before <= 0:
        return f"too few logged steps around it to compare the rate ({run.progress_key})"
    word = (
        "the loop slowed while the GPUs waited: confirms it"
        if during < TRACKER_RATE_DROP.value * before
        else "the rate held: the loss did not slow the loop"
    )
    return f"{during:.2f} steps/s during it against {before:.2f} before ({run.progress_key}; {word})"


def _at(progress: list[tuple[float, float]], t: float) -> float:
    before = [v for when, v in progress if when <= t]
    return before[-1] if before else progress[0][1]
