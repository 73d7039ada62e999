"""Kubelet faults: pod labels survive a hiccup for the grace period, then go; a kubelet whose socket
comes back is asked again within seconds."""

from __future__ import annotations

import grpc

from exporter.policy.thresholds import KUBELET_SOCKET_RECOUNT, POD_LABEL_GRACE
from exporter.sim.kubelet import SimKubelet
from tests.faults.conftest import cycle, scrape


def pods_on_series(metrics: dict[str, list]) -> set[str]:
    return {s.labels.get("pod", "") for s in metrics["gpu_up"]}


def assignment_t(metrics: dict[str, list]) -> float | None:
    found = metrics.get("gpu_exporter_pod_assignment_timestamp_seconds")
    return found[0].value if found else None


def test_a_kubelet_hiccup_keeps_pod_labels_for_the_grace_period(make_node, faulty, clock):
    node = make_node("healthy", n_gpus=2)
    sampler, errors = faulty(node, pods=True, pod_resources_interval_s=5.0)
    metrics = scrape(cycle(sampler, clock, 2))
    answered = assignment_t(metrics)
    assert pods_on_series(metrics) == {"llm-train-0"} and answered is not None
    node.kubelet.misbehave(error=grpc.StatusCode.UNAVAILABLE)
    while clock.now + 2 - answered <= POD_LABEL_GRACE.value:  # the same series, labels and all
        metrics = scrape(cycle(sampler, clock, seconds=2.0))
        assert pods_on_series(metrics) == {"llm-train-0"} and assignment_t(metrics) == answered
    assert errors.snapshot()[("kubelet", "Unavailable")] >= POD_LABEL_GRACE.value // 10  # asked all along
    metrics = scrape(cycle(sampler, clock, 2, seconds=2.0))  # past the grace: dropped, not kept stale
    assert pods_on_series(metrics) == {""} and assignment_t(metrics) is None
    node.kubelet.misbehave()
    metrics = scrape(cycle(sampler, clock, 3, seconds=2.0))
    assert pods_on_series(metrics) == {"llm-train-0"} and assignment_t(metrics) >= clock.now - 6.0


def test_a_kubelet_that_hangs_keeps_the_labels_too(make_node, faulty, clock):
    node = make_node("healthy", n_gpus=1)
    sampler, errors = faulty(node, pods=True, pod_resources_interval_s=5.0)
    answered = assignment_t(scrape(cycle(sampler, clock, 2)))
    node.kubelet.misbehave(delay_s=float("inf"))
    metrics = scrape(cycle(sampler, clock, 3, seconds=5.0))
    assert pods_on_series(metrics) == {"llm-train-0"} and assignment_t(metrics) == answered
    assert errors.snapshot()[("kubelet", "DeadlineExceeded")] >= 1
    node.kubelet.misbehave()


def test_a_returning_kubelet_socket_is_found_within_seconds(make_node, faulty, clock):
    node = make_node("healthy", n_gpus=2)
    sampler, errors = faulty(node, pods=True)
    cycle(sampler, clock, 2)
    node.kubelet.stop()  # the kubelet restarts: its socket goes away...
    metrics = scrape(cycle(sampler, clock, 12))
    assert errors.snapshot()[("kubelet", "SocketNotFound")] == 1  # counted once a minute, not every look
    assert pods_on_series(metrics) == {"llm-train-0"}  # ...and the labels stay meanwhile
    node.kubelet = SimKubelet(node.kubelet_socket, node.current_pods).start()  # ...and comes back
    waited = 0
    while assignment_t(metrics) != clock.now and waited < 5:
        metrics = scrape(cycle(sampler, clock))
        waited += 1
    assert waited <= 2, f"{waited} s to reconnect"  # a second to see the socket, one to ask
    assert pods_on_series(metrics) == {"llm-train-0"}


def test_a_node_without_kubelet_counts_the_missing_socket_once_a_minute(make_node, faulty, clock, tmp_path):
    from exporter.sources.kubelet import PodResourcesSource

    node = make_node("healthy", n_gpus=1)
    sampler, errors = faulty(node)
    sampler.kubelet = PodResourcesSource(errors, str(tmp_path / "none.sock"), timeout_s=0.5)
    metrics = scrape(cycle(sampler, clock, 3 * int(KUBELET_SOCKET_RECOUNT.value)))
    assert errors.snapshot()[("kubelet", "SocketNotFound")] == 3  # under the collection-error alert's rate
    assert pods_on_series(metrics) == {""} and assignment_t(metrics) is None
