"""The service over real HTTP: uvicorn on a free port, in-process and as the real command."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from email.utils import formatdate

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import Application
from exporter.config.settings import Settings
from exporter.serve.server import create_app
from exporter.sim import SimulatedNode
from scripts.stack import free_port
from tests.conftest import REPO, real_nvml_present, require_tool
from tests.timing import HANG_GUARD_S


def wait_ready(url: str, timeout: float = 20.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url + "/readyz", timeout=1.0)
            if response.status_code == 200:
                return response
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"{url} never became ready ({last})")


def families(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, []).extend(family.samples)
    return out


class Served:
    def __init__(self, app: Application, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(
            create_app(app), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def kubelet_node(
    scenario: str, logs: bool = False, n_gpus: int = 2, **settings: object
) -> tuple[SimulatedNode, Served]:
    """A simulated node of ``n_gpus`` GPUs whose pods the exporter learns from the simulated kubelet,
    sampled four times a second, as a Served to enter (``logs``: the pods write their logs and the exporter
    follows them; ``settings``: the Settings fields a test turns on)."""
    node = SimulatedNode(scenario, n_gpus=n_gpus)
    module = node.install()
    node.host.start(period_s=0.2)
    if logs:
        settings["pod_logs"] = node.start_logs()
    config = replace(
        Settings(),
        interval_s=0.25,
        collect_timeout_s=0.5,
        listen_address="127.0.0.1",
        pod_resources_socket=node.kubelet_socket,
        pod_resources_interval_s=1.0,
    )
    config = replace(config, **settings)  # type: ignore[arg-type]
    return node, Served(Application(config, module, node.host_options()), free_port())


@pytest.fixture
def served(request) -> Iterator[tuple[Served, SimulatedNode]]:
    scenario = getattr(request, "param", "healthy")
    node = SimulatedNode(scenario, n_gpus=4)
    module = node.install()
    node.host.start(period_s=0.2)
    settings = replace(Settings(), interval_s=0.25, collect_timeout_s=0.5, listen_address="127.0.0.1")
    app = Application(settings, module, node.host_options())
    with Served(app, free_port()) as s:
        yield s, node
    node.close()


def test_metrics_over_real_http_parse_as_prometheus_text(served):
    s, _ = served
    wait_ready(s.url)
    time.sleep(0.6)
    response = httpx.get(s.url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    metrics = families(response.text)
    assert len([x for x in metrics["gpu_up"] if x.value == 1]) == 4
    assert {x.labels["gpu"] for x in metrics["gpu_power_watts"]} == {"0", "1", "2", "3"}
    assert metrics["gpu_node_cpu_iowait_ratio"][0].value >= 0
    assert httpx.get(s.url + "/healthz").text == "ok\n"


def test_promtool_accepts_the_served_body_with_the_process_metrics(served):
    """Prometheus 2.42's own checker (its parser and lint) on the body as served, which carries the
    client library's process and platform metrics beside the exporter's."""
    promtool = require_tool("promtool")
    s, _ = served
    wait_ready(s.url)
    body = httpx.get(s.url + "/metrics").content
    check = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    metrics = families(body.decode())
    assert metrics["process_cpu_seconds"][0].value > 0  # the counter family, its sample ends in _total
    assert metrics["process_resident_memory_bytes"][0].value > 0
    assert metrics["python_info"][0].value == 1


def test_openmetrics_and_gzip_on_request(served):
    s, _ = served
    wait_ready(s.url)
    om = httpx.get(s.url + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.text.rstrip().endswith("# EOF")
    raw = httpx.get(s.url + "/metrics", headers={"Accept-Encoding": "gzip"})
    assert raw.headers["content-encoding"] == "gzip"
    assert b"gpu_info{" in raw.content  # httpx decoded it
    plain = httpx.Client(headers={"Accept-Encoding": "gzip"}).send(
        httpx.Request("GET", s.url + "/metrics", headers={"Accept-Encoding": "gzip"}), stream=True
    )
    body = b"".join(plain.iter_raw())
    assert gzip.decompress(body).startswith(b"# HELP")


def test_a_hung_nvml_call_never_slows_a_scrape(served):
    s, node = served
    wait_ready(s.url)
    node.faults.add("*", hang_s=float("inf"), gpu=1)
    time.sleep(1.2)  # well past the 0.5 s collection timeout
    latencies = []
    for _ in range(20):
        started = time.monotonic()
        response = httpx.get(s.url + "/metrics")
        latencies.append(time.monotonic() - started)
        assert response.status_code == 200
    metrics = families(response.text)
    up = {x.labels["gpu"]: x.value for x in metrics["gpu_up"]}
    assert up == {"0": 1, "1": 0, "2": 1, "3": 1}
    errors = {x.labels["error"]: x.value for x in metrics["gpu_exporter_collect_errors"]}
    assert errors["CollectTimeout"] >= 1
    assert max(latencies) < 0.5, latencies
    node.faults.clear()
    time.sleep(1.0)
    up = {x.labels["gpu"]: x.value for x in families(httpx.get(s.url + "/metrics").text)["gpu_up"]}
    assert up == {"0": 1, "1": 1, "2": 1, "3": 1}


def _start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "exporter", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError("the exporter did not stop on SIGTERM:\n" + out) from None
    return proc.returncode, out


@pytest.mark.slow
def test_the_command_serves_a_simulated_node_and_stops_on_sigterm():
    port = free_port()
    proc = _start(
        ["--simulate", "comm_hang", "--sim-gpus", "2", "--listen-address", "127.0.0.1"],
        env={"GBE_PORT": str(port), "GBE_INTERVAL": "0.5"},
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}")
        time.sleep(1.2)
        metrics = families(httpx.get(f"http://127.0.0.1:{port}/metrics").text)
        assert {x.labels["gpu"] for x in metrics["gpu_utilization_ratio"]} == {"0", "1"}
        assert all(x.value == 1.0 for x in metrics["gpu_utilization_ratio"])  # hung in NCCL, util pinned
    finally:
        code, out = _stop(proc)
    assert code == 0, out
    assert "simulating 2 x NVIDIA H100" in out


@pytest.mark.slow
@pytest.mark.skipif(real_nvml_present(), reason="this machine has a real NVIDIA driver")
def test_the_command_on_a_node_without_gpu_serves_host_metrics():
    port = free_port()
    proc = _start(["--port", str(port), "--listen-address", "127.0.0.1", "--interval", "0.5"])
    try:
        wait_ready(f"http://127.0.0.1:{port}")
        time.sleep(1.2)
        metrics = families(httpx.get(f"http://127.0.0.1:{port}/metrics").text)
        assert metrics["gpu_exporter_nvml_up"][0].value == 0
        assert "gpu_node_cpu_core_busy_max_ratio" in metrics and "gpu_up" not in metrics
        errors = {(x.labels["source"], x.labels["error"]) for x in metrics["gpu_exporter_collect_errors"]}
        assert errors == {
            ("nvml", "LibraryNotFound"),
            ("kubelet", "SocketNotFound"),
        }  # neither GPU nor kubelet
    finally:
        code, out = _stop(proc)
    assert code == 0, out
    assert out.count("NVML is not usable") == 1, out  # one clear warning, not one per retry


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--port", "http"], {}, "--port: must be a whole number, not 'http'"),
        ([], {"GBE_PORT": "99999"}, "GBE_PORT: port must be 1-65535"),
        (["--interval", "-1"], {}, "interval must be positive"),
        (["--simulate", "meltdown"], {}, "unknown scenario 'meltdown'"),
        (["--log-level", "loud"], {}, "log level must be"),
    ],
)
def test_bad_configuration_is_a_clear_error(args, env, message):
    result = subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=30,
    )
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_help_names_every_environment_variable():
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    for var in ("GBE_PORT", "GBE_LISTEN_ADDRESS", "GBE_INTERVAL", "GBE_PROC_ROOT", "GBE_SIMULATE"):
        assert var in result.stdout


def test_scenarios_are_listed():
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "scenarios"], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0 and "data_starvation" in result.stdout and "tour" in result.stdout
    assert "short_tour" in result.stdout  # the demo's default tour is listed with its phases


def test_the_quiet_server_sleeps_while_idle_serves_dated_answers_and_stops_at_once_when_asked():
    """No housekeeping tick: an idle server runs uvicorn's checks once, the Date header is still the
    second of each answer, and a shutdown request, by signal or by ``should_exit`` from another thread,
    stops it at once."""
    from fastapi import FastAPI

    from exporter.serve.server import QuietServer

    class Counted(QuietServer):
        ticks = 0

        async def on_tick(self, counter: int) -> bool:
            self.ticks += 1
            return await super().on_tick(counter)

    def started(server: QuietServer) -> threading.Thread:
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + HANG_GUARD_S
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return thread

    app = FastAPI()
    app.get("/")(lambda: {"ok": True})
    for stop in ("signal", "should_exit"):
        port = free_port()
        server = Counted(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = started(server)
        url = f"http://127.0.0.1:{port}/"
        first = httpx.get(url, timeout=2).headers["date"]
        assert first == formatdate(time.time(), usegmt=True) or first == formatdate(
            time.time() - 1, usegmt=True
        )
        time.sleep(2.1)
        assert httpx.get(url, timeout=2).headers["date"] != first
        assert server.ticks == 1, "the idle server woke up for housekeeping"
        if stop == "signal":
            server.handle_exit(signal.SIGTERM, None)
        else:
            server.should_exit = True  # as a test or an embedding program stops uvicorn
        # idle, it sleeps until woken (one tick, above): only the request ends it, whatever the pace
        thread.join(HANG_GUARD_S)
        assert not thread.is_alive(), f"the server did not stop when asked ({stop})"
