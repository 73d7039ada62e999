"""Simulated nodes beyond one: a node sampled on a virtual clock, and (below) a fleet served from one
process through the real render path."""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

from exporter.collect.sampler import Sampler
from exporter.collect.snapshot import Snapshot
from exporter.config.settings import Settings
from exporter.policy.kube_labels import ksm_label  # the recording rules' spelling of the label
from exporter.serve.metrics import TEXT_TYPE, Renderer
from exporter.sim import SimulatedNode
from exporter.sources.errors import ErrorCounter
from exporter.sources.host import HostSource
from exporter.sources.kubelet import PodRef, PodResourcesSource
from exporter.sources.nvml import NvmlSource
from exporter.sources.processes import ProcessSource


class VirtualClock:
    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


def stepped_snapshot(scenario: str = "healthy", n_gpus: int = 8, seconds: int = 70) -> Snapshot:
    """The snapshot of a simulated node after ``seconds`` one-second collections on a virtual clock, with
    the kubelet's pod attribution: the window is full and the slow collections have run."""
    clock = VirtualClock()
    settings = replace(Settings(), lost_gpu_retry_s=0.0, nvml_retry_initial_s=0.0, nvml_retry_max_s=0.0)
    node = SimulatedNode(scenario, n_gpus=n_gpus, clock=clock)
    sampler = None
    try:
        errors = ErrorCounter()
        host = HostSource(errors, clock=clock, **node.host_options())  # type: ignore[arg-type]
        nvml = NvmlSource.configured(node.install(), errors, settings, clock=clock)
        kubelet = PodResourcesSource(errors, node.kubelet_socket, timeout_s=0.5)
        opts = node.host_options()
        processes = ProcessSource(errors, str(opts["proc_root"]), str(opts["host_root"]))
        sources = {"host": host, "nvml": nvml, "kubelet": kubelet, "processes": processes}
        sampler = Sampler(settings, errors, sources, clock=clock)
        snapshot = None
        for _ in range(seconds):
            clock.t += 1.0
            node.host.refresh()
            snapshot = sampler.cycle(wait_s=2.0)
        assert snapshot is not None
        return snapshot
    finally:
        if sampler is not None:
            sampler.stop()
        node.close()


# ---- a fleet: N simulated nodes served from one process ----------------------------------------------
#
# One simulated node per *role* (healthy, the straggler, the nodes that wait for it) runs the real
# sampler and analysis over the real nvidia-ml-py bindings in a worker process of its own (the fake
# driver is installed process-wide in pynvml, so one node per process). Its snapshots come to the fleet
# process, which gives every fleet node of that role its own identity (GPU UUIDs, its pod of the job) and
# renders it with the exporter's own Renderer. kube-state-metrics' kube_pod_labels for the job's pods is
# served beside them, so Prometheus can join GPUs to their job as it would in a cluster.


@dataclass(frozen=True)
class FleetSpec:
    nodes: int = 40
    gpus: int = 2
    straggler: int | None = None  # the node (1-based) whose pod starves; its job's other pods wait
    hang: int | None = None  # the node whose pod stays out of the collective its job's other pods hang in
    namespace: str = "ml"
    job: str = "llm-pretrain"
    job_label: str = "training.kubeflow.org/job-name"
    warm_s: int = 150  # virtual seconds each role samples before serving: its verdicts already hold
    prefix: str = "node"  # node names: <prefix>-<i>

    def node_name(self, i: int) -> str:
        return f"{self.prefix}-{i:0{len(str(self.nodes))}d}"

    def pod_name(self, i: int) -> str:
        return f"{self.job}-worker-{i - 1}"

    def role(self, i: int) -> str:
        if self.hang is not None:
            return "outside" if i == self.hang else "hung"
        if self.straggler is None:
            return "healthy"
        return "straggler" if i == self.straggler else "waiting"

    def scenarios(self) -> dict[str, str]:
        if self.hang is not None:
            return {"outside": "healthy", "hung": "comm_hang"}
        if self.straggler is None:
            return {"healthy": "healthy"}
        every = "+".join(str(g) for g in range(self.gpus))
        return {"straggler": f"data_starvation:gpus={every}", "waiting": "remote_straggler"}


