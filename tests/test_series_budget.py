"""The series budget: the default exposition of a simulated 8 x H100 node stays within
thresholds.SERIES_BUDGET with every verdict, the ledger and the threshold table's signals in it; --detail adds
the per-link, per-pair and per-XID families, and the per-GPU aggregates agree with them."""

from __future__ import annotations

import time
from urllib.request import urlopen

from prometheus_client.parser import text_string_to_metric_families

from bench.series import own_and_runtime, series_per_family, worst_case
from exporter.analysis.kinds import NAMES
from exporter.analysis.ledger import STATES
from exporter.policy.detail import CATEGORIES, DETAIL, parse_detail
from exporter.policy.thresholds import SERIES_BUDGET
from exporter.serve.metrics import Renderer
from scripts.stack import free_port, start_exporter, wait_http
from tests.conftest import step
from tests.timing import HANG_GUARD_S

# the threshold table's signals: utilization and its shape, power against TDP, SM
# activity against copy utilization, framebuffer, NVLink traffic and state, P2P, fabric, temperature,
# shm, I/O wait, disk reads, the busiest core
TABLE_SIGNALS = (
    "gpu_utilization_ratio",
    "gpu_utilization_window_ratio",
    "gpu_utilization_idle_fraction",
    "gpu_power_watts",
    "gpu_power_window_watts",
    "gpu_power_default_limit_watts",
    "gpu_sm_active_ratio",
    "gpu_memory_utilization_ratio",
    "gpu_memory_used_bytes",
    "gpu_memory_total_bytes",
    "gpu_nvlink_traffic_bytes_total",
    "gpu_nvlink_links_up",
    "gpu_nvlink_links_expected",
    "gpu_p2p_failing_pairs",
    "gpu_fabric_registered",
    "gpu_temperature_celsius",
    "gpu_node_shm_used_bytes",
    "gpu_node_shm_size_bytes",
    "gpu_node_cpu_iowait_ratio",
    "gpu_node_disk_read_bytes_total",
    "gpu_node_cpu_core_busy_max_ratio",
)


# prometheus_client's process, platform and GC collectors: 16 series on Linux (6 process_*, python_info,
# 3 GC families x 3 generations), the same on every node whatever its GPUs; counted beside the budget,
# which is the exporter's own families (bench.series.own_and_runtime)
RUNTIME_SERIES = 16


def samples(body: bytes) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def test_default_exposition_of_an_8_gpu_h100_node_fits_the_budget(make_node, make_sampler, clock):
    # the sources read what every detail shows (each link's traffic); the default exposition is the same
    sampler, _ = make_sampler(make_node("healthy"), pods=True, detail=frozenset(CATEGORIES))
    snap = step(sampler, clock, cycles=70)
    body, _ = Renderer().render(snap)
    counts = series_per_family(body)
    table = "\n".join(f"{n:5d} {name}" for name, n in counts.most_common())
    own, runtime = own_and_runtime(counts)
    assert own <= SERIES_BUDGET.value, f"{own} series:\n{table}"
    assert runtime == RUNTIME_SERIES and counts["process_cpu_seconds_total"] == 1, table
    s = samples(body)
    verdicts = {(x.labels["gpu"], x.labels["kind"]) for x in s["gpu_bottleneck"]}
    assert verdicts == {(str(g), k) for g in range(8) for k in NAMES}  # every verdict on every GPU
    ledger = {(x.labels["gpu"], x.labels["state"]) for x in s["gpu_time_seconds_total"]}
    assert {g for g, _ in ledger} == {str(g) for g in range(8)} and {st for _, st in ledger} <= set(STATES)
    for g in range(8):  # every state the GPU has spent time in; the states sum to the time observed
        held = {st: seconds for st, seconds in snap.gpus[g].ledger.items() if seconds > 0}
        assert {st for gpu, st in ledger if gpu == str(g)} == set(held)
    for name in TABLE_SIGNALS:
        assert name in s, f"threshold-table signal {name} missing at the default detail"
    assert all(x.labels.get("pod") == "llm-train-0" for x in s["gpu_bottleneck"])  # pods for the job join
    # the detail would have multiplied it several times
    everything = sum(series_per_family(Renderer(frozenset(CATEGORIES)).render(snap)[0]).values())
    assert everything > 3 * (own + runtime), (everything, own + runtime)


