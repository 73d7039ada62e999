"""What one ``replay --prometheus`` costs: a real Prometheus loaded (promtool) with the simulated fleet of
scripts/demo_prometheus.py at a 30 s scrape, then one replay over the whole range, in this process.

Prints the wall time of loading and of the replay (reading and analysis apart), the peak RSS, the queries
issued and samples read, and the cost per GPU-day, extrapolated to the issue's week of 100 nodes x 8 GPUs.
The issue's size itself (80 M samples) takes promtool, which re-reads its input once per two-hour block,
far longer to load than the replay takes: run a smaller size and scale by GPU-days (the replay's work is
linear in them, one node at a time).

    python bench/prometheus_replay.py [--nodes 4] [--days 1] [--step 30]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exporter.offline.promhistory import history
from exporter.offline.promhistory.history import Progress, Request, replay_prometheus
from scripts import demo_prometheus as demo

TARGET_GPU_DAYS = 100 * 8 * 7.0  # the week of 100 nodes x 8 GPUs
DAY_S = 86400.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--step", type=float, default=30.0)
    args = parser.parse_args(argv)
    end = float(int(time.time()) // 3600 * 3600 - 3600)
    start = end - args.days * DAY_S
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="bench-prometheus-"))
    began = time.monotonic()
    fleet = demo.schedule(args.nodes, start, end)
    count = demo.openmetrics(work / "history.om", fleet, demo.Loops(args.step), start, end)
    written = time.monotonic() - began
    proc, url = demo.load_prometheus(work, work / "history.om")
    loaded = time.monotonic() - began - written
    seen = Progress()
    reading = [0.0]
    read_node = history.read_node

    def timed_read(*a: object, **k: object) -> object:  # the reading's share of the replay
        t = time.monotonic()
        out = read_node(*a, **k)  # type: ignore[arg-type]
        reading[0] += time.monotonic() - t
        return out

    history.read_node = timed_read  # type: ignore[assignment]
    try:
        t0 = time.monotonic()
        result = replay_prometheus(
            Request(url, start, end), prices=None, on_progress=lambda p: _keep(seen, p)
        )
        wall = time.monotonic() - t0
    finally:
        history.read_node = read_node
        proc.terminate()
        proc.wait(timeout=30)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gpu_days = args.nodes * demo.GPUS * args.days
    per_day = wall / gpu_days
    print(
        f"fleet: {args.nodes} nodes x {demo.GPUS} GPUs, {args.days:g} days at {args.step:g} s: "
        f"{count:,} samples"
    )
    print(f"load: openmetrics written in {written:.0f} s, promtool + Prometheus ready in {loaded:.0f} s")
    print(
        f"replay: {wall:.1f} s wall ({reading[0]:.1f} s reading, {wall - reading[0]:.1f} s analysis), "
        f"peak RSS {rss_mib:.0f} MiB, {seen.queries} queries, {seen.samples:,} samples read, "
        f"{len(result.stats.gpus)} GPUs, {result.stats.rows:,} rows"
    )
    print(
        f"cost: {per_day:.2f} s per GPU-day ({per_day * 1e6 / (DAY_S / args.step):.0f} us per GPU-step); "
        f"the issue's week of 100 x 8 GPUs ({TARGET_GPU_DAYS:.0f} GPU-days): "
        f"~{per_day * TARGET_GPU_DAYS / 60:.0f} min"
    )
    return 0


def _keep(into: Progress, p: Progress) -> None:
    into.queries, into.samples, into.nodes_done = p.queries, p.samples, p.nodes_done


if __name__ == "__main__":
    raise SystemExit(main())
