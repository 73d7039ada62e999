"""A class from a pod's log needs more than one line, through the real exporter over HTTP (uvicorn) on a
simulated node whose starving trainer writes its own log: one inference request line appended to it
leaves the job training, its waits input waits; three such lines (the documented bound) make it a
server's log."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from tests.e2e.test_http import Served, families, kubelet_node, wait_ready
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
    node, served = kubelet_node("data_starvation:onset=0", logs=True)
    root = node.start_logs()  # (started already: where they are)
    try:
        with served as s:
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
