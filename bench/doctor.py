"""Cost of the node checks on a simulated 8 x H100 node.

    python bench/doctor.py

Prints, as JSON: the wall time of the `doctor` command as a user runs it (a separate process, start-up
included), and for the live checker the wall and CPU time of a full round (every check, P2P matrix and
pods included) and of a cheap round, with the NVML calls each makes. The simulated driver's own CPU (what
libnvidia-ml would spend on a real node) is reported apart. Medians of several rounds.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

ROUNDS = 7


def _command_s() -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "exporter", "doctor", "--simulate", "healthy"],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _rounds(slow: bool) -> dict[str, float]:
    from exporter.config.settings import Settings
    from exporter.doctor.live import NodeChecker
    from exporter.sim import SimulatedNode

    with SimulatedNode("healthy", n_gpus=8) as node:
        settings = Settings(simulate="healthy", pod_resources_socket=node.kubelet_socket)
        checker = NodeChecker.for_settings(settings, node.install(), node.host_options())
        checker.run_once(slow=True)  # warm: imports, first gRPC channel
        wall, cpu, sim, calls = [], [], [], []
        for _ in range(ROUNDS):
            node.library.calls.clear()
            sim_before = node.cpu_seconds()
            w0, c0 = time.perf_counter(), time.process_time()
            checker.run_once(slow=slow)
            wall.append(time.perf_counter() - w0)
            sim.append(node.cpu_seconds() - sim_before)
            cpu.append(time.process_time() - c0 - sim[-1])
            calls.append(sum(node.library.calls.values()))
    return {
        "wall_ms": round(statistics.median(wall) * 1000, 1),
        "exporter_cpu_ms": round(statistics.median(cpu) * 1000, 1),
        "simulated_driver_cpu_ms": round(statistics.median(sim) * 1000, 1),
        "nvml_calls": statistics.median(calls),
    }


def main() -> None:
    figures = {
        "doctor_command_wall_s": round(_command_s(), 2),
        "live_full_round": _rounds(slow=True),
        "live_cheap_round": _rounds(slow=False),
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
