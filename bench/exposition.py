"""What the exposition costs, on one snapshot of a simulated 8-GPU node.

    python bench/exposition.py

prometheus_client writes /metrics (exporter/serve/metrics.py): the snapshot's families through a custom
collector, beside the library's process, platform and GC collectors. Prints, per render of the same
snapshot: its time in each format (OpenMetrics as served, under the library's UTF-8 escaping, and under
its default, which rewrites each sample's name character by character), of which the library's self
metrics; what that is per minute at 15 s and at 1 s scrapes (one render per snapshot and format, so per
scrape while snapshots are newer than scrapes); and which format this exporter's content negotiation
and the library's ``choose_encoder`` pick for a few Accept headers (why the negotiation stays ours).
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from prometheus_client.exposition import choose_encoder, generate_latest  # noqa: E402
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest  # noqa: E402
from prometheus_client.registry import CollectorRegistry  # noqa: E402

from exporter.collect.sampler import Sampler  # noqa: E402
from exporter.config.settings import Settings  # noqa: E402
from exporter.serve.http_negotiation import wants_openmetrics  # noqa: E402
from exporter.serve.metrics import Renderer, _openmetrics, families  # noqa: E402
from exporter.sim import SimulatedNode  # noqa: E402
from exporter.sources.errors import ErrorCounter  # noqa: E402
from exporter.sources.host import HostSource  # noqa: E402
from exporter.sources.nvml import NvmlSource  # noqa: E402

ACCEPT = [
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",  # Prometheus 2.x
    "application/openmetrics-text;q=0,text/plain",  # OpenMetrics refused
    "text/plain;q=0.5,application/openmetrics-text;version=1.0.0;q=0.2",  # text weighs more
    "application/openmetrics-text;version=2.0.0",  # a version not written here
]


def snapshot(gpus: int = 8, seconds: int = 70) -> object:
    """A snapshot after ``seconds`` of sampling on a virtual clock (windows and ledgers filled)."""
    now = [1_790_000_000.0]
    mono = [1000.0]
    node = SimulatedNode("healthy", n_gpus=gpus, clock=lambda: now[0])
    settings, errors = Settings(), ErrorCounter()
    nvml = NvmlSource.configured(node.install(), errors, settings, clock=lambda: now[0])
    host = HostSource(errors, clock=lambda: now[0], **node.host_options())  # type: ignore[arg-type]
    sampler = Sampler(
        settings, errors, {"host": host, "nvml": nvml}, clock=lambda: now[0], monotonic=lambda: mono[0]
    )
    try:
        for _ in range(seconds):
            now[0] += 1
            mono[0] += 1
            node.host.refresh()
            snap = sampler.cycle(wait_s=5)
    finally:
        sampler.stop()
        node.close()
    return snap


def ms(fn: object, number: int = 50) -> float:
    return min(timeit.repeat(fn, number=number, repeat=7)) / number * 1000  # type: ignore[arg-type]


def main() -> int:
    snap = snapshot()
    settings = Settings()
    renderer = Renderer(settings.detail, settings.prices)
    renderer.render(snap)  # type: ignore[arg-type]  # points the registry's collector at this snapshot
    self_only = CollectorRegistry(auto_describe=False)  # the library's own collectors, without ours
    for collector in list(renderer.registry._collector_to_names)[1:]:
        self_only.register(collector)
    render = {"text": ms(lambda: generate_latest(renderer.registry))}
    render["openmetrics"] = ms(lambda: _openmetrics(renderer.registry))  # as served
    default_escaping = ms(lambda: openmetrics_latest(renderer.registry))
    own = {"text": ms(lambda: generate_latest(self_only))}
    own["openmetrics"] = ms(lambda: _openmetrics(self_only))
    fams = families(snap, settings.detail, settings.prices)  # type: ignore[arg-type]
    series = sum(len(f.samples) for f in fams)
    extra = sum(len(m.samples) for m in self_only.collect())
    print(f"one snapshot of a simulated 8-GPU node: {len(fams)} families, {series} series")
    print(f"(and {extra} series of the library's process, platform and GC collectors)\n")
    print(f"{'one render (ms)':44s} {'text':>10s} {'openmetrics':>12s}")
    label = "families and body, through prometheus_client"
    print(f"{label:44s} {render['text']:10.3f} {render['openmetrics']:12.3f}")
    print(f"{'of which the self metrics':44s} {own['text']:10.3f} {own['openmetrics']:12.3f}")
    label = "(the library's default escaping)"
    print(f"{label:44s} {'':10s} {default_escaping:12.3f}")
    for period in (15, 1):
        per_min = {k: v * 60 / period / 1000 for k, v in render.items()}
        label = f"CPU s/min, one format scraped every {period} s"
        print(f"{label:44s} {per_min['text']:10.4f} {per_min['openmetrics']:12.4f}")
    print(f"\n{'Accept':100s} here          prometheus_client")
    for accept in ACCEPT:
        here = "openmetrics" if wants_openmetrics(accept) else "text"
        theirs = choose_encoder(accept)[1].split(";")[0]
        theirs = "openmetrics" if "openmetrics" in theirs else "text"
        print(f"{accept:100s} {here:13s} {theirs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
