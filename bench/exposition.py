"""The exposition written by hand against prometheus_client's, on one snapshot of a simulated 8-GPU node.

    python bench/exposition.py

Prints, per render of the same snapshot: the time of this exporter's renderer (families and text), and
the time prometheus_client takes to write the same samples from its own metric objects (text and
OpenMetrics; building those objects is not counted, so it is the library's best case); how many lines
of the two bodies differ and how; and which format each content negotiation picks for a few Accept
headers. docs/development.md quotes the figures: they are why the exposition stays hand-written.
"""

from __future__ import annotations

import re
import sys
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from prometheus_client.core import Metric  # noqa: E402
from prometheus_client.exposition import choose_encoder, generate_latest  # noqa: E402
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest  # noqa: E402

from exporter.collect.sampler import Sampler  # noqa: E402
from exporter.config.settings import Settings  # noqa: E402
from exporter.serve import metrics  # noqa: E402
from exporter.serve.http_negotiation import wants_openmetrics  # noqa: E402
from exporter.sim import SimulatedNode  # noqa: E402
from exporter.sources.errors import ErrorCounter  # noqa: E402
from exporter.sources.host import HostSource  # noqa: E402
from exporter.sources.nvml import NvmlSource  # noqa: E402

_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
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
    nvml = NvmlSource(node.install(), errors, clock=lambda: now[0], slow_interval_s=settings.slow_interval_s)
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


def library_metrics(fams: list[metrics.Family]) -> list[Metric]:
    out = []
    for fam in fams:
        metric = Metric(fam.name, fam.doc, fam.kind)
        name = fam.name + "_total" if fam.kind == "counter" else fam.name
        for text, value in fam.samples:
            pairs = {
                k: re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], v)
                for k, v in _LABEL.findall(text)
            }
            metric.add_sample(name, pairs, value)
        out.append(metric)
    return out


class _Registry:
    def __init__(self, collected: list[Metric]) -> None:
        self.collected = collected

    def collect(self) -> list[Metric]:
        return self.collected


def ms(fn: object, number: int = 50) -> float:
    return min(timeit.repeat(fn, number=number, repeat=7)) / number * 1000  # type: ignore[arg-type]


def main() -> int:
    snap = snapshot()
    settings = Settings()
    fams = metrics.families(snap, settings.detail, settings.prices)  # type: ignore[arg-type]
    registry = _Registry(library_metrics(fams))
    ours = {
        "text": ms(lambda: metrics.expose(metrics.families(snap, settings.detail, settings.prices), False)),  # type: ignore[arg-type]
        "openmetrics": ms(
            lambda: metrics.expose(metrics.families(snap, settings.detail, settings.prices), True)
        ),  # type: ignore[arg-type]
    }
    library = {
        "text": ms(lambda: generate_latest(registry)),  # type: ignore[arg-type]
        "openmetrics": ms(lambda: openmetrics_latest(registry)),  # type: ignore[arg-type]
    }
    samples = sum(len(f.samples) for f in fams)
    print(f"one snapshot of a simulated 8-GPU node: {len(fams)} families, {samples} samples\n")
    print(f"{'render (ms)':34s} {'text':>10s} {'openmetrics':>12s}")
    print(f"{'this exporter (families + text)':34s} {ours['text']:10.3f} {ours['openmetrics']:12.3f}")
    print(f"{'prometheus_client (writing only)':34s} {library['text']:10.3f} {library['openmetrics']:12.3f}")
    ratio = {k: library[k] / ours[k] for k in ours}
    print(f"{'library / here':34s} {ratio['text']:9.1f}x {ratio['openmetrics']:11.1f}x")
    for openmetrics, write in ((False, generate_latest), (True, openmetrics_latest)):
        a = metrics.expose(fams, openmetrics).decode().splitlines()
        b = write(registry).decode().splitlines()  # type: ignore[arg-type]
        differ = [(x, y) for x, y in zip(a, b, strict=False) if x != y]
        kind = "OpenMetrics" if openmetrics else "text"
        print(f"\n{kind}: {len(a)} lines here, {len(b)} from the library, {len(differ)} differ")
        for x, y in differ[:1]:
            print(f"  here:    ...{x[-90:]}\n  library: ...{y[-90:]}")
    print(f"\n{'Accept':100s} here          prometheus_client")
    for accept in ACCEPT:
        here = "openmetrics" if wants_openmetrics(accept) else "text"
        theirs = choose_encoder(accept)[1].split(";")[0]
        theirs = "openmetrics" if "openmetrics" in theirs else "text"
        print(f"{accept:100s} {here:13s} {theirs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
