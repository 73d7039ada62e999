"""The node doctor end to end: the real nvidia-ml-py bindings over the simulated driver, the simulated
/sys and /proc, a real gRPC kubelet and containerd bundle files; through the command line."""

from __future__ import annotations

import json
import re

import pytest

from exporter.cli import main
from exporter.config.settings import Settings
from exporter.doctor.checks import CHECKS, run_checks
from exporter.doctor.command import diagnose
from exporter.doctor.facts import SIM_CLOCK
from exporter.doctor.gather import PodSources, gather, kmsg_xids
from exporter.doctor.model import Status
from exporter.doctor.render import table
from exporter.sim import BoardSpec, Capabilities
from tests.conftest import real_nvml_present

# scenario -> (the one check it fails or warns, its detail, status)
SCENARIOS = {
    "no_fabric_manager": ("fabric", "not_started", Status.FAIL),
    "p2p_blocked": ("p2p", "write_blocked", Status.FAIL),
    "nvlink_link_down": ("nvlink", "link_down", Status.FAIL),
    "shm_default": ("pod_shm", "default_shm", Status.FAIL),
    "nccl_p2p_disabled": ("nccl_env", "p2p_disabled", Status.FAIL),
    "pcie_degraded": ("pcie", "width_degraded", Status.FAIL),
    "ecc_pending": ("ecc", "remap_pending", Status.FAIL),
    "missing_gpu": ("gpu_count", "missing", Status.FAIL),
    "no_efa": ("rdma", "pod_without_rdma", Status.WARN),
    "persistence_off": ("driver", "persistence_off", Status.WARN),
}
EXIT = {Status.FAIL: 2, Status.WARN: 1}


def test_healthy_node_passes_every_check(capsys):
    assert main(["doctor", "--simulate", "healthy"]) == 0
    out = capsys.readouterr().out
    for name in CHECKS:
        assert re.search(rf"^{name}\s+pass\s+\S", out, re.M), f"{name} did not pass:\n{out}"
    assert "\033[" not in out  # not a terminal: no colour
    assert out.rstrip().endswith("0 fail, 0 warn, 13 pass, 0 skipped: exit 0")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_fails_exactly_its_check_with_its_fix(scenario, capsys):
    check, detail, status = SCENARIOS[scenario]
    assert main(["doctor", "--simulate", scenario, "--json"]) == EXIT[status]
    doc = json.loads(capsys.readouterr().out)
    flagged = {c["check"]: c for c in doc["checks"] if c["status"] in ("warn", "fail")}
    assert set(flagged) == {check}, f"{scenario}: {sorted(flagged)}"
    got = flagged[check]
    assert (got["status"], got["detail"]) == (status.value, detail)
    assert got["fix"] == CHECKS[check].fixes[detail] and got["fix"]
    assert got["evidence"], "a finding without evidence"
    assert doc["status"] == status.value and doc["exit_code"] == EXIT[status]
    others = {c["status"] for c in doc["checks"] if c["check"] != check}
    assert others <= {"pass", "skipped"}


def test_scenario_evidence_names_what_is_wrong(capsys):
    main(["doctor", "--simulate", "nvlink_link_down:gpus=6"])
    assert re.search(r"^nvlink\s+FAIL\s+GPU 6: link 4 down \(17 of 18 up\)", capsys.readouterr().out, re.M)
    main(["doctor", "--simulate", "missing_gpu", "--sim-gpus", "4"])
    out = capsys.readouterr().out
    assert re.search(r"NVML lists 3 GPU\(s\); expected 4 \(NVIDIA GPUs on the PCI bus\)", out)
    assert "on the PCI bus but not in NVML: 0000:5d:00.0" in out


def test_no_fabric_manager_defers_p2p_to_the_fabric_check():
    results = {r.check: r for r in run_checks(diagnose(Settings(simulate="no_fabric_manager")))}
    assert results["p2p"].status is Status.SKIPPED and results["p2p"].detail == "fabric_pending"
    assert "fabric state not_started" in results["fabric"].evidence[0]
    assert "nvidia-fabricmanager" in results["fabric"].fix


def test_expected_gpus_overrides_the_bus_count(capsys):
    assert main(["doctor", "--simulate", "healthy", "--expected-gpus", "16"]) == 2
    assert re.search(
        r"^gpu_count\s+FAIL\s+NVML lists 8 GPU\(s\); expected 16 \(--expected-gpus\)",
        capsys.readouterr().out,
        re.M,
    )


