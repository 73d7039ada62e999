"""The node checks, live: NodeChecker on a simulated node, its results in the sampler's snapshot and on
/metrics; a hung NVML call in the checks never holds up a collection."""

from __future__ import annotations

import threading

from prometheus_client.parser import text_string_to_metric_families

from exporter.config.settings import Settings
from exporter.doctor.checks import CHECKS
from exporter.doctor.live import NodeChecker
from exporter.doctor.model import Status
from exporter.serve.metrics import Renderer
from exporter.sim import BoardSpec, Capabilities
from tests.conftest import step


def _checker(node, settings: Settings | None = None, **kw) -> NodeChecker:
    settings = settings or Settings(simulate=node.scenario.name, pod_resources_socket=node.kubelet_socket)
    return NodeChecker.for_settings(settings, node.install(), node.host_options(), **kw)


def _series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("gpu_node_check"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_first_round_runs_every_check_and_fast_rounds_keep_the_slow_results(make_node):
    node = make_node("p2p_blocked")
    checker = _checker(node)
    first = {r.check: r for r in checker.run_once()}
    assert list(first) == list(CHECKS)
    assert (first["p2p"].status, first["p2p"].detail) == (Status.FAIL, "write_blocked")
    fast = {r.check: r for r in checker.run_once()}  # the slow checks are not due yet
    assert fast["p2p"] is first["p2p"] and fast["pod_shm"] is first["pod_shm"]
    assert fast["driver"] is not first["driver"]  # re-run
    assert [r.check for r in checker.run_once(slow=True)] == list(CHECKS)


def test_failing_check_is_exported_with_its_severity_and_detail(make_node, make_sampler, clock):
    node = make_node("no_fabric_manager")
    sampler, _ = make_sampler(node, pods=True)
    checker = _checker(node)
    sampler.checker = checker
    assert step(sampler, clock).node_checks == ()  # no round yet: nothing exported
    checker.run_once()
    snap = step(sampler, clock)
    text, _ = Renderer().render(snap)
    series = _series(text.decode())
    failed = {
        dict(labels)["check"]: (dict(labels)["severity"], v)
        for (n, labels), v in series.items()
        if n == "gpu_node_check_failed"
    }
    assert failed["fabric"] == ("critical", 1.0)
    assert failed["nvlink"] == ("critical", 0.0) and failed["pod_shm"] == ("warning", 0.0)
    assert "p2p" not in failed  # skipped (waits for the fabric): no value rather than a false 0
    info = {
        dict(labels)["check"]: dict(labels) for (n, labels), v in series.items() if n == "gpu_node_check_info"
    }
    assert info["fabric"] == {"check": "fabric", "status": "fail", "detail": "not_started"}
    assert info["p2p"]["status"] == "skipped" and info["p2p"]["detail"] == "fabric_pending"
    assert len(info) == len(CHECKS)  # bounded: one series per check
    for labels in info.values():
        assert labels["detail"] in CHECKS[labels["check"]].vocabulary
    # the checks are a source like the others: booked up, with the duration of their last round
    assert snap.source_up["node_checks"] and snap.source_durations["node_checks"] >= 0.0
    assert 'gpu_exporter_source_up{source="node_checks"} 1' in text.decode()
    # its own schedule (minutes): not a collection the stale-collection alert judges by the sampler's cadence
    assert 'gpu_exporter_last_collect_timestamp_seconds{source="node_checks"}' not in text.decode()


def test_xids_come_from_the_exporters_own_counts(make_node):
    node = make_node("healthy")
    checker = _checker(node, xids=lambda: {3: {79: 1}})
    results = {r.check: r for r in checker.run_once()}
    assert (results["xid"].status, results["xid"].detail) == (Status.FAIL, "critical_xid")
    assert results["xid"].evidence == ("GPU 3: XID 79 x1 (GPU has fallen off the bus)",)


def test_a_hung_check_never_holds_up_the_sampler(make_node, make_sampler, clock):
    node = make_node("healthy")
    sampler, _ = make_sampler(node)
    checker = _checker(node)
    checker.run_once()
    before = checker.latest
    sampler.checker = checker
    hang = node.faults.add("nvmlDeviceGetPersistenceMode", hang_s=float("inf"))
    stuck = threading.Thread(target=checker.run_once, daemon=True)
    stuck.start()
    try:
        for _ in range(3):
            snap = step(sampler, clock)
            assert snap.node_checks is before  # the last finished round, published as it was
        assert stuck.is_alive()
        assert all(r.status is Status.PASS for r in snap.node_checks)
    finally:
        node.faults.remove(hang)
        stuck.join(5)


def test_fast_rounds_judge_a_blind_fabric_by_the_last_p2p_matrix(make_node):
    # an A100 NVSwitch node: no fabric state from the driver, so the fabric check reads NVLink P2P,
    # which only the slow rounds gather; the fast rounds in between must not flip it to "unknown"
    a100 = BoardSpec(
        name="NVIDIA A100-SXM4-80GB", tdp_w=400.0, nvlinks=12, compute_capability="8.0", gpm=False
    )
    node = make_node("healthy", n_gpus=4, board=a100, capabilities=Capabilities(fabric=False))
    checker = _checker(node)
    for slow in (True, False, False):
        fabric = {r.check: r for r in checker.run_once(slow=slow)}["fabric"]
        assert (fabric.status, fabric.detail) == (Status.PASS, "ok"), fabric


def test_shared_gpus_without_process_owners_warn_in_the_checklist_and_page_no_one(
    make_node, make_sampler, clock
):
    """time_slicing with processOwners off, as the chart's default: the sharing check warns live, and its
    series carries severity info, which neither node check alert selects."""
    node = make_node("time_slicing")
    sampler, _ = make_sampler(node, pods=True)
    settings = Settings(
        simulate=node.scenario.name, pod_resources_socket=node.kubelet_socket, process_owners=False
    )
    checker = _checker(node, settings)
    sampler.checker = checker
    sharing = {r.check: r for r in checker.run_once()}["sharing"]
    assert (sharing.status, sharing.detail) == (Status.WARN, "owners_off")
    assert sharing.fix == CHECKS["sharing"].fixes["owners_off"] and "processOwners.enabled" in sharing.fix
    text, _ = Renderer().render(step(sampler, clock))
    series = _series(text.decode())
    labels = (("check", "sharing"), ("severity", "info"))
    assert series[("gpu_node_check_failed", labels)] == 1.0
    info = (("check", "sharing"), ("detail", "owners_off"), ("status", "warn"))
    assert series[("gpu_node_check_info", info)] == 1.0


def test_shared_gpus_with_process_owners_pass(make_node):
    node = make_node("time_slicing")
    sharing = {r.check: r for r in _checker(node).run_once()}["sharing"]  # on: the default
    assert (sharing.status, sharing.detail) == (Status.PASS, "ok")
    assert sharing.evidence[-1] == "split per pod by the processes' owners"
