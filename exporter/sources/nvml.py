"""GPU source: every signal of the metric contract that NVML offers, over an injected pynvml module.

Rules this module keeps:
- A call the driver confirms it lacks (NotSupported, FunctionNotFound, or ArgumentVersionMismatch and
  Deprecated for a versioned struct it does not know) is counted once and then left out for that GPU
  until the next NVML session, which probes it again; nothing unsupported is ever reported as 0.
- A call refused for another reason (NoPermission, InvalidArgument, a Python exception...) is left out
  for a while and retried with backoff (``nvml.signal_retry_*`` in the threshold table): it comes back
  on its own once the cause is gone.
- ``GpuIsLost`` raises ``GpuLost``: the sampler marks that GPU down and the others carry on.
- When none of a GPU's core reads (utilization, power, memory) answered, or a session-wide error came
  from one GPU's handle while the session itself still answers, ``collect`` raises ``GpuReadFailed``:
  that GPU is down for this collection, the others carry on.
- Errors that mean the NVML session itself is gone (driver unloaded, library/driver mismatch, and
  session-level calls fail too) raise ``SessionError``: the sampler re-initialises NVML with backoff.
- Every other error is counted and costs only that signal for this collection: a value whose read
  failed is never carried over from an earlier collection.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import operator
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType

from exporter.config.settings import Settings
from exporter.policy import catalog
from exporter.policy.nvml_vocab import FABRIC_STATES, FI_THROTTLE_NS, NVLINK_STATE_UP
from exporter.policy.thresholds import SAMPLE_CARRY, SIGNAL_RETRY_INITIAL, SIGNAL_RETRY_MAX
from exporter.sources.errors import ErrorCounter
from exporter.sources.readings import (
    GpuIdentity,
    GpuProcess,
    GpuReading,
    MigReading,
    NvLinkReading,
    Sample,
    counter_sum,
)
from exporter.sources.registry import Inputs, Registration, Schedule, register

log = logging.getLogger(__name__)


def real_nvml() -> ModuleType | None:
    """The nvidia-ml-py module; None (with a warning) if the bindings are not installed."""
    try:
        import pynvml
    except ImportError:
        log.warning("nvidia-ml-py is not installed: GPU metrics are off")
        return None
    return pynvml


SOURCE = "nvml"

SESSION_ERRORS = frozenset(
    {"Uninitialized", "DriverNotLoaded", "LibRmVersionMismatch", "LibraryNotFound", "LibraryMismatch"}
)
LEAVE_OUT_ERRORS = frozenset(
    {
        "NotSupported",
        "FunctionNotFound",
        "NoPermission",
        "InvalidArgument",
        "ArgumentVersionMismatch",
        "Deprecated",
    }
)
LOST_ERRORS = frozenset({"GpuIsLost", "GpuNotFound", "ResetRequired"})
# off until the next session: the driver says it lacks the call (or this version of its struct), which
# only a driver change can alter, and a driver change means a new session
CONFIRMED_UNSUPPORTED = frozenset(
    {"NotSupported", "FunctionNotFound", "ArgumentVersionMismatch", "Deprecated"}
)
# the reads a GPU's data rests on: when none of them answers, the GPU is down, not "up with no values"
CORE_KEYS = (
    "samples_util",
    "samples_mem_util",
    "utilization",
    "samples_power",
    "power",
    "memory_v2",
    "memory",
)


# field ids from nvml.h (an ABI: the numbers never change, older bindings may lack the names)
FI_MEMORY_TEMP = 82
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_TX_KIB = 138  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, scopeId = link
FI_NVLINK_RX_KIB = 139
FI_SCOPE_ALL_LINKS = 0xFFFFFFFF  # a throughput field's scopeId for its sum over every link
FI_NVLINK_ERR = {161: "replay", 162: "recovery", 163: "crc"}  # NVML_FI_DEV_NVLINK_ERROR_DL_*, per link
FI_NVLINK_STATE = 165  # NVML_FI_DEV_NVLINK_GET_STATE, per link
FI_PCIE_TX_BYTES = 197
FI_PCIE_RX_BYTES = 198
ERROR_COUNTERS = {0: "replay", 1: "recovery", 2: "crc"}  # nvmlDeviceGetNvLinkErrorCounter; 2 = DL_CRC_FLIT

# plain ints: pynvml spells NVML_P2P_CAPS_INDEX_READ as the tuple (0,), which ctypes rejects
P2P_CAPS = {"read": 0, "write": 1, "nvlink": 2}

GPM_METRICS = {2: "sm_active", 3: "sm_occupancy", 5: "tensor_active", 10: "dram_active"}  # NVML_GPM_METRIC_*

SAMPLE_GPU_UTIL, SAMPLE_MEM_UTIL, SAMPLE_POWER = 1, 2, 0  # nvmlSamplingType_t


class GpuLost(Exception):
    """The GPU fell off the bus or needs a reset; its name is the NVML error."""

    status = "lost"


class GpuReadFailed(Exception):
    """This collection of one GPU gave nothing usable (its core reads failed, or its handle reports a
    session-wide error the session itself does not have); the GPU is down until a collection works."""

    status = "error"


class SessionError(Exception):
    """The NVML session is unusable (driver gone, version mismatch); re-initialise."""


def error_name(exc: BaseException, nvml: ModuleType) -> str:
    """NVMLError_GpuIsLost -> 'GpuIsLost'; NVMLLibraryMismatchError -> 'LibraryMismatch'."""
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    if mismatch is not None and isinstance(exc, mismatch):
        return "LibraryMismatch"
    name = type(exc).__name__
    if name.startswith("NVMLError_"):
        return name[len("NVMLError_") :]
    if name == "NVMLError":
        return f"Code{getattr(exc, 'value', 'Unknown')}"
    return name


# nvmlValueType_t -> the struct format of its nvmlValue_t member (dVal, uiVal, ulVal, ullVal, sllVal, siVal,
# usVal; native sizes: ulVal is a C long); a type not listed reads as ullVal, as in the bindings
_VALUE_FORMATS = {0: "d", 1: "I", 2: "L", 3: "Q", 4: "q", 5: "i", 6: "H"}

# an nvmlSample_t (an unsigned long long time stamp, then the nvmlValue_t union at offset 8) unpacked by
# its value type in one C call: reading it through the bindings' structure costs three Python-level
# attribute hooks and a union object per sample (8 -> 3 us for a call's six samples)


@functools.cache
def _sample_layout(value_type: int, size: int = 0) -> struct.Struct:
    """An ``nvmlSample_t`` as (timestamp, value) for a value type; ``size``: the entry's size in an array
    (the union's widest member sets it), padded to so that a whole array unpacks in one call."""
    fmt = "@Q" + _VALUE_FORMATS.get(value_type, "Q")
    return struct.Struct(fmt + "x" * max(0, size - struct.calcsize(fmt)))


_STAMP = operator.itemgetter(0)  # a (timestamp, value) sample's time stamp
SAMPLE_BUFFER_MAX = 1 << 16  # entries: a driver that keeps filling any buffer is not followed further


class SampleReader:
    """``nvmlDeviceGetSamples`` in one driver call into an array kept per sample type. The bindings'
    function calls the driver twice every time (how many samples are new, then those into a new array);
    the driver fills as many entries as the array holds and says how many it wrote, so an array as large
    as the driver's own buffer takes every new sample in one call. One that comes back full is grown and
    read again."""

    def __init__(self, N: ModuleType) -> None:
        self.N = N
        self._lookup = getattr(N, "_nvmlGetFunctionPointer", None)
        self._check = getattr(N, "_nvmlCheckReturn", None)
        entry = getattr(N, "c_nvmlSample_t", None)
        self._entry = _plain(entry) if entry is not None else None
        self._arrays: dict[int, ctypes.Array] = {}  # by sample type

    @property
    def direct(self) -> bool:
        """Are the bindings' lookup, return check and sample layout there (else theirs is used)?"""
        return self._lookup is not None and self._check is not None and self._entry is not None

    def read(self, handle: object, kind: int, last: int) -> list[tuple[int, float]]:
        """(timestamp, value) of each sample newer than ``last``, in the driver's order. Raises the
        bindings' NVMLError (NotFound: nothing newer)."""
        if not self.direct:
            value_type, raw = self.N.nvmlDeviceGetSamples(handle, kind, last)
            unpack = _sample_layout(value_type).unpack_from
            return [unpack(entry) for entry in raw]
        fn = self._lookup("nvmlDeviceGetSamples")  # type: ignore[misc]
        value_type, count = ctypes.c_uint(0), ctypes.c_uint(0)
        array = self._arrays.get(kind)
        if array is None:  # the first read: twice what the driver's buffer holds now, room to spare
            self._call(fn, handle, kind, 0, value_type, count, None)
            array = self._grow(kind, 2 * count.value)
        while True:
            count.value = len(array)
            self._call(fn, handle, kind, last, value_type, count, array)
            if count.value < len(array) or len(array) >= SAMPLE_BUFFER_MAX:
                break
            array = self._grow(kind, len(array) * 2)  # full: there may be more
        layout = _sample_layout(value_type.value, ctypes.sizeof(self._entry))  # type: ignore[arg-type]
        return list(layout.iter_unpack(memoryview(array).cast("B")[: count.value * layout.size]))

    def _call(self, fn: Callable[..., int], handle: object, kind: int, last: int, *out: object) -> None:
        value_type, count, array = out
        args = (ctypes.byref(value_type), ctypes.byref(count), array)  # type: ignore[arg-type]
        self._check(fn(handle, ctypes.c_uint(kind), ctypes.c_ulonglong(last), *args))  # type: ignore[misc]

    def _grow(self, kind: int, entries: int) -> ctypes.Array:
        size = max(1, min(entries, SAMPLE_BUFFER_MAX))
        array = self._arrays[kind] = (self._entry * size)()  # type: ignore[operator]
        return array


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


UNANSWERED = 999  # NVML_ERROR_UNKNOWN: what an entry the driver did not fill in reads as


_U64 = struct.Struct("=Q")


def _member(fmt: str) -> Callable[[int], float]:
    layout = struct.Struct("@" + fmt)
    return lambda bits: layout.unpack_from(_U64.pack(bits))[0]


# an nvmlValue_t union's value from its eight bytes read as one unsigned 64-bit integer in the machine's
# byte order (packed back, the bytes are the union's own, and a member is read from their start), by
# nvmlValueType_t; ullVal, and a type not listed, is the integer itself
_FROM_BITS: dict[int, Callable[[int], float]] = {t: _member(f) for t, f in _VALUE_FORMATS.items() if f != "Q"}


def _from_bits(value_type: int, bits: int) -> float:
    """An nvmlValue_t union's value by its type, from its bits (a union's ``ullVal``)."""
    convert = _FROM_BITS.get(value_type)
    return bits if convert is None else convert(bits)


def _field_layout(entry: type) -> struct.Struct | None:
    """An ``nvmlFieldValue_t`` as (valueType, nvmlReturn, the value union's bits) in one C call per batch;
    None where the layout is not the one this reads (then each entry is read through its structure)."""
    try:
        kind, ret, value = entry.valueType, entry.nvmlReturn, entry.value  # type: ignore[attr-defined]
    except AttributeError:
        return None
    offsets = (kind.offset, ret.offset, value.offset)
    if (
        (kind.size, ret.size, value.size) != (4, 4, 8)
        or not offsets[0] + 4 <= offsets[1] <= offsets[2] - 4
        or offsets[2] + 8 > ctypes.sizeof(entry)
    ):
        return None
    gaps = (offsets[0], offsets[1] - offsets[0] - 4, offsets[2] - offsets[1] - 4)
    tail = ctypes.sizeof(entry) - offsets[2] - 8
    return struct.Struct(f"={gaps[0]}xI{gaps[1]}xI{gaps[2]}xQ{tail}x")


_ALL_LINKS = {(FI_NVLINK_TX_KIB, FI_SCOPE_ALL_LINKS), (FI_NVLINK_RX_KIB, FI_SCOPE_ALL_LINKS)}


@functools.cache
def _link_keys(count: int) -> tuple[tuple[int, tuple[int, int], tuple[int, int]], ...]:
    """Each of ``count`` links with the keys of its traffic fields (TX, RX), made once per link count."""
    return tuple((n, (FI_NVLINK_TX_KIB, n), (FI_NVLINK_RX_KIB, n)) for n in range(count))


@functools.cache
def _plain(entry: type) -> type:
    """A structure of the bindings (``c_nvmlFieldValue_t``, ``c_nvmlGpmMetricsGet_t``...) as a plain ctypes
    structure: the same fields, nested structures and arrays of them plain too, so the same layout,
    without the Python-level attribute hooks of nvml-py's ``_PrintableStructure`` on every field read and
    write, which cost more than the rest of a 40-field batch or a GPM read."""
    fields = []
    for name, kind, *bits in entry._fields_:
        if (
            isinstance(kind, type)
            and issubclass(kind, ctypes.Array)
            and issubclass(kind._type_, ctypes.Structure)
        ):
            kind = _plain(kind._type_) * kind._length_
        elif isinstance(kind, type) and issubclass(kind, ctypes.Structure):
            kind = _plain(kind)
        fields.append((name, kind, *bits))
    return type(entry.__name__, (ctypes.Structure,), {"_fields_": fields})


class FieldBatch:
    """One GPU's list of (field, scope) requests as an array filled once and reused each collection;
    nvml-py's ``nvmlDeviceGetFieldValues`` builds and fills a new array on every call."""

    def __init__(self, requests: list[tuple[int, int]], N: ModuleType) -> None:
        self.requests = list(requests)
        self._lookup = getattr(N, "_nvmlGetFunctionPointer", None)
        self._check = getattr(N, "_nvmlCheckReturn", None)
        entry = getattr(N, "c_nvmlFieldValue_t", None)
        self.array: ctypes.Array | None = None  # None: bindings without these parts, read through theirs
        self._blank = b""  # the array as each call starts it: the requests, every entry unanswered
        self._layout: struct.Struct | None = None  # the entries' (type, return, bits), where known
        if self._lookup is not None and self._check is not None and entry is not None:
            self._layout = _field_layout(_plain(entry))
            self.array = (_plain(entry) * len(requests))()
            for item, (field_id, scope) in zip(self.array, requests, strict=True):
                item.fieldId, item.scopeId = field_id, scope
                item.nvmlReturn = UNANSWERED  # a driver that skips an entry leaves it failed, never stale
            self._blank = bytes(self.array)

    def reader(self, wrapper: Callable[..., object]) -> Callable[[object], object]:
        """The call for one handle: the library's entry point through the bindings' own lookup and
        return check, or ``wrapper`` (the bindings' function) where those are not offered."""
        array, lookup, check = self.array, self._lookup, self._check
        if array is None or lookup is None or check is None:
            return lambda handle: wrapper(handle, self.requests)

        blank = self._blank

        def read(handle: object) -> object:
            ctypes.memmove(array, blank, len(blank))  # one copy instead of a Python write per entry
            check(lookup("nvmlDeviceGetFieldValues")(handle, ctypes.c_int32(len(array)), ctypes.byref(array)))
            return array

        return read

    def rows(self, values: object) -> Iterable[tuple[int, int, int]]:
        """(valueType, nvmlReturn, the value union's bits) of each entry a read returned: the batch's own
        array unpacked in one call, or the bindings' structures one by one (their ullVal is the bits)."""
        if values is self.array and self._layout is not None:
            return self._layout.iter_unpack(values)  # type: ignore[arg-type]
        return ((fv.valueType, fv.nvmlReturn, fv.value.ullVal) for fv in values)  # type: ignore[attr-defined]


@dataclass(eq=False)
class Device:
    """One GPU and what has been learnt about it in this NVML session."""

    index: int
    handle: object | None
    identity: GpuIdentity
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)
    fields: list[tuple[int, int]] = field(default_factory=list)  # read every collection
    batches: dict[str, FieldBatch] = field(default_factory=dict)  # by list name: its ready-made array
    slow_fields: list[tuple[int, int]] = field(default_factory=list)  # read every slow interval
    link_count: int = 0
    # each link's traffic read every collection: for --detail nvlink, or a driver that cannot sum the links
    traffic_per_link: bool = False
    cursors: dict[int, int] = field(default_factory=dict)
    samples: SampleReader | None = None  # its sample buffers' reader (None: lost at discovery)
    last: dict[str, float] = field(default_factory=dict)
    last_t: dict[str, float] = field(default_factory=dict)  # when each ``last`` value was read
    default_limit_w: float | None = None
    slowdown_c: float | None = None
    sm_max_hz: float | None = None
    mem_max_hz: float | None = None
    gpm_samples: list[object] = field(default_factory=list)
    gpm_metrics: list[int] = field(default_factory=lambda: list(GPM_METRICS))
    gpm_buffer: object | None = None
    migs: list[MigDevice] = field(default_factory=list)  # its MIG devices (MIG mode on), from the slow read
    next_slow: float = 0.0
    process_cursor: int = 0  # time stamp (us) of the newest per-process utilization sample read
    slow: dict[str, object] = field(default_factory=dict)
    retry: dict[object, tuple[float, float]] = field(default_factory=dict)  # key -> (next try, backoff)
    failed: set[str] = field(default_factory=set)  # keys whose read failed in the current collection


