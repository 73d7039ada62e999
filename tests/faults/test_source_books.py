"""One place books every source: gpu_exporter_source_up / _duration_seconds follow each source's last
attempt through the real bindings, the real host source and the real kubelet client."""

from __future__ import annotations

import pynvml

from exporter.sources.kubelet import PodResourcesSource
from tests.faults.conftest import cycle, scrape


def by_source(metrics: dict[str, list], name: str) -> dict[str, float]:
    return {s.labels["source"]: s.value for s in metrics.get(name, [])}


def test_every_source_is_booked_up_with_its_duration(make_node, faulty, clock):
    sampler, _ = faulty(make_node("healthy", n_gpus=2), pods=True)
    metrics = scrape(cycle(sampler, clock, 3))
    up = by_source(metrics, "gpu_exporter_source_up")
    assert up == {"nvml": 1, "host": 1, "kubelet": 1}
    durations = by_source(metrics, "gpu_exporter_source_duration_seconds")
    assert set(durations) == set(up) and all(d >= 0 for d in durations.values())
    # the success-only family keeps its meaning: the same sources, stamped at their last success (the
    # kubelet is asked every --pod-resources-interval, the others every cycle)
    stamps = by_source(metrics, "gpu_exporter_last_collect_timestamp_seconds")
    assert set(stamps) == set(up) and stamps["nvml"] == stamps["host"] == clock.now >= stamps["kubelet"]


def test_a_missing_kubelet_socket_is_down_and_keeps_its_last_success(make_node, faulty, clock, tmp_path):
    sampler, _ = faulty(make_node("healthy", n_gpus=1), pods=True, pod_resources_interval_s=1.0)
    answered_at = scrape(cycle(sampler, clock, 2))
    last_ok = by_source(answered_at, "gpu_exporter_last_collect_timestamp_seconds")["kubelet"]
    sampler.kubelet = PodResourcesSource(sampler.errors, str(tmp_path / "none.sock"), timeout_s=0.5)
    metrics = scrape(cycle(sampler, clock, 2))
    assert by_source(metrics, "gpu_exporter_source_up") == {"nvml": 1, "host": 1, "kubelet": 0}
    assert by_source(metrics, "gpu_exporter_last_collect_timestamp_seconds")["kubelet"] == last_ok


def test_a_lost_driver_takes_nvml_down_and_back(make_node, faulty, clock):
    node = make_node("healthy", n_gpus=2)
    sampler, _ = faulty(node)
    cycle(sampler, clock, 2)
    node.faults.add("*", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    metrics = scrape(cycle(sampler, clock, 3))
    assert by_source(metrics, "gpu_exporter_source_up") == {"nvml": 0, "host": 1}
    node.faults.clear()
    metrics = scrape(cycle(sampler, clock, 40))  # past the re-open backoff
    assert by_source(metrics, "gpu_exporter_source_up") == {"nvml": 1, "host": 1}


def test_one_failing_gpu_leaves_the_source_up_and_the_gpu_down(make_node, faulty, clock):
    node = make_node("healthy", n_gpus=2)
    sampler, _ = faulty(node)
    cycle(sampler, clock, 2)
    node.faults.add("*", pynvml.NVML_ERROR_UNKNOWN, gpu=1)
    metrics = scrape(cycle(sampler, clock, 2))
    assert by_source(metrics, "gpu_exporter_source_up")["nvml"] == 1
    assert {s.labels["gpu"]: s.value for s in metrics["gpu_up"]} == {"0": 1, "1": 0}
    node.faults.add("*", pynvml.NVML_ERROR_UNKNOWN, gpu=0)  # no GPU answers: the source is down
    metrics = scrape(cycle(sampler, clock, 1))
    assert by_source(metrics, "gpu_exporter_source_up")["nvml"] == 0


def test_each_stale_judged_source_exports_its_own_interval(make_node, faulty, clock):
    """The stale-collection alert scales with each source's interval: a kubelet asked every five minutes
    is not stale a minute after its last answer, while NVML at 1 s sampling is."""
    sampler, _ = faulty(
        make_node("healthy", n_gpus=1), pods=True, interval_s=2.0, pod_resources_interval_s=300.0
    )
    metrics = scrape(cycle(sampler, clock, 2, seconds=2.0))
    intervals = by_source(metrics, "gpu_exporter_source_interval_seconds")
    assert intervals == {"nvml": 2.0, "host": 2.0, "kubelet": 300.0}
    assert set(intervals) == set(by_source(metrics, "gpu_exporter_last_collect_timestamp_seconds"))
    sampler.kubelet = None  # a source taken away leaves no interval behind
    metrics = scrape(cycle(sampler, clock, 1, seconds=2.0))
    assert by_source(metrics, "gpu_exporter_source_interval_seconds") == {"nvml": 2.0, "host": 2.0}