def test_every_detail_a_check_reports_is_in_its_vocabulary():
    for scenario in [*SCENARIOS, "healthy", "gpu_lost:onset=0", "nvlink_down:onset=0"]:
        for r in run_checks(diagnose(Settings(simulate=scenario))):
            assert r.detail in CHECKS[r.check].vocabulary, (scenario, r)
            if r.status in (Status.WARN, Status.FAIL):
                assert r.fix == CHECKS[r.check].fixes[r.detail]


def test_a_lost_gpu_fails_the_count_and_its_xid_is_read_from_the_kernel_log():
    results = {r.check: r for r in run_checks(diagnose(Settings(simulate="gpu_lost:onset=0")))}
    assert (results["gpu_count"].status, results["gpu_count"].detail) == (Status.FAIL, "lost")
    assert (results["xid"].status, results["xid"].detail) == (Status.FAIL, "critical_xid")
    assert results["xid"].evidence == (
        "the GPU at 0000:db:00.0 (NVML cannot identify it): XID 79 x1 (GPU has fallen off the bus)",
    )


def test_kernel_log_xids_map_to_nvml_indices(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text(
        "6,1,2,-;nvidia-nvswitch0: probe\n"
        "3,2,3,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
        "3,3,4,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
        "3,4,5,-;NVRM: Xid (PCI:0000:5d:00): 13, pid=7, Graphics Exception\n"
    )
    assert kmsg_xids(str(log), {"3b:00": 2, "5d:00": 3}) == {2: {79: 2}, 3: {13: 1}}
    assert kmsg_xids(str(tmp_path / "absent"), {}) is None


# ---- a node without NVML -------------------------------------------------------------------------


def _cpu_node_results(make_node, tmp_path):
    node = make_node(library_present=False)
    cpu_node_sys = tmp_path / "sys"
    (cpu_node_sys / "bus/pci/devices/0000:00:1f.0").mkdir(parents=True)  # an Intel bridge, no NVIDIA GPU
    (cpu_node_sys / "bus/pci/devices/0000:00:1f.0/vendor").write_text("0x8086\n")
    pods = PodSources(node.kubelet_socket, node.host.host_root, statvfs=node.host.statvfs)
    return run_checks(gather(node.install(), str(cpu_node_sys), node.host.proc_root, pods))


@pytest.mark.parametrize("check", CHECKS)
def test_on_a_gpu_less_node_each_check_says_skipped_no_nvml(check, make_node, tmp_path):
    results = _cpu_node_results(make_node, tmp_path)
    (r,) = [r for r in results if r.check == check]
    assert (r.status, r.detail, r.fix) == (Status.SKIPPED, "no_nvml", "")
    assert r.evidence == ("no NVML (LibraryNotFound)",)
    assert re.search(rf"^{check}\s+skipped\s+no NVML \(LibraryNotFound\)$", table(results, "cpu-node"), re.M)


def test_a_gpu_less_node_exits_0(make_node, tmp_path):
    results = _cpu_node_results(make_node, tmp_path)
    assert [r.check for r in results] == list(CHECKS)
    assert table(results, "cpu-node").endswith("0 fail, 0 warn, 0 pass, 13 skipped: exit 0")


def test_nvml_missing_on_a_node_with_gpus_on_the_bus_fails_the_driver_check(make_node):
    node = make_node(library_present=False)
    facts = gather(node.install(), node.host.sys_root, node.host.proc_root, None)
    results = {r.check: r for r in run_checks(facts)}
    assert (results["driver"].status, results["driver"].detail) == (Status.FAIL, "driver_broken")
    assert "8 NVIDIA GPU(s)" in results["driver"].evidence[0]
    assert all(r.status is Status.SKIPPED for name, r in results.items() if name != "driver")


def test_nvml_missing_where_gpus_are_expected_fails_the_driver_check(make_node, tmp_path):
    """Bring-up automation says how many GPUs the node has: a node whose NVML does not load fails, even
    where /sys shows no NVIDIA device (a driver that never bound, a container without the library)."""
    node = make_node(library_present=False)
    facts = gather(node.install(), str(tmp_path), node.host.proc_root, None, expected_gpus=8)
    results = run_checks(facts)
    driver = next(r for r in results if r.check == "driver")
    assert (driver.status, driver.detail) == (Status.FAIL, "driver_broken")
    assert driver.evidence == ("NVML cannot be loaded (LibraryNotFound) but --expected-gpus says 8 GPU(s)",)
    assert driver.fix == CHECKS["driver"].fixes["driver_broken"]
    assert table(results, "gpu-node").endswith("1 fail (driver), 0 warn, 0 pass, 12 skipped: exit 2")


def test_the_summary_line_names_the_checks_that_failed_and_warned(capsys):
    assert main(["doctor", "--simulate", "no_fabric_manager", "--expected-gpus", "16"]) == 2
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("2 fail (gpu_count, fabric), 0 warn, ") and last.endswith(": exit 2"), last


@pytest.mark.skipif(real_nvml_present(), reason="this machine has a GPU driver")
def test_doctor_expecting_gpus_on_this_gpu_less_machine_exits_2(tmp_path, capsys):
    """What bring-up automation runs, through the real bindings on a machine without a driver."""
    code = main(["doctor", "--expected-gpus", "8", "--sys-root", str(tmp_path), "--pod-resources-socket", ""])
    out = capsys.readouterr().out
    assert code == 2
    assert re.search(
        r"^driver\s+FAIL\s+NVML cannot be loaded \(\w+\) but --expected-gpus says 8 GPU\(s\)$", out, re.M
    )
    assert out.rstrip().endswith("1 fail (driver), 0 warn, 0 pass, 12 skipped: exit 2")


@pytest.mark.skipif(real_nvml_present(), reason="this machine has a GPU driver")
def test_doctor_on_this_gpu_less_machine_through_the_real_bindings(tmp_path, capsys):
    code = main(["doctor", "--sys-root", str(tmp_path), "--pod-resources-socket", "", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["status"] == "skipped"
    assert {c["detail"] for c in doc["checks"]} == {"no_nvml"}
    assert all(c["evidence"][0].startswith("no NVML (") for c in doc["checks"])


@pytest.mark.parametrize("scenario", ["time_slicing", "mps"])
def test_pods_sharing_a_gpu_without_process_owners_warn_with_the_setting_to_change(
    scenario, capsys, monkeypatch
):
    """The chart's default (GBE_PROCESS_OWNERS=off in the pod the doctor is run in): shared GPUs are
    judged whole; the doctor says so, and which setting splits them per pod."""
    monkeypatch.setenv("GBE_PROCESS_OWNERS", "off")
    assert main(["doctor", "--simulate", scenario, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    flagged = {c["check"]: c for c in doc["checks"] if c["status"] in ("warn", "fail")}
    assert set(flagged) == {"sharing"}
    got = flagged["sharing"]
    assert (got["detail"], got["severity"]) == ("owners_off", "info")
    assert got["evidence"][0].startswith("GPU 0 is shared by 3 pods through time-slicing or MPS replicas: ")
    assert "research/shared-starving" in got["evidence"][0]
    assert got["fix"] == CHECKS["sharing"].fixes["owners_off"]
    monkeypatch.delenv("GBE_PROCESS_OWNERS")
    assert main(["doctor", "--simulate", scenario, "--process-owners", "on"]) == 0
    assert re.search(r"^sharing\s+pass\s+GPU 0 is shared by 3 pods", capsys.readouterr().out, re.M)


def test_bad_flags_are_one_line_and_exit_2(capsys):
    assert main(["doctor", "--expected-gpus", "many"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpu-bottleneck-exporter: --expected-gpus: must be a whole number, not 'many'"]
    assert main(["doctor", "--simulate", "no_such_fault"]) == 2
    assert "unknown scenario 'no_such_fault'" in capsys.readouterr().err


def test_fix_texts_and_titles_are_complete():
    for check in CHECKS.values():
        assert check.title
        assert set(check.fixes) == set(check.details) - {"fabric_pending"}, check.name


def test_colour_only_on_a_terminal(capsys, monkeypatch):
    from exporter.doctor.render import use_colour

    results = run_checks(diagnose(Settings(simulate="no_fabric_manager")))
    coloured = table(results, "n1", colour=True)
    assert re.search(
        r"^fabric\s+\033\[31;1mFAIL\s*\033\[0m GPUs 0, 1, 2, 3, 4, 5, 6, 7: fabric state", coloured, re.M
    )
    assert "\033[" not in table(results, "n1", colour=False)

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert use_colour(Tty()) and not use_colour(object())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Tty())


def test_json_explains_the_nccl_variables(capsys):
    main(["doctor", "--simulate", "healthy", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["nccl_variables"]) == {
        "NCCL_P2P_DISABLE",
        "NCCL_IB_DISABLE",
        "NCCL_P2P_LEVEL",
        "NCCL_SOCKET_IFNAME",
        "NCCL_CUMEM_HOST_ENABLE",
        "NCCL_DEBUG",
    }
    assert all(v["does"] and v["hurts"] for v in doc["nccl_variables"].values())
    assert {c["severity"] for c in doc["checks"]} == {"critical", "warning", "info"}


def test_unreadable_runtime_bundles_cost_only_themselves(make_node):
    node = make_node("shm_default")
    tasks = node.host.root / "host/run/containerd/io.containerd.runtime.v2.task/k8s.io"
    for name, text in (
        ("junk1", "{not json"),
        ("junk2", '["a list"]'),
        (
            "junk3",  # a container spec whose process is not an object
            '{"annotations": {"io.kubernetes.cri.container-type": "container", '
            '"io.kubernetes.cri.sandbox-namespace": "ml"}, "process": "x"}',
        ),
    ):
        (tasks / name).mkdir()
        (tasks / name / "config.json").write_text(text)
    pods = PodSources(node.kubelet_socket, node.host.host_root, statvfs=node.host.statvfs)
    facts = gather(node.install(), node.host.sys_root, node.host.proc_root, pods)
    results = {r.check: r for r in run_checks(facts)}
    assert (results["pod_shm"].status, results["pod_shm"].detail) == (Status.FAIL, "default_shm")
    assert results["nccl_env"].status is Status.PASS


A100 = BoardSpec(name="NVIDIA A100-SXM4-80GB", tdp_w=400.0, nvlinks=12, compute_capability="8.0", gpm=False)


def _a100(make_node, scenario: str) -> dict[str, object]:
    # an A100 SXM4 node on NVSwitch, whose driver has no fabric state to report
    node = make_node(scenario, board=A100, capabilities=Capabilities(fabric=False))
    pods = PodSources(node.kubelet_socket, node.host.host_root, statvfs=node.host.statvfs)
    facts = gather(node.install(), node.host.sys_root, node.host.proc_root, pods, clock=lambda: SIM_CLOCK)
    return {r.check: r for r in run_checks(facts)}


def test_a100_without_fabric_manager_fails_the_fabric_check_from_its_p2p_matrix(make_node):
    results = _a100(make_node, "no_fabric_manager")
    fabric = results["fabric"]
    assert (fabric.status, fabric.detail) == (Status.FAIL, "not_started")
    assert fabric.evidence == (
        "GPUs 0, 1, 2, 3, 4, 5, 6, 7: NVSwitch board, but the driver reports no fabric state",
        "P2P over NVLink: 0 of 56 GPU pairs OK",
    )
    assert results["p2p"].detail == "fabric_pending"
    assert {n for n, r in results.items() if r.status in (Status.WARN, Status.FAIL)} == {"fabric"}


def test_healthy_a100_passes_with_twelve_links(make_node):
    results = _a100(make_node, "healthy")
    assert all(r.status is Status.PASS for r in results.values()), [
        r for r in results.values() if r.status is not Status.PASS
    ]
    assert results["nvlink"].evidence == ("96 NVLinks up on 8 GPU(s), error counters low",)
    assert "P2P over NVLink: 56 of 56 GPU pairs OK" in results["fabric"].evidence


def test_a_sidecar_without_gpus_on_the_default_shm_does_not_fail_the_pod(make_node):
    node = make_node("healthy")
    pod = node.pods[0]
    tasks = node.host.root / "host/run/containerd/io.containerd.runtime.v2.task/k8s.io"
    spec = json.loads((tasks / pod.sandbox_id[::-1] / "config.json").read_text())
    spec["annotations"]["io.kubernetes.cri.container-name"] = "log-shipper"
    spec["mounts"] = [
        {
            "destination": "/dev/shm",
            "source": f"/run/containerd/io.containerd.grpc.v1.cri/sandboxes/{pod.sandbox_id}/shm",
        }
    ]
    spec["process"]["env"] = ["NCCL_P2P_DISABLE=1"]  # not a GPU container: its NCCL settings do not matter
    (tasks / "sidecar").mkdir()
    (tasks / "sidecar" / "config.json").write_text(json.dumps(spec))
    pods = PodSources(node.kubelet_socket, node.host.host_root, statvfs=node.host.statvfs)
    facts = gather(node.install(), node.host.sys_root, node.host.proc_root, pods, clock=lambda: SIM_CLOCK)
    assert {c.name for c in facts.pods[0].containers} == {"trainer", "log-shipper"}
    results = {r.check: r for r in run_checks(facts)}
    assert results["pod_shm"].status is Status.PASS and results["nccl_env"].status is Status.PASS
    assert "log-shipper" not in " ".join(results["pod_shm"].evidence)
