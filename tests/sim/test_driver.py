"""The fake libnvidia-ml behind the real nvidia-ml-py: same entry points, same errors, same protocols."""

from __future__ import annotations

import ctypes
import inspect
import re
import threading
import time
from pathlib import Path

import pynvml
import pytest

from exporter.sim import Capabilities
from exporter.sim.driver import FakeNvmlLibrary


def _pynvml_symbols() -> set[str]:
    """Every C entry point the real bindings look up."""
    return set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', inspect.getsource(pynvml)))


def test_every_fake_entry_point_is_a_real_nvml_symbol():
    fake = {name for name in dir(FakeNvmlLibrary) if name.startswith("nvml")}
    unknown = fake - _pynvml_symbols()
    assert not unknown, f"the fake driver defines entry points real NVML does not have: {unknown}"


def test_every_binding_the_exporter_calls_exists_in_nvidia_ml_py():
    source = Path(inspect.getfile(__import__("exporter.sources.nvml", fromlist=["x"]))).read_text()
    names = set(re.findall(r'"(nvml[A-Z]\w+)"', source)) | set(re.findall(r"self\.N\.(nvml\w+)", source))
    missing = {n for n in names if not hasattr(pynvml, n)}
    assert not missing, f"the NVML source calls bindings nvidia-ml-py lacks: {missing}"


def test_real_bindings_run_over_the_fake(make_node, clock):
    make_node("healthy")
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 8
    h = pynvml.nvmlDeviceGetHandleByIndex(2)
    assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    assert pynvml.nvmlDeviceGetUUID(h).startswith("GPU-")
    mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert mem.total == 81559 << 20 and mem.used + mem.free + mem.reserved == mem.total
    assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) == 700_000  # mW, like the real driver
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(8)


def test_samples_follow_the_cursor_protocol(make_node, clock):
    make_node("data_starvation")
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(3)
    clock.advance(5.0)
    value_type, samples = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert value_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert len(samples) == 25  # 5 s at 0.2 s
    values = [s.sampleValue.uiVal for s in samples]
    assert min(values) == 0 and max(values) == 100  # the starved rank alternates
    with pytest.raises(pynvml.NVMLError_NotFound):  # nothing newer than the last seen timestamp
        pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, samples[-1].timeStamp)
    clock.advance(1.0)
    _, newer = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, samples[-1].timeStamp)
    assert len(newer) == 5 and newer[0].timeStamp > samples[-1].timeStamp


def test_missing_entry_point_is_function_not_found(make_node):
    make_node("healthy", capabilities=Capabilities(missing_functions={"nvmlDeviceGetGpuFabricInfoV"}))
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(pynvml.c_nvmlGpuFabricInfoV_t()))


def test_uninitialised_calls_fail_like_nvml(make_node):
    make_node("healthy")
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_injected_error_applies_to_one_gpu_and_a_number_of_calls(make_node):
    node = make_node("healthy")
    pynvml.nvmlInit()
    node.faults.add("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_TIMEOUT, gpu=1, times=2)
    h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetPowerUsage(h0) > 0
    for _ in range(2):
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlDeviceGetPowerUsage(h1)
    assert pynvml.nvmlDeviceGetPowerUsage(h1) > 0


def test_injected_exception_and_hang(make_node):
    node = make_node("healthy")
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    node.faults.add(
        "nvmlDeviceGetTemperatureV", exception=pynvml.NVMLLibraryMismatchError("mismatch"), times=1
    )
    with pytest.raises(pynvml.NVMLLibraryMismatchError):
        pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU)
    node.faults.add("nvmlDeviceGetClockInfo", hang_s=float("inf"))
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("mhz", pynvml.nvmlDeviceGetClockInfo(h, 1)))
    worker.start()
    worker.join(0.3)
    assert worker.is_alive(), "the call should hang until the fault is cleared"
    assert pynvml.nvmlDeviceGetPowerUsage(h) > 0, "other calls go on while one hangs"
    node.faults.clear()
    worker.join(2)
    assert result["mhz"] == 1980


