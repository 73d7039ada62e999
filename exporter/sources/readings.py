"""What sources return: plain, immutable values in base units (ratios 0-1, watts, bytes, hertz,
celsius, seconds). ``None`` always means "not supported or not available", never zero."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

N = TypeVar("N", int, float)

# Sample, NvLinkReading and GpuReading are values like the rest, never changed once made, but not frozen:
# hundreds are made every second (each sample, each link of each GPU, each GPU's reading), and a frozen
# dataclass costs three to five times as much to make (every field set through object.__setattr__)


@dataclass(slots=True)
class Sample:
    """One driver sample: seconds since the epoch and a value in base units."""

    t: float
    value: float


@dataclass(slots=True)  # not frozen: made for every link of every GPU each second (see Sample)
class NvLinkReading:
    link: int
    up: bool | None = None
    tx_bytes: int | None = None  # cumulative counter
    rx_bytes: int | None = None
    errors: dict[str, int] = field(default_factory=dict)  # type -> cumulative count


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    index: int
    uuid: str
    name: str = ""
    pci_bus_id: str = ""
    serial: str = ""
    vbios_version: str = ""
    compute_capability: str = ""

    def labels(self) -> dict[str, str]:
        return {
            "model": self.name,
            "pci_bus_id": self.pci_bus_id,
            "serial": self.serial,
            "vbios_version": self.vbios_version,
            "compute_capability": self.compute_capability,
        }


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute (or MPS client) process the driver lists on a GPU, read every slow interval."""

    pid: int
    used_bytes: int | None  # None: the driver does not say
    kind: str = "compute"  # compute, or mps
    sm_util: float | None = None  # mean of its utilization samples since the last read, 0-1
    mem_util: float | None = None


@dataclass(frozen=True, slots=True)
class MigReading:
    """One MIG device (a GPU instance with its compute instance) of a GPU in MIG mode. The driver answers for
    its identity, its memory and (with GPM) its SM activity; utilization, power, clocks, temperatures and
    links are the GPU's alone."""

    uuid: str
    gpu_instance: int
    compute_instance: int
    profile: str  # e.g. 3g.40gb ("" when the driver's name does not say)
    slices: int  # its compute slices (0: unknown)
    gpu_slices: int  # the compute slices of its GPU (7 on A100 and H100)
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    sm_active: float | None = None  # GPM SM activity since the last collection, 0-1; None: not offered


@dataclass(slots=True)  # not frozen: one per GPU each second, 34 fields (see Sample)
class GpuReading:
    """Everything one collection learnt about one GPU. ``t`` is when the collection ended."""

    t: float
    identity: GpuIdentity
    util_samples: tuple[Sample, ...] = ()
    mem_util_samples: tuple[Sample, ...] = ()
    power_samples: tuple[Sample, ...] = ()
    util: float | None = None
    mem_util: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    energy_j: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temp_c: float | None = None
    temp_mem_c: float | None = None
    temp_slowdown_c: float | None = None
    clock_sm_hz: float | None = None
    clock_mem_hz: float | None = None
    clock_sm_max_hz: float | None = None
    clock_mem_max_hz: float | None = None
    clock_reasons: int | None = None
    clock_reason_seconds: dict[str, float] = field(default_factory=dict)  # reason -> cumulative s
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    nvlinks: tuple[NvLinkReading, ...] = ()
    nvlink_tx_bytes: int | None = None  # cumulative, over every link (None: not every link counted)
    nvlink_rx_bytes: int | None = None
    pcie_tx_bytes: int | None = None  # cumulative
    pcie_rx_bytes: int | None = None
    fabric_state: str | None = None
    fabric_status: str | None = None
    process_count: int | None = None
    processes: tuple[GpuProcess, ...] | None = None  # None: not read (the calls failed or are not offered)
    processes_mem_bytes: int | None = None  # memory in use when ``processes`` was listed
    mig_uuids: tuple[str, ...] = ()  # MIG devices carved out of this GPU (MIG mode on)
    migs: tuple[MigReading, ...] = ()  # the same MIG devices, read at each collection
    extra: dict[str, float] = field(default_factory=dict)  # catalog signals read generically, by name

    def nvlink_traffic(self) -> tuple[int | None, int | None]:
        """NVLink bytes sent and received over every link: the source's sums, or the links' own counters
        added up where every link gave its part."""
        if self.nvlink_tx_bytes is not None or self.nvlink_rx_bytes is not None:
            return self.nvlink_tx_bytes, self.nvlink_rx_bytes
        if not self.nvlinks:
            return None, None
        return (
            counter_sum(link.tx_bytes for link in self.nvlinks),
            counter_sum(link.rx_bytes for link in self.nvlinks),
        )


def counter_sum(parts: Iterable[N | None]) -> N | None:
    """The sum of counters, None unless every one gave its part: a sum with a part missing one time and
    not the next would look like a counter reset."""
    total: N | None = None
    for part in parts:
        if part is None:
            return None
        total = part if total is None else total + part
    return total


@dataclass(frozen=True, slots=True)
class ShmReading:
    mountpoint: str
    size_bytes: int
    used_bytes: int
    namespace: str = ""
    pod: str = ""
    volume: str = ""


@dataclass(frozen=True, slots=True)
class DiskReading:
    device: str
    read_bytes: int  # cumulative
    write_bytes: int


@dataclass(frozen=True, slots=True)
class HostReading:
    t: float
    shm: tuple[ShmReading, ...] = ()
    iowait: float | None = None  # share of all CPU time since the previous reading
    core_busy_max: float | None = None  # busiest core's busy share since the previous reading
    cpu_count: int | None = None
    disks: tuple[DiskReading, ...] = ()
    pressure: dict[str, float] = field(default_factory=dict)  # resource -> "some" avg10 ratio
    pod_dev_shm: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)  # (ns, pod) -> sources
    # (namespace, pod, container) -> the container's image, from the runtime's bundles (shared, never changed)
    pod_images: dict[tuple[str, str, str], str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuState:
    """What the NVML session knows of one GPU at publication (ok, pending, lost,
    timeout, error, nvml_down), with its latest reading."""

    index: int
    identity: GpuIdentity
    status: str
    reading: GpuReading | None
    collected_t: float | None
