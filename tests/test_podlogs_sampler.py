"""The pod-log source through the real sampler over a simulated node: the sampler names the GPU pods,
takes the source's numbers at publish, gives each GPU's points the seconds since its pod's last line (and
its pod's workload and server load to the analysis), and the renderer exports the derived numbers. The
scrape path reads no file."""

from __future__ import annotations

from exporter.analysis.workload import Workload
from exporter.collect.sampler import Sampler
from exporter.podlogs.logparse import ServerLoad, WorkloadHint
from exporter.serve.metrics import Renderer
from exporter.sources.errors import ErrorCounter
from exporter.sources.kubelet import PodResourcesSource
from exporter.sources.nvml import NvmlSource
from exporter.sources.podlogs import PodLogSource
from tests.conftest import FAST, RefreshingHostSource, step
from tests.sources.test_podlogs import rec
from tests.test_logparse import VLLM_V1


def _sampler(node, errors, source, clock) -> Sampler:
    return Sampler(
        FAST,
        errors,
        {
            "host": RefreshingHostSource(node, errors, clock=clock, **node.host_options()),  # type: ignore[arg-type]
            "nvml": NvmlSource(node.install(), errors, clock=clock, slow_interval_s=FAST.slow_interval_s),
            "kubelet": PodResourcesSource(errors, node.kubelet_socket, timeout_s=0.5),
            "podlogs": source,
        },
        clock=clock,
    )


def _pod_log(tmp_path, errors: ErrorCounter, text: str) -> PodLogSource:
    """The simulated training pod's container log holding ``text``, and a pod-log source over it."""
    pods = tmp_path / "pods"
    log = pods / "ml_llm-train-0_6f1c2d3e" / "trainer" / "0.log"
    log.parent.mkdir(parents=True)
    log.write_text(text)
    return PodLogSource(str(pods), errors, sys_root=str(tmp_path / "sys"))


def test_points_carry_the_silence_of_their_pods_log(make_node, clock, tmp_path):
    node = make_node("healthy", n_gpus=2)
    errors = ErrorCounter()
    last_line = clock()
    source = _pod_log(tmp_path, errors, rec(last_line - 5, "step 40") + rec(last_line, "step 41"))
    sampler = _sampler(node, errors, source, clock)
    try:
        step(sampler, clock, cycles=2)  # the sampler learns which pods hold GPUs and names them
        source.poll()  # the source's own thread does this once a second
        snap = step(sampler, clock, seconds=3.0, cycles=2)
        assert snap.pod_logs is not None
        (c,) = snap.pod_logs.containers
        assert (c.namespace, c.pod, c.container, c.step) == ("ml", "llm-train-0", "trainer", 41)
        newest = list(sampler.analyzer.window("0"))[-1]
        assert newest.log_silent_s is not None
        assert abs(newest.log_silent_s - (newest.t - last_line)) < 0.01
        body = Renderer().render(snap)[0].decode()
        assert 'gpu_pod_training_step{container="trainer",namespace="ml",pod="llm-train-0"} 41.0' in body
        assert 'gpu_pod_nccl_warnings_total{namespace="ml",pod="llm-train-0"} 0.0' in body
    finally:
        sampler.stop()


def test_the_sampler_hands_each_gpu_its_pods_workload_and_server_load(make_node, clock, tmp_path):
    """The analysis reads ``JobSignals.workload`` and ``server_load`` after each publication."""
    node = make_node("healthy", n_gpus=2)
    errors = ErrorCounter()
    now = clock()
    start_up = rec(now - 5, "INFO 11-27 01:00:00 Starting vLLM API server on http://0.0.0.0:8000")
    source = _pod_log(tmp_path, errors, start_up + rec(now - 1, VLLM_V1) + rec(now, VLLM_V1))
    sampler = _sampler(node, errors, source, clock)
    try:
        step(sampler, clock, cycles=2)
        source.poll()
        step(sampler, clock, seconds=3.0, cycles=2)
        held = set(sampler.job.last_sign)
        assert held  # the simulated pod holds GPUs
        serving = WorkloadHint("serving", "vLLM API server start-up")  # its log outranks its names
        assert sampler.job.workload == dict.fromkeys(held, serving)
        assert {
            i: (round(t - now, 3), load) for i, (t, load) in sampler.job.server_load.items()
        } == dict.fromkeys(held, (0.0, ServerLoad(3, 0)))
        step(sampler, clock, seconds=1.0, cycles=1)  # what the sampler took, the analysis now has
        for gpu in map(str, held):
            assert sampler.analyzer.workload(gpu) == Workload("serving", "log", "vLLM API server start-up")
            newest = list(sampler.analyzer.window(gpu))[-1]
            assert (newest.requests_running, newest.requests_waiting) == (3.0, 0.0)
    finally:
        sampler.stop()
