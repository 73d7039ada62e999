"""A class from a pod's log needs more than one line, through the real exporter over HTTP (uvicorn) on a
simulated node whose starving trainer writes its own log: one inference request line appended to it
leaves the job training, its waits input waits; three such lines (the documented bound) make it a
server's log."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx

from exporter.app import Application
from exporter.config.settings import Settings
from exporter.sim import SimulatedNode
from scripts.stack import free_port
from tests.e2e.test_http import Served, families, wait_ready
from tests.timing import HANG_GUARD_S

REQUEST = 'INFO:     10.0.0.7:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK'


def _classes(s: Served) -> dict[str, tuple[str, str]]:
    fams = families(httpx.get(s.url + "/metrics").text)
    return {x.labels["gpu"]: (x.labels["workload"], x.labels["source"]) for x in fams["gpu_workload_class"]}


def _append(log: Path, text: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
    with log.open("a") as f:
        f.write(f"{stamp} stdout F {text}\n")


def _settle(s: Served, seconds: float) -> dict[str, tuple[str, str]]:
    """The classes after ``seconds`` (the pod-log thread passes once a second)."""
    time.sleep(seconds)
    return _classes(s)


def test_one_request_line_in_a_trainers_log_leaves_it_training():
    node = SimulatedNode("data_starvation:onset=0", n_gpus=2)
    module = node.install()
    node.host.start(period_s=0.2)
    root = node.start_logs()
    settings = replace(
        Settings(),
        interval_s=0.25,
        collect_timeout_s=0.5,
        listen_address="127.0.0.1",
        pod_resources_socket=node.kubelet_socket,
        pod_resources_interval_s=1.0,
        pod_logs=root,
    )
    try:
        with Served(Application(settings, module, node.host_options()), free_port()) as s:
            wait_ready(s.url)
            deadline = time.monotonic() + HANG_GUARD_S
            while time.monotonic() < deadline and ("training", "log") not in _classes(s).values():
                time.sleep(0.3)  # the trainer's steps have made three lines of training
            before = _classes(s)
            assert set(before.values()) == {("training", "log")}, before
            (log,) = Path(root).glob("*/*/0.log")
            _append(log, REQUEST)
            assert _settle(s, 2.5) == before  # one line of a server: nothing changes
            _append(log, REQUEST)
            _append(log, REQUEST)
            after = _settle(s, 2.5)  # the bound: three such lines make it a server's log
            assert set(after.values()) == {("serving", "log")}, after
    finally:
        node.close()
