"""The NVML source over the simulated driver: values, units, fallbacks and the error policy."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from exporter.sim import Capabilities
from exporter.sources.errors import ErrorCounter
from exporter.sources.nvml import (
    FieldBatch,
    GpuLost,
    NvmlSource,
    SampleReader,
    SessionError,
    _from_bits,
    _plain,
    _sample_layout,
)

MIB = 1 << 20
# the bindings' nvmlValue_t member for each nvmlValueType_t: what the readers are checked against
UNION_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def opened(node, clock, **kw):
    errors = ErrorCounter()
    source = NvmlSource(node.install(), errors, clock=clock, **kw)
    devices = source.open()
    return source, devices, errors


def test_discovery_reads_identity_and_capabilities(make_node, clock):
    node = make_node("healthy")
    source, devices, _ = opened(node, clock)
    assert len(devices) == 8
    d = devices[3]
    g = node.model.gpus[3]
    assert d.identity.uuid == g.uuid and d.identity.pci_bus_id == g.pci_bus_id
    assert d.identity.name == "NVIDIA H100 80GB HBM3" and d.identity.compute_capability == "9.0"
    assert d.link_count == 18 and d.default_limit_w == 700.0 and d.slowdown_c == 87.0
    assert d.sm_max_hz == 1980e6 and len(d.gpm_samples) == 2
    assert source.driver == {
        "driver_version": "550.90.07",
        "cuda_version": "12.4",
        "nvml_version": "12.550.90.07",
    }


def test_collect_reports_every_signal_in_base_units(make_node, clock):
    node = make_node("healthy")
    source, devices, errors = opened(node, clock)
    source.collect(devices[0])
    clock.advance(2.0)
    r = source.collect(devices[0])
    g = node.model.gpus[0]
    assert len(r.util_samples) == 10 and all(0 <= s.value <= 1 for s in r.util_samples)
    assert [round(s.value * 100) for s in r.util_samples] == [s.util for s in list(g.samples)[-10:]]
    assert r.power_samples[-1].value == pytest.approx(g.samples[-1].power_mw / 1000)
    assert r.power_w == r.power_samples[-1].value
    assert r.mem_total_bytes == 81559 * MIB and r.mem_used_bytes == g.mem_used_bytes
    assert r.power_limit_w == 700.0 and r.power_default_limit_w == 700.0
    assert r.energy_j == pytest.approx(int(g.energy_mj) / 1000)
    assert r.temp_c == round(g.temp_c) and r.temp_mem_c == round(g.temp_c + 4)
    assert r.clock_sm_hz == g.sm_clock_mhz * 1e6 and r.clock_mem_hz == 2619e6 and r.clock_sm_max_hz == 1980e6
    assert r.clock_reasons == g.reasons
    assert set(r.clock_reason_seconds) == {
        "sw_power_cap",
        "sw_thermal",
        "hw_thermal",
    }  # what the board counts
    assert 0.5 < r.sm_active < 0.85 and 0.2 < r.tensor_active < 0.6
    assert len(r.nvlinks) == 18 and all(link.up for link in r.nvlinks)
    # KiB counters, exported in bytes: the driver's sum over the links (each link's own only for the
    # per-link series)
    assert r.nvlink_tx_bytes == sum(int(tx) // 1024 for tx in g.link_tx) * 1024
    assert r.nvlinks[4].tx_bytes is None
    assert r.nvlinks[4].errors == {"replay": 0, "recovery": 0, "crc": 0}
    assert r.pcie_rx_bytes == int(g.pcie_rx)
    assert r.fabric_state == "completed" and r.fabric_status == "success" and r.process_count == 1
    assert errors.snapshot() == {
        ("nvml", "NotSupported"): 2
    }  # the two throttle counters H100 lacks, probed once


def test_unsupported_calls_are_probed_once_then_left_out(make_node, clock):
    node = make_node("healthy")
    source, devices, errors = opened(node, clock)
    node.faults.add("nvmlDeviceGetEnforcedPowerLimit", pynvml.NVML_ERROR_NOT_SUPPORTED)
    for _ in range(3):
        clock.advance(1)
        r = source.collect(devices[0])
    assert r.power_limit_w is None  # left out, never 0
    assert node.library.calls["nvmlDeviceGetEnforcedPowerLimit"] == 1
    assert errors.snapshot()[("nvml", "NotSupported")] == 3  # 2 fields + this call


def test_transient_errors_cost_one_signal_once(make_node, clock):
    node = make_node("healthy")
    source, devices, errors = opened(node, clock)
    node.faults.add("nvmlDeviceGetTemperatureV", pynvml.NVML_ERROR_TIMEOUT, times=1)
    clock.advance(1)
    assert source.collect(devices[0]).temp_c is None
    clock.advance(1)
    assert source.collect(devices[0]).temp_c is not None
    assert errors.snapshot()[("nvml", "Timeout")] == 1


def test_fallbacks_for_older_drivers_and_boards(make_node, clock):
    caps = Capabilities(
        samples=False,
        gpm=False,
        fabric=False,
        missing_functions={"nvmlDeviceGetTemperatureV", "nvmlDeviceGetMemoryInfo_v2"},
        unsupported_fields={165, 161, 162, 163},
    )
    node = make_node("healthy", capabilities=caps)
    source, devices, errors = opened(node, clock)
    clock.advance(1)
    r = source.collect(devices[1])
    assert (
        len(r.util_samples) == 1 and r.util == node.model.gpus[1].util / 100
    )  # nvmlDeviceGetUtilizationRates
    assert r.power_w == pytest.approx(node.model.gpus[1].power_w, abs=0.01)  # nvmlDeviceGetPowerUsage
    assert r.temp_c is not None and r.mem_used_bytes is not None  # the older entry points
    assert r.sm_active is None and r.tensor_active is None  # no GPM: left out
    assert r.fabric_state is None
    assert all(link.up for link in r.nvlinks) and len(r.nvlinks) == 18  # per-link state calls
    assert r.nvlinks[0].errors == {"replay": 0, "recovery": 0, "crc": 0}  # per-link error counter calls
    snap = errors.snapshot()
    assert snap[("nvml", "FunctionNotFound")] == 2 and ("nvml", "GpuIsLost") not in snap


def test_gpu_lost_raises_for_that_gpu_only(make_node, clock):
    node = make_node("healthy")
    source, devices, errors = opened(node, clock)
    node.faults.add("*", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=5)
    clock.advance(1)
    with pytest.raises(GpuLost):
        source.collect(devices[5])
    assert source.collect(devices[4]).util_samples
    assert errors.snapshot()[("nvml", "GpuIsLost")] == 1


def test_lost_gpu_is_reprobed_and_comes_back(make_node, clock):
    node = make_node("gpu_lost:onset=0")
    clock.advance(1)
    source, devices, errors = opened(node, clock)
    lost = devices[7]
    assert lost.lost and lost.identity.uuid == ""
    assert errors.snapshot() == {("nvml", "GpuIsLost"): 1}
    assert source.reprobe(lost) is lost
    node.model.timeline = [(0.0, node.scenario.__class__(name="healthy"))]
    clock.advance(1)
    back = source.reprobe(lost)
    assert not back.lost and back.identity.uuid == node.model.gpus[7].uuid


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH]
)
def test_session_errors_raise_session_error(make_node, clock, code):
    node = make_node("healthy")
    source, devices, _ = opened(node, clock)
    node.faults.add("*", code)
    with pytest.raises(SessionError):
        source.collect(devices[0])


def test_library_mismatch_reinitialises_once_then_leaves_the_call_out(make_node, clock):
    node = make_node("healthy")
    source, devices, errors = opened(node, clock)
    node.faults.add("nvmlDeviceGetComputeRunningProcesses_v3", exception=pynvml.NVMLLibraryMismatchError("x"))
    with pytest.raises(SessionError, match="LibraryMismatch"):
        source.collect(devices[0])
    source.close(devices)
    devices = source.open()  # the re-initialisation the sampler does
    clock.advance(1)
    r = source.collect(devices[0])
    assert r.process_count is None and r.util_samples  # the call is left out, the rest is fine
    assert errors.snapshot()[("nvml", "LibraryMismatch")] == 2


def test_library_not_found_at_start(make_node, clock):
    node = make_node("healthy", library_present=False)
    source = NvmlSource(node.install(), ErrorCounter(), clock=clock)
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        source.open()


def test_p2p_status_per_pair_and_capability(make_node, clock):
    node = make_node("nvlink_down", n_gpus=4)
    source, devices, _ = opened(node, clock)
    clock.advance(1)
    p2p = source.collect_p2p(devices)
    assert len(p2p) == 4 * 3 * 3
    assert p2p[(0, 1, "nvlink")] and p2p[(1, 0, "write")]
    assert not p2p[(0, 2, "nvlink")] and not p2p[(2, 3, "read")]


def test_nvlink_down_shows_in_links_fabric_and_errors(make_node, clock):
    node = make_node("nvlink_down")
    source, devices, _ = opened(node, clock)
    clock.advance(2)
    r = source.collect(devices[2])
    assert not any(link.up for link in r.nvlinks)
    assert r.fabric_state == "not_started" and r.fabric_status == "NotReady"
    assert r.nvlinks[0].errors["replay"] == 1200
    assert all(link.up for link in source.collect(devices[0]).nvlinks)


def test_no_new_samples_is_not_an_error(make_node, clock):
    node = make_node("healthy")
    source, devices, errors = opened(node, clock)
    clock.advance(1)
    first = source.collect(devices[0])
    again = source.collect(devices[0])  # same instant: the driver has nothing newer
    assert first.util_samples and again.util_samples == ()
    assert again.util == first.util  # the latest value is carried
    assert ("nvml", "NotFound") not in errors.snapshot()


def test_unsupported_fields_are_dropped_quietly_after_the_first_probe(make_node, clock, caplog):
    """A simulated (or real) H100 has no sync-boost counter (field 76): counted once, logged at debug
    with what it means, never asked for again, and nothing about it at info or above."""
    node = make_node("healthy", n_gpus=1)
    with caplog.at_level("DEBUG"):
        source, devices, errors = opened(node, clock)
        for _ in range(3):
            clock.advance(1.0)
            source.collect(devices[0])
    loud = [r.getMessage() for r in caplog.records if r.levelno >= 20 and "NotSupported" in r.getMessage()]
    assert loud == []
    quiet = [r.getMessage() for r in caplog.records if "field 76" in r.getMessage()]
    assert quiet == [
        "nvml: NotSupported (field 76 scope 0 on GPU 0: not offered by this GPU or driver, "
        "no longer asked for) (counted in gpu_exporter_collect_errors_total)"
    ]
    assert errors.snapshot()[("nvml", "NotSupported")] >= 1
    assert (76, 0) not in devices[0].fields


def test_field_values_read_through_the_ready_batch_match_the_bindings_call(make_node, clock):
    """The batch array is filled once and reused; what it reads is what nvml-py's own call reads."""
    node = make_node("healthy", n_gpus=1)
    source, devices, _ = opened(node, clock)
    dev = devices[0]
    for _ in range(2):  # the first probe drops what the board does not offer (field 76)
        clock.advance(1.0)
        source.collect(dev)
    batch = dev.batches["fields"]
    assert batch.requests == dev.fields and batch.array is not None  # the ready array, not the fallback
    # every collection: PCIe, memory temperature, throttle time, the NVLink traffic summed by the driver;
    # the slow state: each of 18 links' state and error counters
    for slow, wanted, count in ((False, dev.fields, 8), (True, dev.slow_fields, 18 * 4)):
        ours = source._field_values(dev, slow=slow)
        theirs = pynvml.nvmlDeviceGetFieldValues(dev.handle, wanted)
        assert len(ours) == len(wanted) == count
        for request, fv in zip(wanted, theirs, strict=True):
            assert fv.nvmlReturn == 0
            value = getattr(fv.value, "ullVal" if fv.valueType == 3 else "dVal")
            assert ours[request] == pytest.approx(value)
    assert dev.batches["fields"] is batch  # reused while the request list stands


