"""The simulated node's kubelet: a real gRPC PodResourcesLister server on a unix socket, serving the
pods of the simulated job(s). Tests also use it to make the kubelet slow, failing or silent."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from exporter.sources.podresources.v1 import api_pb2, api_pb2_grpc


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
