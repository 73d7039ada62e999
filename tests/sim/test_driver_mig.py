"""The fake driver's MIG protocol under the real nvidia-ml-py (scenario mig_h100): MIG mode on GPU 0, its
instances reached through their MIG device handles, GPM per instance, and what an instance's handle
refuses because it is the GPU's."""

from __future__ import annotations

import pynvml
import pytest

from exporter.sim.mig import GPU_SLICES, LAYOUT


def _instances(h: object) -> list[object]:
    out = []
    for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            out.append(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i))
        except pynvml.NVMLError_NotFound:
            continue  # an empty slot
    return out


def _sm(h: object, gi: int, clock, seconds: int) -> list[float]:
    """GPM SM activity of one GPU instance over ``seconds`` one-second intervals."""
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmMigSampleGet(h, gi, first)
    out = []
    for _ in range(seconds):
        clock.advance(1.0)
        pynvml.nvmlGpmMigSampleGet(h, gi, second)
        mg = pynvml.c_nvmlGpmMetricsGet_t()
        mg.version, mg.numMetrics = pynvml.NVML_GPM_METRICS_GET_VERSION, 1
        mg.sample1, mg.sample2 = first, second
        mg.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
        pynvml.nvmlGpmMetricsGet(mg)
        out.append(mg.metrics[0].value / 100.0)
        first, second = second, first
    return out


def test_a_mig_gpu_lists_its_instances_with_their_identity_and_memory(make_node, clock):
    node = make_node("mig_h100", n_gpus=2)
    pynvml.nvmlInit()
    h, other = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1] and pynvml.nvmlDeviceGetMigMode(other) == [0, 0]
    clock.advance(1.0)
    migs = _instances(h)
    assert len(migs) == len(LAYOUT) and _instances(other) == []
    found = []
    for m, spec in zip(migs, LAYOUT, strict=True):
        attrs = pynvml.nvmlDeviceGetAttributes_v2(m)
        mem = pynvml.nvmlDeviceGetMemoryInfo(m)
        assert pynvml.nvmlDeviceGetName(m).endswith(f"MIG {spec.profile}")
        found.append(
            (
                pynvml.nvmlDeviceGetGpuInstanceId(m),
                pynvml.nvmlDeviceGetComputeInstanceId(m),
                attrs.gpuInstanceSliceCount,
                mem.total,
                mem.used,
            )
        )
    assert found == [(s.gi, 0, s.slices, s.mem_total, s.mem_held) for s in LAYOUT]
    assert sum(s.slices for s in LAYOUT) == GPU_SLICES
    # the kubelet gives the held instances out by their MIG UUIDs
    given = {d for pod in node.pods for ids in pod.devices.values() for d in ids if d.startswith("MIG-")}
    assert given == {pynvml.nvmlDeviceGetUUID(m) for m, s in zip(migs, LAYOUT, strict=True) if s.pod}


def test_utilization_is_the_gpus_alone_and_gpm_is_per_instance(make_node, clock):
    make_node("mig_h100", n_gpus=1)
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock.advance(1.0)
    busy = _instances(h)[0]
    for call in (pynvml.nvmlDeviceGetUtilizationRates, pynvml.nvmlDeviceGetPowerUsage):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call(busy)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetProcessUtilization(h, 0)  # no per-process utilization in MIG mode
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetUtilizationRates(h)  # nor the GPU's own, in MIG mode
    assert _sm(h, LAYOUT[0].gi, clock, 6) == pytest.approx([0.93] * 6)
    rhythm = _sm(h, LAYOUT[1].gi, clock, 12)
    assert rhythm.count(0.0) == 8 and max(rhythm) == pytest.approx(0.9)  # 2 s of every 6 computing
    assert _sm(h, LAYOUT[2].gi, clock, 3) == [0.0] * 3
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmMigSampleGet(h, 42, pynvml.nvmlGpmSampleAlloc())  # no such GPU instance
