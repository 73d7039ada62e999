"""Thread CPU of the work done every second, stage by stage, in the real serve command.

    python bench/analysis_cpu.py                 # 30 s warm-up, then 120 s measured
    python bench/analysis_cpu.py --seconds 60

Runs ``serve --simulate healthy`` (8 GPUs, 1 s sampling) in this process with the analysis stages
wrapped, and prints each stage's CPU seconds per minute (``time.thread_time``: the CPU of the thread that
ran it, which a loaded machine barely moves, unlike a sampling profiler's wall-clock samples). Stages
nest: ``analyze`` holds the others except ``add_gpu_points`` (feeding a collection's points in),
``gpu_points`` (readings into points) and ``snapshot build`` (the published snapshot). ``sampler cycle``
is the sampler thread's whole turn; ``nvml collect``, ``host collect`` and ``kubelet collect`` run on
their call threads. Every stage is net of the simulated driver's CPU inside it (counted per thread), so
what is left is the exporter's own: on a real node that time goes to libnvidia-ml instead.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import exporter.analysis.engine as engine  # noqa: E402
import exporter.collect.sampler as sampler  # noqa: E402
from exporter.analysis.ledger import GpuLedger  # noqa: E402
from exporter.sources.host import HostSource  # noqa: E402
from exporter.sources.kubelet import PodResourcesSource  # noqa: E402
from exporter.sources.nvml import NvmlSource  # noqa: E402

SPENT: dict[str, float] = {}
_DRIVER = threading.local()  # the simulated driver's CPU on this thread so far


def _driver_s() -> float:
    return getattr(_DRIVER, "s", 0.0)


def _count_driver() -> None:
    from exporter.sim import driver

    inner = driver._Entry.__call__

    def call(self: Any, *args: object) -> object:
        start = time.thread_time()
        try:
            return inner(self, *args)
        finally:
            _DRIVER.s = _driver_s() + time.thread_time() - start

    driver._Entry.__call__ = call  # type: ignore[method-assign]


def _timed(owner: object, name: str, label: str) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start, in_driver = time.thread_time(), _driver_s()
        try:
            return inner(*args, **kwargs)
        finally:
            own = time.thread_time() - start - (_driver_s() - in_driver)
            SPENT[label] = SPENT.get(label, 0.0) + own

    setattr(owner, name, timed)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _report(warmup: float, seconds: float) -> None:
    time.sleep(warmup)
    before = dict(SPENT)
    time.sleep(seconds)
    print(f"analysis stages, CPU s/min over {seconds:.0f} s after {warmup:.0f} s of warm-up:")
    for label in sorted(SPENT, key=lambda k: before.get(k, 0.0) - SPENT[k]):
        print(f"  {label:16s} {(SPENT[label] - before.get(label, 0.0)) / seconds * 60:.3f}", flush=True)
    os._exit(0)  # the server has no stop hook here


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds before measuring (windows fill)")
    args = parser.parse_args()
    _timed(sampler, "analyze", "analyze")
    _timed(engine, "gpu_features", "gpu_features")
    _timed(engine, "host_features", "host_features")
    _timed(engine.Analyzer, "_tick_ledgers", "ledger ticks")
    _timed(engine.Analyzer, "_decide", "verdicts")
    _timed(GpuLedger, "shares", "ledger shares")
    _timed(engine.Analyzer, "add_gpu_points", "add_gpu_points")
    _timed(sampler, "gpu_points", "gpu_points")
    _timed(sampler, "build", "snapshot build")
    _timed(sampler.Sampler, "turn", "sampler cycle")
    _timed(NvmlSource, "collect", "nvml collect")
    _timed(HostSource, "collect", "host collect")
    _timed(PodResourcesSource, "collect", "kubelet collect")
    _count_driver()
    threading.Thread(target=_report, args=(args.warmup, args.seconds), daemon=True).start()
    from exporter.cli import main as serve

    sys.argv = [
        "exporter",
        "--simulate",
        "healthy",
        "--listen-address",
        "127.0.0.1",
        "--port",
        str(_free_port()),
    ]
    serve()


if __name__ == "__main__":
    main()
