"""/metrics content: the metric contract, units, values, and nothing unsupported."""

from __future__ import annotations

import gzip
import math
import re
from dataclasses import replace

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from exporter.analysis.kinds import NAMES
from exporter.policy.detail import CATEGORIES
from exporter.serve.metrics import Renderer
from exporter.sim import Capabilities
from tests.conftest import REPO, step

# The metric contract: the names alert rules, dashboards and the Helm chart are built against, fixed by
# the project's brief (its metric contract table); written out here so that the tests read nothing outside
# the repository.
CONTRACT = frozenset(
    {
        "gpu_bottleneck",
        "gpu_bottleneck_score",
        "gpu_clock_event_active",
        "gpu_clock_event_seconds_total",
        "gpu_clock_hertz",
        "gpu_clock_max_hertz",
        "gpu_dram_active_ratio",
        "gpu_energy_joules_total",
        "gpu_exporter_build_info",
        "gpu_exporter_collect_errors_total",
        "gpu_exporter_last_collect_timestamp_seconds",
        "gpu_exporter_source_duration_seconds",  # node_exporter's pair; it replaced collect_duration
        "gpu_exporter_source_up",
        "gpu_fabric_state",
        "gpu_info",
        "gpu_memory_total_bytes",
        "gpu_memory_used_bytes",
        "gpu_memory_utilization_ratio",
        "gpu_node_cpu_core_busy_max_ratio",
        "gpu_node_cpu_iowait_ratio",
        "gpu_node_disk_read_bytes_total",
        "gpu_node_pressure_ratio",
        "gpu_node_shm_size_bytes",
        "gpu_node_shm_used_bytes",
        "gpu_nvlink_bytes_total",
        "gpu_nvlink_errors_total",
        "gpu_nvlink_up",
        "gpu_p2p_status",
        "gpu_pcie_bytes_total",
        "gpu_power_default_limit_watts",
        "gpu_power_limit_watts",
        "gpu_power_watts",
        "gpu_power_window_watts",
        "gpu_sm_active_ratio",
        "gpu_sm_occupancy_ratio",
        "gpu_temperature_celsius",
        "gpu_temperature_slowdown_celsius",
        "gpu_tensor_active_ratio",
        "gpu_utilization_idle_fraction",
        "gpu_utilization_ratio",
        "gpu_utilization_window_ratio",
        "gpu_xid_errors_total",
    }
)


ALL_DETAIL = frozenset(CATEGORIES)
# what the metric contract names are at the default detail: its per-link, per-pair, per-XID and other
# fine-grained families come with --detail; their per-GPU aggregates always
DEFAULT_ONLY = frozenset(
    {
        "gpu_nvlink_links_up",
        "gpu_nvlink_links_expected",
        "gpu_nvlink_traffic_bytes_total",
        "gpu_nvlink_link_errors_total",
        "gpu_p2p_failing_pairs",
        "gpu_fabric_registered",
        "gpu_xid_errors_by_criticality_total",
    }
)
DETAIL_ONLY = frozenset(
    {
        "gpu_nvlink_up",
        "gpu_nvlink_bytes_total",
        "gpu_nvlink_errors_total",
        "gpu_p2p_status",
        "gpu_xid_errors_total",
        "gpu_bottleneck_score",
        "gpu_clock_event_active",
        "gpu_clock_event_seconds_total",
        "gpu_clock_max_hertz",
        "gpu_fabric_state",
        "gpu_sm_occupancy_ratio",
        "gpu_tensor_active_ratio",
        "gpu_dram_active_ratio",
    }
)


def contract_names() -> set[str]:
    return set(CONTRACT)


def samples_by_name(body: bytes) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


@pytest.fixture
def healthy_body(make_node, make_sampler, clock):
    node = make_node("healthy")
    sampler, _ = make_sampler(node, detail=ALL_DETAIL)  # the sources read what the detail shows
    snap = step(sampler, clock, cycles=5)
    body, content_type = Renderer(ALL_DETAIL).render(snap)
    return node, snap, body, content_type


def test_every_contract_metric_of_the_simulated_h100_is_exported(healthy_body):
    _, snap, body, content_type = healthy_body
    assert content_type.startswith("text/plain; version=0.0.4")
    missing = (contract_names() | DEFAULT_ONLY) - set(samples_by_name(body))
    assert not missing, f"contract metrics missing from /metrics --detail all: {sorted(missing)}"
    default = set(samples_by_name(Renderer().render(snap)[0]))
    missing = (contract_names() - DETAIL_ONLY) | DEFAULT_ONLY
    assert not missing - default, f"missing at the default detail: {sorted(missing - default)}"
    assert not default & DETAIL_ONLY, sorted(default & DETAIL_ONLY)