def _role_worker(scenario: str, gpus: int, warm_s: int, conn: Connection, stop: Event) -> None:
    """A worker process: one simulated node sampled once a second of virtual time, after ``warm_s``
    virtual seconds sampled at once; every snapshot goes to ``conn``."""
    logging.getLogger("exporter").setLevel(logging.ERROR)  # a verdict line per GPU per role is noise here
    clock = VirtualClock(time.time() - warm_s)
    settings = replace(Settings(), lost_gpu_retry_s=0.0)
    node = SimulatedNode(scenario, n_gpus=gpus, clock=clock)
    errors = ErrorCounter()
    host = HostSource(errors, clock=clock, **node.host_options())  # type: ignore[arg-type]
    nvml = NvmlSource.configured(node.install(), errors, settings, clock=clock)
    kubelet = PodResourcesSource(errors, node.kubelet_socket, timeout_s=0.5)
    sampler = Sampler(settings, errors, {"host": host, "nvml": nvml, "kubelet": kubelet}, clock=clock)
    try:
        while not stop.is_set():
            now = time.time()
            if clock.t + 1.0 > now:  # caught up with the wall clock: one collection a second
                stop.wait(clock.t + 1.0 - now)
            clock.t += 1.0
            node.host.refresh()
            snapshot = sampler.cycle(wait_s=2.0)
            if clock.t + 1.0 > time.time():
                conn.send(snapshot)
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        pass
    finally:
        sampler.stop()
        node.close()


def _uuid(node: int, gpu: int) -> str:
    return f"GPU-{node:08x}-0000-4000-8000-{gpu:012x}"


def for_node(snapshot: Snapshot, spec: FleetSpec, i: int) -> Snapshot:
    """A role's snapshot as fleet node ``i`` sees it: its own GPU UUIDs and its own pod of the job."""
    pod = PodRef(spec.namespace, spec.pod_name(i), "trainer")
    gpus = tuple(
        replace(
            view,
            identity=replace(view.identity, uuid=_uuid(i, view.index)),
            pod=pod if view.pod is not None else None,
            assignments=tuple(
                (replace(a, device_id=_uuid(i, view.index), ref=pod), mig) for a, mig in view.assignments
            ),
        )
        for view in snapshot.gpus
    )
    host = snapshot.host
    if host is not None:
        shm = tuple(replace(s, namespace=pod.namespace, pod=pod.pod) if s.pod else s for s in host.shm)
        host = replace(host, shm=shm, pod_dev_shm={})
    shm_default = (
        {(pod.namespace, pod.pod): any(snapshot.pod_shm_default.values())} if snapshot.pod_shm_default else {}
    )
    return replace(snapshot, gpus=gpus, host=host, pod_shm_default=shm_default)


class Fleet:
    """The fleet's role workers and the latest snapshot of each; renders any node's /metrics."""

    def __init__(self, spec: FleetSpec, detail: frozenset[str] = frozenset()) -> None:
        self.spec, self.detail = spec, detail
        self._lock = threading.Lock()
        self._latest: dict[str, Snapshot] = {}
        self._cache: dict[int, tuple[int, bytes]] = {}  # node -> (role snapshot seq, body)
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._workers: list[multiprocessing.process.BaseProcess] = []
        self._readers: list[threading.Thread] = []
        for role, scenario in spec.scenarios().items():
            ours, theirs = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_role_worker, args=(scenario, spec.gpus, spec.warm_s, theirs, self._stop), daemon=True
            )
            proc.start()
            theirs.close()
            self._workers.append(proc)
            reader = threading.Thread(target=self._read, args=(role, ours), daemon=True)
            reader.start()
            self._readers.append(reader)

    def _read(self, role: str, conn: Connection) -> None:
        try:
            while True:
                snapshot = conn.recv()
                with self._lock:
                    self._latest[role] = snapshot
        except (EOFError, OSError):
            return

    def ready(self) -> bool:
        with self._lock:
            return set(self._latest) == set(self.spec.scenarios())

    def metrics(self, i: int) -> bytes:
        """Node ``i``'s exposition (text format), rendered once per snapshot of its role."""
        with self._lock:
            snapshot = self._latest.get(self.spec.role(i))
            cached = self._cache.get(i)
        if snapshot is None:
            return b""
        if cached is not None and cached[0] == snapshot.seq:
            return cached[1]
        body, _ = Renderer(self.detail).render(for_node(snapshot, self.spec, i))
        with self._lock:
            self._cache[i] = (snapshot.seq, body)
        return body

    def kube_state_metrics(self) -> bytes:
        return kube_state_metrics(self.spec)

    def close(self) -> None:
        self._stop.set()
        for proc in self._workers:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()


