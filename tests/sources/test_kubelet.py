"""GPU -> pod through a real gRPC PodResourcesLister server on a unix socket."""

from __future__ import annotations

import contextlib
import os
import time

import grpc
import pytest

from exporter.analysis.pods import gpu_owners
from exporter.sim.kubelet import SimKubelet, SimPod
from exporter.sources.errors import ErrorCounter
from exporter.sources.kubelet import Assignment, PodRef, PodResourcesSource
from tests.timing import HANG_GUARD_S, assert_within, pace, timed


def pod(name: str, devices: dict[str, list[str]], namespace: str = "ml", container: str = "main") -> SimPod:
    return SimPod(namespace, name, f"uid-{name}", f"{name}-sandbox", container, devices)


@pytest.fixture
def kubelet(tmp_path):
    pods: list[SimPod] = []
    server = SimKubelet(str(tmp_path / "kubelet.sock"), lambda: pods).start()
    yield server, pods
    server.stop()


def test_gpus_and_mig_slices_are_listed_other_devices_ignored(kubelet):
    server, pods = kubelet
    pods.append(pod("train-0", {"nvidia.com/gpu": ["GPU-a", "GPU-b"], "vpc.amazonaws.com/efa": ["efa0"]}))
    pods.append(pod("notebook", {"nvidia.com/mig-1g.10gb": ["MIG-x"]}, namespace="lab"))
    pods.append(pod("web", {"example.com/fpga": ["f0"]}))
    found = PodResourcesSource(ErrorCounter(), server.socket_path).collect()
    assert sorted(found, key=lambda a: a.device_id) == [
        Assignment("nvidia.com/gpu", "GPU-a", PodRef("ml", "train-0", "main")),
        Assignment("nvidia.com/gpu", "GPU-b", PodRef("ml", "train-0", "main")),
        Assignment("nvidia.com/mig-1g.10gb", "MIG-x", PodRef("lab", "notebook", "main")),
    ]


def test_pods_come_and_go(kubelet):
    server, pods = kubelet
    source = PodResourcesSource(ErrorCounter(), server.socket_path)
    assert source.collect() == ()
    pods.append(pod("train-0", {"nvidia.com/gpu": ["GPU-a"]}))
    assert [a.ref.pod for a in source.collect()] == ["train-0"]
    pods[:] = [pod("train-1", {"nvidia.com/gpu": ["GPU-a"]})]
    assert [a.ref.pod for a in source.collect()] == ["train-1"]


def test_errors_are_counted_by_status_and_recover(kubelet):
    server, pods = kubelet
    pods.append(pod("train-0", {"nvidia.com/gpu": ["GPU-a"]}))
    errors = ErrorCounter()
    source = PodResourcesSource(errors, server.socket_path)
    server.misbehave(error=grpc.StatusCode.PERMISSION_DENIED)
    assert source.collect() is None
    server.misbehave()
    assert len(source.collect()) == 1
    assert errors.snapshot() == {("kubelet", "PermissionDenied"): 1}


def test_a_kubelet_that_never_answers_costs_one_deadline(kubelet):
    server, pods = kubelet
    pods.append(pod("train-0", {"nvidia.com/gpu": ["GPU-a"]}))
    errors = ErrorCounter()
    deadline_s = 2.0
    source = PodResourcesSource(errors, server.socket_path, timeout_s=deadline_s)
    answered = pace(source.collect)  # a list the kubelet answers, here and now
    server.misbehave(delay_s=float("inf"))
    result, took = timed(source.collect)
    assert result is None
    # one deadline and the call around it (what an answered call costs); a retry is a second deadline
    assert_within(took, 1.5 * deadline_s + 3 * answered, 1, "a kubelet that never answers")
    assert errors.snapshot() == {("kubelet", "DeadlineExceeded"): 1}


def test_missing_socket_is_counted_not_raised(tmp_path):
    errors = ErrorCounter()
    assert PodResourcesSource(errors, str(tmp_path / "absent.sock")).collect() is None
    assert errors.snapshot() == {("kubelet", "SocketNotFound"): 1}


def test_a_socket_nobody_listens_on_is_unavailable(tmp_path):
    import socket

    path = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))  # the file exists, no server behind it
        errors = ErrorCounter()
        assert PodResourcesSource(errors, str(path), timeout_s=1.0).collect() is None
    assert set(errors.snapshot()) <= {("kubelet", "Unavailable"), ("kubelet", "DeadlineExceeded")}


def test_owners_by_uuid_index_and_mig():
    a = [
        Assignment("nvidia.com/gpu", "GPU-a", PodRef("ml", "train-0", "main")),
        Assignment("nvidia.com/gpu", "1", PodRef("ml", "train-1", "main")),  # index device-ID strategy
        Assignment("nvidia.com/mig-1g.10gb", "MIG-x", PodRef("lab", "nb-1", "main")),
        Assignment("nvidia.com/mig-1g.10gb", "MIG-y", PodRef("lab", "nb-2", "main")),
        Assignment("nvidia.com/gpu", "GPU-unknown", PodRef("ml", "elsewhere", "main")),
    ]
    owners, held = gpu_owners(a, [(0, "GPU-a", ()), (1, "GPU-b", ()), (2, "GPU-c", ("MIG-x", "MIG-y"))])
    assert owners == {0: PodRef("ml", "train-0", "main"), 1: PodRef("ml", "train-1", "main")}
    assert [(x.ref.pod, mig) for x, mig in held[2]] == [("nb-1", "MIG-x"), ("nb-2", "MIG-y")]
    assert 3 not in held


def _sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # an fd closed while listing
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


def test_no_connection_is_held_between_lists(kubelet):
    """An open gRPC channel keeps its poller threads waking (CPU every second while idle): each list
    connects, answers and lets go."""
    server, pods = kubelet
    pods.append(pod("train-0", {"nvidia.com/gpu": ["GPU-a"]}))
    source = PodResourcesSource(ErrorCounter(), server.socket_path)
    before = _sockets()
    for _ in range(3):
        assert [a.ref.pod for a in source.collect()] == ["train-0"]
    deadline = time.monotonic() + HANG_GUARD_S
    while _sockets() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sockets() <= before
