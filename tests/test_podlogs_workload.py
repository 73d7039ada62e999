"""What a GPU pod runs and how loaded its inference server is, through the real pod-log source over
CRI logs in the kubelet's layout, the merged view and ``JobSignals``: the load line's own time, the
strongest hint of a pod's containers, pushed progress, and the names when the logs say nothing; the
words of an image's repository path."""

from __future__ import annotations

import json

import pytest

from exporter.collect.job_signals import JobSignals
from exporter.podlogs.logparse import ServerLoad, WorkloadHint
from exporter.podlogs.workload import NAME_WORDS, image_hint, name_hint
from exporter.sources.kubelet import PodRef
from exporter.sources.progress import ProgressStore
from tests.sources.test_podlogs import T0, Node, rec
from tests.test_logparse import SGLANG_DECODE, VLLM_V0, VLLM_V1

VLLM_POD = ("serve", "llama-70b-7c9d8f-x2k4q")
TRAIN_POD = ("ml", "bert-0")
START = "INFO 11-27 01:00:00 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000"
REQUEST = 'INFO:     10.0.0.7:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK'


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "pods")
    n.root.mkdir()
    n.source.set_pods(frozenset({VLLM_POD, TRAIN_POD}))
    yield n
    n.source.stop()


def test_the_newest_load_line_with_its_own_time(node):
    log = node.dir(*VLLM_POD, "uid-1", "vllm") / "0.log"
    node.write(log, rec(T0, START), rec(T0 + 10, VLLM_V0), rec(T0 + 11, REQUEST))  # before the source
    node.poll()
    view = node.source.view
    assert view.server_load(*VLLM_POD) == (pytest.approx(T0 + 10), ServerLoad(3, 0))
    assert view.workload(*VLLM_POD) == WorkloadHint("serving", "vLLM API server start-up")
    # one read: two load lines, the second split by the runtime (P records), requests after both
    half = VLLM_V1.index("Running")
    node.write(log, rec(T0 + 20, VLLM_V1.replace("Running: 3", "Running: 9")), rec(T0 + 21, REQUEST))
    node.write(
        log,
        rec(T0 + 29.5, VLLM_V1[:half], "P"),  # the line is the F record's, and so is its time
        rec(T0 + 30, VLLM_V1[half:].replace("Waiting: 0", "Waiting: 4")),
    )
    node.write(log, *(rec(T0 + 31 + i, REQUEST) for i in range(5)))
    node.poll()
    view = node.source.view
    assert view.server_load(*VLLM_POD) == (pytest.approx(T0 + 30), ServerLoad(3, 4))
    assert view.last_line(*VLLM_POD) == pytest.approx(T0 + 35)
    node.write(log, rec(T0 + 40, REQUEST))  # a read without a load line keeps the load and its time
    node.poll()
    assert node.source.view.server_load(*VLLM_POD) == (pytest.approx(T0 + 30), ServerLoad(3, 4))


def test_a_pods_containers_the_newest_load_and_the_strongest_hint(node):
    for container, t, line in (
        ("loader", T0, "step 3 of 8 shards"),  # an init container's steps: the weakest hint
        ("sglang", T0 + 5, SGLANG_DECODE),
        ("vllm", T0 + 2, VLLM_V0),
    ):  # three lines each: a class from a log needs workload.log_lines of them
        lines = [rec(t - 2 + i, line) for i in range(3)]
        node.write(node.dir(*VLLM_POD, "uid-1", container) / "0.log", *lines)
    node.poll()
    view = node.source.view
    assert view.server_load(*VLLM_POD) == (pytest.approx(T0 + 5), ServerLoad(8, 4))
    assert view.workload(*VLLM_POD) == WorkloadHint("serving", "SGLang batch stats")
    assert view.server_load(*TRAIN_POD) is None and view.workload(*TRAIN_POD) is None


