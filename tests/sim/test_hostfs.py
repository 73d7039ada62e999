"""The simulated /proc writer: the CPU it reports as the simulation's."""

from __future__ import annotations

import time
from pathlib import Path

from exporter.sim import parse_scenario
from exporter.sim.hostfs import SimHost
from exporter.sim.physics import NodeModel
from tests.timing import HANG_GUARD_S


def test_the_writer_thread_counts_all_of_its_cpu_as_the_simulations_not_only_its_refreshes():
    """Benchmarks take the simulation's CPU out of the exporter's: the writer's thread is the simulation's
    whole, so its waking and waiting count too (with no work in its refreshes, only those are left)."""
    host = SimHost(NodeModel(parse_scenario("healthy"), n_gpus=1))
    try:
        seen: list[float] = []
        host._update = lambda: seen.append(time.thread_time())  # a refresh that does no work
        before = host.cpu_s
        host.start(period_s=0.002)
        deadline = time.monotonic() + HANG_GUARD_S
        while len(seen) < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        host.close()
    assert len(seen) >= 30
    assert host.cpu_s - before >= seen[-1] - seen[0] > 0  # every bit of the thread's time between them


def test_each_pod_names_its_image_and_its_process_its_work():
    """The containerd bundles name each container's image (a server's, a framework's for training) and
    the GPU processes run their workload's command whatever the pod is called."""
    from exporter.sim import SimulatedNode
    from exporter.sources import runtime

    for scenario, image, command in (
        ("serving:pod=model-api", "vllm/vllm-openai:v0.6.3", "vllm.entrypoints"),
        ("healthy", "nvcr.io/nvidia/pytorch:24.05-py3", "train.py"),
    ):
        node = SimulatedNode(scenario, n_gpus=2)
        try:
            pod = node.pods[0]
            index = runtime.scan(node.host.host_root)
            assert index.images == {(pod.namespace, pod.name, pod.container): image}
            node.host.refresh()
            cmdlines = {p.read_text() for p in Path(node.host.proc_root).glob("*/cmdline")}
            assert cmdlines and all(command in c for c in cmdlines), cmdlines
        finally:
            node.close()