def test_a_driver_that_cannot_sum_the_links_has_each_link_read_every_collection(make_node, clock):
    """Drivers before the all-links scope refuse it: the links' own counters are read and added up."""
    node = make_node("healthy", n_gpus=1, capabilities=Capabilities(nvlink_all_links=False))
    source, devices, _ = opened(node, clock)
    dev = devices[0]
    for _ in range(2):  # the first collection learns the scope is refused
        clock.advance(1.0)
        r = source.collect(dev)
    g = node.model.gpus[0]
    assert dev.traffic_per_link and len(dev.fields) == 6 + 36 and len(dev.slow_fields) == 18 * 4
    assert r.nvlink_tx_bytes == sum(int(tx) // 1024 for tx in g.link_tx) * 1024
    assert [link.rx_bytes for link in r.nvlinks] == [int(rx) // 1024 * 1024 for rx in g.link_rx]


def test_the_per_link_series_have_each_link_read_every_collection(make_node, clock):
    node = make_node("healthy", n_gpus=1)
    source, devices, _ = opened(node, clock, link_traffic=True)
    dev = devices[0]
    clock.advance(1.0)
    r = source.collect(dev)
    g = node.model.gpus[0]
    assert dev.traffic_per_link and len(dev.fields) == 6 + 36
    assert [link.tx_bytes for link in r.nvlinks] == [int(tx) // 1024 * 1024 for tx in g.link_tx]
    assert r.nvlink_tx_bytes == sum(link.tx_bytes for link in r.nvlinks)


def test_an_entry_the_driver_leaves_unfilled_is_no_value(make_node, clock, monkeypatch):
    """A reused array must not serve the last collection's value for a field the driver skipped."""
    node = make_node("healthy", n_gpus=1)
    source, devices, errors = opened(node, clock)
    dev = devices[0]
    clock.advance(1.0)
    first = source._field_values(dev)
    skipped = dev.fields[0]
    assert skipped in first
    real_lookup = pynvml._nvmlGetFunctionPointer

    def lookup(name):
        fn = real_lookup(name)
        if name != "nvmlDeviceGetFieldValues":
            return fn

        def skipping_first(handle, count, ref):
            ret = fn(handle, count, ref)
            ref._obj[0].nvmlReturn = pynvml.NVML_ERROR_UNKNOWN  # as if never written
            return ret

        return skipping_first

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lookup)
    clock.advance(1.0)
    again = source._field_values(dev)
    assert skipped not in again and len(again) == len(first) - 1
    assert ("nvml", "Unknown") in errors.snapshot()


@pytest.mark.parametrize("value_type", sorted(UNION_MEMBERS))
def test_a_sample_array_unpacks_as_the_bindings_read_it_for_every_value_type(value_type):
    member = UNION_MEMBERS[value_type]
    entries = (3 * pynvml.c_nvmlSample_t)()
    values = {"dVal": (0.1, 1e300, -2.5), "sllVal": (-1, 2**62, 0), "siVal": (-7, 2**31 - 1, 0)}.get(
        member, (0, 1, 65535)
    )
    for i, (entry, value) in enumerate(zip(entries, values, strict=True)):
        entry.timeStamp = 1_700_000_000_123_456 + i
        setattr(entry.sampleValue, member, value)
    layout = _sample_layout(value_type, ctypes.sizeof(pynvml.c_nvmlSample_t))
    unpacked = list(layout.iter_unpack(memoryview(entries).cast("B")))  # the whole array in one call
    assert unpacked == [(e.timeStamp, getattr(e.sampleValue, member)) for e in entries[0:3]]
    assert [_sample_layout(value_type).unpack_from(e) for e in entries[0:3]] == unpacked  # one by one


@pytest.mark.parametrize("value_type", [*sorted(UNION_MEMBERS), 99])
def test_a_field_batch_unpacks_as_the_bindings_read_it_for_every_value_type(value_type):
    """A batch's array is read in one unpacking call as (type, return, bits); the value from the bits is
    what the bindings' union says for every value type (an unknown type reads as ullVal, as theirs)."""
    member = UNION_MEMBERS.get(value_type, "ullVal")
    values = {
        "dVal": (0.1, 1e300, -2.5),
        "sllVal": (-1, 2**62, -(2**63)),
        "siVal": (-7, 2**31 - 1, -(2**31)),
        "uiVal": (0, 2**32 - 1, 12345),
        "usVal": (0, 1, 65535),
    }.get(member, (0, 2**64 - 1, 2**40 + 3))
    batch = FieldBatch([(1, 0), (2, 0), (3, 1)], pynvml)
    for i, (entry, value) in enumerate(zip(batch.array, values, strict=True)):
        entry.value.ullVal = 0xFFFF_FFFF_FFFF_FFFF  # bits a narrower member leaves as they were
        setattr(entry.value, member, value)
        entry.valueType, entry.nvmlReturn = value_type, i  # returns: told apart per entry
    union = pynvml.c_nvmlValue_t
    rows = list(batch.rows(batch.array))
    assert [(kind, ret) for kind, ret, _ in rows] == [(value_type, 0), (value_type, 1), (value_type, 2)]
    read = [_from_bits(kind, bits) for kind, _, bits in rows]
    assert read == [getattr(e.value, member) for e in batch.array]
    assert read == [getattr(union.from_buffer_copy(e.value), member) for e in batch.array]
    # the bindings' own structures (their function's answer, where there is no batch array): the same
    theirs = (3 * pynvml.c_nvmlFieldValue_t).from_buffer_copy(batch.array)
    assert list(batch.rows(theirs)) == rows


def test_samples_are_read_in_one_driver_call_into_a_kept_array(make_node, clock):
    """The bindings' function asks the driver twice per read; the reader asks once (after a first size
    query), reads what the bindings read, grows its array when a read fills it, and says NotFound the
    same way when nothing is newer."""
    node = make_node("healthy")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    kind = pynvml.NVML_GPU_UTILIZATION_SAMPLES
    reader = SampleReader(pynvml)
    assert reader.direct
    clock.advance(5.0)
    calls = node.library.calls
    before = calls["nvmlDeviceGetSamples"]
    first = reader.read(handle, kind, 0)
    assert calls["nvmlDeviceGetSamples"] - before == 2  # the size query, once, then the read
    _, theirs = pynvml.nvmlDeviceGetSamples(handle, kind, 0)
    assert first == [(s.timeStamp, s.sampleValue.uiVal) for s in theirs] and len(first) > 3
    clock.advance(3.0)
    before = calls["nvmlDeviceGetSamples"]
    newer = reader.read(handle, kind, first[-1][0])
    assert calls["nvmlDeviceGetSamples"] - before == 1
    assert newer and all(stamp > first[-1][0] for stamp, _ in newer)
    reader._grow(kind, 2)  # an array smaller than what is new: filled, grown, read again
    assert reader.read(handle, kind, 0) == [(s.timeStamp, s.sampleValue.uiVal) for s in theirs] + newer
    with pytest.raises(pynvml.NVMLError_NotFound):
        reader.read(handle, kind, newer[-1][0])


def test_samples_are_read_through_the_bindings_when_their_internals_are_not_offered(make_node, clock):
    make_node("healthy")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock.advance(3.0)

    class Bindings:  # bindings without the lookup the direct read uses
        def __getattr__(self, name):
            if name == "_nvmlGetFunctionPointer":
                raise AttributeError(name)
            return getattr(pynvml, name)

    reader = SampleReader(Bindings())  # type: ignore[arg-type]
    assert not reader.direct
    _, theirs = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
    got = reader.read(handle, pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
    assert got == [(s.timeStamp, s.sampleValue.uiVal) for s in theirs]


@pytest.mark.parametrize(
    "name", ["c_nvmlFieldValue_t", "c_nvmlSample_t", "c_nvmlGpmMetricsGet_t", "c_nvmlGpmMetric_t"]
)
def test_a_plain_mirror_of_a_bindings_structure_has_its_layout(name):
    """The reads go through plain copies of the bindings' structures: the driver must find every field
    where the bindings put it, nested ones included."""
    theirs = getattr(pynvml, name)
    ours = _plain(theirs)

    def layout(kind: type) -> list:
        out = []
        for field_name, field_kind, *_ in kind._fields_:
            field = getattr(kind, field_name)
            out.append((field_name, field.offset, field.size))
            is_array = isinstance(field_kind, type) and issubclass(field_kind, ctypes.Array)
            inner = field_kind._type_ if is_array else field_kind  # an array's element, or the field
            if isinstance(inner, type) and issubclass(inner, ctypes.Structure):
                out.append(layout(inner))
        return out

    assert ctypes.sizeof(ours) == ctypes.sizeof(theirs) and layout(ours) == layout(theirs)
    assert not any(issubclass(k, pynvml._PrintableStructure) for k in ours.__mro__)