def test_per_gpu_series_carry_gpu_and_uuid(healthy_body):
    _, _, body, _ = healthy_body
    for name, samples in samples_by_name(body).items():
        if name.startswith("gpu_") and not name.startswith(("gpu_node_", "gpu_exporter_")):
            assert all(s.labels.get("gpu") and s.labels.get("uuid") for s in samples), name


def test_conventions_counters_and_no_nan(healthy_body):
    _, _, body, _ = healthy_body
    for family in text_string_to_metric_families(body.decode()):
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), family.name
        assert not re.search(r"percent|_pct", family.name)
        for sample in family.samples:
            assert not math.isnan(sample.value), sample


def test_values_and_units_match_the_device(healthy_body):
    node, snap, body, _ = healthy_body
    s = samples_by_name(body)

    def value(name: str, **labels: str) -> float:
        matches = [x.value for x in s[name] if all(x.labels.get(k) == v for k, v in labels.items())]
        assert len(matches) == 1, (name, labels, matches)
        return matches[0]

    g = node.model.gpus[0]
    reading = snap.gpus[0].reading
    assert value("gpu_memory_total_bytes", gpu="0") == 81559 * 2**20
    assert value("gpu_power_default_limit_watts", gpu="0") == 700
    assert value("gpu_power_watts", gpu="0") == reading.power_w
    assert value("gpu_clock_max_hertz", gpu="0", clock="sm") == 1.98e9
    assert value("gpu_temperature_slowdown_celsius", gpu="0") == 87
    assert value("gpu_temperature_celsius", gpu="0", sensor="gpu") == round(g.temp_c)
    assert value("gpu_energy_joules_total", gpu="0") == pytest.approx(reading.energy_j)
    assert value("gpu_utilization_window_ratio", gpu="0", stat="max") <= 1.0
    assert value("gpu_fabric_state", gpu="0", state="completed") == 1
    assert value("gpu_fabric_state", gpu="0", state="not_started") == 0
    assert value("gpu_p2p_status", gpu="0", peer_gpu="1", capability="nvlink") == 1
    assert len([x for x in s["gpu_nvlink_up"] if x.labels["gpu"] == "0"]) == 18
    assert value("gpu_xid_errors_total", gpu="0", xid="79") == 0  # critical XIDs start at zero
    info = next(x for x in s["gpu_info"] if x.labels["gpu"] == "0").labels
    assert info["model"] == "NVIDIA H100 80GB HBM3" and info["driver_version"] == "550.90.07"
    assert info["uuid"] == g.uuid and info["pci_bus_id"] == g.pci_bus_id and info["cuda_version"] == "12.4"
    assert value("gpu_node_shm_size_bytes", mountpoint="/dev/shm") == 64 * 2**30
    assert value("gpu_exporter_nvml_up") == 1


def test_unsupported_signals_are_absent_not_zero(make_node, make_sampler, clock):
    caps = Capabilities(gpm=False, fabric=False, memory_temperature=False)
    sampler, _ = make_sampler(make_node("healthy", capabilities=caps), detail=ALL_DETAIL)
    body, _ = Renderer(ALL_DETAIL).render(step(sampler, clock, cycles=3))
    names = samples_by_name(body)
    for absent in (
        "gpu_sm_active_ratio",
        "gpu_tensor_active_ratio",
        "gpu_dram_active_ratio",
        "gpu_fabric_state",
    ):
        assert absent not in names
    assert {x.labels["sensor"] for x in names["gpu_temperature_celsius"]} == {"gpu"}


def test_openmetrics_and_gzip(healthy_body):
    _, snap, _, _ = healthy_body
    renderer = Renderer()
    body, content_type = renderer.render(snap, openmetrics=True)
    assert content_type.startswith("application/openmetrics-text")
    families = {f.name: f for f in parse_openmetrics(body.decode())}
    assert families["gpu_energy_joules"].type == "counter"
    zipped, _ = renderer.render(snap, gzipped=True)
    plain, _ = renderer.render(snap)
    assert gzip.decompress(zipped) == plain


# the self metrics whose values move between two writes of the same snapshot
_MOVING = re.compile(rb"^((?:process_|python_gc_)\S*) \S+$", re.MULTILINE)


def test_the_body_is_what_prometheus_client_writes(healthy_body):
    """/metrics at the default detail is the library's own output for the snapshot's registry, byte for
    byte in both formats (but for the values of the self metrics that move between two writes: CPU,
    memory, collections), and both of the library's parsers read it, process_* series included."""
    _, snap, _, _ = healthy_body
    renderer = Renderer()
    for openmetrics, write, parse in (
        (False, generate_latest, text_string_to_metric_families),
        (True, generate_openmetrics, parse_openmetrics),
    ):
        body, _ = renderer.render(snap, openmetrics=openmetrics)
        again = write(renderer.registry)
        assert _MOVING.sub(rb"\1 X", body) == _MOVING.sub(rb"\1 X", again)
        families = {f.name: f for f in parse(body.decode())}
        assert families["gpu_up"].type == "gauge" and len(families["gpu_up"].samples) == 8
        for name in ("process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds"):
            assert families[name].samples[0].value > 0, name
        assert families["python_info"].samples[0].labels["implementation"] == "CPython"
        assert "python_gc_collections" in families


