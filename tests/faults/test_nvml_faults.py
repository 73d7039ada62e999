"""NVML faults through the real bindings over the simulated driver: a GPU whose reads fail is down and
its values leave; refused signals come back; one GPU's error stays that GPU's."""

from __future__ import annotations

import itertools

import pynvml
import pytest

from exporter.policy.thresholds import SAMPLE_CARRY, SIGNAL_RETRY_INITIAL, SIGNAL_RETRY_MAX
from tests.faults.conftest import cycle, of_gpu, scrape

VALUES = (  # per-GPU series that carry a reading; none may outlive a failed read
    "gpu_utilization_ratio",
    "gpu_utilization_window_ratio",
    "gpu_power_watts",
    "gpu_power_window_watts",
    "gpu_memory_used_bytes",
    "gpu_temperature_celsius",
    "gpu_bottleneck",
    "gpu_time_seconds_total",
)


def gpus(snapshot) -> dict[int, object]:
    return {g.index: g for g in snapshot.gpus}


@pytest.mark.parametrize(
    "fault",
    [
        {"error": pynvml.NVML_ERROR_UNKNOWN},
        {"error": pynvml.NVML_ERROR_TIMEOUT},
        {"exception": RuntimeError("the bindings broke")},
    ],
    ids=["Unknown", "Timeout", "exception"],
)
def test_a_gpu_whose_reads_all_fail_is_down_and_its_values_leave(make_node, faulty, clock, fault):
    node = make_node("healthy", n_gpus=4)
    sampler, errors = faulty(node)
    before = scrape(cycle(sampler, clock, 3))
    assert all(of_gpu(before, name, 2) for name in VALUES if name != "gpu_bottleneck")
    last_good = of_gpu(before, "gpu_last_collect_timestamp_seconds", 2)[0].value
    assert last_good == clock.now

    node.faults.add("*", gpu=2, **fault)
    for _ in range(3):  # frozen for as long as it fails: nothing of GPU 2 repeats as current
        snap = cycle(sampler, clock)
        metrics = scrape(snap)
        assert of_gpu(metrics, "gpu_up", 2)[0].value == 0 and gpus(snap)[2].status == "error"
        assert [name for name in VALUES if of_gpu(metrics, name, 2)] == []
        assert of_gpu(metrics, "gpu_last_collect_timestamp_seconds", 2)[0].value == last_good < clock.now
        assert of_gpu(metrics, "gpu_info", 2)  # who it is stays known
        assert all(of_gpu(metrics, "gpu_up", g)[0].value == 1 for g in (0, 1, 3))
        assert all(of_gpu(metrics, "gpu_power_watts", g) for g in (0, 1, 3))
    assert snap.nvml_up and node.library.calls["nvmlInitWithFlags"] == 1  # no session restart
    counted = {error for (source, error) in errors.snapshot() if source == "nvml"}
    assert counted & {"Unknown", "Timeout", "RuntimeError"}

    node.faults.clear()  # an exception's refusals wait out their first backoff; errors come back at once
    snap = cycle(sampler, clock, int(SIGNAL_RETRY_INITIAL.value) + 1)
    metrics = scrape(snap)
    assert of_gpu(metrics, "gpu_up", 2)[0].value == 1 and of_gpu(metrics, "gpu_power_watts", 2)
    assert of_gpu(metrics, "gpu_last_collect_timestamp_seconds", 2)[0].value == clock.now