@dataclass
class MigDevice:
    """A MIG device of a GPU: its handle and identity (slow read), its pair of GPM samples."""

    handle: object
    uuid: str
    gpu_instance: int
    compute_instance: int
    profile: str
    slices: int
    gpu_slices: int
    gpm_samples: list[object] = field(default_factory=list)
    gpm_buffer: object | None = None


Samples = tuple[Sample, ...] | None  # a sample buffer's read: None when it failed or is not offered


class NvmlSource:
    """Collects GPUs through ``nvml`` (the pynvml module, or the same module over the simulator)."""

    def __init__(
        self,
        nvml: ModuleType,
        errors: ErrorCounter,
        clock: Callable[[], float] = time.time,
        slow_interval_s: float = 10.0,
        link_traffic: bool = False,
    ) -> None:
        self.N = nvml
        self.errors = errors
        self.clock = clock
        self.slow_interval_s = slow_interval_s
        self.link_traffic = link_traffic  # each NVLink's traffic every collection (--detail nvlink)
        self.driver: dict[str, str] = {}
        self._mismatched: set[str] = set()  # calls that raised NVMLLibraryMismatchError once already
        self._open = False

    # ---- session -----------------------------------------------------------------------------

    @classmethod
    def configured(
        cls,
        nvml: ModuleType,
        errors: ErrorCounter,
        settings: Settings,
        clock: Callable[[], float] = time.time,
    ) -> NvmlSource:
        """The source as ``settings`` ask: the slow state's cadence, each link's traffic for the per-link
        series (``--detail nvlink``)."""
        return cls(nvml, errors, clock, settings.slow_interval_s, link_traffic="nvlink" in settings.detail)

    def open(self) -> list[Device]:
        """Initialise NVML and discover GPUs. Raises the NVML error when NVML is not usable."""
        self.N.nvmlInit()
        self._open = True
        self.driver = {
            "driver_version": _text(self._quiet(self.N.nvmlSystemGetDriverVersion) or ""),
            "cuda_version": self._cuda_version(),
            "nvml_version": _text(self._quiet(self.N.nvmlSystemGetNVMLVersion) or ""),
        }
        count = self.N.nvmlDeviceGetCount()
        return [self.discover(i) for i in range(count)]

    def close(self, devices: Iterable[Device] = ()) -> None:
        for dev in devices:
            for sample in [*dev.gpm_samples, *(s for m in dev.migs for s in m.gpm_samples)]:
                self._quiet(self.N.nvmlGpmSampleFree, sample)
            dev.gpm_samples = []
            dev.migs = []
        if self._open:
            self._open = False
            self._quiet(self.N.nvmlShutdown)

    @staticmethod
    def _quiet(fn: Callable[..., object], *args: object) -> object | None:
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - best effort during open/close
            return None

    def _cuda_version(self) -> str:
        fn = getattr(self.N, "nvmlSystemGetCudaDriverVersion_v2", None) or getattr(
            self.N, "nvmlSystemGetCudaDriverVersion", None
        )
        raw = self._quiet(fn) if fn else None
        return f"{raw // 1000}.{raw % 1000 // 10}" if isinstance(raw, int) and raw > 0 else ""

    def discover(self, index: int) -> Device:
        """Handle, identity and one-time probes of GPU ``index``. A lost GPU comes back marked lost."""
        try:
            handle = self.N.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(self.N.nvmlDeviceGetUUID(handle))
        except self.N.NVMLError as exc:
            name = error_name(exc, self.N)
            self.errors.inc(SOURCE, name, f"GPU {index} discovery")
            if name in SESSION_ERRORS and not self.session_answers():
                raise SessionError(name) from exc
            return Device(index=index, handle=None, identity=GpuIdentity(index=index, uuid=""), lost=True)
        dev = Device(
            index=index,
            handle=handle,
            identity=GpuIdentity(index=index, uuid=uuid),
            samples=SampleReader(self.N),
        )
        try:
            self._probe(dev)
        except (GpuLost, GpuReadFailed):  # it failed half-way: down, and re-probed like a lost GPU
            dev.lost = True
        return dev

    def _probe(self, dev: Device) -> None:
        handle = dev.handle
        dev.identity = self._identity(dev, dev.identity.uuid)
        dev.default_limit_w = self._scaled(
            dev, "default_limit", "nvmlDeviceGetPowerManagementDefaultLimit", 1e-3
        )
        dev.slowdown_c = self._num(dev, "slowdown", "nvmlDeviceGetTemperatureThreshold", handle, 1)
        dev.sm_max_hz = self._scaled(dev, "max_sm", "nvmlDeviceGetMaxClockInfo", 1e6, 1)
        dev.mem_max_hz = self._scaled(dev, "max_mem", "nvmlDeviceGetMaxClockInfo", 1e6, 2)
        dev.link_count = self._link_count(dev)
        dev.fields, dev.slow_fields = self._field_requests(dev.link_count)
        if self.link_traffic and dev.link_count:
            self._traffic_per_link(dev)
        self._gpm_setup(dev)

    def reprobe(self, dev: Device) -> Device:
        """Try a lost GPU again; a new Device if it answers with the same identity, else the old one."""
        fresh = self.discover(dev.index)
        if fresh.lost or (dev.identity.uuid and fresh.identity.uuid != dev.identity.uuid):
            return dev
        return fresh

    def _identity(self, dev: Device, uuid: str) -> GpuIdentity:
        def text(key: str, fn: str) -> str:
            value = self._call(dev, key, fn, dev.handle)
            return _text(value) if value is not None else ""

        pci = self._call(dev, "pci", "nvmlDeviceGetPciInfo_v3", dev.handle)
        cc = self._call(dev, "cc", "nvmlDeviceGetCudaComputeCapability", dev.handle)
        return GpuIdentity(
            index=dev.index,
            uuid=uuid,
            name=text("name", "nvmlDeviceGetName"),
            pci_bus_id=_text(pci.busId) if pci is not None else "",
            serial=text("serial", "nvmlDeviceGetSerial"),
            vbios_version=text("vbios", "nvmlDeviceGetVbiosVersion"),
            compute_capability=f"{cc[0]}.{cc[1]}" if cc else "",
        )

    # ---- one call, with the error policy -----------------------------------------------------

    def session_answers(self) -> bool:
        """Do session-level calls still work? Tells a GPU's own failure from the session's."""
        try:
            self.N.nvmlDeviceGetCount()
            self.N.nvmlSystemGetDriverVersion()
        except Exception:  # noqa: BLE001 - any failure here means the session is not usable
            return False
        return True

    def _off(self, dev: Device, key: object) -> bool:
        """Is ``key`` left out now: confirmed unsupported, or refused and waiting for its retry?"""
        if key in dev.unsupported:
            return True
        retry = dev.retry.get(key)
        return retry is not None and self.clock() < retry[0]

    def _back_off(self, dev: Device, key: object) -> None:
        """Leave ``key`` out for a while; each refusal in a row doubles the wait, up to the maximum."""
        previous = dev.retry.get(key)
        delay = (
            SIGNAL_RETRY_INITIAL.value if previous is None else min(previous[1] * 2, SIGNAL_RETRY_MAX.value)
        )
        dev.retry[key] = (self.clock() + delay, delay)

    def _call(
        self,
        dev: Device,
        key: str,
        fn_name: str,
        *args: object,
        via: Callable[[Callable[..., object]], Callable[..., object]] | None = None,
    ) -> object | None:
        """Run one NVML call for ``dev`` under the module's error policy; None when it gave nothing.
        ``via`` turns the bindings' function into the one to run (a field batch's ready array)."""
        if self._off(dev, key):
            return None
        fn = getattr(self.N, fn_name, None)
        if fn is not None and via is not None:
            fn = via(fn)
        if fn is None:  # bindings too old to know the call
            dev.unsupported.add(key)
            self.errors.inc(SOURCE, "FunctionNotFound", fn_name, level=logging.INFO)
            return None
        try:
            value = fn(*args)
        except Exception as exc:  # noqa: BLE001 - every driver error is data, never a crash
            self._handle(dev, key, fn_name, exc)
            return None
        dev.retry.pop(key, None)
        return value

    def _handle(self, dev: Device, key: str, fn_name: str, exc: BaseException) -> None:
        name = error_name(exc, self.N)
        level = logging.INFO if name in LEAVE_OUT_ERRORS else logging.WARNING  # probing is routine
        self.errors.inc(SOURCE, name, f"{fn_name} on GPU {dev.index}", level=level)
        dev.failed.add(key)
        if name == "LibraryMismatch":
            if fn_name in self._mismatched:  # it survived a re-initialisation: the call is just missing
                dev.unsupported.add(key)
                return
            self._mismatched.add(fn_name)
            raise SessionError(name) from exc
        if name in SESSION_ERRORS:
            if self.session_answers():  # only this GPU's handle says so: this GPU's failure
                raise GpuReadFailed(f"{name} on GPU {dev.index} while the session answers") from exc
            raise SessionError(name) from exc
        if name in LOST_ERRORS:
            raise GpuLost(name) from exc
        if name in CONFIRMED_UNSUPPORTED:
            dev.unsupported.add(key)
        elif name in LEAVE_OUT_ERRORS or not isinstance(exc, self.N.NVMLError):
            self._back_off(dev, key)

    def _num(self, dev: Device, key: str, fn_name: str, *args: object) -> float | None:
        value = self._call(dev, key, fn_name, *args)
        return float(value) if value is not None else None

    def _scaled(self, dev: Device, key: str, fn_name: str, scale: float, *extra: object) -> float | None:
        value = self._call(dev, key, fn_name, dev.handle, *extra)
        return float(value) * scale if value is not None else None

    def _first(self, dev: Device, options: list[tuple[str, str, tuple[object, ...]]]) -> object | None:
        """The first supported call of a preference list (newest API first)."""
        for key, fn_name, args in options:
            if self._off(dev, key):
                continue
            value = self._call(dev, key, fn_name, *args)
            if value is not None or not self._off(dev, key):
                return value
        return None

    # ---- collection --------------------------------------------------------------------------

    def _sample_buffers(self, dev: Device, now: float) -> tuple[Samples, Samples, Samples]:
        """Utilization, memory utilization and power: the driver's samples since the last read (an
        instantaneous reading where a buffer is not offered); each one's latest value kept while current."""
        util = self._samples(dev, SAMPLE_GPU_UTIL, "samples_util", 0.01)
        mem_util = self._samples(dev, SAMPLE_MEM_UTIL, "samples_mem_util", 0.01)
        if util is None or mem_util is None:  # no sample buffer: one instantaneous reading instead
            rates = self._call(dev, "utilization", "nvmlDeviceGetUtilizationRates", dev.handle)
            if rates is not None:
                util = util if util is not None else (Sample(now, rates.gpu / 100.0),)
                mem_util = mem_util if mem_util is not None else (Sample(now, rates.memory / 100.0),)
        power = self._samples(dev, SAMPLE_POWER, "samples_power", 1e-3)
        if power is None:
            watts = self._scaled(dev, "power", "nvmlDeviceGetPowerUsage", 1e-3)
            power = (Sample(now, watts),) if watts is not None else None
        for key, samples in (("util", util), ("mem_util", mem_util), ("power", power)):
            if samples:
                dev.last[key], dev.last_t[key] = samples[-1].value, now
            elif samples is None or now - dev.last_t.get(key, now) > SAMPLE_CARRY.value:
                dev.last.pop(key, None)  # failed, not offered, or a buffer silent too long: not current
        return util, mem_util, power

    def collect(self, dev: Device) -> GpuReading:
        """One collection of one GPU. Raises GpuLost or SessionError; everything else is counted."""
        if dev.lost or dev.handle is None:
            raise GpuLost("GpuIsLost")
        h = dev.handle
        now = self.clock()
        dev.failed = set()
        util, mem_util, power = self._sample_buffers(dev, now)

        mem = self._first(
            dev,
            [
                ("memory_v2", "nvmlDeviceGetMemoryInfo", (h, getattr(self.N, "nvmlMemory_v2", 0x02000028))),
                ("memory", "nvmlDeviceGetMemoryInfo", (h,)),
            ],
        )
        if util is None and power is None and mem is None and self._core_failing(dev):
            raise GpuReadFailed(f"GPU {dev.index}: no core read answered ({', '.join(sorted(dev.failed))})")
        temp = self._first(
            dev,
            [
                ("temp_v", "nvmlDeviceGetTemperatureV", (h, 0)),
                ("temp", "nvmlDeviceGetTemperature", (h, 0)),
            ],
        )
        reasons = self._first(
            dev,
            [
                ("reasons", "nvmlDeviceGetCurrentClocksEventReasons", (h,)),
                ("reasons_old", "nvmlDeviceGetCurrentClocksThrottleReasons", (h,)),
            ],
        )
        energy = self._call(dev, "energy", "nvmlDeviceGetTotalEnergyConsumption", h)
        values = self._field_values(dev)
        if dev.link_count and not dev.traffic_per_link and not set(dev.fields) >= _ALL_LINKS:
            log.info("GPU %d: the driver does not sum NVLink traffic; each link is read", dev.index)
            self._traffic_per_link(dev)  # the all-links scope was refused for good
        nvlink_tx, nvlink_rx = self._link_traffic(dev, values) if dev.link_count else (None, None)
        gpm = self._gpm(dev)
        if now >= dev.next_slow:
            self._slow(dev)
            dev.next_slow = now + self.slow_interval_s
            # the memory in use when the processes were listed: an empty list is judged against it, not
            # against a later reading (a process that starts between two lists holds memory unlisted)
            dev.slow["processes_mem"] = int(mem.used) if mem is not None else None
        slow = dev.slow
        return GpuReading(
            t=self.clock(),
            identity=dev.identity,
            util_samples=util or (),
            mem_util_samples=mem_util or (),
            power_samples=power or (),
            util=dev.last.get("util"),
            mem_util=dev.last.get("mem_util"),
            power_w=dev.last.get("power"),
            power_limit_w=slow.get("limit"),  # type: ignore[arg-type]
            power_default_limit_w=dev.default_limit_w,
            energy_j=energy / 1000.0 if energy is not None else None,
            mem_used_bytes=int(mem.used) if mem is not None else None,
            mem_total_bytes=int(mem.total) if mem is not None else None,
            temp_c=float(temp) if temp is not None else None,
            temp_mem_c=values.get((FI_MEMORY_TEMP, 0)),
            temp_slowdown_c=dev.slowdown_c,
            clock_sm_hz=self._scaled(dev, "clock_sm", "nvmlDeviceGetClockInfo", 1e6, 1),
            clock_mem_hz=slow.get("clock_mem"),  # type: ignore[arg-type]
            clock_sm_max_hz=dev.sm_max_hz,
            clock_mem_max_hz=dev.mem_max_hz,
            clock_reasons=int(reasons) if reasons is not None else None,
            clock_reason_seconds={
                reason: values[(fid, 0)] / 1e9 for fid, reason in FI_THROTTLE_NS.items() if (fid, 0) in values
            },
            sm_active=gpm.get("sm_active"),
            sm_occupancy=gpm.get("sm_occupancy"),
            tensor_active=gpm.get("tensor_active"),
            dram_active=gpm.get("dram_active"),
            nvlinks=self._nvlinks(dev, values) if dev.traffic_per_link else dev.slow.get("links", ()),  # type: ignore[arg-type]
            nvlink_tx_bytes=nvlink_tx,
            nvlink_rx_bytes=nvlink_rx,
            pcie_tx_bytes=_as_int(values.get((FI_PCIE_TX_BYTES, 0))),
            pcie_rx_bytes=_as_int(values.get((FI_PCIE_RX_BYTES, 0))),
            fabric_state=slow.get("fabric_state"),  # type: ignore[arg-type]
            fabric_status=slow.get("fabric_status"),  # type: ignore[arg-type]
            process_count=slow.get("process_count"),  # type: ignore[arg-type]
            processes=slow.get("processes"),  # type: ignore[arg-type]
            processes_mem_bytes=slow.get("processes_mem"),  # type: ignore[arg-type]
            mig_uuids=slow.get("mig_uuids", ()),  # type: ignore[arg-type]
            migs=tuple(self._mig_reading(dev, m) for m in dev.migs),
            extra=self._catalog_reads(dev, slow=False) | slow.get("extra", {}),  # type: ignore[operator]
        )

    def _catalog_reads(self, dev: Device, slow: bool) -> dict[str, float]:
        """The catalog's generic signals (exporter/policy/catalog.py ``read``) of one cadence, by name,
        under the module's error policy like every other call."""
        out = {}
        for signal in catalog.READS:
            read = signal.read
            if read is not None and read.slow == slow:
                value = self._scaled(dev, f"signal.{signal.name}", read.call, read.scale, *read.args)
                if value is not None:
                    out[signal.name] = value
        return out

    @staticmethod
    def _core_failing(dev: Device) -> bool:
        """A core read failed in this collection, or is waiting for its retry after a refusal."""
        return any(key in dev.failed or key in dev.retry for key in CORE_KEYS)

    def _samples(self, dev: Device, kind: int, key: str, scale: float) -> tuple[Sample, ...] | None:
        """New driver samples since the last call; () when there are none, None when unsupported."""
        if self._off(dev, key) or dev.samples is None:
            return None
        last = dev.cursors.get(kind, 0)
        try:
            raw = dev.samples.read(dev.handle, kind, last)
        except self.N.NVMLError_NotFound:
            dev.retry.pop(key, None)
            return ()  # no sample newer than the cursor: not an error
        except Exception as exc:  # noqa: BLE001
            self._handle(dev, key, "nvmlDeviceGetSamples", exc)
            return None  # nothing read: the instantaneous fallback may still answer
        dev.retry.pop(key, None)
        # the driver's buffer is circular: its order is not time order
        fresh = sorted([entry for entry in raw if entry[0] > last], key=_STAMP)
        if not fresh:
            return ()
        dev.cursors[kind] = fresh[-1][0]
        return tuple([Sample(stamp / 1e6, value * scale) for stamp, value in fresh])

    # ---- field values (one batched call per collection) ---------------------------------------

    @staticmethod
    def _field_requests(links: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(every collection, slow cadence): traffic counters move every second, link state rarely. The
        NVLink traffic is the driver's sum over the links (two fields, not two a link; each link's own
        counters are read only for ``--detail nvlink``, see ``_traffic_per_link``)."""
        fast = [(FI_PCIE_TX_BYTES, 0), (FI_PCIE_RX_BYTES, 0), (FI_MEMORY_TEMP, 0)]
        fast += [(fid, 0) for fid in FI_THROTTLE_NS]
        if links:
            fast += [(FI_NVLINK_TX_KIB, FI_SCOPE_ALL_LINKS), (FI_NVLINK_RX_KIB, FI_SCOPE_ALL_LINKS)]
        slow = []
        for link in range(links):
            slow += [(FI_NVLINK_STATE, link), *((fid, link) for fid in FI_NVLINK_ERR)]
        return fast, slow

    @staticmethod
    def _traffic_per_link(dev: Device) -> None:
        """Each link's traffic every collection, summed here: for the per-link series, or where the
        driver cannot sum the links (it refused the all-links scope)."""
        dev.traffic_per_link = True
        own = [key for _, *keys in _link_keys(dev.link_count) for key in keys]  # each link's TX, RX
        dev.fields = [r for r in dev.fields if r[1] != FI_SCOPE_ALL_LINKS] + own

    @staticmethod
    def _link_traffic(dev: Device, values: dict[tuple[int, int], float]) -> tuple[int | None, int | None]:
        """Bytes sent and received over every link: the driver's sums, or each link's counter added up
        (None unless every link gave its part: a partial sum would look like a counter reset)."""
        out = []
        for fid in (FI_NVLINK_TX_KIB, FI_NVLINK_RX_KIB):
            if dev.traffic_per_link:
                kib = counter_sum(values.get((fid, link)) for link in range(dev.link_count))
            else:
                kib = values.get((fid, FI_SCOPE_ALL_LINKS))
            out.append(int(kib) * 1024 if kib is not None else None)
        return out[0], out[1]

    def _field_values(self, dev: Device, slow: bool = False) -> dict[tuple[int, int], float]:
        """One batched nvmlDeviceGetFieldValues; fields the driver does not support are dropped."""
        attr, key = ("slow_fields", "slow_fields") if slow else ("fields", "fields")
        wanted: list[tuple[int, int]] = getattr(dev, attr)
        if dev.retry or not dev.unsupported.isdisjoint(wanted):
            requests = [r for r in wanted if not self._off(dev, r)]
        else:  # nothing is left out: the list as it is (the usual case, checked without a call per field)
            requests = wanted
        if not requests or self._off(dev, key):
            return {}
        batch = dev.batches.get(attr)
        if batch is None or batch.requests != requests:
            batch = dev.batches[attr] = FieldBatch(requests, self.N)
        values = self._call(dev, key, "nvmlDeviceGetFieldValues", dev.handle, via=batch.reader)
        if values is None:
            return {}
        out: dict[tuple[int, int], float] = {}
        dropped: list[tuple[int, int]] = []
        retry = dev.retry
        for request, (kind, ret, bits) in zip(requests, batch.rows(values), strict=False):
            if ret == 0:
                out[request] = _from_bits(kind, bits)
                if retry:
                    retry.pop(request, None)
                continue
            name = error_name(self.N.NVMLError(ret), self.N)
            if name in LOST_ERRORS:
                self.errors.inc(SOURCE, name, f"field values on GPU {dev.index}")
                raise GpuLost(name)
            confirmed = name in CONFIRMED_UNSUPPORTED
            if confirmed:  # probing: boards lack some fields (an H100 has no sync-boost counter, field 76)
                dropped.append(request)
            elif name in LEAVE_OUT_ERRORS:  # refused for now: asked again after a backoff
                self._back_off(dev, request)
            self.errors.inc(
                SOURCE,
                name,
                f"field {request[0]} scope {request[1]} on GPU {dev.index}"
                + (": not offered by this GPU or driver, no longer asked for" if confirmed else ""),
                level=logging.DEBUG if name in LEAVE_OUT_ERRORS else logging.WARNING,
            )
        if dropped:
            setattr(dev, attr, [r for r in getattr(dev, attr) if r not in dropped])
        return out

    def _link_count(self, dev: Device) -> int:
        values = self._call(dev, "link_count", "nvmlDeviceGetFieldValues", dev.handle, [FI_NVLINK_LINK_COUNT])
        if values is not None and values[0].nvmlReturn == 0:
            return int(_from_bits(values[0].valueType, values[0].value.ullVal))
        # older drivers: probe link states until the driver says there is no such link
        count = 0
        for link in range(getattr(self.N, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                self.N.nvmlDeviceGetNvLinkState(dev.handle, link)
            except Exception:  # noqa: BLE001 - the first failure ends the probe
                break
            count += 1
        return count

    def _nvlinks(self, dev: Device, values: dict[tuple[int, int], float]) -> tuple[NvLinkReading, ...]:
        """Per-link traffic from ``values``, state and errors from the last slow read (their dicts are
        made new by each slow read and never changed after, so the readings share them). Made by each slow
        read from its own values, and every collection where each link's traffic is read then."""
        links = []
        states: dict[int, bool] = dev.slow.get("link_states", {})  # type: ignore[assignment]
        errors: dict[int, dict[str, int]] = dev.slow.get("link_errors", {})  # type: ignore[assignment]
        get = values.get
        for link, tx_key, rx_key in _link_keys(dev.link_count):  # 18 links a GPU a second: positionally
            up, tx, rx, errs = states.get(link), get(tx_key), get(rx_key), errors.get(link)
            if up is not None or tx is not None or errs:
                links.append(
                    NvLinkReading(
                        link,
                        up,
                        int(tx) * 1024 if tx is not None else None,
                        int(rx) * 1024 if rx is not None else None,
                        errs if errs is not None else {},
                    )
                )
        return tuple(links)

    # ---- GPM (Hopper and later) ----------------------------------------------------------------

    def _gpm_setup(self, dev: Device) -> None:
        support = self._call(dev, "gpm", "nvmlGpmQueryDeviceSupport", dev.handle)
        if support is None:  # not offered (left out), or refused for now (retried by _gpm)
            return
        if not support.isSupportedDevice:
            dev.unsupported.add("gpm")
            return
        first = self._call(dev, "gpm", "nvmlGpmSampleAlloc")
        second = self._call(dev, "gpm", "nvmlGpmSampleAlloc") if first is not None else None
        if first is None or second is None:
            if first is not None:
                self._quiet(self.N.nvmlGpmSampleFree, first)
            return
        dev.gpm_samples = [first, second]
        dev.gpm_buffer = _plain(self.N.c_nvmlGpmMetricsGet_t)()  # the same layout, read without hooks
        if self._call(dev, "gpm", "nvmlGpmSampleGet", dev.handle, first) is None and "gpm" in dev.unsupported:
            dev.gpm_samples = []

    def _gpm(self, dev: Device) -> dict[str, float]:
        """Metrics between the previous GPM sample and a new one (ratios 0-1)."""
        if "gpm" in dev.unsupported or not dev.gpm_metrics:
            return {}
        if len(dev.gpm_samples) != 2:  # the setup was refused earlier: try again once its backoff is over
            if not self._off(dev, "gpm"):
                self._gpm_setup(dev)
            return {}
        previous, current = dev.gpm_samples
        if self._call(dev, "gpm", "nvmlGpmSampleGet", dev.handle, current) is None:
            return {}
        mg = dev.gpm_buffer
        mg.version = self.N.NVML_GPM_METRICS_GET_VERSION  # type: ignore[union-attr]
        mg.numMetrics = len(dev.gpm_metrics)  # type: ignore[union-attr]
        mg.sample1, mg.sample2 = previous, current  # type: ignore[union-attr]
        for i, metric in enumerate(dev.gpm_metrics):
            mg.metrics[i].metricId = metric  # type: ignore[union-attr]
        dev.gpm_samples = [current, previous]  # the new sample is the next call's baseline
        if self._call(dev, "gpm", "nvmlGpmMetricsGet", mg) is None:
            return {}
        out, keep = {}, []
        for i, metric in enumerate(dev.gpm_metrics):
            entry = mg.metrics[i]  # type: ignore[union-attr]
            if entry.nvmlReturn == 0:
                out[GPM_METRICS[metric]] = max(0.0, min(entry.value / 100.0, 1.0))
                keep.append(metric)
            elif entry.nvmlReturn == self.N.NVML_ERROR_NOT_SUPPORTED:
                self.errors.inc(
                    SOURCE, "NotSupported", f"GPM metric {metric} on GPU {dev.index}", level=logging.INFO
                )
            else:  # e.g. two samples too close together: try again next time
                keep.append(metric)
        dev.gpm_metrics = keep
        return out

    # ---- slow cadence: things that change rarely -----------------------------------------------

    def _slow(self, dev: Device) -> None:
        h = dev.handle
        # settings rather than measurements, read with the slow state: the enforced power limit moves when
        # someone sets it, the memory clock with the board's performance state (fixed on HBM boards)
        dev.slow["limit"] = self._scaled(dev, "limit", "nvmlDeviceGetEnforcedPowerLimit", 1e-3)
        dev.slow["clock_mem"] = self._scaled(dev, "clock_mem", "nvmlDeviceGetClockInfo", 1e6, 2)
        limit = self._scaled(dev, "default_limit", "nvmlDeviceGetPowerManagementDefaultLimit", 1e-3)
        if limit is not None:
            dev.default_limit_w = limit
        if dev.slowdown_c is None:  # discovery-time reads that failed then: asked again
            dev.slowdown_c = self._num(dev, "slowdown", "nvmlDeviceGetTemperatureThreshold", h, 1)
        if dev.sm_max_hz is None:
            dev.sm_max_hz = self._scaled(dev, "max_sm", "nvmlDeviceGetMaxClockInfo", 1e6, 1)
        if dev.mem_max_hz is None:
            dev.mem_max_hz = self._scaled(dev, "max_mem", "nvmlDeviceGetMaxClockInfo", 1e6, 2)
        info_cls = getattr(self.N, "c_nvmlGpuFabricInfoV_t", None)
        if info_cls is not None and "fabric" not in dev.unsupported:
            info = info_cls()
            if self._call(dev, "fabric", "nvmlDeviceGetGpuFabricInfoV", h, ctypes.byref(info)) is not None:
                state = FABRIC_STATES.get(int(info.state))
                if state is None:  # NOT_SUPPORTED: not an NVSwitch system
                    dev.unsupported.add("fabric")
                dev.slow["fabric_state"] = state
                dev.slow["fabric_status"] = (
                    "success" if info.status == 0 else error_name(self.N.NVMLError(info.status), self.N)
                )
        processes = self._processes(dev)
        dev.slow["processes"] = processes
        dev.slow["process_count"] = len(processes) if processes is not None else None
        dev.slow["mig_uuids"] = self._mig_uuids(dev)
        dev.slow["extra"] = self._catalog_reads(dev, slow=True)
        if dev.link_count:
            self._slow_links(dev)

    def _processes(self, dev: Device) -> tuple[GpuProcess, ...] | None:
        """The compute and MPS client processes with their memory, and each one's mean utilization over
        the driver's per-process samples since the last read (a time-stamp cursor, as for the device's
        sample buffers: no sample is counted twice or missed between slow reads). None when the compute
        list could not be read: "no process" is never guessed."""
        h = dev.handle
        compute = self._call(dev, "processes", "nvmlDeviceGetComputeRunningProcesses", h)
        if compute is None:
            return None
        mps = self._call(dev, "processes_mps", "nvmlDeviceGetMPSComputeRunningProcesses", h) or []
        util = self._process_util(dev)
        out: dict[int, GpuProcess] = {}
        for kind, procs in (("compute", compute), ("mps", mps)):
            for p in procs:  # type: ignore[attr-defined]
                used = getattr(p, "usedGpuMemory", None)
                pid = int(p.pid)
                sm, mem = util.get(pid, (None, None))
                seen = out.get(pid)
                if seen is not None:  # listed twice (both lists): one process, its larger memory figure
                    if used is not None and (seen.used_bytes is None or used > seen.used_bytes):
                        out[pid] = GpuProcess(pid, int(used), seen.kind, sm, mem)
                    continue
                out[pid] = GpuProcess(pid, int(used) if used is not None else None, kind, sm, mem)
        return tuple(out.values())

    def _process_util(self, dev: Device) -> dict[int, tuple[float, float]]:
        """pid -> (SM, memory) utilization, 0-1, averaged over its samples newer than the cursor."""
        if self._off(dev, "process_util"):
            return {}
        try:
            samples = self.N.nvmlDeviceGetProcessUtilization(dev.handle, dev.process_cursor)
        except self.N.NVMLError_NotFound:
            return {}  # no sample newer than the cursor (no process ran a kernel since): not an error
        except Exception as exc:  # noqa: BLE001
            self._handle(dev, "process_util", "nvmlDeviceGetProcessUtilization", exc)
            return {}
        dev.retry.pop("process_util", None)
        sums: dict[int, list[float]] = {}
        for s in samples:
            if s.timeStamp <= dev.process_cursor:
                continue
            acc = sums.setdefault(int(s.pid), [0.0, 0.0, 0.0])
            acc[0] += s.smUtil
            acc[1] += s.memUtil
            acc[2] += 1
        dev.process_cursor = max([dev.process_cursor, *(int(s.timeStamp) for s in samples)])
        return {pid: (sm / n / 100.0, mem / n / 100.0) for pid, (sm, mem, n) in sums.items()}

    def _slow_links(self, dev: Device) -> None:
        """NVLink state and error counters: field values where the driver has them, else per-link calls."""
        h = dev.handle
        values = self._field_values(dev, slow=True)
        states = {
            link: int(v) in NVLINK_STATE_UP for (fid, link), v in values.items() if fid == FI_NVLINK_STATE
        }
        errors: dict[int, dict[str, int]] = {}
        for (fid, link), v in values.items():
            if fid in FI_NVLINK_ERR:
                errors.setdefault(link, {})[FI_NVLINK_ERR[fid]] = int(v)
        requested = {fid for fid, _ in dev.slow_fields}
        if FI_NVLINK_STATE not in requested:  # older drivers: one call per link
            for link in range(dev.link_count):
                state = self._call(dev, "nvlink_state", "nvmlDeviceGetNvLinkState", h, link)
                if state is not None:
                    states[link] = bool(state)
        if not requested & set(FI_NVLINK_ERR):
            for link in range(dev.link_count):
                for counter, kind in ERROR_COUNTERS.items():
                    value = self._call(
                        dev, f"nvlink_err_{counter}", "nvmlDeviceGetNvLinkErrorCounter", h, link, counter
                    )
                    if value is not None:
                        errors.setdefault(link, {})[kind] = int(value)
        dev.slow["link_states"], dev.slow["link_errors"] = states, errors
        dev.slow["links"] = self._nvlinks(dev, values)  # the readings until the next slow read share them

    def _mig_uuids(self, dev: Device) -> tuple[str, ...]:
        """The MIG devices of a GPU in MIG mode: pods get MIG slices, and the kubelet names them by UUID.
        Their handles and identity are kept (``dev.migs``) for the per-instance reads of each collection."""
        mode = self._call(dev, "mig", "nvmlDeviceGetMigMode", dev.handle)
        if not mode or mode[0] != 1:
            self._drop_migs(dev, ())
            return ()
        known = {m.uuid: m for m in dev.migs}
        slots = self._call(dev, "mig", "nvmlDeviceGetMaxMigDeviceCount", dev.handle) or 0
        found: list[MigDevice] = []
        for i in range(slots):
            try:
                handle = self.N.nvmlDeviceGetMigDeviceHandleByIndex(dev.handle, i)
                uuid = _text(self.N.nvmlDeviceGetUUID(handle))
            except self.N.NVMLError_NotFound:
                continue  # an empty slot
            except Exception as exc:  # noqa: BLE001
                self._handle(dev, "mig", "nvmlDeviceGetMigDeviceHandleByIndex", exc)
                break
            found.append(known.get(uuid) or self._mig_device(handle, uuid, slots))
        self._drop_migs(dev, found)
        return tuple(m.uuid for m in found)

    def _mig_device(self, handle: object, uuid: str, gpu_slices: int) -> MigDevice:
        """A new MIG device's identity: its instance ids, its profile (the driver's name ends with it) and
        its compute slices."""
        gi = self._quiet(self.N.nvmlDeviceGetGpuInstanceId, handle)
        ci = self._quiet(self.N.nvmlDeviceGetComputeInstanceId, handle)
        attrs = self._quiet(self.N.nvmlDeviceGetAttributes_v2, handle)
        name = _text(self._quiet(self.N.nvmlDeviceGetName, handle) or "")
        return MigDevice(
            handle,
            uuid,
            int(gi) if gi is not None else -1,
            int(ci) if ci is not None else -1,
            name.rpartition(" MIG ")[2] if " MIG " in name else "",
            int(attrs.computeInstanceSliceCount) if attrs is not None else 0,  # type: ignore[attr-defined]
            gpu_slices,
        )

    def _drop_migs(self, dev: Device, keep: list[MigDevice]) -> None:
        """MIG devices gone (the GPU repartitioned, MIG mode off): their GPM samples are freed."""
        for m in dev.migs:
            if m not in keep:
                for sample in m.gpm_samples:
                    self._quiet(self.N.nvmlGpmSampleFree, sample)
        dev.migs = list(keep)

    def _mig_reading(self, dev: Device, m: MigDevice) -> MigReading:
        """One MIG device now: its memory, and its SM activity since the last collection (GPM per GPU
        instance, nvmlGpmMigSampleGet, where the GPU has GPM)."""
        mem = self._call(dev, "mig_memory", "nvmlDeviceGetMemoryInfo", m.handle)
        return MigReading(
            m.uuid,
            m.gpu_instance,
            m.compute_instance,
            m.profile,
            m.slices,
            m.gpu_slices,
            int(mem.used) if mem is not None else None,  # type: ignore[attr-defined]
            int(mem.total) if mem is not None else None,  # type: ignore[attr-defined]
            self._mig_sm(dev, m),
        )

    def _mig_sm(self, dev: Device, m: MigDevice) -> float | None:
        if "gpm" in dev.unsupported or m.gpu_instance < 0 or self._off(dev, "gpm_mig"):
            return None
        if not m.gpm_samples:  # first read: two samples, the first one the baseline
            first = self._call(dev, "gpm_mig", "nvmlGpmSampleAlloc")
            second = self._call(dev, "gpm_mig", "nvmlGpmSampleAlloc") if first is not None else None
            if second is None:
                if first is not None:
                    self._quiet(self.N.nvmlGpmSampleFree, first)
                return None
            m.gpm_samples = [first, second]
            m.gpm_buffer = _plain(self.N.c_nvmlGpmMetricsGet_t)()
            self._call(dev, "gpm_mig", "nvmlGpmMigSampleGet", dev.handle, m.gpu_instance, first)
            return None
        previous, current = m.gpm_samples
        if self._call(dev, "gpm_mig", "nvmlGpmMigSampleGet", dev.handle, m.gpu_instance, current) is None:
            return None
        mg = m.gpm_buffer
        mg.version = self.N.NVML_GPM_METRICS_GET_VERSION  # type: ignore[union-attr]
        mg.numMetrics = 1  # type: ignore[union-attr]
        mg.sample1, mg.sample2 = previous, current  # type: ignore[union-attr]
        mg.metrics[0].metricId = self.N.NVML_GPM_METRIC_SM_UTIL  # type: ignore[union-attr]
        m.gpm_samples = [current, previous]
        if self._call(dev, "gpm_mig", "nvmlGpmMetricsGet", mg) is None:
            return None
        entry = mg.metrics[0]  # type: ignore[union-attr]
        return max(0.0, min(entry.value / 100.0, 1.0)) if entry.nvmlReturn == 0 else None

    # ---- node level: P2P between every pair ----------------------------------------------------

    def collect_p2p(self, devices: list[Device]) -> dict[tuple[int, int, str], bool]:
        """P2P status of every ordered GPU pair and capability (True = OK)."""
        out: dict[tuple[int, int, str], bool] = {}
        usable = [d for d in devices if not d.lost and d.handle is not None]
        for a in usable:
            try:
                self._p2p_from(a, usable, out)
            except (GpuLost, GpuReadFailed):
                continue  # that GPU's collection says so; the other pairs still count
        return out

    def _p2p_from(self, a: Device, usable: list[Device], out: dict[tuple[int, int, str], bool]) -> None:
        for b in usable:
            if a is b:
                continue
            for cap, index in P2P_CAPS.items():
                status = self._call(a, f"p2p_{cap}", "nvmlDeviceGetP2PStatus", a.handle, b.handle, index)
                if status is not None:
                    out[(a.index, b.index, cap)] = int(status) == 0


def _as_int(value: float | None) -> int | None:
    return int(value) if value is not None else None


def _build(inputs: Inputs) -> NvmlSource | None:
    if inputs.nvml is None:
        return None
    return NvmlSource.configured(inputs.nvml, inputs.errors, inputs.settings, inputs.clock)


# the session (collect/nvml_session.py) runs one call per GPU every cycle, each bounded by the timeout
REGISTRATION = register(Registration[GpuReading](SOURCE, Schedule.PER_GPU, GpuReading, _build))
