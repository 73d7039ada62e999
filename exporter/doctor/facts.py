"""What the node doctor learns about a node before judging it: plain, immutable values.

``None`` means "could not be read here" (not supported, not mounted, no permission), never a default:
a check that lacks its input says so instead of passing.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuFacts:
    index: int
    uuid: str
    name: str = ""
    pci_bus_id: str = ""
    lost: str = ""  # the NVML error when the GPU does not answer
    util: float | None = None
    persistence: bool | None = None
    ecc_current: bool | None = None
    ecc_pending: bool | None = None
    remapped: tuple[int, int, bool, bool] | None = None  # corrected rows, uncorrected, pending, failure
    retired_pending: bool | None = None  # pre-Ampere page retirement waiting for a reset
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    numa_node: int | None = None
    link_count: int = 0
    links_up: dict[int, bool] = field(default_factory=dict)
    link_errors: dict[int, dict[str, int]] = field(default_factory=dict)
    fabric_state: str | None = None  # not_started, in_progress, completed; None: no fabric (or unknown)
    fabric_supported: bool | None = None  # False: the driver says this GPU has no NVSwitch fabric
    pids: tuple[int, ...] = ()  # compute processes


@dataclass(frozen=True)
class NvmlFacts:
    error: str = ""  # why NVML is not usable ("" when it is): LibraryNotFound, DriverNotLoaded, ...
    library: str = ""  # the libnvidia-ml file the process loaded ("" when none loaded)
    driver_version: str = ""
    cuda_version: str = ""
    nvml_version: str = ""
    gpus: tuple[GpuFacts, ...] = ()
    p2p: dict[tuple[int, int, str], bool] | None = (
        None  # (gpu, peer, read|write|nvlink) -> OK; None: not read
    )

    @property
    def usable(self) -> bool:
        return not self.error


@dataclass(frozen=True)
class PciGpu:
    """An NVIDIA display/3D controller on the PCI bus, from /sys/bus/pci/devices."""

    bdf: str  # 0000:18:00.0
    numa_node: int | None = None
    speed: str = ""  # current_link_speed, e.g. "32.0 GT/s PCIe"
    max_speed: str = ""
    width: int | None = None
    max_width: int | None = None


@dataclass(frozen=True)
class ClockFacts:
    synced: bool
    max_error_s: float | None = None


SIM_CLOCK = ClockFacts(synced=True, max_error_s=0.004)  # the simulated node's chrony is fine


@dataclass(frozen=True)
class HostFacts:
    pci_gpus: tuple[PciGpu, ...] | None = None  # None: /sys/bus/pci not readable
    rdma_devices: tuple[str, ...] | None = None  # /sys/class/infiniband entries; None: not readable
    memlock: dict[int, int | None] = field(default_factory=dict)  # GPU process pid -> bytes (None: unlimited)
    clock: ClockFacts | None = None
    xids: dict[int, dict[int, int]] | None = None  # GPU index -> XID -> count; None: no history here
    xid_source: str = ""
    xid_buses: dict[int, str] = field(default_factory=dict)  # negative key -> PCI address of a GPU NVML lacks


@dataclass(frozen=True)
class ContainerFacts:
    name: str
    env: dict[str, str] = field(default_factory=dict)
    capabilities: frozenset[str] = frozenset()
    host_ipc: bool | None = None
    shm_source: str = ""  # what is mounted at the container's /dev/shm
    shm_bytes: int | None = None  # its size (statvfs)
    shm_memory_volume: bool = False  # a memory-backed emptyDir rather than the runtime's own tmpfs


@dataclass(frozen=True)
class PodFacts:
    namespace: str
    pod: str
    resources: dict[str, int] = field(default_factory=dict)  # resource name -> devices held
    containers: tuple[ContainerFacts, ...] = ()  # from the runtime bundles; () when none were found
    gpu_containers: frozenset[str] = frozenset()  # the containers the kubelet gave GPUs to
    gpu_devices: tuple[str, ...] = ()  # its nvidia.com/gpu device IDs (<uuid>::<n>: a time-slicing replica)

    @property
    def judged(self) -> tuple[ContainerFacts, ...]:
        """The containers that hold GPUs (a sidecar on the default /dev/shm is not the job's problem);
        all of them when the runtime's names do not match the kubelet's."""
        holding = tuple(c for c in self.containers if c.name in self.gpu_containers)
        return holding or self.containers

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}"

    @property
    def gpus(self) -> int:
        return sum(
            n for r, n in self.resources.items() if r == "nvidia.com/gpu" or r.startswith("nvidia.com/mig-")
        )

    @property
    def rdma(self) -> dict[str, int]:
        return {
            r: n for r, n in self.resources.items() if r == "vpc.amazonaws.com/efa" or r.startswith("rdma/")
        }


@dataclass(frozen=True)
class NodeFacts:
    nvml: NvmlFacts
    host: HostFacts = HostFacts()
    pods: tuple[PodFacts, ...] | None = None  # None: the kubelet could not be asked
    pods_error: str = ""
    expected_gpus: int | None = None  # given by the operator (--expected-gpus)
    process_owners: bool | None = None  # GPU processes mapped to pods (--process-owners); None: not said
