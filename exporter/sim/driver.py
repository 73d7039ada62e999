"""A fake ``libnvidia-ml.so``: the C entry points NVML exports, written in Python over ``NodeModel``.

The real nvidia-ml-py module loads its shared library into ``pynvml.nvmlLib`` and calls entry points
with ctypes arguments (``byref`` pointers, string buffers, struct arrays), checking the returned
``nvmlReturn_t``. Installing ``FakeNvmlLibrary`` there instead keeps every line of the real bindings
in play: argument packing, versioned structs, the two-call size protocols, and the real
``NVMLError_*`` classes raised by ``_nvmlCheckReturn``. Only the driver is fake.

An entry point that the fake does not define raises AttributeError on lookup, which pynvml turns
into ``NVMLError_FunctionNotFound``, exactly as for an older driver.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pynvml as N

from exporter.policy.nvml_vocab import FI_THROTTLE_NS, THROTTLE_COUNTER_BITS
from exporter.sim import mig
from exporter.sim.conditions import PCIE_GEN, PCIE_WIDTH, NodeConditions, conditions_for
from exporter.sim.faults import FaultPlan
from exporter.sim.physics import NodeModel

_DEVICE_BASE = 0x7F0000001000
# an event wait advances the model itself this often: the exporter's own calls advance it every second,
# and a poll every 50 ms cost the simulator 0.2 s of CPU a minute and woke the exporter's process 20
# times a second (a driver's wait sleeps in the kernel until an event comes)
EVENT_WAIT_ADVANCE_S = 1.0
_ERROR_TYPES = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}
_FIELD_ERROR_TYPES = {
    N.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: "replay",
    N.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: "recovery",
    N.NVML_FI_DEV_NVLINK_ERROR_DL_CRC: "crc_flit",
}
# the reasons whose time the simulated board counts, by field id
_THROTTLE_FIELDS = {fid: reason for fid, reason in FI_THROTTLE_NS.items() if reason in THROTTLE_COUNTER_BITS}
_GPM_METRICS = {
    N.NVML_GPM_METRIC_SM_UTIL: 1,
    N.NVML_GPM_METRIC_SM_OCCUPANCY: 2,
    N.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 3,
    N.NVML_GPM_METRIC_DRAM_BW_UTIL: 4,
}
_SUPPORTED_EVENTS = N.nvmlEventTypeXidCriticalError | N.nvmlEventTypeDoubleBitEccError
# what a MIG device handle answers (its identity and its memory); everything else on it is the GPU's, and the
# driver refuses it there with NOT_SUPPORTED (utilization rates and samples among them)
_MIG_HANDLE_CALLS = frozenset(
    {
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetAttributes_v2",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceIsMigDeviceHandle",
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    }
)
_MIG_SLOTS = 7  # MIG devices a GPU may hold (A100, H100)
_SMS_PER_SLICE = 16  # an H100 instance's SMs per compute slice (132 on the whole board)


@dataclass
class Capabilities:
    """What the simulated driver and board support; turn things off to imitate older parts."""

    samples: bool = True  # nvmlDeviceGetSamples
    gpm: bool = True
    fabric: bool = True  # NVSwitch system with a fabric manager
    missing_functions: set[str] = field(default_factory=set)  # entry points the library lacks
    unsupported_fields: set[int] = field(default_factory=set)
    memory_temperature: bool = True
    nvlink_all_links: bool = True  # the throughput fields' all-links scope (older drivers: one link each)
    mig: dict[int, list[str]] = field(default_factory=dict)  # GPU index -> MIG device UUIDs (MIG mode on)


class _Entry:
    """One exported symbol. A class instance, so pynvml can set ``restype`` on it as on a C function."""

    def __init__(self, driver: FakeNvmlLibrary, name: str, impl: Callable[..., int]) -> None:
        self._driver, self._name, self._impl = driver, name, impl
        self.restype: object = ctypes.c_int
        self.argtypes: object = None

    def __call__(self, *args: object) -> object:
        # the whole entry point is the simulator's: argument decoding, fault lookup and call counting
        # as well as the model (on a real node this time is spent inside libnvidia-ml)
        started = time.thread_time()
        try:
            return self._driver._dispatch(self._name, self._impl, args)
        finally:
            self._driver.count_cpu(time.thread_time() - started)


def _obj(arg: object) -> object:
    """The ctypes object behind ``byref(x)``, or the argument itself."""
    return getattr(arg, "_obj", arg)


def _int(arg: object) -> int:
    """A C integer argument, as ctypes would convert it (anything else is a ctypes.ArgumentError)."""
    value = _obj(arg)
    if isinstance(value, ctypes._SimpleCData):
        return int(value.value)
    if isinstance(value, int):
        return value
    raise ctypes.ArgumentError(f"don't know how to convert parameter of type {type(value).__name__}")


def _addr(pointer: object) -> int:
    return ctypes.cast(_obj(pointer), ctypes.c_void_p).value or 0


def _set_pointer(ref: object, address: int) -> None:
    ctypes.c_void_p.from_buffer(_obj(ref)).value = address


def _put(ref: object, value: int | float) -> None:
    _obj(ref).value = value


def _put_str(buf: object, length: object, text: str) -> int:
    data = text.encode()
    if len(data) + 1 > _int(length):
        return N.NVML_ERROR_INSUFFICIENT_SIZE
    buf.value = data  # type: ignore[attr-defined]
    return N.NVML_SUCCESS


class FakeNvmlLibrary:
    """Stands in for the ctypes handle of libnvidia-ml; see the module docstring."""

    def __init__(
        self, model: NodeModel, faults: FaultPlan | None = None, capabilities: Capabilities | None = None
    ) -> None:
        self.model = model
        # what `doctor` names as the library it loaded (a real one is a path the loader mapped)
        self.described_as = f"the simulator's libnvidia-ml ({len(model.gpus)} simulated GPUs)"
        self.faults = faults or FaultPlan()
        self.caps = capabilities or Capabilities()
        self.calls: Counter[str] = Counter()
        self.cpu_s = 0.0
        self._lock = threading.Lock()
        self._init_count = 0
        # sample -> (GPU index, or (index, GPU instance id), its integrals)
        self._gpm_samples: dict[int, tuple[object, list[float]] | None] = {}
        self._event_sets: dict[int, dict[str, object]] = {}
        # opaque handles (GPM samples, event sets) unique to this library, like pointers into its heap
        self._ids = itertools.count(0x7E0000000010 + (id(self) & 0xFFFFFF) * 0x10000, 0x10)
        self._conditions: dict[int, NodeConditions] = {}  # id(scenario segment) -> its conditions
        for name in dir(self):
            if name.startswith("nvml") and name not in self.caps.missing_functions:
                setattr(self, name, _Entry(self, name, getattr(self, name)))

    def __getattribute__(self, name: str) -> object:
        # an entry point the simulated library lacks is absent, as from an older libnvidia-ml
        if name.startswith("nvml") and name in object.__getattribute__(self, "caps").missing_functions:
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    # ---- plumbing ------------------------------------------------------------------------------

    def _dispatch(self, name: str, impl: Callable[..., int], args: tuple[object, ...]) -> object:
        gpu = self._gpu_index(args[0]) if args and isinstance(_obj(args[0]), N.c_nvmlDevice_t) else None
        with self._lock:
            self.calls[name] += 1
        if gpu is not None and self._slot(args[0]) and name not in _MIG_HANDLE_CALLS:
            with self.model.lock:
                return (
                    N.NVML_ERROR_NOT_SUPPORTED
                    if self._mig_slot(args[0]) is not None
                    else N.NVML_ERROR_INVALID_ARGUMENT
                )
        fault = self.faults.take(name, gpu)
        if fault is not None:
            FaultPlan.apply(fault)
            if fault.error is not None:
                return fault.error
        if name not in ("nvmlInitWithFlags", "nvmlErrorString") and self._init_count == 0:
            return N.NVML_ERROR_UNINITIALIZED
        with self.model.lock:
            self.model.advance()
            return impl(*args)

    def count_cpu(self, seconds: float) -> None:
        with self._lock:
            self.cpu_s += seconds

    def conditions(self) -> NodeConditions:
        """The bring-up conditions of the scenario in force (a doctor scenario's one fault)."""
        scenario = self.model.scenario_at(self.model.t)
        found = self._conditions.get(id(scenario))
        if found is None:
            found = self._conditions[id(scenario)] = conditions_for(scenario, self.model.n_gpus)
        return found

    def _visible(self) -> list[int]:
        hidden = self.conditions().hidden
        return [i for i in range(self.model.n_gpus) if i not in hidden]

    def _link_up(self, g, link: int) -> bool:
        return g.link_up[link] and (g.index, link) not in self.conditions().links_down

    def _gpu_index(self, handle: object) -> int | None:
        index = (_addr(handle) - _DEVICE_BASE) // 0x40
        return index if 0 <= index < self.model.n_gpus else None

    @staticmethod
    def _slot(handle: object) -> int:
        """0 for a GPU's handle, 1 + i for its MIG device i (MIG handles sit just above their GPU's)."""
        return (_addr(handle) - _DEVICE_BASE) % 0x40

    def _migs(self, g) -> list[str]:
        """The MIG device UUIDs of a GPU in MIG mode: the capabilities' list, or its simulated instances."""
        listed = self.caps.mig.get(g.index)
        return listed if listed is not None else [m.uuid for m in g.mig]

    def _mig_slot(self, handle: object):  # -> (GpuState, i) | None
        index, slot = self._gpu_index(handle), self._slot(handle)
        if index is None or not slot:
            return None
        g = self.model.gpus[index]
        return (g, slot - 1) if slot - 1 < len(self._migs(g)) else None

    def _instance(self, handle: object):  # -> mig.MigState | int (an error code)
        """The simulated GPU instance behind a MIG device handle."""
        found = self._mig_slot(handle)
        if found is None:
            return N.NVML_ERROR_INVALID_ARGUMENT if self._slot(handle) else N.NVML_ERROR_NOT_SUPPORTED
        g, i = found
        return g.mig[i] if i < len(g.mig) else N.NVML_ERROR_NOT_SUPPORTED

    def _gpu(self, handle: object):  # -> GpuState | int (an error code)
        index = self._gpu_index(handle)
        if index is None:
            return N.NVML_ERROR_INVALID_ARGUMENT
        g = self.model.gpus[index]
        if g.unresponsive:
            return N.NVML_ERROR_TIMEOUT
        return N.NVML_ERROR_GPU_IS_LOST if g.lost else g

    # ---- session -----------------------------------------------------------------------------

    def nvmlInitWithFlags(self, flags: object) -> int:
        self._init_count += 1
        return N.NVML_SUCCESS

    def nvmlShutdown(self) -> int:
        self._init_count = max(0, self._init_count - 1)
        return N.NVML_SUCCESS

    def nvmlErrorString(self, code: object) -> bytes:
        return N.NVMLError._errcode_to_string.get(_int(code), "Unknown Error").encode()

    def nvmlSystemGetDriverVersion(self, buf: object, length: object) -> int:
        return _put_str(buf, length, self.model.board.driver_version)

    def nvmlSystemGetNVMLVersion(self, buf: object, length: object) -> int:
        return _put_str(buf, length, "12." + self.model.board.driver_version)

    def nvmlSystemGetCudaDriverVersion_v2(self, ref: object) -> int:
        _put(ref, self.model.board.cuda_version)
        return N.NVML_SUCCESS

    def nvmlDeviceGetCount_v2(self, ref: object) -> int:
        _put(ref, len(self._visible()))
        return N.NVML_SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index: object, ref: object) -> int:
        visible = self._visible()
        i = _int(index)
        if not 0 <= i < len(visible):
            return N.NVML_ERROR_INVALID_ARGUMENT
        i = visible[i]  # NVML numbers the GPUs it sees; the handle names the physical one
        if self.model.gpus[i].lost:
            return N.NVML_ERROR_GPU_IS_LOST
        _set_pointer(ref, _DEVICE_BASE + i * 0x40)
        return N.NVML_SUCCESS

    # ---- identity ----------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: object, buf: object, length: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        inst = self._instance(handle) if self._slot(handle) else None
        if inst is not None and not isinstance(inst, int):
            return _put_str(buf, length, f"{g.board.name} MIG {inst.spec.profile}")
        return _put_str(buf, length, g.board.name)

    def nvmlDeviceGetUUID(self, handle: object, buf: object, length: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        slot = self._slot(handle)
        if slot:
            return _put_str(buf, length, self._migs(g)[slot - 1])
        return _put_str(buf, length, g.uuid)

    def nvmlDeviceGetMigMode(self, handle: object, current: object, pending: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        mode = 1 if self._migs(g) else 0
        _put(current, mode)
        _put(pending, mode)
        return N.NVML_SUCCESS

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        _put(ref, _MIG_SLOTS if self._migs(g) else 0)
        return N.NVML_SUCCESS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: object, index: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        slices, i = self._migs(g), _int(index)
        if i >= _MIG_SLOTS:
            return N.NVML_ERROR_INVALID_ARGUMENT
        if i >= len(slices):
            return N.NVML_ERROR_NOT_FOUND
        _set_pointer(ref, _DEVICE_BASE + g.index * 0x40 + 1 + i)
        return N.NVML_SUCCESS

    def nvmlDeviceIsMigDeviceHandle(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        _put(ref, 1 if self._slot(handle) else 0)
        return N.NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceId(self, handle: object, ref: object) -> int:
        inst = self._instance(handle)
        if isinstance(inst, int):
            return inst
        _put(ref, inst.spec.gi)
        return N.NVML_SUCCESS

    def nvmlDeviceGetComputeInstanceId(self, handle: object, ref: object) -> int:
        inst = self._instance(handle)
        if isinstance(inst, int):
            return inst
        _put(ref, inst.spec.ci)
        return N.NVML_SUCCESS

    def nvmlDeviceGetAttributes_v2(self, handle: object, ref: object) -> int:
        """A MIG device's share of the GPU: its slices, SMs and memory."""
        inst = self._instance(handle)
        if isinstance(inst, int):
            return inst
        attrs, slices = _obj(ref), inst.spec.slices
        attrs.multiprocessorCount = slices * _SMS_PER_SLICE
        attrs.computeInstanceSliceCount = slices
        attrs.gpuInstanceSliceCount = inst.spec.instance_slices
        attrs.memorySizeMB = inst.spec.mem_total >> 20  # its GPU instance's, shared by its compute instances
        return N.NVML_SUCCESS

    def nvmlDeviceGetSerial(self, handle: object, buf: object, length: object) -> int:
        g = self._gpu(handle)
        return g if isinstance(g, int) else _put_str(buf, length, g.serial)

    def nvmlDeviceGetVbiosVersion(self, handle: object, buf: object, length: object) -> int:
        g = self._gpu(handle)
        return g if isinstance(g, int) else _put_str(buf, length, "96.00.74.00.0D")

    def nvmlDeviceGetPciInfo_v3(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        info = _obj(ref)
        info.busId = g.pci_bus_id.encode()
        info.busIdLegacy = g.pci_bus_id[4:].encode()
        info.domain, info.bus, info.device = 0, int(g.pci_bus_id[9:11], 16), 0
        info.pciDeviceId = 0x233010DE
        return N.NVML_SUCCESS

    def nvmlDeviceGetCudaComputeCapability(self, handle: object, major: object, minor: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        ma, mi = g.board.compute_capability.split(".")
        _put(major, int(ma))
        _put(minor, int(mi))
        return N.NVML_SUCCESS

    # ---- utilization and power ---------------------------------------------------------------

    def nvmlDeviceGetSamples(
        self, handle: object, stype: object, last_seen: object, vtype: object, count: object, samples: object
    ) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        kind = _int(stype)
        if self._migs(g) and kind != N.NVML_TOTAL_POWER_SAMPLES:
            return N.NVML_ERROR_NOT_SUPPORTED  # in MIG mode the GPU's utilization is not offered either
        if not self.caps.samples or kind not in (
            N.NVML_GPU_UTILIZATION_SAMPLES,
            N.NVML_MEMORY_UTILIZATION_SAMPLES,
            N.NVML_TOTAL_POWER_SAMPLES,
        ):
            return N.NVML_ERROR_NOT_SUPPORTED
        last = _int(last_seen)
        entries = [s for s in g.samples if s.ts_us > last]
        if not entries:
            return N.NVML_ERROR_NOT_FOUND
        _put(vtype, N.NVML_VALUE_TYPE_UNSIGNED_INT)
        if samples is None:
            _put(count, len(entries))
            return N.NVML_SUCCESS
        n = min(_int(count), len(samples), len(entries))  # type: ignore[arg-type]
        for i, s in enumerate(entries[:n]):
            samples[i].timeStamp = s.ts_us  # type: ignore[index]
            value = {
                N.NVML_GPU_UTILIZATION_SAMPLES: s.util,
                N.NVML_MEMORY_UTILIZATION_SAMPLES: s.mem_util,
                N.NVML_TOTAL_POWER_SAMPLES: s.power_mw,
            }[kind]
            samples[i].sampleValue.uiVal = value  # type: ignore[index]
        _put(count, n)
        return N.NVML_SUCCESS

    def nvmlDeviceGetUtilizationRates(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        if self._migs(g):  # "on MIG-enabled GPUs, querying device utilization rates is not supported"
            return N.NVML_ERROR_NOT_SUPPORTED
        util = _obj(ref)
        util.gpu, util.memory = g.util, g.mem_util
        return N.NVML_SUCCESS

    def nvmlDeviceGetPowerUsage(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        _put(ref, int(g.power_w * 1000))
        return N.NVML_SUCCESS

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        _put(ref, int(g.power_limit_w * 1000))
        return N.NVML_SUCCESS

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        _put(ref, int(g.board.tdp_w * 1000))
        return N.NVML_SUCCESS

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        _put(ref, int(g.energy_mj))
        return N.NVML_SUCCESS

    def nvmlDeviceGetMemoryInfo_v2(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        mem = _obj(ref)
        if mem.version != N.nvmlMemory_v2:
            return N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        total, used = self._memory(g, handle)
        reserved = 500 * (1 << 20) * total // g.board.mem_total_bytes
        mem.total, mem.reserved, mem.used = total, reserved, used
        mem.free = total - reserved - used
        return N.NVML_SUCCESS

    def nvmlDeviceGetMemoryInfo(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        mem = _obj(ref)
        mem.total, mem.used = self._memory(g, handle)
        mem.free = mem.total - mem.used
        return N.NVML_SUCCESS

    def _memory(self, g, handle: object) -> tuple[int, int]:
        """(total, used) of the GPU, or of the GPU instance behind a MIG handle (memory is a GPU instance's:
        each of its compute instances answers with all of it)."""
        inst = self._instance(handle) if self._slot(handle) else None
        if inst is None or isinstance(inst, int):
            return g.board.mem_total_bytes, g.mem_used_bytes
        return mig.gpu_instance_memory(g.mig, inst.spec.gi)

    # ---- thermal and clocks ------------------------------------------------------------------

    def nvmlDeviceGetTemperatureV(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        temp = _obj(ref)
        if temp.version != N.nvmlTemperature_v1:
            return N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if temp.sensorType != N.NVML_TEMPERATURE_GPU:
            return N.NVML_ERROR_INVALID_ARGUMENT
        temp.temperature = round(g.temp_c)
        return N.NVML_SUCCESS

    def nvmlDeviceGetTemperature(self, handle: object, sensor: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        if _int(sensor) != N.NVML_TEMPERATURE_GPU:
            return N.NVML_ERROR_INVALID_ARGUMENT
        _put(ref, round(g.temp_c))
        return N.NVML_SUCCESS

    def nvmlDeviceGetTemperatureThreshold(self, handle: object, which: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        b = g.board
        values = {
            N.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: b.shutdown_c,
            N.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: b.slowdown_c,
            N.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: b.throttle_start_c,
            N.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: 95.0,
        }
        which_i = _int(which)
        if which_i not in values:
            return N.NVML_ERROR_NOT_SUPPORTED
        _put(ref, int(values[which_i]))
        return N.NVML_SUCCESS

    def nvmlDeviceGetClockInfo(self, handle: object, clock: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        kind = _int(clock)
        if kind in (N.NVML_CLOCK_SM, N.NVML_CLOCK_GRAPHICS):
            _put(ref, int(g.sm_clock_mhz))
        elif kind == N.NVML_CLOCK_MEM:
            _put(ref, int(g.mem_clock_mhz))
        else:
            return N.NVML_ERROR_INVALID_ARGUMENT
        return N.NVML_SUCCESS

    def nvmlDeviceGetMaxClockInfo(self, handle: object, clock: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        kind = _int(clock)
        if kind in (N.NVML_CLOCK_SM, N.NVML_CLOCK_GRAPHICS):
            _put(ref, int(g.board.sm_max_mhz))
        elif kind == N.NVML_CLOCK_MEM:
            _put(ref, int(g.board.mem_max_mhz))
        else:
            return N.NVML_ERROR_INVALID_ARGUMENT
        return N.NVML_SUCCESS

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        _put(ref, g.reasons)
        return N.NVML_SUCCESS

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object, ref: object) -> int:
        return self.nvmlDeviceGetCurrentClocksEventReasons(handle, ref)

    # ---- field values ------------------------------------------------------------------------

    def nvmlDeviceGetFieldValues(self, handle: object, count: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        values = _obj(ref)
        now_us = int(self.model.t * 1e6)
        for i in range(_int(count)):
            fv = values[i]  # type: ignore[index]
            fv.timestamp, fv.latencyUsec = now_us, 0
            result = self._field(g, fv.fieldId, fv.scopeId)
            if result is None:
                fv.nvmlReturn = N.NVML_ERROR_NOT_SUPPORTED
                continue
            fv.nvmlReturn = N.NVML_SUCCESS
            if isinstance(result, float):
                fv.valueType, fv.value.dVal = N.NVML_VALUE_TYPE_DOUBLE, result
            else:
                fv.valueType, fv.value.ullVal = N.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, result
        return N.NVML_SUCCESS

    def _field(self, g, field_id: int, scope: int) -> int | float | None:
        if field_id in self.caps.unsupported_fields:
            return None
        links = len(g.link_up)
        if field_id == N.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return links
        if field_id == N.NVML_FI_DEV_PCIE_COUNT_TX_BYTES:
            return int(g.pcie_tx) & 0xFFFFFFFFFFFFFFFF
        if field_id == N.NVML_FI_DEV_PCIE_COUNT_RX_BYTES:
            return int(g.pcie_rx) & 0xFFFFFFFFFFFFFFFF
        if field_id == N.NVML_FI_DEV_MEMORY_TEMP:
            return round(g.temp_c + 4) if self.caps.memory_temperature else None
        if field_id in _THROTTLE_FIELDS:
            return int(g.throttle_ns[_THROTTLE_FIELDS[field_id]])
        per_link = (
            N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
            N.NVML_FI_DEV_NVLINK_GET_STATE,
            *_FIELD_ERROR_TYPES,
        )
        traffic = (N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
        if field_id in traffic and scope == 0xFFFFFFFF and self.caps.nvlink_all_links and links:
            return sum(self._field(g, field_id, link) for link in range(links))  # type: ignore[misc]
        if field_id in per_link:
            if not 0 <= scope < links:
                return None
            if field_id == N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
                return int(g.link_tx[scope]) // 1024
            if field_id == N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
                return int(g.link_rx[scope]) // 1024
            if field_id == N.NVML_FI_DEV_NVLINK_GET_STATE:
                return 1 if self._link_up(g, scope) else 0
            return g.link_errors[scope][_FIELD_ERROR_TYPES[field_id]]
        return None

    # ---- NVLink, P2P, fabric -----------------------------------------------------------------

    def nvmlDeviceGetNvLinkState(self, handle: object, link: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        index = _int(link)
        if not 0 <= index < len(g.link_up):
            return N.NVML_ERROR_INVALID_ARGUMENT
        _put(ref, 1 if self._link_up(g, index) else 0)
        return N.NVML_SUCCESS

    def nvmlDeviceGetNvLinkErrorCounter(
        self, handle: object, link: object, counter: object, ref: object
    ) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        index, kind = _int(link), _int(counter)
        if not 0 <= index < len(g.link_up) or kind not in _ERROR_TYPES:
            return N.NVML_ERROR_INVALID_ARGUMENT
        _put(ref, g.link_errors[index][_ERROR_TYPES[kind]])
        return N.NVML_SUCCESS

    def nvmlDeviceGetP2PStatus(self, dev1: object, dev2: object, caps: object, ref: object) -> int:
        a, b = self._gpu(dev1), self._gpu(dev2)
        for g in (a, b):
            if isinstance(g, int):
                return g
        index = _int(caps)
        if index not in (0, 1, 2, 3, 4):
            return N.NVML_ERROR_INVALID_ARGUMENT
        ok = self.model.p2p_ok(a.index, b.index)
        cond = self.conditions()
        pci = index == 4  # PCI P2P is not routed on this board
        no_fabric = cond.fabric_state != 3 and index in (0, 1, 2)  # NVSwitch not programmed: no NVLink P2P
        blocked = cond.p2p_write_blocked and index == 1  # the hypervisor refuses writes, allows reads
        ok = ok and not (pci or no_fabric or blocked)
        _put(ref, N.NVML_P2P_STATUS_OK if ok else N.NVML_P2P_STATUS_NOT_SUPPORTED)
        return N.NVML_SUCCESS

    def nvmlDeviceGetGpuFabricInfoV(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        if not self.caps.fabric:
            return N.NVML_ERROR_NOT_SUPPORTED
        info = _obj(ref)
        if info.version not in (N.nvmlGpuFabricInfo_v2, N.nvmlGpuFabricInfo_v3):
            return N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        state = min(g.fabric_state, self.conditions().fabric_state)
        info.state = state
        info.status = N.NVML_SUCCESS if state == 3 else N.NVML_ERROR_NOT_READY
        info.cliqueId = 1 if state == 3 else 0
        info.healthMask = 0
        return N.NVML_SUCCESS

    # ---- health and bring-up state (the node doctor) -------------------------------------------

    def nvmlDeviceGetPersistenceMode(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        _put(ref, 1 if self.conditions().persistence else 0)
        return N.NVML_SUCCESS

    def nvmlDeviceGetEccMode(self, handle: object, current: object, pending: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        _put(current, 1)
        _put(pending, 1)
        return N.NVML_SUCCESS

    def nvmlDeviceGetRemappedRows(
        self, handle: object, corrected: object, uncorrected: object, pending: object, failure: object
    ) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        waiting = g.index in self.conditions().remap_pending
        _put(corrected, 0)
        _put(uncorrected, 1 if waiting else 0)
        _put(pending, 1 if waiting else 0)
        _put(failure, 0)
        return N.NVML_SUCCESS

    def nvmlDeviceGetTotalEccErrors(
        self, handle: object, error_type: object, counter_type: object, ref: object
    ) -> int:
        """A GPU with a row remap pending had one uncorrected error (volatile and in its life's count);
        every board corrected a few in its life (its index), none since the driver loaded."""
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        uncorrected = _int(error_type) == N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        if uncorrected:
            count = 1 if g.index in self.conditions().remap_pending else 0
        else:
            count = g.index if _int(counter_type) == N.NVML_AGGREGATE_ECC else 0
        _put(ref, count)
        return N.NVML_SUCCESS

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        # Ampere and later remap rows instead of retiring pages: the driver says NOT_SUPPORTED
        return g if isinstance(g, int) else N.NVML_ERROR_NOT_SUPPORTED

    def _pcie(self, handle: object, ref: object, value: Callable[[object], int]) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        _put(ref, value(g))
        return N.NVML_SUCCESS

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: object, ref: object) -> int:
        # an idle GPU drops its link to Gen1 to save power, as real boards do
        return self._pcie(handle, ref, lambda g: PCIE_GEN if g.util >= 5 else 1)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: object, ref: object) -> int:
        return self._pcie(handle, ref, lambda g: PCIE_GEN)

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: object, ref: object) -> int:
        return self._pcie(handle, ref, lambda g: PCIE_GEN)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: object, ref: object) -> int:
        return self._pcie(handle, ref, lambda g: self.conditions().pcie_width.get(g.index, PCIE_WIDTH))

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: object, ref: object) -> int:
        return self._pcie(handle, ref, lambda g: PCIE_WIDTH)

    def nvmlDeviceGetNumaNodeId(self, handle: object, ref: object) -> int:
        return self._pcie(handle, ref, lambda g: g.index * 2 // self.model.n_gpus)

    # ---- processes and GPM -------------------------------------------------------------------

    def _processes(self, handle: object, count: object, procs: object, kind: str) -> int:
        """The two-call size protocol of the running-process lists: a count and INSUFFICIENT_SIZE for a
        missing or short array, else the entries (nvmlProcessInfo_v3_t: pid, memory, MIG instance ids)."""
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        mine = [p for p in self.model.processes(g) if p.kind == kind]
        if not mine:
            _put(count, 0)
            return N.NVML_SUCCESS
        if procs is None or _int(count) < len(mine):
            _put(count, len(mine))
            return N.NVML_ERROR_INSUFFICIENT_SIZE
        for i, p in enumerate(mine):
            entry = procs[i]  # type: ignore[index]
            entry.pid, entry.usedGpuMemory = p.pid, p.mem_bytes
            entry.gpuInstanceId = entry.computeInstanceId = 0xFFFFFFFF  # not a MIG instance
        _put(count, len(mine))
        return N.NVML_SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: object, count: object, procs: object) -> int:
        return self._processes(handle, count, procs, "compute")

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: object, count: object, procs: object) -> int:
        return self._processes(handle, count, procs, "mps")

    def nvmlDeviceGetProcessUtilization(
        self, handle: object, samples: object, count: object, last_seen: object
    ) -> int:
        """Per-process utilization samples newer than ``last_seen`` (microseconds): one entry per process
        and driver sample, its share of the GPU's SM and memory utilization. NOT_FOUND when none is newer;
        a NULL or short array gets the count and INSUFFICIENT_SIZE."""
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        if not self.caps.samples or g.mig:  # in MIG mode the driver has no per-process utilization
            return N.NVML_ERROR_NOT_SUPPORTED
        last = _int(last_seen)
        procs = self.model.processes(g)
        entries = [(s, p) for s in g.samples if s.ts_us > last for p in procs]
        if not entries:
            return N.NVML_ERROR_NOT_FOUND
        if samples is None or _int(count) < len(entries):
            _put(count, len(entries))
            return N.NVML_ERROR_INSUFFICIENT_SIZE
        for i, (s, p) in enumerate(entries):
            entry = samples[i]  # type: ignore[index]
            entry.pid, entry.timeStamp = p.pid, s.ts_us
            entry.smUtil, entry.memUtil = round(s.util * p.sm_share), round(s.mem_util * p.sm_share)
            entry.encUtil = entry.decUtil = 0
        _put(count, len(entries))
        return N.NVML_SUCCESS

    def nvmlGpmQueryDeviceSupport(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        support = _obj(ref)
        if support.version != N.NVML_GPM_SUPPORT_VERSION:
            return N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        support.isSupportedDevice = 1 if (self.caps.gpm and g.board.gpm) else 0
        return N.NVML_SUCCESS

    def nvmlGpmSampleAlloc(self, ref: object) -> int:
        address = next(self._ids)
        self._gpm_samples[address] = None
        _set_pointer(ref, address)
        return N.NVML_SUCCESS

    def nvmlGpmSampleFree(self, sample: object) -> int:
        return (
            N.NVML_SUCCESS if self._gpm_samples.pop(_addr(sample), 0) != 0 else N.NVML_ERROR_INVALID_ARGUMENT
        )

    def nvmlGpmSampleGet(self, handle: object, sample: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        if not (self.caps.gpm and g.board.gpm):
            return N.NVML_ERROR_NOT_SUPPORTED
        address = _addr(sample)
        if address not in self._gpm_samples:
            return N.NVML_ERROR_INVALID_ARGUMENT
        self._gpm_samples[address] = (g.index, list(g.gpm_integrals))
        return N.NVML_SUCCESS

    def nvmlGpmMigSampleGet(self, handle: object, gpu_instance: object, sample: object) -> int:
        """A GPM sample of one GPU instance (by its id) of a GPU in MIG mode."""
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        if not (self.caps.gpm and g.board.gpm):
            return N.NVML_ERROR_NOT_SUPPORTED
        gi = _int(gpu_instance)
        integrals = mig.gpu_instance_integrals(g.mig, gi)  # its compute instances' together
        address = _addr(sample)
        if integrals is None or address not in self._gpm_samples:
            return N.NVML_ERROR_INVALID_ARGUMENT
        self._gpm_samples[address] = ((g.index, gi), integrals)
        return N.NVML_SUCCESS

    def nvmlGpmMetricsGet(self, ref: object) -> int:
        mg = _obj(ref)
        if mg.version != N.NVML_GPM_METRICS_GET_VERSION:
            return N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        first, second = self._gpm_samples.get(_addr(mg.sample1)), self._gpm_samples.get(_addr(mg.sample2))
        if first is None or second is None or first[0] != second[0]:
            return N.NVML_ERROR_INVALID_ARGUMENT
        span = second[1][0] - first[1][0]
        for i in range(mg.numMetrics):
            metric = mg.metrics[i]
            slot = _GPM_METRICS.get(metric.metricId)
            if slot is None or span <= 0:
                metric.nvmlReturn = (
                    N.NVML_ERROR_NOT_SUPPORTED if slot is None else N.NVML_ERROR_INVALID_ARGUMENT
                )
                continue
            metric.nvmlReturn = N.NVML_SUCCESS
            metric.value = 100.0 * (second[1][slot] - first[1][slot]) / span
        return N.NVML_SUCCESS

    # ---- events ------------------------------------------------------------------------------

    def nvmlDeviceGetSupportedEventTypes(self, handle: object, ref: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        _put(ref, _SUPPORTED_EVENTS)
        return N.NVML_SUCCESS

    def nvmlEventSetCreate(self, ref: object) -> int:
        address = next(self._ids)
        self._event_sets[address] = {"devices": {}, "cursor": len(self.model.xid_events)}
        _set_pointer(ref, address)
        return N.NVML_SUCCESS

    def nvmlEventSetFree(self, event_set: object) -> int:
        if self._event_sets.pop(_addr(event_set), None) is None:
            return N.NVML_ERROR_INVALID_ARGUMENT
        self.model.xid_raised.notify_all()  # a wait on the set ends now
        return N.NVML_SUCCESS

    def nvmlDeviceRegisterEvents(self, handle: object, types: object, event_set: object) -> int:
        g = self._gpu(handle)
        if isinstance(g, int):
            return g
        es = self._event_sets.get(_addr(event_set))
        if es is None:
            return N.NVML_ERROR_INVALID_ARGUMENT
        if _int(types) & ~_SUPPORTED_EVENTS:
            return N.NVML_ERROR_NOT_SUPPORTED
        es["devices"][g.index] = _int(types)  # type: ignore[index]
        return N.NVML_SUCCESS

    def nvmlEventSetWait_v2(self, event_set: object, ref: object, timeout_ms: object) -> int:
        """Wait for an XID on a registered GPU, in real time. Like the driver's wait it sleeps until an
        event comes: the model raises XIDs as it advances, so the wait advances it itself only every
        EVENT_WAIT_ADVANCE_S (a node whose exporter makes no other call still raises them)."""
        deadline = time.monotonic() + _int(timeout_ms) / 1000.0
        address, model = _addr(event_set), self.model
        while True:  # _dispatch holds the model's lock: the condition's wait lets other calls in
            es = self._event_sets.get(address)
            if es is None:  # freed while waiting
                return N.NVML_ERROR_INVALID_ARGUMENT
            model.advance()
            events = model.xid_events
            while es["cursor"] < len(events):  # type: ignore[operator]
                _, gpu, xid = events[es["cursor"]]  # type: ignore[index]
                es["cursor"] += 1  # type: ignore[operator]
                if gpu in es["devices"]:  # type: ignore[operator]
                    data = _obj(ref)
                    data.device = ctypes.cast(ctypes.c_void_p(_DEVICE_BASE + gpu * 0x40), N.c_nvmlDevice_t)
                    data.eventType = N.nvmlEventTypeXidCriticalError
                    data.eventData = xid
                    return N.NVML_SUCCESS
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return N.NVML_ERROR_TIMEOUT
            model.xid_raised.wait(min(EVENT_WAIT_ADVANCE_S, remaining))
