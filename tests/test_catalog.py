"""The signal catalog is the one place a plain per-GPU signal is described: the trace tables, the
metric families, the detail categories and docs/metrics.md all come from it."""

from __future__ import annotations

import dataclasses
import io
import re

from exporter.analysis.points import GpuPoint
from exporter.offline import traces
from exporter.policy import catalog, detail
from exporter.sources.readings import GpuReading
from tests.conftest import REPO, step

READING_FIELDS = {f.name for f in dataclasses.fields(GpuReading)}
POINT_FIELDS = {f.name for f in dataclasses.fields(GpuPoint)}


def test_every_signal_names_real_attributes() -> None:
    for s in catalog.SIGNALS:
        if s.metric is not None and s.read is None:
            assert s.name in READING_FIELDS, s.name
        if s.point is not None:
            assert s.point in POINT_FIELDS, s.point
        assert s.detail is None or s.detail in detail.CATEGORIES, s.detail


def test_trace_tables_are_the_catalogs() -> None:
    written = {header.split(" [")[0] for header, kind, *_ in traces.WRITE_COLUMNS if kind != "host"}
    assert written == {s.column for s in catalog.SIGNALS if s.column}
    for s in catalog.SIGNALS:
        for name in (s.column, *s.aliases) if s.column else ():
            assert traces.GPU_COLUMNS[name][1] == s.trace_attr


def test_written_trace_reads_back_every_catalog_column() -> None:
    """A point written with every catalog column reads back with the same values (units round-trip)."""
    values = {
        "util": 0.5,
        "mem_used_bytes": 4.0 * 2**30,
        "power_w": 312.5,
        "sm_clock_hz": 1.98e9,
        "reasons": 4,
    }
    generic = {s.name: 3.0 for s in catalog.READS if s.column}
    point = GpuPoint(t=1_700_000_000.0, extra=generic, **values)  # type: ignore[arg-type]
    out = io.StringIO()
    traces.TraceWriter(out).gpu("0", "H100", point)
    (row,) = traces.read_text(out.getvalue())
    for attr, value in values.items():
        assert getattr(row.point, attr) == value, attr
    assert dict(row.point.extra) == generic


def test_detail_categories_list_the_catalogs_families() -> None:
    for s in catalog.SIGNALS:
        if s.metric is not None and s.detail is not None:
            assert catalog.family_name(s) in detail.DETAIL[s.detail][0]


def test_docs_table_is_generated_from_the_catalog() -> None:
    doc = (REPO / "docs" / "metrics.md").read_text()
    block = re.search(r"@generated-begin readings -->\n(.*?)<!-- @generated-end", doc, re.S)
    assert block is not None
    documented = set(re.findall(r"^\| `(gpu_[a-z0-9_]+)` \|", block.group(1), re.M))
    assert documented == {catalog.family_name(s) for s in catalog.SIGNALS if s.metric}
    rest = doc.replace(block.group(1), "")
    for name in documented:  # described once, in the generated table
        assert not re.search(rf"^\| `{name}` \|", rest, re.M), name


def test_ecc_counts_from_the_driver_to_the_exposition_and_the_trace(make_node, make_sampler, clock) -> None:
    """The catalog's ECC rows, read by the NVML source over the simulator, exported with --detail ecc
    only, and carried through a recorded trace."""
    from exporter.analysis.points import gpu_points
    from exporter.policy.detail import parse_detail
    from exporter.serve.metrics import Renderer
    from tests.test_series_budget import samples

    sampler, _ = make_sampler(make_node("ecc_pending"))
    snap = step(sampler, clock, cycles=3)
    assert "gpu_ecc_errors_total" not in samples(Renderer().render(snap)[0])  # not in the series budget
    ecc = {
        (x.labels["gpu"], x.labels["type"], x.labels["counter"]): x.value
        for x in samples(Renderer(parse_detail("ecc")).render(snap)[0])["gpu_ecc_errors_total"]
    }
    assert len(ecc) == 8 * 4
    assert (
        ecc["5", "uncorrected", "volatile"] == ecc["5", "uncorrected", "aggregate"] == 1
    )  # the pending remap
    assert ecc["3", "corrected", "aggregate"] == 3 and ecc["3", "corrected", "volatile"] == 0
    assert ecc["0", "uncorrected", "volatile"] == 0

    reading = snap.gpus[5].reading
    assert reading is not None
    out = io.StringIO()
    for point in gpu_points(reading, None, None, None):
        traces.TraceWriter(out).gpu("5", "H100", point)
    row = traces.read_text(out.getvalue())[0]
    assert row.point.extra["ecc_uncorrected_volatile"] == 1
    assert "ecc.errors.uncorrected.volatile.total" in out.getvalue().splitlines()[0]