def test_job_signals_per_gpu_logs_first_then_names(node, tmp_path):
    node.write(
        node.dir(*VLLM_POD, "uid-1", "vllm") / "0.log",
        rec(T0, START),
        rec(T0 + 5, REQUEST),
        rec(T0 + 10, VLLM_V0),
    )
    # a name that says training, a log that says serving in three lines: the log wins
    node.write(
        node.dir(*TRAIN_POD, "uid-2", "trainer") / "0.log",
        rec(T0, START),
        rec(T0 + 1, REQUEST),
        rec(T0 + 2, REQUEST),
    )
    notebook, unknown = ("lab", "jupyter-alice"), ("ml", "mystery-0")  # no log lines at all
    pods = frozenset({VLLM_POD, TRAIN_POD, notebook, unknown})
    owners = {
        0: PodRef(*VLLM_POD, "vllm"),
        1: PodRef(*VLLM_POD, "vllm"),
        2: PodRef(*TRAIN_POD, "trainer"),
        3: PodRef(*notebook, "notebook"),
        4: PodRef(*unknown, "main"),
    }
    signals = JobSignals()
    signals.update(node.source, None, pods, owners)  # names the pods to the source
    node.poll()
    view = signals.update(node.source, None, pods, owners)
    assert view is not None
    load = (pytest.approx(T0 + 10), ServerLoad(3, 0))
    assert signals.server_load == {0: load, 1: load}
    assert signals.workload == {
        0: WorkloadHint("serving", "vLLM API server start-up"),
        1: WorkloadHint("serving", "vLLM API server start-up"),
        2: WorkloadHint("serving", "vLLM API server start-up"),
        3: WorkloadHint("interactive", "pod name: jupyter", "name"),
    }
    assert set(signals.last_sign) == {0, 1, 2}
    signals.update(node.source, None, pods, {3: owners[3]})  # a GPU given back is forgotten
    assert (signals.server_load, set(signals.workload)) == ({}, {3})


def test_without_log_or_progress_sources_the_names_still_speak():
    signals = JobSignals()
    view = signals.update(
        None, None, frozenset(), {0: PodRef("ml", "llm-finetune-0"), 1: PodRef("a", "b", "c")}
    )
    assert view is None and signals.server_load == {} and signals.last_sign == {}
    assert signals.workload == {0: WorkloadHint("training", "pod name: finetune", "name")}


def test_pushed_progress_never_sets_the_class():
    """A report is progress only: the pod's names still decide (a push for a server leaves it serving),
    and a pod no name speaks for stays unclassified (judged by its shape)."""
    store, signals = ProgressStore(clock=lambda: T0), JobSignals()
    server, other = ("serve", "vllm-0"), ("ml", "job-0")
    store.forget_except(frozenset({server, other}))
    for ns, pod in (server, other):
        store.report(json.dumps({"namespace": ns, "pod": pod, "step": 5}).encode())
    signals.update(
        None, store, frozenset({server, other}), {0: PodRef(*server, "main"), 1: PodRef(*other, "c")}
    )
    assert signals.workload == {0: WorkloadHint("serving", "pod name: vllm", "name")}
    assert signals.last_sign == {0: T0, 1: T0} and signals.server_load == {}


@pytest.mark.parametrize(
    ("pod", "container", "hint"),
    [
        ("vllm-llama3-70b-7c9d8f-x2k4q", "main", ("serving", "pod name: vllm")),
        ("chat-0", "text-generation-inference", ("serving", "container name: text-generation-inference")),
        ("x-0", "kserve-container", ("serving", "container name: kserve")),
        ("llama-cpp-server-0", "server", ("serving", "pod name: llama-cpp")),
        ("sdxl-predictor-00001-deployment-5f8d", "kserve-container", ("serving", "pod name: predictor")),
        ("jupyter-alice", "notebook", ("interactive", "pod name: jupyter")),
        ("llm-eval-3", "vllm", ("evaluation", "pod name: eval")),  # an evaluation that runs vLLM
        ("bert-pytorchjob-master-0", "pytorch", ("training", "pod name: pytorchjob")),
        ("ml_train_0", "worker", ("training", "pod name: train")),
        ("llama-batch-inference-0", "main", ("batch", "pod name: batch-inference")),
        ("retrain-data-0", "main", None),  # whole words only
        ("evaluator", "trainee", None),
        ("", "", None),
    ],
)
def test_the_name_table(pod, container, hint):
    assert name_hint(pod, container) == (WorkloadHint(*hint, source="name") if hint else None)


