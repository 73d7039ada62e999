"""A local monitoring chain on loopback for the demo and the end-to-end tests: exporters, a real
Prometheus with the alert rules, a real Alertmanager, and a webhook receiver that collects pages."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.error import HTTPError
from urllib.parse import urlencode
from urllib.request import urlopen

REPO = Path(__file__).resolve().parent.parent
PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"  # Debian's name for the alertmanager binary


# headless Chromium that reaches for no network (this machine has none): the report test and the
# dashboard pictures share these
HEADLESS_CHROMIUM: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--virtual-time-budget=5000",
)

_HANDED_OUT: set[int] = set()  # ports given to processes that may not have bound them yet


def free_port() -> int:
    """A free loopback port not handed out before in this process (the OS may offer a port again
    between our check and the child's bind)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def tool(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name.removeprefix("prometheus-"))


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before {url} answered")
        try:
            with urlopen(url, timeout=1.0) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


@dataclass
class Page:
    status: str
    labels: dict[str, str]
    annotations: dict[str, str]


@dataclass
class Notification:
    """One webhook call of Alertmanager: one alert group (e.g. one alert on one node), all its alerts."""

    status: str
    group_labels: dict[str, str]
    pages: list[Page]


class PageReceiver:
    """Alertmanager's webhook target: keeps every alert it is sent, calls ``on_page`` for each and
    ``on_notification`` once per webhook call (one alert group)."""

    def __init__(
        self,
        on_page: Callable[[Page], None] | None = None,
        on_notification: Callable[[Notification], None] | None = None,
    ) -> None:
        self.pages: list[Page] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                pages = []
                for alert in body.get("alerts", []):
                    page = Page(
                        alert.get("status", ""), alert.get("labels", {}), alert.get("annotations", {})
                    )
                    pages.append(page)
                    with receiver.lock:
                        receiver.pages.append(page)
                    if on_page:
                        on_page(page)
                if on_notification and pages:
                    on_notification(Notification(body.get("status", ""), body.get("groupLabels", {}), pages))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def snapshot(self) -> list[Page]:
        with self.lock:
            return list(self.pages)

    def close(self) -> None:
        self.server.shutdown()


@dataclass
class Target:
    port: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PrometheusApi:
    """The HTTP API of a Prometheus on loopback."""

    port: int

    def call(self, path: str, **params: str | float) -> dict | list:
        """One call; a query error raises with Prometheus's own message."""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urlencode(params)}"
        try:
            with urlopen(url, timeout=10) as r:
                return json.loads(r.read())["data"]
        except HTTPError as e:
            raise RuntimeError(f"{path} {params}: {e.read().decode(errors='replace')}") from e

    def query(self, expr: str) -> list[dict]:
        return self.call("query", query=expr)["result"]

    def query_range(self, expr: str, seconds: float, step: float = 5.0) -> list[dict]:
        end = time.time()
        return self.call("query_range", query=expr, start=end - seconds, end=end, step=step)["result"]

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        return self.call(f"label/{label}/values", **({"match[]": match} if match else {}))


def alertmanager_config(
    receiver_url: str, group_by: tuple[str, ...] = ("...",), group_wait: str = "1s"
) -> str:
    """Alertmanager's configuration: every alert to the webhook at ``receiver_url`` (after ``group_wait``),
    the suggested inhibitions."""
    return (
        "route:\n"
        "  receiver: pages\n"
        f"  group_by: [{', '.join(repr(g) for g in group_by)}]\n"
        f"  group_wait: {group_wait}\n"
        "  group_interval: 1s\n"
        "  repeat_interval: 24h\n"
        "inhibit_rules:\n"
        # a critical alert on a GPU silences that GPU's warnings; the source must have a gpu label,
        # for Alertmanager counts a label that both alerts lack as equal: a node-level critical
        # alert (GpuShmFull) would silence every node-level warning of its node
        "  - source_matchers: [severity = critical, 'gpu != \"\"']\n"
        "    target_matchers: [severity =~ warning|info]\n"
        "    equal: [instance, gpu]\n"
        "  - source_matchers: [alertname = GpuShmFull]\n"
        "    target_matchers: [alertname = GpuShmNearlyFull]\n"
        "    equal: [instance, mountpoint]\n"
        "receivers:\n"
        "  - name: pages\n"
        "    webhook_configs:\n"
        f"      - url: {receiver_url}\n"
        "        send_resolved: true\n"
    )


