"""A sharded monitoring chain on loopback, for the sharded-fleet test and bench: N Prometheus servers in
agent mode, each scraping the nodes whose ``node`` label hashes to it (``hashmod`` relabelling), remote
writing into one VictoriaMetrics (single node); ``vmalert`` evaluates the rule file against it (recorded
series are written back by remote write) and pages a real Alertmanager.

Every shard stamps the samples it sends with ``shard="<i>"`` (an external label), so the global store
tells which shard a node's series came from. kube-state-metrics is cluster-wide: shard 0 scrapes it.
Optionally a plain Prometheus (``compare=True``) receives the same samples by remote write and evaluates
the same rules itself: the single-server reference the bench compares with.
"""

from __future__ import annotations

import hashlib
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.request import urlopen

from scripts.stack import (
    ALERTMANAGER,
    PROMETHEUS,
    PrometheusApi,
    alertmanager_config,
    free_port,
    tool,
    wait_http,
)

VICTORIA_METRICS = "victoria-metrics"
VMALERT = "vmalert"
SHARD_LABEL = "shard"


@dataclass(frozen=True)
class NodeTarget:
    """One node's exporter: where to scrape it and the node it runs on (the shard key)."""

    address: str  # host:port
    metrics_path: str
    node: str


def shard_of(node: str, shards: int) -> int:
    """The shard Prometheus' ``hashmod`` relabelling gives ``node``: the low 8 bytes of its MD5, big
    endian, modulo the shard count."""
    return int.from_bytes(hashlib.md5(node.encode()).digest()[8:], "big") % shards


def shard_scrape_config(
    shard: int,
    shards: int,
    nodes: list[NodeTarget],
    ksm: list[tuple[str, str]],
    job: str = "gpu-bottleneck-exporter",
) -> str:
    """One shard's scrape jobs: every node listed, kept only where ``hashmod(node) == shard``; shard 0
    also scrapes kube-state-metrics (``ksm``: (address, metrics path) pairs)."""
    lines = [f"  - job_name: {job}", "    static_configs:"]
    for n in nodes:
        lines += [
            f"      - targets: ['{n.address}']",
            f"        labels: {{__metrics_path__: '{n.metrics_path}', node: {n.node}, instance: {n.node}}}",
        ]
    lines += [
        "    relabel_configs:",
        "      - {source_labels: [node], modulus: "
        + str(shards)
        + ", target_label: __tmp_hash, action: hashmod}",
        f"      - {{source_labels: [__tmp_hash], regex: '{shard}', action: keep}}",
    ]
    if shard == 0:
        for i, (address, path) in enumerate(ksm):
            lines += [
                f"  - job_name: kube-state-metrics-{i}",
                "    honor_labels: true",
                f"    metrics_path: {path}",
                "    static_configs:",
                f"      - targets: ['{address}']",
            ]
    return "\n".join(lines) + "\n"


