"""The simulated node's kubelet: a real gRPC PodResourcesLister server on a unix socket, serving the
pods of the simulated job(s). Tests also use it to make the kubelet slow, failing or silent.

``SimKubelet`` serves from the caller's process. ``KubeletProcess`` serves from a process of its own, as a
node's kubelet does: a gRPC server's threads wake even while idle (about 0.05 s of CPU a minute), and
under ``serve --simulate`` that would be counted as the exporter's. The pods and any misbehaviour reach
it as JSON lines on its stdin; it exits when stdin closes, so it never outlives the simulated node."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import asdict, dataclass, field

import grpc

from exporter.sources.podresources.v1 import api_pb2, api_pb2_grpc

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # where exporter/ is


@dataclass
class SimPod:
    namespace: str
    name: str
    uid: str
    sandbox_id: str
    container: str
    devices: dict[str, list[str]]  # resource name -> device ids
    shm_volume: str = ""  # a memory-backed emptyDir mounted at /dev/shm; "" = the 64 MiB default
    env: tuple[tuple[str, str], ...] = ()  # the container's environment (its runtime bundle's process.env)
    capabilities: tuple[str, ...] = ()  # added Linux capabilities, e.g. CAP_IPC_LOCK
    host_ipc: bool = False
    image: str = ""  # the container's image, as its runtime bundle names it ("": no annotation)
    command: str = ""  # its GPU process's command line, NULs between the words ("": a training script)


@dataclass
class KubeletBehaviour:
    delay_s: float = 0.0  # answer this late (float("inf"): never, until cleared)
    error: grpc.StatusCode | None = None  # answer with this status instead
    released: threading.Event = field(default_factory=threading.Event)


class _Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: SimKubelet) -> None:
        self.kubelet = kubelet

    def List(self, request, context):
        self.kubelet.calls += 1
        behaviour = self.kubelet.behaviour
        if behaviour.delay_s > 0:
            behaviour.released.wait(None if behaviour.delay_s == float("inf") else behaviour.delay_s)
        if behaviour.error is not None:
            context.abort(behaviour.error, "simulated kubelet failure")
        response = api_pb2.ListPodResourcesResponse()
        for pod in self.kubelet.pods():
            containers = [
                api_pb2.ContainerResources(
                    name=pod.container,
                    devices=[
                        api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                        for r, ids in pod.devices.items()
                    ],
                )
            ]
            response.pod_resources.append(
                api_pb2.PodResources(name=pod.name, namespace=pod.namespace, containers=containers)
            )
        return response


class SimKubelet:
    def __init__(self, socket_path: str, pods: Callable[[], list[SimPod]]) -> None:
        self.socket_path = socket_path
        self.pods = pods
        self.calls = 0
        self.behaviour = KubeletBehaviour()
        self._server: grpc.Server | None = None

    def start(self) -> SimKubelet:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), self._server)
        self._server.add_insecure_port(f"unix://{self.socket_path}")
        self._server.start()
        return self

    def misbehave(self, delay_s: float = 0.0, error: grpc.StatusCode | None = None) -> None:
        self.behaviour.released.set()
        self.behaviour = KubeletBehaviour(delay_s=delay_s, error=error)

    def stop(self) -> None:
        self.behaviour.released.set()
        if self._server is not None:
            self._server.stop(grace=0.5).wait(2)
            self._server = None
        time.sleep(0)  # let the server threads notice


class KubeletProcess:
    """A ``SimKubelet`` in a child process, fed the pods with ``update`` (see the module docstring)."""

    def __init__(self, socket_path: str, pods: list[SimPod], ready_s: float = 20.0) -> None:
        self.socket_path = socket_path
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from exporter.sim.kubelet import _child; _child(sys.argv[1])",
                socket_path,
            ],
            stdin=subprocess.PIPE,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, (_ROOT, os.environ.get("PYTHONPATH")))),
            },
            stdout=subprocess.PIPE,
            text=True,
        )
        self.update(pods)
        if not self._ready(ready_s):
            self.stop()
            raise RuntimeError(f"the simulated kubelet did not start serving on {socket_path}")

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _ready(self, timeout_s: float) -> bool:
        """Has the child said it is serving within ``timeout_s``? (It says nothing else on stdout.)"""
        out = self._proc.stdout
        assert out is not None
        readable, _, _ = select.select([out], [], [], timeout_s)
        return bool(readable) and out.readline().strip() == "serving"

    def _send(self, message: dict[str, object]) -> None:
        with self._lock:
            if self._proc.stdin is None or self._proc.poll() is not None:
                return
            try:
                self._proc.stdin.write(json.dumps(message) + "\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError):  # it has exited (or is being stopped)
                return

    def update(self, pods: list[SimPod]) -> None:
        self._send({"pods": [asdict(p) for p in pods]})

    def misbehave(self, delay_s: float = 0.0, error: grpc.StatusCode | None = None) -> None:
        self._send({"delay_s": delay_s, "error": error.name if error is not None else None})

    def stop(self) -> None:
        with self._lock:
            if self._proc.stdin is not None and not self._proc.stdin.closed:
                with contextlib.suppress(BrokenPipeError):
                    self._proc.stdin.close()  # its cue to stop serving and exit
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def _child(socket_path: str) -> None:
    """The child's side of ``KubeletProcess``: serve the pods of the last line read, until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the parent stops us
    pods: list[list[SimPod]] = [[]]  # the latest list, swapped whole
    kubelet: SimKubelet | None = None
    for line in sys.stdin:
        message = json.loads(line)
        if "pods" in message:
            pods[0] = [SimPod(**p) for p in message["pods"]]  # env and capabilities arrive as lists: unused
        else:
            error = message["error"]
            kubelet.misbehave(message["delay_s"], grpc.StatusCode[error] if error else None)  # type: ignore[union-attr]
        if kubelet is None:
            kubelet = SimKubelet(socket_path, lambda: pods[0]).start()
            print("serving", flush=True)
    if kubelet is not None:
        kubelet.stop()
