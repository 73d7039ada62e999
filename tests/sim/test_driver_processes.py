"""The fake driver's process entry points through the real nvidia-ml-py: the two-call size protocol, the
versioned process structs, per-process utilization samples behind a time-stamp cursor; and the NVML
source reading them."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from exporter.sources.errors import ErrorCounter
from exporter.sources.nvml import NvmlSource


def test_compute_processes_follow_the_size_protocol(make_node, clock):
    make_node("zombie_process")
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(7)
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
    count = ctypes.c_uint(0)
    assert fn(h, ctypes.byref(count), None) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE and count.value == 1
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)  # the bindings' two calls, v3 structs
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(4312, 17000 << 20)]
    assert pynvml.nvmlDeviceGetMPSComputeRunningProcesses(h) == []  # no MPS server on this node


def test_process_utilization_samples_follow_the_cursor(make_node, clock):
    make_node("healthy")
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock.advance(2.0)
    samples = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
    assert {s.pid for s in samples} == {4242} and len(samples) == 10  # 2 s at 0.2 s
    newest = max(s.timeStamp for s in samples)
    with pytest.raises(pynvml.NVMLError_NotFound):  # nothing newer than the last seen time stamp
        pynvml.nvmlDeviceGetProcessUtilization(h, newest)
    clock.advance(1.0)
    newer = pynvml.nvmlDeviceGetProcessUtilization(h, newest)
    assert len(newer) == 5 and min(s.timeStamp for s in newer) > newest


def test_the_source_lists_processes_with_their_utilization_since_the_last_read(make_node, clock):
    node = make_node("zombie_process")
    source = NvmlSource(node.install(), ErrorCounter(), clock=clock, slow_interval_s=10.0)
    devices = source.open()
    clock.advance(3.0)
    busy, zombie = source.collect(devices[0]).processes, source.collect(devices[7]).processes
    assert [(p.pid, p.kind) for p in busy] == [(4242, "compute")]
    assert busy[0].sm_util > 0.8 and busy[0].used_bytes == 62000 << 20
    assert [(p.pid, p.sm_util, p.used_bytes) for p in zombie] == [(4312, 0.0, 17000 << 20)]
    cursor = devices[0].process_cursor
    clock.advance(10.0)
    again = source.collect(devices[0]).processes
    assert devices[0].process_cursor > cursor and again[0].sm_util > 0.8


def test_a_driver_that_cannot_list_processes_reports_none_not_zero(make_node, clock):
    node = make_node("healthy")
    node.faults.add("nvmlDeviceGetComputeRunningProcesses_v3", pynvml.NVML_ERROR_NOT_SUPPORTED)
    source = NvmlSource(node.install(), ErrorCounter(), clock=clock)
    devices = source.open()
    clock.advance(1.0)
    reading = source.collect(devices[0])
    assert reading.processes is None and reading.process_count is None


def test_a_process_both_lists_name_is_one_process(make_node, clock, monkeypatch):
    """A driver that lists an MPS client among the compute processes too: one process, not two series
    with the same labels and its memory counted twice."""
    from exporter.sim.driver import FakeNvmlLibrary

    monkeypatch.setattr(
        FakeNvmlLibrary,
        "nvmlDeviceGetMPSComputeRunningProcesses_v3",
        lambda self, handle, count, procs: self._processes(handle, count, procs, "compute"),
    )
    node = make_node("zombie_process")
    source = NvmlSource(node.install(), ErrorCounter(), clock=clock, slow_interval_s=10.0)
    devices = source.open()
    clock.advance(3.0)
    listed = source.collect(devices[0]).processes
    assert [(p.pid, p.kind, p.used_bytes) for p in listed] == [(4242, "compute", 62000 << 20)]
