"""Reading the node for the doctor, through the exporter's own sources: the NVML source (the real
nvidia-ml-py, over the real driver or the simulated one), /sys and /proc under their configured roots,
the kubelet's PodResources API and the container runtime's bundle files. Nothing here judges: the
checks (checks.py) are pure functions of what is gathered.

Every reader is bounded (a deadline on the kubelet, non-blocking reads of the kernel log) and turns a
failure into "unknown" (``None``) plus a reason, never an exception.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

import grpc

from exporter.doctor.facts import (
    ClockFacts,
    ContainerFacts,
    GpuFacts,
    HostFacts,
    NodeFacts,
    NvmlFacts,
    PciGpu,
    PodFacts,
)
from exporter.sources import runtime
from exporter.sources.errors import ErrorCounter
from exporter.sources.kubelet import GPU_RESOURCE, MIG_RESOURCE
from exporter.sources.nvml import (
    LOST_ERRORS,
    SESSION_ERRORS,
    Device,
    GpuLost,
    NvmlSource,
    SessionError,
    error_name,
)
from exporter.sources.podresources.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers; NVSwitches are bridges (0x0680) and excluded
# "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." (domain:bus:device)
XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\): (\d+)")
KMSG_MAX_RECORDS = 100_000  # bounded: a kernel ring buffer holds far fewer
CONTAINER_NAME = ("io.kubernetes.cri.container-name", "io.kubernetes.container.name")
STA_UNSYNC = 0x0040  # adjtimex status bit: the kernel clock is not synchronised
TIME_ERROR = 5  # adjtimex return value: clock not synchronised


# ---- NVML ---------------------------------------------------------------------------------------


def gather_nvml(nvml: ModuleType | None, want_p2p: bool = True) -> NvmlFacts:
    """Open an NVML session of our own (NVML counts sessions, so the sampler's is unaffected), read every
    GPU, close it. Probing errors go to a private counter: they are routine, not the exporter's."""
    if nvml is None:
        return NvmlFacts(error="BindingsNotInstalled")
    source = NvmlSource(nvml, ErrorCounter(), slow_interval_s=float("inf"))
    devices: list[Device] = []
    try:
        devices = source.open()
        library = nvml_library(nvml)
        if not devices:
            return NvmlFacts(error="NoGpus", library=library, **source.driver)
        gpus = tuple(_gpu(source, nvml, dev) for dev in devices)
        p2p = source.collect_p2p(devices) if want_p2p else None
        return NvmlFacts(gpus=gpus, p2p=p2p, library=library, **source.driver)
    except SessionError as exc:
        return NvmlFacts(error=str(exc) or "SessionError", library=nvml_library(nvml))
    except Exception as exc:  # noqa: BLE001 - nvmlInit failed: the reason is the finding
        name = error_name(exc, nvml)
        # loaded but refused (its entry points missing, a mismatch): the file is part of the finding
        return NvmlFacts(error=name, library="" if name == "LibraryNotFound" else nvml_library(nvml))
    finally:
        source.close(devices)


def nvml_library(nvml: ModuleType, maps: str = "/proc/self/maps") -> str:
    """The file the bindings loaded NVML from: the path the dynamic loader mapped (LD_LIBRARY_PATH, the
    runtime's injection and the loader cache all end there), or what a stand-in library says it is."""
    lib = getattr(nvml, "nvmlLib", None)
    if lib is None:
        return ""
    described = getattr(lib, "described_as", "")
    if isinstance(described, str) and described:
        return described
    name = str(getattr(lib, "_name", "") or "")
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and Path(fields[5].strip()).name.startswith("libnvidia-ml.so"):
                    return fields[5].strip()
    except OSError:
        pass  # no /proc here: the name the bindings asked the loader for
    return name


def _ask(nvml: ModuleType, fn_name: str, *args: object) -> object | None:
    """One NVML call: None when the driver or board does not offer it; lost GPUs and dead sessions raise."""
    fn = getattr(nvml, fn_name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception as exc:  # every driver error is data
        name = error_name(exc, nvml)
        if name in LOST_ERRORS:
            raise GpuLost(name) from exc
        if name in SESSION_ERRORS:
            raise SessionError(name) from exc
        return None


def _gpu(source: NvmlSource, nvml: ModuleType, dev: Device) -> GpuFacts:
    ident = dev.identity
    base = GpuFacts(index=dev.index, uuid=ident.uuid, name=ident.name, pci_bus_id=ident.pci_bus_id)
    if dev.lost or dev.handle is None:
        return replace(base, lost="GpuIsLost")
    try:
        reading = source.collect(dev)  # its first collection also reads the slow state: links, fabric
        h = dev.handle
        ecc = _ask(nvml, "nvmlDeviceGetEccMode", h)
        rows = _ask(nvml, "nvmlDeviceGetRemappedRows", h)
        retired = _ask(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", h)
        persistence = _ask(nvml, "nvmlDeviceGetPersistenceMode", h)
        procs = _ask(nvml, "nvmlDeviceGetComputeRunningProcesses", h) or []
        pcie = {
            key: _ask(nvml, f"nvmlDevice{call}", h)
            for key, call in (
                ("gen", "GetCurrPcieLinkGeneration"),
                ("gen_max", "GetMaxPcieLinkGeneration"),
                ("width", "GetCurrPcieLinkWidth"),
                ("width_max", "GetMaxPcieLinkWidth"),
                ("numa", "GetNumaNodeId"),
            )
        }
    except GpuLost as exc:
        return replace(base, lost=str(exc) or "GpuIsLost")
    unsupported = "fabric" in dev.unsupported
    return replace(
        base,
        util=reading.util,
        persistence=bool(persistence) if persistence is not None else None,
        ecc_current=bool(ecc[0]) if ecc else None,  # type: ignore[index]
        ecc_pending=bool(ecc[1]) if ecc else None,  # type: ignore[index]
        remapped=(int(rows[0]), int(rows[1]), bool(rows[2]), bool(rows[3])) if rows else None,  # type: ignore[index]
        retired_pending=bool(retired) if retired is not None else None,
        pcie_gen=_int_or_none(pcie["gen"]),
        pcie_gen_max=_int_or_none(pcie["gen_max"]),
        pcie_width=_int_or_none(pcie["width"]),
        pcie_width_max=_int_or_none(pcie["width_max"]),
        numa_node=_int_or_none(pcie["numa"]),
        link_count=dev.link_count,
        links_up={link.link: link.up for link in reading.nvlinks if link.up is not None},
        link_errors={link.link: dict(link.errors) for link in reading.nvlinks if link.errors},
        fabric_state=reading.fabric_state,
        fabric_supported=False if unsupported else (True if reading.fabric_state else None),
        pids=tuple(int(p.pid) for p in procs),  # type: ignore[attr-defined]
    )


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int) and value >= 0 else None  # NUMA -1: no affinity


# ---- host: /sys, /proc, the kernel log, the kernel clock ------------------------------------------


def pci_gpus(sys_root: str) -> tuple[PciGpu, ...] | None:
    """NVIDIA GPUs on the PCI bus, whether or not the driver or NVML sees them."""
    root = Path(sys_root, "bus/pci/devices")
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return None
    out = []
    for bdf in entries:
        d = root / bdf
        if _text(d / "vendor") != NVIDIA_VENDOR or not _text(d / "class").startswith(GPU_CLASSES):
            continue
        out.append(
            PciGpu(
                bdf=bdf,
                numa_node=_num(d / "numa_node"),
                speed=_text(d / "current_link_speed"),
                max_speed=_text(d / "max_link_speed"),
                width=_num(d / "current_link_width"),
                max_width=_num(d / "max_link_width"),
            )
        )
    return tuple(out)


def rdma_devices(sys_root: str) -> tuple[str, ...] | None:
    """EFA and InfiniBand devices (/sys/class/infiniband); () when the class is absent (no RDMA driver)."""
    cls = Path(sys_root, "class")
    if not cls.is_dir():
        return None  # /sys is not mounted here: unknown, not "none"
    try:
        return tuple(sorted(os.listdir(cls / "infiniband")))
    except FileNotFoundError:
        return ()
    except OSError:
        return None


def memlock(proc_root: str, pids: list[int]) -> dict[int, int | None]:
    """The locked-memory limit of each visible GPU process (None = unlimited); unreadable ones left out."""
    out: dict[int, int | None] = {}
    for pid in pids:
        text = _text(Path(proc_root, str(pid), "limits"))
        for line in text.splitlines():
            if line.startswith("Max locked memory"):
                soft = line[len("Max locked memory") :].split()[0]
                out[pid] = None if soft == "unlimited" else int(soft) if soft.isdigit() else None
    return out


def kmsg_xids(path: str, bus_to_index: dict[str, int]) -> dict[int, dict[int, int]] | None:
    """XIDs in the kernel log (``NVRM: Xid (PCI:...): N``), read without blocking; None if unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    out: dict[int, dict[int, int]] = {}
    pending = b""
    try:
        for _ in range(KMSG_MAX_RECORDS):
            try:
                chunk = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # /dev/kmsg: records overwritten under us; read on
                    continue
                break  # EAGAIN: the end of the ring buffer
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                _xid(line.decode(errors="replace"), bus_to_index, out)
        _xid(pending.decode(errors="replace"), bus_to_index, out)
    finally:
        os.close(fd)
    return out


def _xid(line: str, bus_to_index: dict[str, int], out: dict[int, dict[int, int]]) -> None:
    match = XID_LINE.search(line)
    if match is None:
        return
    index = bus_to_index.get(_short_bus(match.group(1)), -1)
    xid = int(match.group(2))
    out.setdefault(index, {})[xid] = out.get(index, {}).get(xid, 0) + 1


def _short_bus(bus: str) -> str:
    """00000000:18:00.0 and 0000:18:00 -> 18:00 (the kernel log and NVML spell a GPU's address "
    "differently)."""
    bus = bus.lower().split(".")[0]
    return bus.split(":", 1)[1] if bus.count(":") == 2 else bus


class _Timex(ctypes.Structure):
    # struct timex of <sys/timex.h> (Linux, LP64): only the fields read here are named
    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("rest", ctypes.c_byte * 256),
    ]


def kernel_clock() -> ClockFacts | None:
    """Whether the kernel clock is synchronised (NTP/chrony/PTP) and its maximum error, from adjtimex(2)
    with no modes set (a read, allowed without privileges); None where it cannot be asked."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        tx = _Timex()
        state = libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError):
        return None
    if state < 0:
        return None
    synced = state != TIME_ERROR and not tx.status & STA_UNSYNC
    return ClockFacts(synced=synced, max_error_s=tx.maxerror / 1e6)


def gather_host(
    sys_root: str,
    proc_root: str,
    nvml: NvmlFacts,
    clock: Callable[[], ClockFacts | None] = kernel_clock,
    xids: Callable[[], dict[int, dict[int, int]] | None] | None = None,
    kmsg_path: str = "/dev/kmsg",
) -> HostFacts:
    """The host side; XIDs from ``xids`` (the live exporter's counts) or else the kernel log."""
    pids = sorted({pid for g in nvml.gpus for pid in g.pids})
    pci = pci_gpus(sys_root)
    unlisted: dict[int, str] = {}  # GPUs on the bus that NVML does not list get negative keys
    if xids is not None:
        found, where = xids(), "the exporter's XID event counts since it started"
    else:
        bus = {_short_bus(g.pci_bus_id): g.index for g in nvml.gpus if g.pci_bus_id}
        for p in pci or ():
            if _short_bus(p.bdf) not in bus:
                key = -1 - len(unlisted)
                bus[_short_bus(p.bdf)], unlisted[key] = key, p.bdf
        found, where = kmsg_xids(kmsg_path, bus), f"the kernel log ({kmsg_path})"
    return HostFacts(
        pci_gpus=pci,
        xid_buses=unlisted,
        rdma_devices=rdma_devices(sys_root),
        memlock=memlock(proc_root, pids),
        clock=clock(),
        xids=found,
        xid_source=where,
    )


# ---- pods: the kubelet's PodResources and the runtime's bundles ------------------------------------


@dataclass(frozen=True)
class PodSources:
    socket_path: str
    host_root: str = "/"
    bundle_dirs: tuple[str, ...] = runtime.BUNDLE_DIRS
    statvfs: Callable[[str], os.statvfs_result] = os.statvfs
    timeout_s: float = 2.0


def gather_pods(src: PodSources) -> tuple[tuple[PodFacts, ...] | None, str]:
    """Every pod with devices from the kubelet, with its containers' specs; (None, why) when unknown."""
    listed, error = _kubelet(src)
    if listed is None:
        return None, error
    containers = _bundles(src)
    pods = []
    for (namespace, pod), (resources, holders, devices) in sorted(listed.items()):
        found = tuple(containers.get((namespace, pod), ()))
        pods.append(PodFacts(namespace, pod, resources, found, frozenset(holders), tuple(devices)))
    return tuple(pods), ""


def _kubelet(
    src: PodSources,
) -> tuple[dict[tuple[str, str], tuple[dict[str, int], set[str], list[str]]] | None, str]:
    """(namespace, pod) -> (devices held by resource name, the containers holding GPUs, its GPU device
    IDs)."""
    if not src.socket_path:
        return None, "pod attribution is off (no PodResources socket)"
    if not os.path.exists(src.socket_path):
        return None, f"no kubelet PodResources socket at {src.socket_path}"
    channel = grpc.insecure_channel(f"unix://{src.socket_path}")
    try:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        response = stub.List(api_pb2.ListPodResourcesRequest(), timeout=src.timeout_s)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        return None, f"the kubelet did not answer ({code.name if code else 'RpcError'})"
    finally:
        channel.close()
    out: dict[tuple[str, str], tuple[dict[str, int], set[str], list[str]]] = {}
    for pod in response.pod_resources:
        held, holders, ids = out.setdefault((pod.namespace, pod.name), ({}, set(), []))
        for container in pod.containers:
            for devices in container.devices:
                name = devices.resource_name
                held[name] = held.get(name, 0) + len(devices.device_ids)
                if name == GPU_RESOURCE or MIG_RESOURCE.match(name):
                    holders.add(container.name)
                if name == GPU_RESOURCE:
                    ids.extend(devices.device_ids)
    return out, ""


def _bundles(src: PodSources) -> dict[tuple[str, str], list[ContainerFacts]]:
    """Container specs (OCI config.json) of the node's pods, by (namespace, pod)."""
    out: dict[tuple[str, str], list[ContainerFacts]] = {}
    for bundle_dir in src.bundle_dirs:
        root = Path(src.host_root, bundle_dir.lstrip("/"))
        try:
            entries = sorted(os.listdir(root))
        except OSError:
            continue
        for entry in entries:
            spec = _spec(root / entry / "config.json") or _spec(root / entry / "userdata" / "config.json")
            try:
                found = _container(spec, src) if spec else None
            except (AttributeError, TypeError, ValueError):
                found = None  # a spec not shaped like an OCI config: not a container we can read
            if found is not None:
                out.setdefault(found[0], []).append(found[1])
    return out


def _container(spec: dict, src: PodSources) -> tuple[tuple[str, str], ContainerFacts] | None:
    notes = spec.get("annotations") or {}
    keys = runtime.CONTAINERD if runtime.CONTAINERD["type"] in notes else runtime.CRIO
    if notes.get(keys["type"]) != "container" or not notes.get(keys["namespace"]):
        return None
    process = spec.get("process") or {}
    env = dict(item.partition("=")[::2] for item in process.get("env") or [] if "=" in item)
    caps = process.get("capabilities") or {}
    namespaces = (spec.get("linux") or {}).get("namespaces")
    shm = next(
        (m.get("source", "") for m in spec.get("mounts") or [] if m.get("destination") == "/dev/shm"), ""
    )
    size = None
    if shm:
        try:
            st = src.statvfs(str(Path(src.host_root, shm.lstrip("/"))))
            size = st.f_frsize * st.f_blocks
        except OSError:
            size = None
    name = next((notes[k] for k in CONTAINER_NAME if k in notes), "")
    return (notes[keys["namespace"]], notes.get(keys["pod"], "")), ContainerFacts(
        name=name,
        env=env,
        capabilities=frozenset(caps.get("effective") or caps.get("bounding") or ()),
        host_ipc=None if namespaces is None else not any(n.get("type") == "ipc" for n in namespaces),
        shm_source=shm,
        shm_bytes=size,
        shm_memory_volume=bool(runtime.EMPTY_DIR.search(shm)),
    )


# ---- everything ---------------------------------------------------------------------------------


def gather(
    nvml: ModuleType | None,
    sys_root: str,
    proc_root: str,
    pods: PodSources | None,
    want_slow: bool = True,
    expected_gpus: int | None = None,
    clock: Callable[[], ClockFacts | None] = kernel_clock,
    xids: Callable[[], dict[int, dict[int, int]] | None] | None = None,
    kmsg_path: str = "/dev/kmsg",
    process_owners: bool | None = None,
) -> NodeFacts:
    """Everything the checks read. ``want_slow`` adds the P2P matrix and the pods (the costly reads)."""
    nvml_facts = gather_nvml(nvml, want_p2p=want_slow)
    host = gather_host(sys_root, proc_root, nvml_facts, clock, xids, kmsg_path)
    found, why = None, "not read this round"
    if want_slow and pods is not None:
        try:
            found, why = gather_pods(pods)
        except Exception as exc:  # noqa: BLE001 - the pod checks say "unknown", the others still run
            found, why = None, f"reading the pods failed: {exc!r}"
    return NodeFacts(
        nvml=nvml_facts,
        host=host,
        pods=found,
        pods_error=why,
        expected_gpus=expected_gpus,
        process_owners=process_owners,
    )


def _spec(path: Path) -> dict | None:
    """A bundle's spec, read as the exporter's own scan reads it: bounded, no link or FIFO followed."""
    return runtime.read_spec(path)


def _text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _num(path: Path) -> int | None:
    text = _text(path)
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 0 else None