def test_gpu_lost_scenario_fails_every_call_and_raises_xid_79(make_node, clock):
    make_node("gpu_lost:onset=2")
    pynvml.nvmlInit()
    h7 = pynvml.nvmlDeviceGetHandleByIndex(7)
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h7, pynvml.nvmlEventTypeXidCriticalError, es)
    clock.advance(3.0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetPowerUsage(h7)
    data = pynvml.nvmlEventSetWait_v2(es, 100)
    assert (data.eventType, data.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 79)
    assert ctypes.cast(data.device, ctypes.c_void_p).value == ctypes.cast(h7, ctypes.c_void_p).value
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 50)


def test_an_event_wait_sleeps_until_an_event_and_ends_when_its_set_is_freed(make_node, clock):
    """Like the driver's, the wait does not poll: it wakes for an XID or a freed set, not 20 times a
    second (which the exporter's process would pay for in switches)."""
    node = make_node("gpu_lost:onset=2")
    pynvml.nvmlInit()
    h7 = pynvml.nvmlDeviceGetHandleByIndex(7)
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h7, pynvml.nvmlEventTypeXidCriticalError, es)
    advances = []
    inner = node.model.advance
    node.model.advance = lambda now=None: advances.append(1) or inner(now)
    outcome: dict[str, object] = {}

    def wait() -> None:  # its timeout (two minutes) outlasts the joins below: only an event or a free ends it
        try:
            outcome["data"] = pynvml.nvmlEventSetWait_v2(es, 120_000)
        except pynvml.NVMLError as exc:
            outcome["error"] = exc

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.4)
    assert waiter.is_alive() and len(advances) <= 2  # asleep, not polling
    clock.advance(3.0)
    pynvml.nvmlDeviceGetCount()  # any call advances the model, which raises the XID: the wait wakes
    waiter.join(30)
    assert not waiter.is_alive() and outcome["data"].eventData == 79  # type: ignore[union-attr]
    outcome.clear()
    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    pynvml.nvmlEventSetFree(es)
    waiter.join(30)
    assert not waiter.is_alive() and isinstance(outcome["error"], pynvml.NVMLError_InvalidArgument)


def test_p2p_caps_tuple_constant_is_rejected_like_ctypes_would(make_node):
    """pynvml spells NVML_P2P_CAPS_INDEX_READ as (0,); the real library call fails on it too."""
    make_node("healthy")
    pynvml.nvmlInit()
    h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    assert isinstance(pynvml.NVML_P2P_CAPS_INDEX_READ, tuple)
    with pytest.raises(ctypes.ArgumentError):
        pynvml.nvmlDeviceGetP2PStatus(h0, h1, pynvml.NVML_P2P_CAPS_INDEX_READ)
    assert pynvml.nvmlDeviceGetP2PStatus(h0, h1, 0) == pynvml.NVML_P2P_STATUS_OK


def test_two_nodes_cannot_be_installed_at_once(make_node):
    from exporter.sim import SimulatedNode

    make_node("healthy")
    second = SimulatedNode("healthy")
    try:
        with pytest.raises(RuntimeError, match="another simulated node"):
            second.install()
    finally:
        second.host.close()


def test_gpm_metrics_average_between_two_samples(make_node, clock):
    make_node("healthy")
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(h, s1)
    clock.advance(10.0)
    pynvml.nvmlGpmSampleGet(h, s2)
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version, mg.numMetrics, mg.sample1, mg.sample2 = pynvml.NVML_GPM_METRICS_GET_VERSION, 2, s1, s2
    mg.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    mg.metrics[1].metricId = pynvml.NVML_GPM_METRIC_FP64_UTIL  # not simulated: per-metric NotSupported
    pynvml.nvmlGpmMetricsGet(mg)
    assert mg.metrics[0].nvmlReturn == 0 and 60 < mg.metrics[0].value < 85
    assert mg.metrics[1].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_driver_calls_are_counted(make_node):
    node = make_node("healthy")
    pynvml.nvmlInit()
    for _ in range(3):
        pynvml.nvmlDeviceGetCount()
    assert node.library.calls["nvmlDeviceGetCount_v2"] == 3


def test_fake_is_found_by_pynvml_loader_and_removed_on_close(make_node):
    node = make_node("healthy")
    assert pynvml.nvmlLib is node.library
    node.close()
    assert pynvml.nvmlLib is None