@pytest.mark.parametrize(
    ("image", "hint"),
    [
        ("vllm/vllm-openai:v0.6.3", ("serving", "image vllm/vllm-openai (vllm)")),
        ("docker.io/vllm/vllm-openai@sha256:" + "0" * 64, ("serving", "image vllm/vllm-openai (vllm)")),
        (
            "nvcr.io/nvidia/tritonserver:24.05-trtllm-python-py3",
            ("serving", "image nvidia/tritonserver (tritonserver)"),
        ),
        (
            "ghcr.io/huggingface/text-generation-inference:2.4.0",
            ("serving", "image huggingface/text-generation-inference (text-generation-inference)"),
        ),
        ("lmsysorg/sglang:v0.3.5-cu124", ("serving", "image lmsysorg/sglang (sglang)")),
        ("ollama/ollama:0.4.1", ("serving", "image ollama/ollama (ollama)")),
        ("pytorch/torchserve:0.12.0-gpu", ("serving", "image pytorch/torchserve (torchserve)")),
        ("ghcr.io/ggerganov/llama.cpp:server-cuda", ("serving", "image ggerganov/llama.cpp (llama-cpp)")),
        (
            "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.2",
            ("serving", "image nim/meta/llama-3.1-8b-instruct (nim/)"),
        ),
        (
            "jupyter/pytorch-notebook:cuda12-latest",
            ("interactive", "image jupyter/pytorch-notebook (jupyter)"),
        ),
        (
            "quay.io/jupyter/scipy-notebook:2024-10-07",
            ("interactive", "image jupyter/scipy-notebook (jupyter)"),
        ),
        ("registry.example.com:5000/ml/llm-trainer:v3", ("training", "image ml/llm-trainer (trainer)")),
        ("ghcr.io/acme/finetune-llama:1", ("training", "image acme/finetune-llama (finetune)")),
        ("acme/lm-eval-harness:0.4", ("evaluation", "image acme/lm-eval-harness (eval)")),
        ("acme/vllm-eval:1", ("evaluation", "image acme/vllm-eval (eval)")),  # an evaluation running vLLM
        # a framework's own image trains, serves and runs notebooks alike: no class
        ("pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime", None),
        ("nvcr.io/nvidia/pytorch:24.05-py3", None),
        ("nvcr.io/nvidia/nemo:24.07", None),
        ("nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04", None),
        ("tensorflow/tensorflow:2.17.0-gpu", None),
        ("docker.io/library/python:3.11", None),
        # the registry host and the tag are never read
        ("vllm.example.com/base/cuda:12", None),
        ("ghcr.io/acme/base:inference", None),
        ("acme/base:train-v2", None),
        ("triton.internal:5000/acme/app", None),
        # the namespace word only as the path's first component, whole words only
        ("acme/nim:1", None),
        ("acme/retrained-model:1", None),
        # no image reference at all
        ("", None),
        ("VLLM/VLLM-OPENAI", None),
        ("vllm/vllm-openai:" + "x" * 200, None),
        ("x" * 600, None),
        ("vllm//openai", None),
        ("vllm/vllm-openai@sha256:short", None),
    ],
)
def test_the_image_table(image, hint):
    assert image_hint(image) == (WorkloadHint(*hint, source="image") if hint else None)


def test_image_words_are_the_name_table_s():
    """The image hint reads the one word table of the name and process hints: each serving word of it,
    as an image's repository, says serving."""
    serving = dict(NAME_WORDS)["serving"]
    assert all(image_hint(f"acme/{word}:1").kind == "serving" for word in serving)