@pytest.mark.parametrize("scenario", ["healthy", "time_slicing", "zombie_process"])
def test_every_name_is_legacy_valid_so_the_utf8_escaping_writes_the_same_bytes(
    scenario, make_node, make_sampler, clock
):
    """The OpenMetrics body is written under the library's UTF-8 escaping (the cheap one): with every
    metric and label name legacy-valid it is the default escaping's body byte for byte, at every detail,
    pods and processes included. A name that was not would be quoted here and underscored there."""
    node = make_node(scenario)
    sampler, _ = make_sampler(node, detail=ALL_DETAIL, pods=True)
    snap = step(sampler, clock, cycles=20)
    renderer = Renderer(ALL_DETAIL)
    body, _ = renderer.render(snap, openmetrics=True)
    assert b'pod="' in body or scenario == "healthy"
    assert _MOVING.sub(rb"\1 X", body) == _MOVING.sub(rb"\1 X", generate_openmetrics(renderer.registry))


def test_render_is_cached_per_snapshot(healthy_body):
    _, snap, _, _ = healthy_body
    renderer = Renderer()
    first, _ = renderer.render(snap)
    assert renderer.render(snap)[0] is first


def test_docs_describe_every_exported_metric(make_node, make_sampler, clock):
    documented = set(
        re.findall(r"`((?:gpu|process|python)_\w+)`", (REPO / "docs" / "metrics.md").read_text())
    )
    exported: set[str] = set()
    for scenario in ("healthy", "nvlink_down", "gpu_lost:onset=0"):
        node = make_node(scenario)
        sampler, _ = make_sampler(node, detail=ALL_DETAIL)
        exported |= set(samples_by_name(Renderer(ALL_DETAIL).render(step(sampler, clock, cycles=3))[0]))
        node.close()
    assert not exported - documented, f"document these in docs/metrics.md: {sorted(exported - documented)}"
    missing = contract_names() - documented
    assert not missing, sorted(missing)


def test_label_values_are_escaped_and_round_trip():
    from exporter.collect.sampler import EMPTY_SNAPSHOT
    from exporter.sources.readings import HostReading, ShmReading

    odd = '/mnt/we"ird\\path\nline'
    host = HostReading(t=0.0, shm=(ShmReading(mountpoint=odd, size_bytes=10, used_bytes=5),))
    snap = replace(EMPTY_SNAPSHOT, seq=1, host=host)
    for openmetrics in (False, True):
        body, _ = Renderer().render(snap, openmetrics=openmetrics)
        parse = parse_openmetrics if openmetrics else text_string_to_metric_families
        samples = {s.name: s for f in parse(body.decode()) for s in f.samples}
        assert samples["gpu_node_shm_used_bytes"].labels["mountpoint"] == odd


def test_verdicts_are_exported_per_gpu_and_kind(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("data_starvation"))
    body, _ = Renderer(frozenset({"scores"})).render(step(sampler, clock, cycles=90))  # start-up, a minute
    verdicts = samples_by_name(body)["gpu_bottleneck"]
    firing = {(x.labels["gpu"], x.labels["kind"], x.labels["cause"]) for x in verdicts if x.value == 1}
    assert firing == {("3", "data_starvation", "cpu")}
    assert len(verdicts) == 8 * len(NAMES)  # every kind on every GPU, 0 when not holding
    scores = {
        (x.labels["gpu"], x.labels["kind"]): x.value for x in samples_by_name(body)["gpu_bottleneck_score"]
    }
    assert scores[("3", "data_starvation")] > 0.5 and scores[("0", "data_starvation")] < 0.1


def test_a_render_reads_no_file_the_process_metrics_come_from_their_own_thread(healthy_body, monkeypatch):
    """The scrape path never reads files: process_* (read from /proc/self by the library) are served
    from what a thread of their own read last."""
    import builtins
    import os

    _, snap, _, _ = healthy_body
    renderer = Renderer()
    renderer.render(snap)  # the process metrics are read once, when first needed

    def refuse(*args, **kwargs):
        raise AssertionError(f"a render read {args[0]!r}")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(os, "listdir", refuse)
    later = replace(snap, seq=snap.seq + 1)  # a new snapshot: rendered afresh, not from the cache
    body, _ = renderer.render(later)
    assert b"process_cpu_seconds_total" in body and b"process_open_fds" in body
