"""POST /v1/progress over real HTTP (uvicorn) on a simulated node: off by default; on, a GPU pod's
reports become its step and last sign of progress, and everything else is refused with a clear status."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

from exporter.app import Application
from exporter.config.settings import Settings
from exporter.policy.thresholds import PROGRESS_BODY_BYTES
from exporter.sim import SimulatedNode
from scripts.stack import free_port
from tests.e2e.test_http import Served, families, wait_ready
from tests.timing import HANG_GUARD_S

GOOD = {"namespace": "ml", "pod": "llm-train-0", "step": 41}


def _served(progress: bool) -> Iterator[Served]:
    node = SimulatedNode("healthy", n_gpus=2)
    module = node.install()
    node.host.start(period_s=0.2)
    settings = replace(
        Settings(),
        interval_s=0.25,
        collect_timeout_s=0.5,
        listen_address="127.0.0.1",
        pod_resources_socket=node.kubelet_socket,
        pod_resources_interval_s=1.0,
        progress_api=progress,
    )
    with Served(Application(settings, module, node.host_options()), free_port()) as s:
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