def kube_state_metrics(s: FleetSpec) -> bytes:
    """kube_pod_labels and kube_pod_info of the job's pods, as kube-state-metrics writes them."""
    label = ksm_label(s.job_label)
    lines = [
        "# HELP kube_pod_labels Kubernetes labels converted to Prometheus labels.",
        "# TYPE kube_pod_labels gauge",
    ]
    for i in range(1, s.nodes + 1):
        lines.append(
            f'kube_pod_labels{{namespace="{s.namespace}",pod="{s.pod_name(i)}",uid="{_uuid(i, 0)[4:]}",'
            f'{label}="{s.job}"}} 1'
        )
    lines += ["# HELP kube_pod_info Information about pod.", "# TYPE kube_pod_info gauge"]
    for i in range(1, s.nodes + 1):
        lines.append(
            f'kube_pod_info{{namespace="{s.namespace}",pod="{s.pod_name(i)}",node="{s.node_name(i)}"}} 1'
        )
    return ("\n".join(lines) + "\n").encode()


class FleetServer:
    """/nodes/<name>/metrics for every node, /kube-state-metrics/metrics, /readyz; on loopback."""

    def __init__(self, fleet: Fleet, port: int, address: str = "127.0.0.1") -> None:
        names = {fleet.spec.node_name(i): i for i in range(1, fleet.spec.nodes + 1)}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                parts = self.path.split("?", 1)[0].strip("/").split("/")
                if parts == ["readyz"]:
                    self._reply(
                        200 if fleet.ready() else 503, b"ready\n" if fleet.ready() else b"not ready\n"
                    )
                elif parts == ["kube-state-metrics", "metrics"]:
                    self._reply(200, fleet.kube_state_metrics())
                elif len(parts) == 3 and parts[0] == "nodes" and parts[2] == "metrics" and parts[1] in names:
                    self._reply(200, fleet.metrics(names[parts[1]]))
                else:
                    self._reply(404, b"not found\n")

            def _reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", TEXT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer((address, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def scrape_configs(spec: FleetSpec, port: int, job: str = "gpu-bottleneck-exporter") -> str:
    """Prometheus scrape jobs for the fleet: every node a target of its own (``node`` and ``instance``
    name it, as the chart's relabelling does) and kube-state-metrics."""
    lines = [f"  - job_name: {job}", "    static_configs:"]
    for i in range(1, spec.nodes + 1):
        name = spec.node_name(i)
        lines += [
            f"      - targets: ['127.0.0.1:{port}']",
            f"        labels: {{__metrics_path__: /nodes/{name}/metrics, node: {name}, instance: {name}}}",
        ]
    lines += [
        "  - job_name: kube-state-metrics",
        "    honor_labels: true",
        "    metrics_path: /kube-state-metrics/metrics",
        "    static_configs:",
        f"      - targets: ['127.0.0.1:{port}']",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """python -m exporter.sim.fleet: serve a simulated fleet until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m exporter.sim.fleet", description=main.__doc__)
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--straggler", type=int, help="the node (1-based) whose pod starves")
    parser.add_argument("--port", type=int, default=9612)
    parser.add_argument("--print-scrape-config", action="store_true", help="print Prometheus scrape jobs")
    args = parser.parse_args(argv)
    if args.nodes < 1 or not 1 <= args.gpus <= 64:
        print("fleet: --nodes must be at least 1 and --gpus 1-64", file=sys.stderr)
        return 2
    if args.straggler is not None and not 1 <= args.straggler <= args.nodes:
        print(f"fleet: --straggler must be a node of 1-{args.nodes}", file=sys.stderr)
        return 2
    spec = FleetSpec(nodes=args.nodes, gpus=args.gpus, straggler=args.straggler)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    fleet = Fleet(spec)
    server = FleetServer(fleet, args.port)
    if args.print_scrape_config:
        print(scrape_configs(spec, server.port), flush=True)
    try:
        while not done.wait(1.0):  # a timed wait: the signal handler runs between waits
            pass
    finally:
        server.close()
        fleet.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