def test_a_failed_signal_is_dropped_not_repeated(make_node, faulty, clock):
    node = make_node("healthy", n_gpus=2)
    sampler, _ = faulty(node)
    cycle(sampler, clock, 3)
    fault = node.faults.add("nvmlDeviceGetSamples", pynvml.NVML_ERROR_TIMEOUT, gpu=1)
    node.faults.add("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_TIMEOUT, gpu=1)
    node.faults.add("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_TIMEOUT, gpu=1)
    metrics = scrape(cycle(sampler, clock, 2))
    assert of_gpu(metrics, "gpu_up", 1)[0].value == 1  # memory, clocks, temperature still answer
    for name in ("gpu_power_watts", "gpu_power_window_watts", "gpu_utilization_ratio"):
        assert of_gpu(metrics, name, 1) == [] and of_gpu(metrics, name, 0), name
    assert of_gpu(metrics, "gpu_utilization_window_ratio", 1) == []
    assert of_gpu(metrics, "gpu_memory_used_bytes", 1)
    node.faults.clear()
    assert fault is not None
    metrics = scrape(cycle(sampler, clock))
    assert of_gpu(metrics, "gpu_power_watts", 1) and of_gpu(metrics, "gpu_utilization_ratio", 1)


@pytest.mark.parametrize(
    ("function", "fault", "metric"),
    [
        (
            "nvmlDeviceGetTotalEnergyConsumption",
            {"error": pynvml.NVML_ERROR_NO_PERMISSION},
            "gpu_energy_joules_total",
        ),
        (
            "nvmlDeviceGetTotalEnergyConsumption",
            {"error": pynvml.NVML_ERROR_INVALID_ARGUMENT},
            "gpu_energy_joules_total",
        ),
        ("nvmlDeviceGetClockInfo", {"exception": ValueError("bad struct")}, "gpu_clock_hertz"),
        ("nvmlDeviceGetFieldValues", {"error": pynvml.NVML_ERROR_NO_PERMISSION}, "gpu_pcie_bytes_total"),
        ("nvmlGpmSampleGet", {"error": pynvml.NVML_ERROR_NO_PERMISSION}, "gpu_sm_active_ratio"),
    ],
    ids=["NoPermission", "InvalidArgument", "exception", "fields", "gpm"],
)
def test_a_refused_signal_comes_back_within_the_backoff_bound(
    make_node, faulty, clock, function, fault, metric
):
    node = make_node("healthy", n_gpus=1)
    sampler, _ = faulty(node)
    cycle(sampler, clock, 3)
    node.faults.add(function, **fault)
    metrics = scrape(cycle(sampler, clock, 120))  # long enough for the backoff to reach its maximum
    assert of_gpu(metrics, metric, 0) == [] and of_gpu(metrics, "gpu_up", 0)[0].value == 1
    calls = node.library.calls[function]
    node.faults.clear()
    back_after = None
    for second in range(1, int(SIGNAL_RETRY_MAX.value) + 3):
        if of_gpu(scrape(cycle(sampler, clock)), metric, 0):
            back_after = second
            break
    assert back_after is not None and back_after <= SIGNAL_RETRY_MAX.value + 2, back_after
    assert node.library.calls[function] - calls <= back_after + 2  # retried with backoff, not every second


def test_backoff_doubles_up_to_its_maximum(make_node, faulty, clock):
    node = make_node("healthy", n_gpus=1)
    sampler, _ = faulty(node)
    cycle(sampler, clock, 2)
    node.faults.add("nvmlDeviceGetTotalEnergyConsumption", pynvml.NVML_ERROR_NO_PERMISSION)
    tries = []
    for second in range(300):
        before = node.library.calls["nvmlDeviceGetTotalEnergyConsumption"]
        cycle(sampler, clock)
        if node.library.calls["nvmlDeviceGetTotalEnergyConsumption"] > before:
            tries.append(second)
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps[:4] == [5, 10, 20, 40]  # each refusal in a row doubles the wait...
    assert set(gaps[4:]) == {int(SIGNAL_RETRY_MAX.value)}  # ...up to the maximum


def test_confirmed_unsupported_stays_off_until_the_session_restarts(make_node, faulty, clock):
    node = make_node("healthy", n_gpus=2)
    sampler, _ = faulty(node)
    cycle(sampler, clock, 2)
    node.faults.add("nvmlDeviceGetTotalEnergyConsumption", pynvml.NVML_ERROR_NOT_SUPPORTED)
    cycle(sampler, clock, 2)
    node.faults.clear()
    calls = node.library.calls["nvmlDeviceGetTotalEnergyConsumption"]
    metrics = scrape(cycle(sampler, clock, 2 * int(SIGNAL_RETRY_MAX.value)))
    assert node.library.calls["nvmlDeviceGetTotalEnergyConsumption"] == calls  # never asked again
    assert of_gpu(metrics, "gpu_energy_joules_total", 0) == []
    node.faults.add("*", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)  # the driver reloads: a new session
    snap = cycle(sampler, clock, 2)
    assert not snap.nvml_up
    node.faults.clear()
    metrics = scrape(cycle(sampler, clock, 3))
    assert of_gpu(metrics, "gpu_energy_joules_total", 0) and of_gpu(metrics, "gpu_energy_joules_total", 1)


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_UNINITIALIZED])
def test_a_session_error_on_one_gpu_handle_downs_only_that_gpu(make_node, faulty, clock, code):
    node = make_node("healthy", n_gpus=4)
    sampler, errors = faulty(node)
    cycle(sampler, clock, 2)
    node.faults.add("*", code, gpu=2)
    snap = cycle(sampler, clock, 3)
    assert snap.nvml_up and node.library.calls["nvmlInitWithFlags"] == 1  # the session answers: kept
    assert {g.index: g.status for g in snap.gpus} == {0: "ok", 1: "ok", 2: "error", 3: "ok"}
    metrics = scrape(snap)
    assert [s.value for s in sorted(metrics["gpu_up"], key=lambda s: s.labels["gpu"])] == [1, 1, 0, 1]
    assert of_gpu(metrics, "gpu_p2p_failing_pairs", 0)  # the other GPUs' pairs are still probed
    assert snap.gpus[0].p2p  # (their per-pair results, the --detail p2p series)
    node.faults.clear()
    snap = cycle(sampler, clock, 2)
    assert all(g.up for g in snap.gpus)
    assert errors.snapshot()[("nvml", pynvml.NVMLError(code).__class__.__name__.removeprefix("NVMLError_"))]


