"""The simulated GPU node: a physical model, a fake libnvidia-ml under the real nvidia-ml-py, fault
injection, and a simulated /proc for the host source. Drives the tests and ``--simulate``."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType

import pynvml

from exporter.sim.driver import Capabilities, FakeNvmlLibrary
from exporter.sim.faults import Fault, FaultPlan
from exporter.sim.hostfs import SimHost
from exporter.sim.kubelet import SimKubelet, SimPod
from exporter.sim.physics import BoardSpec, NodeModel
from exporter.sim.podlogs import SimPodLogs
from exporter.sim.scenarios import Scenario, ScenarioError, parse_scenario, scenario_names

__all__ = [
    "BoardSpec",
    "Capabilities",
    "Fault",
    "FaultPlan",
    "Scenario",
    "ScenarioError",
    "SimulatedNode",
    "parse_scenario",
    "scenario_names",
]


class SimulatedNode:
    """A node of simulated GPUs. ``install()`` points the real pynvml at the fake driver and returns
    the module to hand to the NVML source; ``host_options()`` are the host source's roots."""

    def __init__(
        self,
        scenario: str | Scenario = "healthy",
        n_gpus: int = 8,
        clock: Callable[[], float] = time.time,
        capabilities: Capabilities | None = None,
        board: BoardSpec | None = None,
        sample_period_s: float = 0.2,
        library_present: bool = True,
    ) -> None:
        self.scenario = parse_scenario(scenario) if isinstance(scenario, str) else scenario
        self.model = NodeModel(
            self.scenario, n_gpus=n_gpus, board=board, clock=clock, sample_period_s=sample_period_s
        )
        self.faults = FaultPlan()
        self.library = FakeNvmlLibrary(self.model, self.faults, capabilities)
        self.pods = pod_layout(self.model, self.scenario.pods)
        self.host = SimHost(self.model, pods=self.pods)
        self.kubelet = SimKubelet(str(self.host.root / "kubelet.sock"), lambda: self.pods).start()
        self.logs: SimPodLogs | None = None
        if not library_present:
            # what pynvml raises when libnvidia-ml.so.1 cannot be loaded; clear the fault to "install" it
            self.faults.add("nvmlInitWithFlags", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def install(self) -> ModuleType:
        with pynvml.libLoadLock:
            current = pynvml.nvmlLib
            if isinstance(current, FakeNvmlLibrary) and current is not self.library:
                raise RuntimeError("another simulated node is installed in pynvml; uninstall it first")
            pynvml.nvmlLib = self.library
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlLib_refcount = 0
        return pynvml

    def uninstall(self) -> None:
        with pynvml.libLoadLock:
            if pynvml.nvmlLib is self.library:
                pynvml.nvmlLib = None
                pynvml._nvmlGetFunctionPointer_cache.clear()
                pynvml._nvmlLib_refcount = 0

    @property
    def kubelet_socket(self) -> str:
        return self.kubelet.socket_path

    def start_logs(self) -> str:
        """The pods start writing their container logs; returns the directory (the node's /var/log/pods)."""
        if self.logs is None:
            # a node with EFA devices: NCCL on sockets between nodes (comm_bound) is then a fault
            (self.host.root / "sys" / "class" / "infiniband" / "efa_0").mkdir(parents=True, exist_ok=True)
            self.logs = SimPodLogs(self.model, self.pods, self.host.root / "pods").start()
        return str(self.logs.root)

    def host_options(self) -> dict[str, object]:
        return {
            "proc_root": self.host.proc_root,
            "sys_root": self.host.sys_root,
            "host_root": self.host.host_root,
            "statvfs": self.host.statvfs,
        }

    def cpu_seconds(self) -> float:
        """CPU the simulation itself used (the fake driver's work and the /proc writer): on a real node
        this is spent in libnvidia-ml and the kernel, so benchmarks subtract it from the exporter's."""
        return self.library.cpu_s + self.host.cpu_s

    def close(self) -> None:
        self.faults.clear()
        if self.logs is not None:
            self.logs.close()
        self.uninstall()
        self.kubelet.stop()
        self.host.close()

    def __enter__(self) -> SimulatedNode:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pod_layout(model: NodeModel, pods: int) -> list[SimPod]:
    """The job(s) on the simulated node: one training pod holding every GPU with a 64 GiB memory-backed
    /dev/shm, or with ``pods=2`` a second pod holding the other half on the 64 MiB default /dev/shm."""
    n = model.n_gpus
    split = n if pods == 1 else (n + 1) // 2
    specs = [("ml", "llm-train-0", "trainer", "dshm", range(split))]
    if pods == 2:
        specs.append(("research", "finetune-0", "worker", "", range(split, n)))
    out = []
    for i, (namespace, name, container, volume, gpus) in enumerate(specs):
        uuids = [model.gpus[g].uuid for g in gpus]
        out.append(
            SimPod(
                namespace=namespace,
                name=name,
                uid=f"6f1c2d3e-4b5a-4c6d-8e7f-{i:012x}",
                sandbox_id=f"{i + 1:02x}" * 32,
                container=container,
                devices={"nvidia.com/gpu": uuids} if uuids else {},
                shm_volume=volume,
            )
        )
    return out