def test_detail_adds_the_fine_grained_series_and_the_aggregates_agree(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("nvlink_down"), detail=parse_detail("nvlink,p2p,xid"))
    snap = step(sampler, clock, cycles=40)
    default = samples(Renderer().render(snap)[0])
    detail = samples(Renderer(parse_detail("nvlink,p2p,xid")).render(snap)[0])
    for name in ("gpu_nvlink_up", "gpu_nvlink_bytes_total", "gpu_nvlink_errors_total", "gpu_p2p_status"):
        assert name not in default and name in detail, name
    for name in default:  # detail only adds
        assert len(detail[name]) == len(default[name]), name

    def per_gpu(name: str, **match: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for x in detail[name]:
            if all(x.labels.get(k) == v for k, v in match.items()):
                out[x.labels["gpu"]] = out.get(x.labels["gpu"], 0.0) + x.value
        return out

    def aggregate(name: str, **match: str) -> dict[str, float]:
        return {
            x.labels["gpu"]: x.value
            for x in default[name]
            if all(x.labels.get(k) == v for k, v in match.items())
        }

    assert aggregate("gpu_nvlink_links_up") == per_gpu("gpu_nvlink_up")
    assert aggregate("gpu_nvlink_links_up")["2"] < aggregate("gpu_nvlink_links_expected")["2"] == 18
    assert aggregate("gpu_nvlink_links_up")["0"] == 18
    for direction in ("tx", "rx"):
        assert aggregate("gpu_nvlink_traffic_bytes_total", direction=direction) == per_gpu(
            "gpu_nvlink_bytes_total", direction=direction
        )
    assert aggregate("gpu_nvlink_link_errors_total") == per_gpu("gpu_nvlink_errors_total")
    failing = {g: float(n) for g, n in per_gpu("gpu_p2p_status").items()}
    pairs = {g: 0.0 for g in failing}
    for x in detail["gpu_p2p_status"]:
        pairs[x.labels["gpu"]] += x.value == 0
    assert aggregate("gpu_p2p_failing_pairs") == pairs and pairs["2"] > 0 and pairs["0"] > 0
    assert aggregate("gpu_fabric_registered") == {**{str(g): 1.0 for g in range(8)}, "2": 0.0}
    assert aggregate("gpu_xid_errors_by_criticality_total", criticality="critical") == per_gpu(
        "gpu_xid_errors_total"
    )


def test_every_detail_category_names_families_the_exporter_has(make_node, make_sampler, clock):
    sampler, _ = make_sampler(make_node("healthy"), detail=frozenset(CATEGORIES))
    everything = samples(Renderer(frozenset(CATEGORIES)).render(step(sampler, clock, cycles=12))[0])
    for category, (names, _) in DETAIL.items():
        assert set(names) <= set(everything), (category, set(names) - set(everything))


def test_the_command_serves_the_detail_it_is_asked_for(tmp_path):
    """--detail through the real command and real HTTP: the categories named, and only those."""
    import subprocess
    import sys
    import time

    import httpx

    from scripts.stack import free_port, wait_http
    from tests.conftest import REPO

    port = free_port()
    args = ["--simulate", "healthy", "--sim-gpus", "2", "--interval", "0.5", "--detail", "nvlink,xid"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", *args, "--port", str(port), "--listen-address", "127.0.0.1"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", proc=proc)
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            names = set(samples(httpx.get(f"http://127.0.0.1:{port}/metrics").content))
            if "gpu_nvlink_links_up" in names or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(15)
    assert {
        "gpu_nvlink_up",
        "gpu_nvlink_errors_total",
        "gpu_xid_errors_total",
        "gpu_nvlink_links_up",
    } <= names
    assert not names & {"gpu_p2p_status", "gpu_bottleneck_score", "gpu_clock_event_active"}


def test_the_served_exposition_of_the_real_command_fits_the_budget(tmp_path):
    """The whole product as a user starts it (node checks, server metrics, pod labels included) on a
    simulated 8 x H100 node: the default exposition stays within the budget."""
    port = free_port()
    proc = start_exporter(["--simulate", "healthy", "--sim-gpus", "8"], port, tmp_path / "exporter.log")
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_http(url, proc=proc)
        deadline = time.monotonic() + 60
        while True:  # until the node checks' first round and the ledger are in
            body = urlopen(url, timeout=10).read()
            counts = series_per_family(body)
            if counts["gpu_node_check_info"] and counts["gpu_time_seconds_total"] and counts["gpu_pod_info"]:
                break
            assert time.monotonic() < deadline, f"incomplete exposition: {sorted(counts)}"
            time.sleep(0.5)
        table = "\n".join(f"{n:5d} {name}" for name, n in counts.most_common())
        own, runtime = own_and_runtime(counts)
        assert own <= SERIES_BUDGET.value, f"{own} series:\n{table}"
        assert runtime == RUNTIME_SERIES, table
        assert counts["gpu_bottleneck"] == 8 * len(NAMES)
        # what the same node comes to once its GPUs have been in every ledger state, a verdict firing on
        # each (the demo's tour, or a week of work): the budget bounds that too
        worst = worst_case(counts, 8)
        assert own < worst <= SERIES_BUDGET.value, f"worst case {worst} series:\n{table}"
    finally:
        proc.terminate()
        proc.wait(15)
