"""The workload class from a container's image, through the real exporter over HTTP (uvicorn) on a
simulated node whose containerd bundles name each container's image: a vLLM server in a pod named for
nothing (`model-api`, container `main`, no log read) is classed serving from its image, its quiet time
is idle capacity and nothing pages; the image outranks a pod name that says otherwise, and what the GPU
processes run outranks the image."""

from __future__ import annotations

import time

import httpx
import pytest

from exporter.sim import SimulatedNode
from tests.e2e.test_http import Served, families, kubelet_node, wait_ready
from tests.timing import HANG_GUARD_S


def _scrape(s: Served) -> dict[str, list]:
    return families(httpx.get(s.url + "/metrics").text)


def _classes(fams: dict[str, list]) -> dict[str, tuple[str, str, str]]:
    """GPU -> (pod, workload, source) of its gpu_workload_class series."""
    return {
        x.labels["gpu"]: (x.labels.get("pod", ""), x.labels["workload"], x.labels["source"])
        for x in fams.get("gpu_workload_class", [])
    }


def _served(scenario: str, process_owners: bool) -> tuple[SimulatedNode, Served]:
    return kubelet_node(scenario, process_owners=process_owners)


def _settled(s: Served, expected: tuple[str, str, str]) -> dict[str, tuple[str, str, str]]:
    """The classes once both GPUs' series say ``expected`` (or at the guard: what they say then). The
    processes are read a cycle or two after the pods, so a stronger source may come second."""
    deadline = time.monotonic() + HANG_GUARD_S
    classes: dict[str, tuple[str, str, str]] = {}
    while time.monotonic() < deadline:
        classes = _classes(_scrape(s))
        if len(classes) == 2 and set(classes.values()) == {expected}:
            break
        time.sleep(0.3)
    return classes


@pytest.mark.parametrize(
    ("scenario", "process_owners", "expected"),
    [
        # a name that says nothing: the image says what runs
        ("serving:pod=model-api", False, ("model-api-0", "serving", "image")),
        # a name that says training ("trainer"): what was shipped outranks what the pod is called
        ("serving:pod=llm-trainer", False, ("llm-trainer-0", "serving", "image")),
        # the GPU processes' commands (python -m vllm.entrypoints...) outrank the image
        ("serving:pod=model-api", True, ("model-api-0", "serving", "process")),
    ],
)
def test_the_image_classes_a_server_its_pod_name_does_not(scenario, process_owners, expected):
    node, served = _served(scenario, process_owners)
    try:
        with served as s:
            wait_ready(s.url)
            classes = _settled(s, expected)
            assert set(classes) == {"0", "1"} and set(classes.values()) == {expected}, classes
            time.sleep(2.0)  # and it stays: a weaker source never speaks over it
            assert set(_classes(_scrape(s)).values()) == {expected}
    finally:
        node.close()


WATCH_S = 60.0  # long enough for the unclassed server to book input waits (see below)


def test_a_server_classed_by_its_image_is_not_paged_for_its_quiet_time():
    """Between requests the vLLM engines sit without a kernel: from the image, idle capacity from the
    start, never a trainer's input wait, and no verdict fires. The same pod without the image annotation
    was judged as training until its shape showed a server (73 s into a run on this simulator), and
    one of its GPUs booked 8.6 s of input wait from 46 s on: a minute tells the two apart."""
    node, served = _served("serving:pod=model-api", False)
    try:
        with served as s:
            wait_ready(s.url)
            server = ("model-api-0", "serving", "image")
            assert set(_settled(s, server).values()) == {server}
            seen: set[tuple[str, str, str]] = set()
            waits: list = []
            pages: list = []
            idle: dict[str, float] = {}
            end = time.monotonic() + WATCH_S
            while time.monotonic() < end:
                time.sleep(1.0)
                fams = _scrape(s)
                seen |= set(_classes(fams).values())
                times = fams.get("gpu_time_seconds", [])
                waits += [(x.labels["gpu"], x.value) for x in times if x.labels["state"] == "input_wait"]
                pages += [x.labels for x in fams.get("gpu_bottleneck", []) if x.value == 1]
                idle = {x.labels["gpu"]: x.value for x in times if x.labels["state"] == "idle"}
            assert seen == {server}, seen
            assert all(idle.get(g, 0.0) >= 10.0 for g in ("0", "1")), idle  # it did sit quiet
            assert waits == [] and pages == [], (waits, pages)
    finally:
        node.close()