@dataclass
class Stack:
    workdir: Path
    rules: Path
    targets: list[Target]
    receiver_url: str
    interval: str = "1s"
    group_by: tuple[str, ...] = ("...",)  # Alertmanager's grouping: every alert on its own by default
    group_wait: str = "1s"  # how long Alertmanager gathers a new group's alerts before it pages
    prometheus_port: int = field(default_factory=free_port)
    alertmanager_port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen] = field(default_factory=list)
    scrape_configs: str = ""  # scrape jobs of its own (a simulated fleet's) instead of ``targets``

    def _prometheus_config(self) -> str:
        lines = [
            "global:",
            f"  scrape_interval: {self.interval}",
            f"  evaluation_interval: {self.interval}",
            "rule_files:",
            f"  - {self.rules}",
            "alerting:",
            "  alertmanagers:",
            "    - static_configs:",
            f"        - targets: ['127.0.0.1:{self.alertmanager_port}']",
            "scrape_configs:",
        ]
        if self.scrape_configs:
            return "\n".join(lines) + "\n" + self.scrape_configs
        lines += ["  - job_name: gpu-bottleneck-exporter", "    static_configs:"]
        for target in self.targets:
            lines.append(f"      - targets: ['127.0.0.1:{target.port}']")
            if target.labels:
                lines.append(
                    "        labels: {" + ", ".join(f"{k}: {v}" for k, v in target.labels.items()) + "}"
                )
        return "\n".join(lines) + "\n"

    def _alertmanager_config(self) -> str:
        return alertmanager_config(self.receiver_url, self.group_by, self.group_wait)

    def start(self, log: Path | None = None) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        out = (log or self.workdir / "stack.log").open("a")
        (self.workdir / "alertmanager.yml").write_text(self._alertmanager_config())
        (self.workdir / "prometheus.yml").write_text(self._prometheus_config())
        am = subprocess.Popen(
            [
                tool(ALERTMANAGER) or ALERTMANAGER,
                f"--config.file={self.workdir / 'alertmanager.yml'}",
                f"--storage.path={self.workdir / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{self.alertmanager_port}",
                "--cluster.listen-address=",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        self.procs.append(am)
        prom = subprocess.Popen(
            [
                tool(PROMETHEUS) or PROMETHEUS,
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{self.prometheus_port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        self.procs.append(prom)
        wait_http(f"http://127.0.0.1:{self.alertmanager_port}/-/ready", proc=am)
        wait_http(f"http://127.0.0.1:{self.prometheus_port}/-/ready", proc=prom)

    @property
    def api(self) -> PrometheusApi:
        return PrometheusApi(self.prometheus_port)

    def query(self, expr: str) -> list[dict]:
        return self.api.query(expr)

    def query_range(self, expr: str, seconds: float, step: float = 5.0) -> list[dict]:
        return self.api.query_range(expr, seconds, step)

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        return self.api.label_values(label, match)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def start_victoria_metrics(binary: str, work: Path, port: int) -> subprocess.Popen:
    """A single-node VictoriaMetrics on loopback, its data and log in ``work``, keeping any history it is
    given (imported samples may be years old) and caching no query (the tests and bench compare answers)."""
    return subprocess.Popen(
        [
            binary,
            f"-storageDataPath={work / 'vm'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=100y",
            "-search.disableCache",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(work / "vm.log").open("w"),
    )


def start_exporter(args: list[str], port: int, log: Path | None = None) -> subprocess.Popen:
    """The real command, on loopback."""
    out = log.open("a") if log else subprocess.DEVNULL
    return subprocess.Popen(
        [sys.executable, "-m", "exporter", *args, "--port", str(port), "--listen-address", "127.0.0.1"],
        cwd=REPO,
        stdout=out,
        stderr=subprocess.STDOUT,
    )


@contextmanager
def simulated_fleet(
    workdir: Path,
    rules: Path,
    scenarios: dict[str, str],
    label: str,
    extra_args: dict[str, list[str]] | None = None,
) -> Iterator[tuple[Stack, PageReceiver]]:
    """One simulated 2-GPU exporter per scenario (``name -> --simulate``), each a target labelled
    ``label=name``, behind a started Stack that pages into the returned receiver; all stopped on exit.
    ``extra_args``: more flags for some scenarios' exporters (``name -> [flag, value, ...]``)."""
    receiver = PageReceiver()
    exporters, targets = [], []
    for name, simulate in scenarios.items():
        port = free_port()
        args = ["--simulate", simulate, "--sim-gpus", "2", "--interval", "0.5"]
        args += (extra_args or {}).get(name, [])
        exporters.append(start_exporter(args, port, log=workdir / f"exporter-{name}.log"))
        targets.append(Target(port, {label: name}))
    stack = Stack(workdir / "stack", rules, targets, receiver.url)
    try:
        for target in targets:
            wait_http(f"http://127.0.0.1:{target.port}/readyz")
        stack.start()
        yield stack, receiver
    finally:
        stack.stop()
        for proc in exporters:
            proc.terminate()
        for proc in exporters:
            proc.wait(15)
        receiver.close()
