"""The simulated kubelet in a process of its own (what ``serve --simulate`` runs): it serves the node's
pods over the real PodResources gRPC API, follows pod churn and misbehaviour sent to it, and never
outlives the node or the exporter that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.request import urlopen

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.sim import SimulatedNode
from exporter.sim.kubelet import KubeletProcess
from exporter.sources.errors import ErrorCounter
from exporter.sources.kubelet import PodResourcesSource
from scripts.stack import free_port, start_exporter, wait_http
from tests.conftest import REPO
from tests.timing import assert_within, pace, timed


def _children(pid: int) -> list[int]:
    """The live (not zombie) child processes of ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == pid and stat[0] != "Z":
            out.append(int(entry))
    return out


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def _pods(source: PodResourcesSource) -> set[str]:
    return {a.ref.pod for a in source.collect() or ()}


def test_the_pods_are_served_from_another_process_and_follow_churn():
    now = [1_000_000.0]
    node = SimulatedNode("pod_churn:churn=30", n_gpus=2, clock=lambda: now[0], kubelet_process=True)
    try:
        child = node.kubelet.pid  # type: ignore[union-attr]
        assert child in _children(os.getpid()) and child != os.getpid()
        source = PodResourcesSource(ErrorCounter(), node.kubelet_socket)
        assert _pods(source) == {"llm-train-0"}
        now[0] += 31
        node.current_pods()  # the simulator's /proc writer asks this every refresh
        assert _pods(source) == {"llm-train-1"}
        node.kubelet.misbehave(error=grpc.StatusCode.UNAVAILABLE)
        errors = ErrorCounter()
        assert PodResourcesSource(errors, node.kubelet_socket).collect() is None
        assert any(key[0] == "kubelet" for key in errors.snapshot())
        node.kubelet.misbehave()
        assert _pods(source) == {"llm-train-1"}
    finally:
        node.close()
    assert _gone(child, 5)
    assert not Path(node.kubelet_socket).parent.exists()


def test_the_kubelet_process_exits_when_its_node_process_dies_without_closing():
    code = (
        "import os, sys; from exporter.sim import SimulatedNode\n"
        "node = SimulatedNode('healthy', n_gpus=1, kubelet_process=True)\n"
        "print(os.getpid(), flush=True); sys.stdin.readline(); os._exit(1)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        parent = int(proc.stdout.readline())
        (child,) = _children(parent)
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(10)
        assert _gone(child, 5), "the simulated kubelet outlived its node"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT])
def test_serve_simulate_reads_its_pods_from_the_kubelet_process_and_takes_it_along(how):
    port = free_port()
    exporter = start_exporter(["--simulate", "healthy", "--sim-gpus", "2", "--interval", "0.5"], port)
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", proc=exporter)
        (child,) = _children(exporter.pid)
        assert "exporter.sim.kubelet" in Path(f"/proc/{child}/cmdline").read_text()
        deadline, pods = time.monotonic() + 20, set()
        while time.monotonic() < deadline and not pods:
            body = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            info = [
                s for f in text_string_to_metric_families(body) for s in f.samples if s.name == "gpu_pod_info"
            ]
            pods = {s.labels["pod"] for s in info}
            time.sleep(0.2)
        assert pods == {"llm-train-0"}
        exporter.send_signal(how)
        assert exporter.wait(15) == 0
        assert _gone(child, 5)
    finally:
        exporter.kill()
        exporter.wait()


def test_a_kubelet_that_cannot_serve_is_a_clear_error_not_a_hang(tmp_path):
    def start_and_stop() -> None:
        KubeletProcess(str(tmp_path / "kubelet.sock"), [], ready_s=600.0).stop()

    baseline = pace(start_and_stop, repeat=2)  # a child that starts, serves and stops, here and now

    def refused() -> None:
        with pytest.raises(RuntimeError, match="did not start serving"):
            KubeletProcess(str(tmp_path / "no-such-dir" / "kubelet.sock"), [], ready_s=600.0)

    _, took = timed(refused)
    # the child's end is noticed, not its ten-minute window waited out
    assert_within(took, baseline, 10, "a kubelet that cannot serve")
