"""Faults seen over real HTTP (uvicorn in-process, the real Application on a simulated node): a GPU that
stops answering shows as down with its data's age while the kubelet vanishes, and /metrics keeps
answering with the other GPUs and the held pod labels."""

from __future__ import annotations

import time

import httpx

from tests.e2e.test_http import families, kubelet_node, wait_ready


def scrape_until(url: str, done, timeout: float = 15.0) -> dict[str, list]:
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.get(url + "/metrics", timeout=5.0)
        assert response.status_code == 200
        metrics = families(response.text)
        if done(metrics) or time.monotonic() > deadline:
            return metrics
        time.sleep(0.2)


def up(metrics: dict[str, list]) -> dict[str, float]:
    return {s.labels["gpu"]: s.value for s in metrics["gpu_up"]}


def test_an_unresponsive_gpu_and_a_vanished_kubelet_over_http():
    node, app = kubelet_node("gpu_unresponsive:onset=3,gpus=1", n_gpus=4, pod_resources_interval_s=0.5)
    try:
        with app as served:
            wait_ready(served.url)
            metrics = scrape_until(served.url, lambda m: up(m).get("1") == 0)
            assert up(metrics) == {"0": 1, "1": 0, "2": 1, "3": 1}
            assert {s.labels["gpu"] for s in metrics["gpu_power_watts"]} == {"0", "2", "3"}
            age = {s.labels["gpu"]: s.value for s in metrics["gpu_last_collect_timestamp_seconds"]}
            assert age["1"] < min(age["0"], age["2"], age["3"])  # its data is older than the others'
            assert metrics["gpu_exporter_nvml_up"][0].value == 1
            assert {s.labels.get("pod") for s in metrics["gpu_up"]} == {"llm-train-0"}

            node.kubelet.stop()  # the kubelet goes away: the labels are held, the errors counted
            metrics = scrape_until(
                served.url,
                lambda m: any(
                    s.labels.get("error") == "SocketNotFound" for s in m["gpu_exporter_collect_errors"]
                ),
            )
            assert {s.labels.get("pod") for s in metrics["gpu_up"]} == {"llm-train-0"}
            assert "gpu_exporter_pod_assignment_timestamp_seconds" in metrics
    finally:
        node.close()
