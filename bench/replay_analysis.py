"""The analysis of ``replay --prometheus`` alone: CPU microseconds per GPU per step, no server.

    python bench/replay_analysis.py                       # 2 nodes x 1 day at 30 s, best of 2
    python bench/replay_analysis.py --nodes 2 --days 2 --repeat 1 --dump /tmp/after.txt
    python bench/replay_analysis.py --profile             # cProfile of one replay, by own time

Builds the demo fleet's five dcgm-exporter signals (scripts/demo_prometheus.py, as
bench/prometheus_replay.py loads them into VictoriaMetrics) straight into the nodes' GPUs, as
``read_node`` would return them, then times ``replay_nodes`` over them: the rows, the analysis and the
join, without reading. ``--dump`` writes the result's repr (events, episodes, ledgers, costs), so that
two trees can be compared byte for byte: run each with ``ROOT=<tree>`` in turns (before, after, before,
after) on the same machine, since a shared machine's load moves the times.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("ROOT") or str(Path(__file__).resolve().parent.parent))

from exporter.offline.promhistory import export, names
from exporter.offline.promhistory.history import Gpu, _keep, replay_nodes
from scripts import demo_prometheus as demo

FIVE = ("util", "power_w", "mem_used_bytes", "temp_c", "sm_clock_hz")
START = 1_700_000_000.0
DAY_S = 86400.0

Nodes = list[tuple[dict[str, Gpu], dict[str, dict[float, float]]]]


def build(nodes: int, days: float, step: float) -> tuple[Nodes, dict[str, str]]:
    """Each node's GPUs with the demo's samples on the step, and every pod's job."""
    end = START + days * DAY_S
    fleet = demo.schedule(nodes, START, end)
    loops = demo.Loops(step)
    out: dict[str, dict[str, Gpu]] = {}
    for s in export.writers(names.DCGM_49):
        if s.attr not in FIVE:
            continue
        for node, runs in fleet.items():
            gpus = out.setdefault(node, {})
            for gpu in range(demo.GPUS):
                for labels, samples in demo._gpu_series(s, node, str(gpu), runs, loops, START, end, step):
                    times = [t for t, _ in samples]
                    _keep(gpus, names.DCGM_49, s, node, labels, times, [v for _, v in samples])
    pod_jobs = {f"{r.namespace}/{r.pod}": r.job for runs in fleet.values() for r in runs}
    return [(gpus, {}) for gpus in out.values()], pod_jobs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--step", type=float, default=30.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--dump", default="", help="write the result's repr here")
    args = parser.parse_args()
    nodes, pod_jobs = build(args.nodes, args.days, args.step)
    gpu_steps = args.nodes * demo.GPUS * args.days * DAY_S / args.step

    def run() -> object:
        return replay_nodes(nodes, pod_jobs, args.step, START, "prometheus", Path("bench"))

    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        run()
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(40)
    times, result = [], None
    for _ in range(args.repeat):
        start = time.process_time()
        result = run()
        times.append(time.process_time() - start)
    if times:
        best = min(times)
        print(
            f"{args.nodes} nodes x {demo.GPUS} GPUs x {args.days:g} days at {args.step:g} s: "
            f"best {best:.2f} s CPU of {len(times)} ({best / gpu_steps * 1e6:.1f} us per GPU-step)"
        )
    if args.dump and result is not None:
        Path(args.dump).write_text(repr(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
