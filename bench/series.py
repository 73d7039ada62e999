"""Series per metric family of a simulated 8 x H100 node, at the default detail and with every detail
category on (what the node exposed before the series budget), against the budget.

    python bench/series.py                       # healthy node, one pod holding every GPU
    python bench/series.py --scenario nvlink_down --gpus 8
    python bench/series.py --served 300 --scenario short_tour   # what the demo's node serves

The node is sampled in-process on a virtual clock (70 one-second collections: the window fills and the
slow collections run) and rendered by the real renderer; nothing is timed. ``--served SECONDS`` instead
starts the real command on the simulated node and scrapes its /metrics over real HTTP for that long:
what a Prometheus gets, the node checks, the server's own metrics and the runtime's series included. It
prints the largest exposition seen and the worst case of that node, every ledger state on every GPU and
one firing verdict on each (``worst_case``): the series budget bounds that.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def series_per_family(body: bytes) -> Counter[str]:
    """Sample lines of a text exposition, by metric name."""
    counts: Counter[str] = Counter()
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            counts[line.split("{", 1)[0].split(" ", 1)[0]] += 1
    return counts


# prometheus_client's process, platform and GC collectors: the same on every node whatever its GPUs,
# counted beside the budget, which is the exporter's own families
RUNTIME_PREFIXES = ("process_", "python_")
LEDGER = "gpu_time_seconds_total"
SINCE = "gpu_bottleneck_since_timestamp_seconds"


def own_and_runtime(counts: Counter[str]) -> tuple[int, int]:
    runtime = sum(n for name, n in counts.items() if name.startswith(RUNTIME_PREFIXES))
    return sum(counts.values()) - runtime, runtime


def worst_case(counts: Counter[str], gpus: int) -> int:
    """The exporter's own series of this node once every GPU has been in every ledger state (each state
    seen stays a counter) with one verdict firing on each (its onset series): what the node can come to
    at the default detail without a change in its GPUs, pods or checks."""
    from exporter.analysis.ledger import STATES

    own, _ = own_and_runtime(counts)
    return own - counts[LEDGER] - counts[SINCE] + len(STATES) * gpus + gpus


def served(scenario: str, gpus: int, seconds: float) -> Counter[str]:
    """The largest exposition the real command served over ``seconds`` on a simulated node."""
    import time
    from urllib.request import urlopen

    from scripts.stack import free_port, start_exporter, wait_http

    port = free_port()
    proc = start_exporter(["--simulate", scenario, "--sim-gpus", str(gpus)], port)
    largest: Counter[str] = Counter()
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_http(url, proc=proc)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            counts = series_per_family(urlopen(url, timeout=10).read())
            if counts.total() > largest.total():
                largest = counts
            time.sleep(2)
    finally:
        proc.terminate()
        proc.wait(15)
    return largest


def main_served(scenario: str, gpus: int, seconds: float) -> int:
    from exporter.policy.thresholds import SERIES_BUDGET

    counts = served(scenario, gpus, seconds)
    own, runtime = own_and_runtime(counts)
    worst = worst_case(counts, gpus)
    budget = SERIES_BUDGET.value * gpus / 8
    print(f"the real command on a simulated {gpus} x H100, scenario {scenario}, scraped for {seconds:g} s")
    print(f"largest exposition: {own + runtime} series ({own} the exporter's own, {runtime} the runtime's)")
    print(f"  ledger states seen: {counts[LEDGER]} series; firing verdicts: {counts[SINCE]}")
    print(f"worst case of this node (every ledger state, one verdict firing per GPU): {worst}")
    print(f"budget at the default detail: {budget:g} series; {'met' if worst <= budget else 'MISSED'}")
    return 0 if worst <= budget else 1


def main() -> int:
    from exporter.policy.detail import CATEGORIES
    from exporter.policy.thresholds import SERIES_BUDGET
    from exporter.serve.metrics import Renderer
    from exporter.sim.fleet import stepped_snapshot

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", default="healthy")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--served", type=float, metavar="SECONDS", help="scrape the real command this long")
    args = parser.parse_args()
    if args.served:
        return main_served(args.scenario, args.gpus, args.served)
    snapshot = stepped_snapshot(args.scenario, n_gpus=args.gpus)
    before = series_per_family(Renderer(frozenset(CATEGORIES)).render(snapshot)[0])
    after = series_per_family(Renderer().render(snapshot)[0])
    print(f"simulated {args.gpus} x H100, scenario {args.scenario}: series per family\n")
    print(f"{'family':46s} {'--detail all':>12s} {'default':>8s}")
    for name in sorted(set(before) | set(after), key=lambda n: (-before.get(n, 0), n)):
        print(f"{name:46s} {before.get(name, 0):12d} {after.get(name, 0):8d}")
    total_before, total_after = sum(before.values()), sum(after.values())
    print(f"{'total':46s} {total_before:12d} {total_after:8d}")
    budget = SERIES_BUDGET.value * args.gpus / 8
    print(
        f"\nbudget at the default detail: {budget:g} series; {'met' if total_after <= budget else 'MISSED'}"
    )
    return 0 if total_after <= budget else 1


if __name__ == "__main__":
    sys.exit(main())
