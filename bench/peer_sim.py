"""Runs nvitop-exporter over this project's simulated driver (bench/peer_cpu.py starts it).

    .bench-venv/bin/python bench/peer_sim.py --gpus 8 -- --bind-address 127.0.0.1 --port 9500

It runs inside the peer's own virtual environment (nvitop-exporter and its dependencies only), so it
loads the simulator's driver modules straight from the checkout: ``exporter/sim/__init__.py`` also
starts the kubelet and /proc simulators, which need packages that environment does not have and which
the peer never reads. The fake library goes where nvidia-ml-py keeps its loaded libnvidia-ml
(``pynvml.nvmlLib``), exactly as ``--simulate`` does for the exporter, so both processes run the same
bindings over the same fake driver. On SIGTERM, and on SIGUSR1 so far, it prints the simulated
driver's CPU seconds.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def install(gpus: int, scenario: str) -> object:
    sys.path.insert(0, str(REPO))
    package = types.ModuleType("exporter.sim")
    package.__path__ = [str(REPO / "exporter" / "sim")]
    sys.modules["exporter.sim"] = package
    import pynvml

    from exporter.sim.driver import FakeNvmlLibrary
    from exporter.sim.faults import FaultPlan
    from exporter.sim.physics import NodeModel
    from exporter.sim.scenarios import parse_scenario

    # the same model and sample period as SimulatedNode's defaults
    model = NodeModel(parse_scenario(scenario), n_gpus=gpus, clock=time.time, sample_period_s=0.2)
    library = FakeNvmlLibrary(model, FaultPlan())
    with pynvml.libLoadLock:
        pynvml.nvmlLib = library
        pynvml._nvmlGetFunctionPointer_cache.clear()
    return library


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--scenario", default="healthy")
    parser.add_argument("peer_args", nargs="*", help="nvitop-exporter's own arguments (after --)")
    args = parser.parse_args()
    library = install(args.gpus, args.scenario)

    def so_far(signum: int, frame: object) -> None:  # the benchmark asks at each phase's ends
        print(f"simulated driver used {library.cpu_s:.3f} s of CPU", file=sys.stderr, flush=True)  # type: ignore[attr-defined]

    def stop(signum: int, frame: object) -> None:
        so_far(signum, frame)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGUSR1, so_far)
    from nvitop_exporter.cli import main as peer_main

    sys.argv = ["nvitop-exporter", *args.peer_args]
    return peer_main()


if __name__ == "__main__":
    sys.exit(main())