@dataclass
class ShardedStack:
    workdir: Path
    rules: Path
    nodes: list[NodeTarget]
    receiver_url: str
    ksm: list[tuple[str, str]] = field(default_factory=list)
    shards: int = 2
    interval: str = "2s"  # scrape interval of the shards, evaluation interval of vmalert
    compare: bool = False  # also a single Prometheus holding every node, evaluating the same rules
    # VictoriaMetrics 1.79 makes a series it has never seen searchable only after up to ~10 s (existing
    # series' new samples after ~1 s). A test whose every series is new at once, and whose job evidence
    # is five recording levels deep, asks it to flush its buffers every second instead.
    force_flush: bool = False
    vm_port: int = field(default_factory=free_port)
    vmalert_port: int = field(default_factory=free_port)
    alertmanager_port: int = field(default_factory=free_port)
    prometheus_port: int = field(default_factory=free_port)  # the single Prometheus (compare)
    shard_ports: list[int] = field(default_factory=list)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        if not self.shard_ports:
            self.shard_ports = [free_port() for _ in range(self.shards)]

    @property
    def api(self) -> PrometheusApi:
        """VictoriaMetrics' Prometheus-compatible query API."""
        return PrometheusApi(self.vm_port)

    @property
    def prometheus(self) -> PrometheusApi:
        return PrometheusApi(self.prometheus_port)

    def query(self, expr: str) -> list[dict]:
        return self.api.query(expr)

    def _shard_config(self, shard: int) -> str:
        writes = [f"http://127.0.0.1:{self.vm_port}/api/v1/write"]
        if self.compare:
            writes.append(f"http://127.0.0.1:{self.prometheus_port}/api/v1/write")
        lines = [
            "global:",
            f"  scrape_interval: {self.interval}",
            f"  external_labels: {{{SHARD_LABEL}: '{shard}'}}",
            "remote_write:",
        ]
        for url in writes:
            lines += [f"  - url: {url}", "    queue_config: {batch_send_deadline: 1s}"]
        return (
            "\n".join(lines)
            + "\nscrape_configs:\n"
            + shard_scrape_config(shard, self.shards, self.nodes, self.ksm)
        )

    def _start(self, name: str, args: list[str], out) -> subprocess.Popen:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        out = (self.workdir / "stack.log").open("a")
        (self.workdir / "alertmanager.yml").write_text(alertmanager_config(self.receiver_url, ("...",)))
        am = self._start(
            "alertmanager",
            [
                tool(ALERTMANAGER) or ALERTMANAGER,
                f"--config.file={self.workdir / 'alertmanager.yml'}",
                f"--storage.path={self.workdir / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{self.alertmanager_port}",
                "--cluster.listen-address=",
            ],
            out,
        )
        vm = self._start(
            "victoria-metrics",
            [
                tool(VICTORIA_METRICS) or VICTORIA_METRICS,
                f"-storageDataPath={self.workdir / 'vm-data'}",
                f"-httpListenAddr=127.0.0.1:{self.vm_port}",
                "-retentionPeriod=1d",
                # a sample is queryable as soon as it is stored (30 s later by default): each level of
                # recording rules reads the level below, one evaluation later
                "-search.latencyOffset=0s",
                "-search.disableCache",
                "-loggerLevel=WARN",
            ],
            out,
        )
        wait_http(f"http://127.0.0.1:{self.alertmanager_port}/-/ready", proc=am)
        wait_http(f"http://127.0.0.1:{self.vm_port}/health", proc=vm)
        if self.force_flush:
            threading.Thread(target=self._flush, daemon=True).start()
        if self.compare:
            (self.workdir / "prometheus.yml").write_text(
                f"global:\n  evaluation_interval: {self.interval}\nrule_files:\n  - {self.rules}\n"
            )
            prom = self._start(
                "prometheus",
                [
                    tool(PROMETHEUS) or PROMETHEUS,
                    f"--config.file={self.workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.workdir / 'prom-data'}",
                    f"--web.listen-address=127.0.0.1:{self.prometheus_port}",
                    "--web.enable-remote-write-receiver",
                ],
                out,
            )
            wait_http(f"http://127.0.0.1:{self.prometheus_port}/-/ready", proc=prom)
        vm_url = f"http://127.0.0.1:{self.vm_port}"
        vmalert = self._start(
            "vmalert",
            [
                tool(VMALERT) or VMALERT,
                f"-rule={self.rules}",
                f"-datasource.url={vm_url}",
                f"-remoteWrite.url={vm_url}",
                f"-remoteRead.url={vm_url}",
                f"-notifier.url=http://127.0.0.1:{self.alertmanager_port}",
                f"-evaluationInterval={self.interval}",
                "-remoteWrite.flushInterval=1s",
                f"-httpListenAddr=127.0.0.1:{self.vmalert_port}",
                "-loggerLevel=WARN",
            ],
            out,
        )
        wait_http(f"http://127.0.0.1:{self.vmalert_port}/health", proc=vmalert)
        for i, port in enumerate(self.shard_ports):
            (self.workdir / f"shard-{i}.yml").write_text(self._shard_config(i))
            shard = self._start(
                f"shard-{i}",
                [
                    tool(PROMETHEUS) or PROMETHEUS,
                    "--enable-feature=agent",
                    f"--config.file={self.workdir / f'shard-{i}.yml'}",
                    f"--storage.agent.path={self.workdir / f'shard-{i}-wal'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    # at stop, what is still queued for the store is dropped after 1 s (1 minute by
                    # default, while the store is stopping too)
                    "--storage.remote.flush-deadline=1s",
                ],
                out,
            )
            wait_http(f"http://127.0.0.1:{port}/-/ready", proc=shard)

    def _flush(self) -> None:
        while not self._stopping.wait(1.0):
            try:
                with urlopen(f"http://127.0.0.1:{self.vm_port}/internal/force_flush", timeout=5) as r:
                    r.read()
            except OSError:
                pass

    def metrics(self, name: str) -> str:
        """A component's own /metrics (``victoria-metrics``, ``vmalert``, ``shard-<i>``)."""
        port = {"victoria-metrics": self.vm_port, "vmalert": self.vmalert_port} | {
            f"shard-{i}": p for i, p in enumerate(self.shard_ports)
        }
        with urlopen(f"http://127.0.0.1:{port[name]}/metrics", timeout=10) as r:
            return r.read().decode()

    def alive(self) -> list[str]:
        """The components that exited."""
        return [name for name, p in self.procs.items() if p.poll() is not None]

    def stop(self) -> None:
        self._stopping.set()
        for proc in reversed(list(self.procs.values())):
            proc.terminate()
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
