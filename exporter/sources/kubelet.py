"""Which pod holds which GPU: the kubelet's PodResources API (v1 List) over its unix socket.

The call runs on the sampler's worker thread with a deadline; a missing, unreadable or slow socket
means no pod labels this round and a counted error, never a crash and never a slow scrape.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

import grpc

from exporter.sources.errors import ErrorCounter
from exporter.sources.podresources.v1 import api_pb2, api_pb2_grpc
from exporter.sources.registry import Inputs, Registration, Schedule, register

SOURCE = "kubelet"
# gRPC's own reconnect backoff grows to minutes; a kubelet that restarts is back within seconds, and a
# list is at most one call every few seconds, so a fresh connection attempt each time costs nothing.
# The channel is closed after each list: an open one keeps gRPC's poller threads waking, about 0.08 s of
# CPU a minute while idle, where connecting afresh every 10 s costs about 0.02.
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-")


@dataclass(frozen=True)
class PodRef:
    namespace: str
    pod: str
    container: str = ""


@dataclass(frozen=True)
class Assignment:
    """One device the kubelet gave to one container."""

    resource: str
    device_id: str  # a GPU UUID, a MIG UUID, or an index, depending on the device plugin's strategy
    ref: PodRef


def _error_name(code: grpc.StatusCode | None) -> str:
    """StatusCode.DEADLINE_EXCEEDED -> 'DeadlineExceeded'."""
    if code is None:
        return "RpcError"
    return "".join(part.capitalize() for part in code.name.split("_"))


class PodResourcesSource:
    def __init__(self, errors: ErrorCounter, socket_path: str, timeout_s: float = 2.0) -> None:
        self.errors = errors
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._channel: grpc.Channel | None = None
        self.missing = False  # the socket was not there at the last look

    def _stub(self) -> api_pb2_grpc.PodResourcesListerStub:
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket_path}", options=CHANNEL_OPTIONS)
        return api_pb2_grpc.PodResourcesListerStub(self._channel)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def collect(self) -> tuple[Assignment, ...] | None:
        """Every GPU and MIG device assigned to a container; None when the kubelet could not say."""
        self.missing = not os.path.exists(self.socket_path)
        if self.missing:
            self.close()  # the kubelet restarts: the next socket is a new one, reached by a new channel
            # no kubelet here (a node without Kubernetes, or the socket not mounted): routine on a
            # workstation, so not a warning; the count and GpuExporterCollectErrors say it on a cluster
            self.errors.inc(
                SOURCE,
                "SocketNotFound",
                f"{self.socket_path}: series carry no pod labels",
                level=logging.INFO,
            )
            return None
        try:
            response = self._stub().List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            self.errors.inc(
                SOURCE, _error_name(exc.code() if hasattr(exc, "code") else None), self.socket_path
            )
            return None
        finally:
            self.close()  # see CHANNEL_OPTIONS; also, the kubelet may have restarted by the next list
        out = []
        for pod in response.pod_resources:
            for container in pod.containers:
                for devices in container.devices:
                    name = devices.resource_name
                    if name != GPU_RESOURCE and not MIG_RESOURCE.match(name):
                        continue  # other device plugins: NICs, FPGAs, ...
                    ref = PodRef(pod.namespace, pod.name, container.name)
                    out += [Assignment(name, device_id, ref) for device_id in devices.device_ids]
        return tuple(out)


def _build(inputs: Inputs) -> PodResourcesSource | None:
    socket_path = inputs.settings.pod_resources_socket
    return PodResourcesSource(inputs.errors, socket_path) if socket_path else None  # "": off


REGISTRATION = register(
    Registration[tuple[Assignment, ...]](
        SOURCE,
        Schedule.POLLED,
        tuple[Assignment, ...],
        _build,
        interval=lambda settings: settings.pod_resources_interval_s,
    )
)
