"""Two more labelled sets for bench/sensitivity.py, made on demand under out/: the simulator's scenarios
recorded as traces, and every example trace thinned to one sample per 30 s.

    python bench/extra_sets.py [OUT_DIR]   # default: out/sensitivity-sets

- ``scenarios/``: each analysed scenario of the simulator (exporter/sim/scenarios.py), sampled by the
  exporter's own sampler on a virtual clock, one cycle a second, through the real nvidia-ml-py bindings,
  and written with the trace writer ``record`` uses. The fault begins after a healthy lead-in; the labels
  name the kind and GPUs the scenario's text says. The simulator is deterministic, so the files are too.
- ``coarse30/``: every trace of bench/detection.py's sets with each GPU's first row of every 30 s step
  kept (and the host's columns of that row): what a log written with ``-l 30`` holds, the step a
  Prometheus scrape gives. Labels are copied; the ledger's truth is dropped (one sample a step cannot
  be held to a 1 s truth).

A number no example reaches at 1 s (NVLink, a pinned loader core, the coarse evidence window) is moved
on these as on the others, so ``dead`` means dead on every set and scenario.
"""

from __future__ import annotations

import gzip
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

OUT = REPO / "out" / "sensitivity-sets"
COARSE_STEP_S = 30.0
LEAD_IN_S = 120.0  # healthy training before the fault: a verdict's onset is measured against it
LENGTH_S = 900.0
T0 = 1_790_000_000.0


@dataclass(frozen=True)
class Recorded:
    """A scenario to record, and the episodes it should page: (kind, GPUs or () for all, start, end)."""

    name: str
    scenario: str
    labels: tuple[tuple[str, tuple[int, ...], float, float], ...] = ()
    gpus: int = 8
    seconds: float = LENGTH_S


def _at_onset(
    name: str, scenario: str, kind: str, gpus: tuple[int, ...] = (), start: float = 0.0
) -> Recorded:
    """``scenario`` with its fault from the lead-in's end, paged as ``kind`` (``a|b``: either) on ``gpus``
    (none: all) from ``start`` after the onset to the end."""
    return Recorded(name, f"{scenario}:onset={LEAD_IN_S:g}", ((kind, gpus, LEAD_IN_S + start, LENGTH_S),))


SCENARIOS = (
    Recorded("healthy", "healthy"),
    _at_onset("starvation_cpu", "data_starvation", "data_starvation", (3,)),
    _at_onset("starvation_io_all", "data_starvation_all", "data_starvation"),
    _at_onset("hang", "comm_hang", "comm_hang"),
    _at_onset("comm_bound", "comm_bound", "comm_bound"),
    _at_onset("thermal", "thermal_throttle", "thermal_throttle", (5,)),
    _at_onset("power_cap", "power_cap", "power_throttle"),
    # the volume fills over 300 s from the onset; the loss is the loaders dying once it is full
    _at_onset("shm", "shm_exhaustion", "shm_exhaustion", start=300.0),
    _at_onset("idle", "idle_allocated", "idle_allocated"),
    _at_onset("nvlink_down", "nvlink_down", "nvlink_degraded", (2,)),
    _at_onset("checkpoint", "checkpoint_stall", "checkpoint_stall|data_starvation"),
    _at_onset("offload", "offload_starvation", "data_starvation"),
    Recorded("serving", "serving"),
    Recorded("serving_starved", "serving_starved", (("data_starvation", (), 0.0, LENGTH_S),)),
    Recorded("evaluation", "evaluation"),
    Recorded("pipeline", "pipeline"),
    Recorded("notebook", "notebook"),
)


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def record(spec: Recorded, folder: Path) -> Path:
    """Sample ``spec``'s scenario for its length, a cycle a second, into NAME.csv.gz and its labels."""
    from exporter.collect.sampler import Sampler
    from exporter.config.settings import Settings
    from exporter.offline.traces import TraceWriter
    from exporter.sim import SimulatedNode
    from exporter.sources.errors import ErrorCounter
    from exporter.sources.nvml import NvmlSource

    logging.getLogger("exporter").setLevel(logging.WARNING)  # the verdicts it logs are judged later
    clock = _Clock()
    node = SimulatedNode(spec.scenario, n_gpus=spec.gpus, clock=clock)
    out = folder / f"{spec.name}.csv.gz"
    try:
        errors = ErrorCounter()
        settings = Settings(interval_s=1.0, collect_timeout_s=0.5, lost_gpu_retry_s=0.0)
        host = _refreshing_host(node, errors, clock=clock, **node.host_options())
        nvml = NvmlSource.configured(node.install(), errors, settings, clock=clock)
        sampler = Sampler(settings, errors, {"host": host, "nvml": nvml}, clock=clock)
        with gzip.open(out, "wt", encoding="utf-8") as stream:
            writer = TraceWriter(stream)
            sampler.host_listeners.append(writer.host)
            sampler.gpu_listeners.append(
                lambda gpu, points: [writer.gpu(str(gpu.index), gpu.name, p) for p in points]
            )
            try:
                for _ in range(round(spec.seconds)):
                    clock.now += 1.0
                    sampler.cycle(wait_s=2.0)
            finally:
                sampler.stop()
    finally:
        node.close()
    (folder / f"{spec.name}.labels.json").write_text(json.dumps(_labels(spec), indent=1) + "\n")
    return out


