"""The simulated pods' logs, read by the real pod-log source: what each scenario's job prints."""

from __future__ import annotations

import pytest

from exporter.sim import SimulatedNode
from exporter.sim.conditions import EFA_DEVICES
from exporter.sim.podlogs import WATCHDOG_S
from exporter.sources.errors import ErrorCounter
from exporter.sources.podlogs import PodLogSource


@pytest.fixture
def logs():
    nodes = []

    def make(scenario: str) -> tuple[SimulatedNode, PodLogSource]:
        node = SimulatedNode(scenario, n_gpus=2)
        nodes.append(node)
        root = node.start_logs()
        node.logs._stop.set()  # type: ignore[union-attr] # the test writes by hand, not its thread
        source = PodLogSource(root, ErrorCounter(), sys_root=node.host.sys_root)
        source.set_pods(frozenset({("ml", "llm-train-0")}))
        source.poll()  # the init lines, as the tail of a log found at start
        return node, source

    yield make
    for node in nodes:
        node.close()


def write(node: SimulatedNode, *seconds: float) -> None:
    for dt in seconds:
        node.logs.write(node.model.start + dt)  # type: ignore[union-attr]


def test_a_healthy_job_logs_steps_on_nvlink_transports(logs):
    node, source = logs("healthy")
    write(node, 1.0, 2.0, 3.0)
    view = source.poll()
    (c,) = view.containers
    assert c.step is not None and c.last_line_t is not None
    (pod,) = view.pods
    assert pod.version == "2.21.5" and ("intra", "P2P/CUMEM") in pod.transports
    assert view.rdma_devices == len(EFA_DEVICES)  # the simulated p5's EFA devices


def test_a_hung_job_stops_logging_then_the_watchdog_ends_it(logs):
    node, source = logs("comm_hang")
    before = source.view.lines
    write(node, 1.0, 2.0, 3.0)
    view = source.poll()
    assert view.containers[0].step is None and view.lines == before  # not one line after the onset
    write(node, WATCHDOG_S + 1, WATCHDOG_S + 2)
    assert dict(source.poll().pods[0].errors)["watchdog_timeout"] == 1


def test_the_idle_server_keeps_logging_and_faults_show_their_transports(logs):
    node, source = logs("comm_hang:logs=flow")
    before = source.view.lines
    write(node, 1.0, 2.0)
    assert source.poll().lines == before + 2
    assert ("intra", "SHM") in logs("nvlink_down")[1].view.pods[0].transports
    assert ("inter", "NET/Socket") in logs("comm_bound")[1].view.pods[0].transports


def test_a_full_shm_kills_the_loader_once(logs):
    node, source = logs("shm_exhaustion:fill=10")
    write(node, 1.0, 11.0, 12.0, 13.0)
    assert dict(source.poll().pods[0].errors)["bus_error"] == 1