def test_a_session_error_everywhere_still_restarts_the_session(make_node, faulty, clock):
    node = make_node("healthy", n_gpus=4)
    sampler, _ = faulty(node)
    cycle(sampler, clock, 2)
    last_good = clock.now
    node.faults.add("*", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    snap = cycle(sampler, clock, 2)
    assert not snap.nvml_up and all(g.status == "nvml_down" for g in snap.gpus)
    metrics = scrape(snap)
    assert {s.value for s in metrics["gpu_last_collect_timestamp_seconds"]} == {last_good}
    assert "gpu_power_watts" not in metrics
    node.faults.clear()
    snap = cycle(sampler, clock, 3)
    assert snap.nvml_up and all(g.up for g in snap.gpus) and node.library.calls["nvmlInitWithFlags"] >= 2


def test_a_gpu_failing_at_discovery_does_not_stop_the_others(make_node, faulty, clock):
    node = make_node("healthy", n_gpus=4)
    fault = node.faults.add("*", pynvml.NVML_ERROR_DRIVER_NOT_LOADED, gpu=1)
    sampler, _ = faulty(node)
    snap = cycle(sampler, clock, 2)
    assert snap.nvml_up and [g.up for g in snap.gpus] == [True, False, True, True]
    node.faults.remove(fault)
    snap = cycle(sampler, clock, 3)
    assert all(g.up for g in snap.gpus)


def test_the_gpu_unresponsive_scenario_downs_one_gpu_and_keeps_its_age(make_node, faulty, clock):
    node = make_node("gpu_unresponsive:onset=5", n_gpus=8)
    sampler, _ = faulty(node)
    snap = cycle(sampler, clock, 3)
    assert all(g.up for g in snap.gpus)
    snap = cycle(sampler, clock, 5)
    assert [g.index for g in snap.gpus if not g.up] == [6] and snap.nvml_up
    metrics = scrape(snap)
    assert of_gpu(metrics, "gpu_last_collect_timestamp_seconds", 6)[0].value < clock.now - 2
    assert of_gpu(metrics, "gpu_power_watts", 6) == [] and of_gpu(metrics, "gpu_power_watts", 5)


def test_a_sample_buffer_that_stops_filling_is_not_reported_as_current(make_node, faulty, clock):
    node = make_node("healthy", n_gpus=2)
    sampler, _ = faulty(node)
    cycle(sampler, clock, 2)
    node.faults.add("nvmlDeviceGetSamples", pynvml.NVML_ERROR_NOT_FOUND, gpu=1)  # "nothing newer", forever
    metrics = scrape(cycle(sampler, clock, 2))
    assert of_gpu(metrics, "gpu_utilization_ratio", 1)  # a collection or two without a sample is routine
    metrics = scrape(cycle(sampler, clock, int(SAMPLE_CARRY.value)))
    for name in ("gpu_utilization_ratio", "gpu_power_watts", "gpu_utilization_window_ratio"):
        assert of_gpu(metrics, name, 1) == [] and of_gpu(metrics, name, 0), name
    node.faults.clear()
    metrics = scrape(cycle(sampler, clock))
    assert of_gpu(metrics, "gpu_utilization_ratio", 1) and of_gpu(metrics, "gpu_power_watts", 1)
