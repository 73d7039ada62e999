"""POST /v1/progress over real HTTP (uvicorn) on a simulated node: off by default; on, a GPU pod's
reports become its step and last sign of progress, and everything else is refused with a clear status."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from exporter.policy.thresholds import PROGRESS_BODY_BYTES
from tests.e2e.test_http import Served, families, kubelet_node, wait_ready
from tests.timing import HANG_GUARD_S

GOOD = {"namespace": "ml", "pod": "llm-train-0", "step": 41}


def _served(progress: bool, scenario: str = "healthy") -> Iterator[Served]:
    node, served = kubelet_node(scenario, progress_api=progress)
    with served as s:
        wait_ready(s.url)
        yield s
    node.close()


@pytest.fixture
def api() -> Iterator[Served]:
    yield from _served(True)


def _post(s: Served, body: object = None, content: bytes | None = None, **headers: str) -> httpx.Response:
    if content is not None:
        return httpx.post(s.url + "/v1/progress", content=content, headers=headers)
    return httpx.post(s.url + "/v1/progress", json=body, headers=headers)


def _step(s: Served) -> list:
    return families(httpx.get(s.url + "/metrics").text).get("gpu_pod_training_step", [])


def test_off_by_default():
    for s in _served(False):
        assert _post(s, GOOD).status_code in (404, 405)


def test_a_report_becomes_the_pods_step_and_last_sign_of_progress(api):
    deadline = time.monotonic() + HANG_GUARD_S
    while (r := _post(api, GOOD)).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.2)  # until the sampler has asked the kubelet which pods hold GPUs
    assert r.status_code == 204, r.text
    before = time.time()
    assert _post(api, {**GOOD, "step": 45}).status_code == 204
    time.sleep(0.6)
    steps = _step(api)
    assert [(x.labels["pod"], x.labels["container"], x.value) for x in steps] == [("llm-train-0", "", 45)]
    metrics = families(httpx.get(api.url + "/metrics").text)
    last = metrics["gpu_pod_log_last_line_seconds"][0].value
    assert before - 5 < last <= time.time()


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"namespace": "ml", "pod": "llm-train-0"}, 400, "exactly"),
        ({**GOOD, "loss": 2.0}, 400, "exactly"),
        ({**GOOD, "step": -1}, 400, "whole number"),
        ({**GOOD, "step": True}, 400, "whole number"),
        ({**GOOD, "step": 1.5}, 400, "whole number"),
        ({**GOOD, "pod": "Bad_Name"}, 400, "pod name"),
        ({**GOOD, "namespace": "x" * 70}, 400, "namespace"),
        ([1, 2, 3], 400, "exactly"),
        ({**GOOD, "pod": "web-0"}, 404, "holds no GPU"),
    ],
)
def test_bad_reports_are_refused(api, body, status, words):
    wait_until_pods_known(api)
    r = _post(api, body)
    assert r.status_code == status and words in r.text, r.text


def wait_until_pods_known(s: Served) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while _post(s, GOOD).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.2)


def test_wrong_type_junk_and_big_bodies_are_refused_before_parsing(api):
    assert _post(api, content=b'{"namespace":"ml"}', **{"Content-Type": "text/plain"}).status_code == 415
    assert _post(api, content=b"\xff\xfe{", **{"Content-Type": "application/json"}).status_code == 400
    big = (
        b'{"namespace": "ml", "pod": "llm-train-0", "step": 1' + b" " * int(PROGRESS_BODY_BYTES.value) + b"}"
    )
    assert _post(api, content=big, **{"Content-Type": "application/json"}).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming
        for _ in range(64):
            yield b" " * 1024

    r = httpx.post(api.url + "/v1/progress", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413


def test_the_documented_client_reports(api, monkeypatch):
    import re

    from tests.conftest import REPO

    code = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "progress.md").read_text(), re.S)[0]
    namespace: dict = {}
    exec(compile(code, "docs/progress.md", "exec"), namespace)  # our own documentation
    monkeypatch.setenv("POD_NAMESPACE", "ml")
    monkeypatch.setenv("POD_NAME", "llm-train-0")
    wait_until_pods_known(api)
    reporter = namespace["ProgressReporter"](every=0.0, url=api.url + "/v1/progress")
    reporter.report(777)
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline and [x.value for x in _step(api)] != [777]:
        time.sleep(0.2)
    assert [x.value for x in _step(api)] == [777]


SERVER_SAYS = {("serving", "process"), ("serving", "image"), ("serving", "name")}  # processes, image, names


def _classes(s: Served) -> dict[str, tuple[str, str, str, str]]:
    """GPU -> (namespace, pod, workload, source) of its gpu_workload_class series."""
    fams = families(httpx.get(s.url + "/metrics").text)
    return {
        x.labels["gpu"]: (
            x.labels.get("namespace", ""),
            x.labels.get("pod", ""),
            x.labels["workload"],
            x.labels["source"],
        )
        for x in fams.get("gpu_workload_class", [])
    }


def _lost(s: Served, gpu: str) -> dict[str, float]:
    fams = families(httpx.get(s.url + "/metrics").text)
    return {x.labels["state"]: x.value for x in fams.get("gpu_time_seconds", []) if x.labels["gpu"] == gpu}


def test_a_push_for_another_pod_changes_nothing_of_its_class_or_pages():
    """Any holder of the push API (no address check) reports steps for an inference server's pod: the
    step is kept, but the server stays serving by its processes, image and names, its idle time stays idle
    capacity (never the input wait a starving trainer pages on), and nothing pages."""
    for s in _served(True, "serving"):
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline and not any(c[1] for c in _classes(s).values()):
            time.sleep(0.2)
        before = _classes(s)
        gpu, (namespace, pod, kind, source) = sorted(before.items())[0]
        assert (kind, source) in SERVER_SAYS, before
        body = {"namespace": namespace, "pod": pod, "step": 1}
        while _post(s, body).status_code == 404 and time.monotonic() < deadline:
            time.sleep(0.2)
        for step in range(2, 14):
            assert _post(s, {**body, "step": step}).status_code == 204
            time.sleep(0.25)
        assert [(x.labels["pod"], x.value) for x in _step(s)] == [(pod, 13)]  # the report did land
        after = _classes(s)  # the process table may since have spoken over the names: both the server's
        assert set(after) == set(before) and all(c[2:] in SERVER_SAYS for c in after.values()), after
        assert _lost(s, gpu).get("input_wait", 0.0) == 0.0, _lost(s, gpu)
        pages = families(httpx.get(s.url + "/metrics").text).get("gpu_bottleneck", [])
        assert [x.labels for x in pages if x.value == 1 and x.labels["gpu"] == gpu] == []
