"""The simulated GPU node: a physical model, a fake libnvidia-ml under the real nvidia-ml-py, fault
injection, and a simulated /proc for the host source. Drives the tests and ``--simulate``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import pynvml

from exporter.sim.conditions import BASE_ENV, EFA_DEVICES, NodeConditions
from exporter.sim.driver import Capabilities, FakeNvmlLibrary
from exporter.sim.faults import Fault, FaultPlan
from exporter.sim.hostfs import SimHost
from exporter.sim.kubelet import KubeletProcess, SimKubelet, SimPod
from exporter.sim.mig import LAYOUTS, mig_uuid, pod_name
from exporter.sim.physics import SHARED_SCENARIOS, SLICES, BoardSpec, NodeModel
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
        kubelet_process: bool = False,  # serve the pods from a process of its own (serve --simulate)
    ) -> None:
        self.scenario = parse_scenario(scenario) if isinstance(scenario, str) else scenario
        self.model = NodeModel(
            self.scenario, n_gpus=n_gpus, board=board, clock=clock, sample_period_s=sample_period_s
        )
        self.faults = FaultPlan()
        self.library = FakeNvmlLibrary(self.model, self.faults, capabilities)
        self.pods = pod_layout(self.model, self.scenario.pods, self.library.conditions())
        self.host = SimHost(
            self.model, pods=self.pods, conditions=self.library.conditions(), ghosts=ghost_pods(self.model)
        )
        self._churn_s = self.scenario.effective_churn()
        self._generation = 0
        self._pods_lock = threading.Lock()
        self.host.before_refresh = self.current_pods
        socket_path = str(self.host.root / "kubelet.sock")
        try:
            self.kubelet: SimKubelet | KubeletProcess = (
                KubeletProcess(socket_path, self.current_pods())
                if kubelet_process
                else SimKubelet(socket_path, self.current_pods).start()
            )
        except BaseException:
            self.host.close()
            raise
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

    def current_pods(self) -> list[SimPod]:
        """The pods now; with churn a new generation of pods takes the GPUs every ``churn`` seconds."""
        with self._pods_lock:
            if self._churn_s > 0:
                generation = int((self.model.clock() - self.model.start) // self._churn_s)
                if generation != self._generation:
                    self._generation = generation
                    self.host.pods_changed(
                        pod_layout(self.model, self.scenario.pods, self.library.conditions(), generation)
                    )
                    if isinstance(getattr(self, "kubelet", None), KubeletProcess):
                        self.kubelet.update(self.pods)  # type: ignore[union-attr]
            return list(self.pods)

    @property
    def kubelet_socket(self) -> str:
        return self.kubelet.socket_path

    def start_logs(self) -> str:
        """The pods start writing their container logs; returns the directory (the node's /var/log/pods)."""
        if self.logs is None:
            # the node has EFA devices (hostfs): NCCL on sockets between nodes (comm_bound) is a fault
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


@dataclass(frozen=True)
class JobPod:
    """The first pod of a workload: its name and container as a deployment would name them (a vLLM server
    is no trainer), the image it runs and its GPU process's command line (NULs between the words)."""

    stem: str
    container: str
    image: str
    command: str


FRAMEWORK_IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"  # a framework's image: says nothing of the work
_VLLM = JobPod(
    "vllm-llama-8b",
    "vllm",
    "vllm/vllm-openai:v0.6.3",
    "python3\0-m\0vllm.entrypoints.openai.api_server\0--model\0meta-llama/Llama-3.1-8B\0",
)
TRAINING_POD = JobPod("llm-train", "trainer", FRAMEWORK_IMAGE, "python\0train.py\0--config\0llama.yaml\0")
JOB_PODS = {
    "serving": _VLLM,
    "serving_starved": _VLLM,
    "evaluation": JobPod("llm-eval", "evaluator", FRAMEWORK_IMAGE, "python\0eval.py\0--tasks\0mmlu\0"),
    "pipeline": JobPod(
        "llama-70b-generate", "generate", FRAMEWORK_IMAGE, "python\0generate.py\0--device-map\0auto\0"
    ),
    "notebook": JobPod(
        "jupyter-alice",
        "notebook",
        "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
        "python\0-m\0ipykernel_launcher\0-f\0/root/.local/share/jupyter/runtime/kernel-1.json\0",
    ),
}


def pod_layout(
    model: NodeModel, pods: int, cond: NodeConditions | None = None, generation: int = 0
) -> list[SimPod]:
    """The job(s) on the simulated node: one training pod holding every GPU with a 64 GiB memory-backed
    /dev/shm, or with ``pods=2`` a second pod holding the other half on the 64 MiB default /dev/shm.
    The training pod also holds the node's EFA devices and runs with IPC_LOCK, as on an EFA node set up well;
    ``cond`` (a doctor scenario) changes its /dev/shm, environment or EFA devices. Each ``generation``
    (pod churn) is a new set of pods: new names, UIDs and sandboxes."""
    cond = cond or NodeConditions()
    n = model.n_gpus
    split = n if pods == 1 else (n + 1) // 2
    orphaned = _orphaned(model)  # a deleted pod's GPUs: no pod holds them
    sliced = _sliced(model)  # a GPU pods share through time-slicing replicas: not the training pod's
    partitioned = _partitioned(model)  # a GPU in MIG mode: its instances are other pods'
    volume = "" if cond.pod_shm_default else "dshm"
    # the first pod is named for its work, as a deployment would be (a vLLM server is no trainer), unless
    # the scenario names it (pod=NAME: a name that says nothing)
    job = JOB_PODS.get(model.timeline[0][1].name, TRAINING_POD)
    named = model.timeline[0][1].pod_name
    stem, container = (named, "main") if named else (job.stem, job.container)
    specs = [("ml", f"{stem}-{generation}", container, volume, range(split))]
    if pods == 2:
        specs.append(("research", f"finetune-{generation}", "worker", "", range(split, n)))
    out = []
    for i, (namespace, name, container, volume, gpus) in enumerate(specs):
        uuids = [
            model.gpus[g].uuid for g in gpus if g not in orphaned and g != sliced and g not in partitioned
        ]
        devices = {"nvidia.com/gpu": uuids} if uuids else {}
        first = i == 0
        if first and cond.pod_efa and uuids:
            devices["vpc.amazonaws.com/efa"] = [f"efa{k}" for k in range(len(EFA_DEVICES))]
        out.append(
            SimPod(
                namespace=namespace,
                name=name,
                uid=f"6f1c2d3e-4b5a-4c6d-8e7f-{generation * 2 + i:012x}",
                sandbox_id=f"{i + 1:02x}" * 32 if generation == 0 else f"{generation:032x}{i + 1:032x}",
                container=container,
                devices=devices,
                shm_volume=volume,
                env=(*BASE_ENV, *cond.pod_env) if first else (),
                capabilities=("CAP_IPC_LOCK",) if first else (),
                image=job.image if first else FRAMEWORK_IMAGE,
                command=job.command if first else TRAINING_POD.command,
            )
        )
    return out + _sharing_pods(model, sliced, generation) + _mig_pods(model, partitioned, generation)


def _partitioned(model: NodeModel) -> tuple[int, ...]:
    """The GPUs of mig_h100, mig_compute_h100 or mig_all_h100 in MIG mode (the scenario's affected GPUs: GPU
    0 by default, every GPU in mig_all_h100); none in other scenarios."""
    sc = model.timeline[0][1]
    return sc.affected(model.n_gpus) if sc.name in LAYOUTS else ()


def _mig_pods(model: NodeModel, gpus: tuple[int, ...], generation: int) -> list[SimPod]:
    """The pods holding a MIG instance each, as the device plugin's mixed strategy gives them out
    (``nvidia.com/mig-<profile>``, the instance's MIG UUID); set up as well as the training pod, so that
    only the starving one's loss is a fault."""
    layout = LAYOUTS.get(model.timeline[0][1].name, ())
    return [
        _worker_pod(
            pod_name(spec, gpu),
            "7a3b4c5d-6e7f-4a8b-9c0d",
            16 + 8 * gpu + k,
            generation,
            f"nvidia.com/mig-{spec.profile}",
            mig_uuid(model.gpus[gpu].uuid, k),
        )
        for gpu in gpus
        for k, spec in enumerate(layout)
        if spec.pod
    ]


def _worker_pod(name: str, uid_head: str, slot: int, generation: int, resource: str, device: str) -> SimPod:
    """A research pod given one device of a shared GPU (an instance, a replica), set up as well as the
    training pod (a memory-backed /dev/shm, an EFA device, its environment, IPC_LOCK): only the starving
    one's loss is a fault. ``slot`` keeps its UID and sandbox apart from the other simulated pods'."""
    return SimPod(
        namespace="research",
        name=name,
        uid=f"{uid_head}-{generation * 4 + slot:012x}",
        sandbox_id=f"{generation:032x}{slot:032x}",
        container="worker",
        devices={resource: [device], "vpc.amazonaws.com/efa": [f"efa{slot % 8}"]},
        shm_volume="dshm",
        env=BASE_ENV,
        capabilities=("CAP_IPC_LOCK",),
        image=FRAMEWORK_IMAGE,
    )


def _sliced(model: NodeModel) -> int | None:
    """The GPU the pods of time_slicing (or mps) share (its first affected GPU); None in other scenarios."""
    sc = model.timeline[0][1]
    return sc.affected(model.n_gpus)[0] if sc.name in SHARED_SCENARIOS else None


def _sharing_pods(model: NodeModel, gpu: int | None, generation: int) -> list[SimPod]:
    """The pods sharing a GPU: each is given one of the device plugin's time-slicing replicas of it
    (``<uuid>::<n>``), and its process (physics.SLICES) runs in it. Each is set up as well as the training
    pod (a memory-backed /dev/shm, an EFA device, its environment, IPC_LOCK): only the starving one's loss
    is a fault."""
    if gpu is None:
        return []
    uuid = model.gpus[gpu].uuid
    return [
        _worker_pod(name, "5e2d3c4b-6a79-4b8c-9d0e", k + 8, generation, "nvidia.com/gpu", f"{uuid}::{k}")
        for k, (name, _, _) in enumerate(SLICES)
    ]


ZOMBIE_SCENARIO = "zombie_process"


def _orphaned(model: NodeModel) -> frozenset[int]:
    sc = model.timeline[0][1]
    return frozenset(sc.affected(model.n_gpus)) if sc.name == ZOMBIE_SCENARIO else frozenset()


def ghost_pods(model: NodeModel) -> list[SimPod]:
    """Pods deleted while a process of theirs lives on (``zombie_process``): the kubelet no longer lists
    them, but the runtime keeps the task (its bundle) while the process runs, and its cgroup names them."""
    gpus = sorted(_orphaned(model))
    if not gpus:
        return []
    return [
        SimPod(
            namespace="ml",
            name="llm-train-prev",
            uid="0d1e2f3a-4b5c-4d6e-8f70-9a8b7c6d5e4f",
            sandbox_id="ab" * 32,
            container="trainer",
            devices={"nvidia.com/gpu": [model.gpus[g].uuid for g in gpus]},
        )
    ]