def _labels(spec: Recorded) -> dict:
    labels = []
    for kind, gpus, start, end in spec.labels:
        kinds = kind.split("|")
        for gpu in gpus or range(spec.gpus):
            label = {"gpu": str(gpu), "kind": kinds[-1], "start": start, "end": end}
            if len(kinds) > 1:
                label["kinds"] = kinds
            labels.append(label)
    return {"trace": f"{spec.name}.csv", "scenario": spec.scenario, "labels": labels}


def _refreshing_host(node, *args, **kwargs):  # a class made once the host source is imported
    from exporter.sources.host import HostSource

    class Refreshing(HostSource):
        """Rewrites the simulated /proc before reading it, as the simulator's refresh thread does live."""

        def collect(self):
            node.host.refresh()
            return super().collect()

    return Refreshing(*args, **kwargs)


def thin(path: Path, folder: Path, step: float = COARSE_STEP_S) -> Path:
    """``path`` with each GPU's first row of every ``step`` kept, its labels beside it."""
    from bench.detection import trace_name
    from exporter.offline.traces import TraceReader, TraceWriter

    name = trace_name(path)
    out = folder / f"{name}.csv.gz"
    kept: dict[str, float] = {}
    with gzip.open(out, "wt", encoding="utf-8") as stream:
        writer = TraceWriter(stream)
        for row in TraceReader(path):
            slot = row.t // step
            if kept.get(row.gpu) == slot:
                continue
            kept[row.gpu] = slot
            if row.host is not None:
                writer.host(row.host)
            writer.gpu(row.gpu, row.name, row.point)
    labels = json.loads((path.parent / f"{name}.labels.json").read_text())
    labels.pop("ledger_truth", None)
    (folder / f"{name}.labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    return out


def make(out: Path = OUT, jobs: int = 2) -> list[Path]:
    """Both sets under ``out`` (made once: a folder that exists is kept); their folders."""
    from concurrent.futures import ProcessPoolExecutor

    from bench.detection import DEFAULT_DIRS, find_traces

    scenarios, coarse = out / "scenarios", out / f"coarse{COARSE_STEP_S:g}"
    with ProcessPoolExecutor(jobs) as pool:
        if not scenarios.is_dir():
            partial = scenarios.with_suffix(".partial")
            partial.mkdir(parents=True, exist_ok=True)
            list(pool.map(record, SCENARIOS, [partial] * len(SCENARIOS)))
            partial.rename(scenarios)
        if not coarse.is_dir():
            partial = coarse.with_suffix(".partial")
            partial.mkdir(parents=True, exist_ok=True)
            paths = [p for d in DEFAULT_DIRS for p in find_traces(d)]
            list(pool.map(thin, paths, [partial] * len(paths)))
            partial.rename(coarse)
    return [scenarios, coarse]


if __name__ == "__main__":
    folders = make(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
    for folder in folders:
        print(f"{folder}: {len(list(folder.glob('*.labels.json')))} labelled traces")
