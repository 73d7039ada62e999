"""Series per metric family of a simulated 8 x H100 node, at the default detail and with every detail
category on (what the node exposed before the series budget), against the budget.

    python bench/series.py                       # healthy node, one pod holding every GPU
    python bench/series.py --scenario nvlink_down --gpus 8

The node is sampled in-process on a virtual clock (70 one-second collections: the window fills and the
slow collections run) and rendered by the real renderer; nothing is timed.
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
    args = parser.parse_args()
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
