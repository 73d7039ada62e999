"""The process-owner source: cgroup paths of every runtime and cgroup version, the runtime's bundles, a
pod remembered after its bundle is gone, and the degradation without the host's /proc or PID namespace."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from exporter.sources.errors import ErrorCounter
from exporter.sources.processes import CgroupOwner, ProcessSource, parse_cgroup

CID = "3f9a" + "0123456789abcdef" * 3 + "0123456789ab"  # 64 hex digits
UID = "6f1c2d3e-4b5a-4c6d-8e7f-000000000001"
BUNDLES = "run/containerd/io.containerd.runtime.v2.task/k8s.io"


def _cgroup_paths() -> list[tuple[str, str, str, str]]:
    """(id, cgroup file text, expected runtime, expected pod uid) for every runtime, QoS class, cgroup
    driver and cgroup version."""
    cases = []
    for qos in ("", "burstable", "besteffort"):
        for runtime, scope, name in (
            ("containerd", "cri-containerd-{}.scope", "containerd"),
            ("cri-o", "crio-{}.scope", "crio"),
            ("docker", "docker-{}.scope", "docker"),
        ):
            # systemd driver: kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/<scope>
            level = f"kubepods-{qos}.slice/" if qos else ""
            pod_slice = f"kubepods-{qos + '-' if qos else ''}pod{UID.replace('-', '_')}.slice"
            path = f"/kubepods.slice/{level}{pod_slice}/{scope.format(CID)}"
            v2 = f"0::{path}\n"
            v1 = f"12:pids:{path}\n11:memory:{path}\n1:name=systemd:{path}\n"
            cases.append((f"systemd-{qos or 'guaranteed'}-{name}-v2", v2, runtime, UID))
            cases.append((f"systemd-{qos or 'guaranteed'}-{name}-v1", v1, runtime, UID))
        # cgroupfs driver: /kubepods/<qos>/pod<uid>/<id> (containerd and docker alike)
        path = f"/kubepods/{qos + '/' if qos else ''}pod{UID}/{CID}"
        cases.append((f"cgroupfs-{qos or 'guaranteed'}-v1", f"4:devices:{path}\n", "", UID))
        cases.append((f"cgroupfs-{qos or 'guaranteed'}-v2", f"0::{path}\n", "", UID))
    # a cgroup namespace of its own: the path seen from the exporter's namespace starts with ..
    cases.append(
        ("cgroupns", f"0::/../../kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope\n", "cri-o", UID)
    )
    cases.append(("docker-no-k8s", f"0::/docker/{CID}\n", "docker", ""))
    return cases


@pytest.mark.parametrize(
    ("text", "runtime", "uid"), [c[1:] for c in _cgroup_paths()], ids=[c[0] for c in _cgroup_paths()]
)
def test_cgroup_names_the_container_and_pod_of_every_runtime_and_version(text, runtime, uid):
    assert parse_cgroup(text) == CgroupOwner(CID, runtime, uid)


@pytest.mark.parametrize(
    "text",
    [
        "0::/system.slice/sshd.service\n",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        "12:memory:/\n0::/\n",
        "",
        f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-conmon-{CID}.scope\n",
    ],
)
def test_host_processes_and_runtime_monitors_have_no_container(text):
    assert parse_cgroup(text) == CgroupOwner()


# ---- the source over a node's /proc --------------------------------------------------------------


def _proc(
    root: Path, pid: int, cgroup: str, cmdline: bytes = b"python\0train.py\0", start_ticks: int = 500
) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup").write_text(cgroup)
    (d / "cmdline").write_bytes(cmdline)
    (d / "comm").write_text("python\n")
    (d / "stat").write_text(f"{pid} (py thon) S 1 {pid} {pid} 0 -1 0" + " 0" * 12 + f" {start_ticks} 0\n")


def _bundle(root: Path, cid: str, pod: str, namespace: str = "ml", container: str = "trainer") -> None:
    d = root / "host" / BUNDLES / cid
    d.mkdir(parents=True, exist_ok=True)
    notes = {
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.sandbox-id": "ff" * 32,
        "io.kubernetes.cri.sandbox-name": pod,
        "io.kubernetes.cri.sandbox-namespace": namespace,
        "io.kubernetes.cri.container-name": container,
    }
    (d / "config.json").write_text(json.dumps({"annotations": notes}))


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A node's /proc (sharing this process's PID namespace) and root."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    own = tmp_path / "proc" / str(os.getpid())
    own.mkdir()
    (own / "stat").write_text(Path("/proc/self/stat").read_text())
    (tmp_path / "proc" / "2").mkdir()
    (tmp_path / "proc" / "2" / "stat").write_text("2 (kthreadd) S 0 0 0 0 -1 0" + " 0" * 13 + "\n")
    return tmp_path


def _source(root: Path, errors: ErrorCounter | None = None, **kw) -> ProcessSource:
    clock = kw.pop("clock", None) or (lambda: 0.0)
    return ProcessSource(
        errors or ErrorCounter(), str(root / "proc"), str(root / "host"), monotonic=clock, **kw
    )


def test_a_container_process_is_named_with_its_pod_command_and_start(node):
    cgroup = f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
    _proc(node, 4242, cgroup, start_ticks=3000)
    _bundle(node, CID, "llm-train-0")
    source = _source(node)
    source.want([4242])
    owner = source.collect().owners[4242]
    assert (owner.namespace, owner.pod, owner.container) == ("ml", "llm-train-0", "trainer")
    assert (owner.container_id, owner.runtime, owner.pod_uid) == (CID, "containerd", UID)
    assert owner.command == "python train.py"
    assert owner.start_t == pytest.approx(1700000000 + 3000 / os.sysconf("SC_CLK_TCK"), abs=1e-6)


@pytest.mark.parametrize("text", ["[" * 200_000, json.dumps({"annotations": [1, 2]}), json.dumps([1])])
def test_a_malformed_bundle_costs_only_that_process_its_pod(node, text):
    cgroup = f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
    _proc(node, 4242, cgroup)
    _bundle(node, CID, "llm-train-0")
    (node / "host" / BUNDLES / CID / "config.json").write_text(text)
    source = _source(node)
    source.want([4242])
    owner = source.collect().owners[4242]  # the source stays up; the process is its container's
    assert (owner.pod, owner.container_id, owner.command) == ("", CID, "python train.py")


def test_a_pod_name_longer_than_kubernetes_allows_is_not_a_label_value(node):
    cgroup = f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
    _proc(node, 4242, cgroup)
    _bundle(node, CID, "llm-train-0", namespace="n" * 200_000)
    source = _source(node)
    source.want([4242])
    owner = source.collect().owners[4242]
    assert owner.pod == "llm-train-0" and owner.namespace == ""


def test_a_deleted_pods_process_keeps_its_last_pod(node):
    cgroup = f"0::/kubepods/besteffort/pod{UID}/{CID}\n"
    _proc(node, 4242, cgroup)
    _bundle(node, CID, "llm-train-prev")
    now = [0.0]
    source = _source(node, clock=lambda: now[0], refresh_s=10.0)
    source.want([4242])
    assert source.collect().owners[4242].pod == "llm-train-prev"
    for path in (node / "host" / BUNDLES / CID).iterdir():
        path.unlink()  # the runtime tore the bundle down
    now[0] = 11.0  # a full refresh reads the PID again
    assert source.collect().owners[4242].pod == "llm-train-prev"


def test_host_processes_long_commands_and_ended_pids(node):
    _proc(node, 10, "0::/system.slice/bench.service\n", cmdline=b"x" * 500)
    _proc(node, 11, "0::/system.slice/bench.service\n", cmdline=b"")
    source = _source(node)
    source.want([10, 11, 12])  # 12 ended since the driver listed it
    owners = source.collect().owners
    assert set(owners) == {10, 11}
    assert owners[10].container_id == "" and owners[10].pod == ""
    assert len(owners[10].command) == 96
    assert owners[11].command == "python"  # an empty cmdline (a kernel thread, a zombie): its comm


def test_only_new_pids_are_read_between_refreshes(node):
    _proc(node, 1, "0::/system.slice/a.service\n")
    source = _source(node)
    source.want([1])
    first = source.collect()
    (node / "proc" / "1" / "cgroup").unlink()  # not read again until the refresh
    assert source.collect() is first
    _proc(node, 2, "0::/system.slice/b.service\n")
    source.want([1, 2])
    assert set(source.collect().owners) == {1, 2}


@pytest.mark.parametrize("broken", ["no_proc", "other_namespace", "containers_own_proc"])
def test_without_the_hosts_proc_or_pid_namespace_it_says_so_once_and_reports_nothing(node, caplog, broken):
    if broken == "no_proc":
        for path in sorted((node / "proc").rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (node / "proc").rmdir()
    elif broken == "containers_own_proc":  # /proc of the exporter's own namespace: no kernel threads
        (node / "proc" / "2" / "stat").unlink()
    else:  # our PID in the node's /proc is another process: the exporter has a PID namespace of its own
        (node / "proc" / str(os.getpid()) / "stat").write_text(
            f"{os.getpid()} (bash) S 1 1 1 0 -1 0" + " 0" * 12 + " 1 0\n"
        )
    errors = ErrorCounter()
    now = [0.0]
    source = _source(node, errors, clock=lambda: now[0], refresh_s=1.0)
    source.want([4242])
    with caplog.at_level(logging.INFO, logger="exporter.sources.processes"):
        for _ in range(30):
            assert source.collect() is None
            now[0] += 1.0
    lines = [r for r in caplog.records if r.name == "exporter.sources.processes"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "attributed by the kubelet alone" in lines[0].getMessage()
    assert errors.snapshot() == {("processes", "Unavailable"): 1}


def test_a_process_that_ended_is_no_ones_before_the_next_refresh(node):
    _proc(node, 7, "0::/system.slice/a.service\n")
    source = _source(node)
    source.want([7])  # the driver's list (a slow read) still names it after it ends
    assert set(source.collect().owners) == {7}
    for path in (node / "proc" / "7").iterdir():
        path.unlink()
    (node / "proc" / "7").rmdir()
    assert source.collect().owners == {}
