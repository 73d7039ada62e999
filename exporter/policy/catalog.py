"""The signal catalog: one row per plain per-GPU numeric signal, and everything derived from it.

A row says what the signal is (unit, where NVML gives it), how it is exported (metric family, kind, help,
a fixed label that tells it apart from its siblings in a shared family, the ``--detail`` category that
turns it on) and how a trace carries it (the point attribute, nvidia-smi's column name and unit, the
physical bounds of a cell). From the rows come:

- the per-GPU trace columns of exporter/offline/traces.py (``GPU_COLUMNS``, ``WRITE_COLUMNS``,
  ``DEFAULT_UNITS``, ``BOUNDS``, ``PERCENT_FIELDS`` for GPU columns),
- the simple per-GPU families of exporter/serve/metrics.py (``metric_rows``),
- the families a detail category adds (exporter/policy/detail.py),
- the "Readings" table of docs/metrics.md (devtools/artifacts/metrics_doc.py).

A signal with a ``read`` (an NVML call and its arguments) needs nothing else: the NVML source reads it
generically into ``GpuReading.extra`` and ``GpuPoint.extra`` carries it into traces. Adding such a
signal is one row here plus what the simulator must answer.

Not here, on purpose (their shape is not "one number per GPU"): verdicts and scores, the time ledger,
window statistics (they come from the analysis), XIDs, clock-event reasons (a bit mask decoded into
labels), NVLink per-link values and aggregates, PCIe traffic (counters by direction), P2P status, the
fabric state, pod assignments, host and pod-log families. Those stay hand-written in metrics.py. Trace
columns derived from several readings (NVLink rates, links up, P2P failures, fabric readiness, log
silence) are rows without a metric.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from exporter.policy import thresholds as th

MIB = float(1 << 20)

# physical bounds of a trace cell, in base units: (low, high, as shown, why); the numbers and their reasons
# are the threshold table's replay.bound.* lines
Bounds = tuple[float, float, str, str]
SHARE: Bounds = (0.0, 1.0, "0-100 %", "a share of time or capacity")
FLAG: Bounds = (0.0, 1.0, "0 or 1", "a yes/no cell")
TEMPERATURE: Bounds = (
    th.TRACE_TEMP_MIN.value,
    th.TRACE_TEMP_MAX.value,
    f"{th.TRACE_TEMP_MIN.value:g}..{th.TRACE_TEMP_MAX.value:g} C",
    "beyond any GPU's storage and shutdown limits",
)


def _upto(threshold: th.Threshold, scale: float, unit: str, why: str) -> Bounds:
    """0 up to a threshold's value (base units), shown in the column's unit, the threshold named."""
    high = threshold.value * scale
    shown = f"{high:,.0f}" if 1000 <= high < 1e15 else f"{high:g}"
    return (0.0, threshold.value, f"0..{shown} {unit}".rstrip(), f"{why}: {threshold.key}")


POWER = _upto(th.TRACE_POWER_MAX, 1.0, "W", "no board draws less than nothing or more than a whole tray")
CLOCK = _upto(th.TRACE_CLOCK_MAX, 1e-6, "MHz", "no GPU clocks above a few GHz")
MEMORY = _upto(th.TRACE_GPU_MEMORY_MAX, 1 / MIB, "MiB", "no GPU holds more")
HOST_MEMORY = _upto(th.TRACE_HOST_MEMORY_MAX, 1 / MIB, "MiB", "no node holds more")
NVLINK_RATE = _upto(th.TRACE_NVLINK_MAX, 1 / MIB, "MiB/s", "beyond any GPU's NVLinks")
PCIE_RATE = _upto(th.TRACE_PCIE_MAX, 1 / MIB, "MiB/s", "beyond any GPU's PCIe link")
DISK_RATE = _upto(th.TRACE_DISK_MAX, 1 / MIB, "MiB/s", "beyond any node's drives")
LINKS = _upto(th.TRACE_LINKS_MAX, 1.0, "links", "no GPU has more NVLinks")
PEERS = _upto(th.TRACE_PEERS_MAX, 1.0, "peers", "a trace holds at most 1,024 GPUs")
COUNTER = _upto(th.TRACE_COUNTER_MAX, 1.0, "", "a 64-bit counter, never negative")
SILENCE = _upto(th.TRACE_SILENCE_MAX, 1.0, "s", "ten years")
REQUESTS = _upto(th.TRACE_REQUESTS_MAX, 1.0, "", "no server queues ten million requests")

# nvidia-smi's units of a column -> the factor from base units to it (what the writer multiplies by)
_TO_UNIT = {"%": 100.0, "MiB": 1 / MIB, "MiB/s": 1 / MIB, "W": 1.0, "MHz": 1e-6, "s": 1.0, "": 1.0}


@dataclass(frozen=True, slots=True)
class NvmlRead:
    """A read the NVML source does generically: ``call(handle, *args)`` times ``scale`` is the value."""

    call: str
    args: tuple[int, ...] = ()
    scale: float = 1.0
    slow: bool = False  # read every --slow-interval rather than every collection


@dataclass(frozen=True, slots=True)
class Signal:
    name: str  # GpuReading attribute, or the key of GpuReading.extra for a signal with a ``read``
    unit: str  # base unit, as docs/metrics.md shows it: ratio, bytes, watts, celsius, hertz, ...
    nvml: str = ""  # where the value comes from (docs/metrics.md's "source" cell)
    metric: str | None = None  # family name (without _total); None: a trace column only
    help: str = ""
    kind: str = "gauge"
    label: str = ""  # fixed label pair(s) of its series in a shared family: 'sensor="gpu"'
    detail: str | None = None  # the --detail category that turns the series on; None: always
    point: str | None = None  # GpuPoint attribute (None: not in traces); defaults to extra[name]
    column: str | None = None  # trace column (nvidia-smi's --query-gpu name or ours)
    aliases: tuple[str, ...] = ()  # other column names read as the same (older nvidia-smi, variants)
    column_unit: str = ""  # the column's unit when neither header nor cells say (nvidia-smi's own)
    fmt: str = "{:.0f}"  # how the writer formats a cell (after scaling to column_unit); "hex": a mask
    bounds: Bounds | None = None  # physically possible values; a cell outside is read as missing
    read: NvmlRead | None = None

    @property
    def trace_attr(self) -> str:
        return self.point or self.name


SIGNALS: tuple[Signal, ...] = (
    Signal(
        "util",
        "ratio",
        "latest `NVML_GPU_UTILIZATION_SAMPLES` sample; `nvmlDeviceGetUtilizationRates().gpu` where the "
        "sample buffer is not supported",
        "gpu_utilization_ratio",
        "Latest volatile GPU utilization (share of time a kernel ran).",
        point="util",
        column="utilization.gpu",
        column_unit="%",
        fmt="{:.0f} %",
        bounds=SHARE,
    ),
    Signal(
        "mem_util",
        "ratio",
        "latest `NVML_MEMORY_UTILIZATION_SAMPLES` sample (memory controller / copy activity); "
        "`nvmlDeviceGetUtilizationRates().memory` as fallback",
        "gpu_memory_utilization_ratio",
        "Latest memory-controller (copy) utilization.",
        point="mem_util",
        column="utilization.memory",
        column_unit="%",
        fmt="{:.0f} %",
        bounds=SHARE,
    ),
    Signal(
        "mem_used_bytes",
        "bytes",
        "`nvmlDeviceGetMemoryInfo_v2` (`nvmlDeviceGetMemoryInfo` on older drivers)",
        "gpu_memory_used_bytes",
        "Framebuffer memory used.",
        point="mem_used_bytes",
        column="memory.used",
        column_unit="MiB",
        fmt="{:.0f} MiB",
        bounds=MEMORY,
    ),
    Signal(
        "mem_total_bytes",
        "bytes",
        "same",
        "gpu_memory_total_bytes",
        "Framebuffer memory total.",
        point="mem_total_bytes",
        column="memory.total",
        column_unit="MiB",
        fmt="{:.0f} MiB",
        bounds=MEMORY,
    ),
    Signal(
        "power_w",
        "watts",
        "latest `NVML_TOTAL_POWER_SAMPLES` sample; `nvmlDeviceGetPowerUsage` as fallback",
        "gpu_power_watts",
        "Latest power draw.",
        point="power_w",
        column="power.draw",
        aliases=("power.draw.instant", "power.draw.average"),
        column_unit="W",
        fmt="{:.2f} W",
        bounds=POWER,
    ),
    Signal(
        "power_limit_w",
        "watts",
        "`nvmlDeviceGetEnforcedPowerLimit`",
        "gpu_power_limit_watts",
        "Enforced power limit.",
        point="power_limit_w",
        column="power.limit",
        aliases=("enforced.power.limit",),
        column_unit="W",
        fmt="{:.2f} W",
        bounds=POWER,
    ),
    Signal(
        "power_default_limit_w",
        "watts",
        "`nvmlDeviceGetPowerManagementDefaultLimit`; the exporter treats it as the board's TDP",
        "gpu_power_default_limit_watts",
        "The board's default power limit, used as TDP.",
        point="power_default_w",
        column="power.default_limit",
        column_unit="W",
        fmt="{:.2f} W",
        bounds=POWER,
    ),
    Signal(
        "energy_j",
        "joules",
        "`nvmlDeviceGetTotalEnergyConsumption` (energy since the driver loaded)",
        "gpu_energy_joules",
        "Energy consumed since the driver loaded.",
        kind="counter",
    ),
    Signal(
        "temp_c",
        "celsius",
        "`nvmlDeviceGetTemperatureV` (`nvmlDeviceGetTemperature` on older drivers)",
        "gpu_temperature_celsius",
        "Temperature.",
        label='sensor="gpu"',
        point="temp_c",
        column="temperature.gpu",
        fmt="{:.0f}",
        bounds=TEMPERATURE,
    ),
    Signal(
        "temp_mem_c",
        "celsius",
        "memory: field `NVML_FI_DEV_MEMORY_TEMP`",
        "gpu_temperature_celsius",
        "Temperature.",
        label='sensor="memory"',
        point="temp_mem_c",
        column="temperature.memory",
        fmt="{:.0f}",
        bounds=TEMPERATURE,
    ),
    Signal(
        "temp_slowdown_c",
        "celsius",
        "`nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)`",
        "gpu_temperature_slowdown_celsius",
        "Temperature at which the GPU starts hardware slowdown.",
    ),
    Signal(
        "clock_sm_hz",
        "hertz",
        "`nvmlDeviceGetClockInfo`",
        "gpu_clock_hertz",
        "Current clock.",
        label='clock="sm"',
        point="sm_clock_hz",
        column="clocks.sm",
        aliases=("clocks.current.sm",),
        column_unit="MHz",
        fmt="{:.0f} MHz",
        bounds=CLOCK,
    ),
    Signal(
        "clock_sm_max_hz",
        "hertz",
        "`nvmlDeviceGetMaxClockInfo`",
        "gpu_clock_max_hertz",
        "Maximum clock.",
        label='clock="sm"',
        detail="clocks",
        point="sm_clock_max_hz",
        column="clocks.max.sm",
        column_unit="MHz",
        fmt="{:.0f} MHz",
        bounds=CLOCK,
    ),
    Signal(
        "clock_mem_hz",
        "hertz",
        "`nvmlDeviceGetClockInfo`",
        "gpu_clock_hertz",
        "Current clock.",
        label='clock="memory"',
        detail="clocks",
    ),
    Signal(
        "clock_mem_max_hz",
        "hertz",
        "`nvmlDeviceGetMaxClockInfo`",
        "gpu_clock_max_hertz",
        "Maximum clock.",
        label='clock="memory"',
        detail="clocks",
    ),
    Signal(
        "clock_reasons",
        "mask",
        "`nvmlDeviceGetCurrentClocksEventReasons` (`...ThrottleReasons` on older drivers)",
        point="reasons",
        column="clocks_event_reasons.active",
        aliases=("clocks_throttle_reasons.active",),
        fmt="hex",
    ),
    Signal(
        "sm_active",
        "ratio",
        "`NVML_GPM_METRIC_SM_UTIL`. GPM metrics are present only where `nvmlGpmQueryDeviceSupport` says the "
        "GPU supports GPM (Hopper and later); each is the average between two consecutive collections "
        "(`nvmlGpmSampleGet`, `nvmlGpmMetricsGet`)",
        "gpu_sm_active_ratio",
        "Share of time SMs had a warp resident (GPM).",
        point="sm_active",
        column="gpm.sm_active",
        column_unit="%",
        fmt="{:.1f}",
        bounds=SHARE,
    ),
    Signal(
        "sm_occupancy",
        "ratio",
        "`NVML_GPM_METRIC_SM_OCCUPANCY`",
        "gpu_sm_occupancy_ratio",
        "Resident warps over the maximum (GPM).",
        detail="profiling",
    ),
    Signal(
        "tensor_active",
        "ratio",
        "`NVML_GPM_METRIC_ANY_TENSOR_UTIL`",
        "gpu_tensor_active_ratio",
        "Share of time tensor cores were busy (GPM).",
        detail="profiling",
        point="tensor_active",
        column="gpm.tensor_active",
        column_unit="%",
        fmt="{:.1f}",
        bounds=SHARE,
    ),
    Signal(
        "dram_active",
        "ratio",
        "`NVML_GPM_METRIC_DRAM_BW_UTIL`",
        "gpu_dram_active_ratio",
        "DRAM bandwidth used over the peak (GPM).",
        detail="profiling",
    ),
    # trace columns derived from several readings (exporter/analysis/points.py); their metrics, where
    # they have one, are hand-written families
    *(
        Signal(
            f"{link}_{way}_bps",
            "bytes/s",
            point=f"{link}_{way}_bps",
            column=f"{link}.{way}",
            column_unit="MiB/s",
            bounds=bounds,
        )
        for link, bounds in (("nvlink", NVLINK_RATE), ("pcie", PCIE_RATE))
        for way in ("tx", "rx")
    ),
    Signal("nvlink_active", "links", point="nvlink_active", column="nvlink.active", bounds=LINKS),
    Signal("nvlink_links", "links", point="nvlink_links", column="nvlink.links", bounds=LINKS),
    Signal("nvlink_errors", "errors", point="nvlink_errors", column="nvlink.errors", bounds=COUNTER),
    Signal("p2p_failed", "pairs", point="p2p_failed", column="p2p.failed", bounds=PEERS),
    Signal("fabric_ready", "", point="fabric_ready", column="fabric.ready", bounds=FLAG),
    Signal(
        "log_silent_s",
        "seconds",
        point="log_silent_s",
        column="progress.log_silent",
        column_unit="s",
        fmt="{:.1f}",
        bounds=SILENCE,
    ),
    # an inference server's own request counts, from its periodic log line (exporter/podlogs)
    *(
        Signal(
            f"requests_{state}",
            "requests",
            point=f"requests_{state}",
            column=f"serving.{state}",
            fmt="{:.0f}",
            bounds=REQUESTS,
        )
        for state in ("running", "waiting")
    ),
    # nvmlDeviceGetTotalEccErrors(handle, nvmlMemoryErrorType_t, nvmlEccCounterType_t), read every
    # --slow-interval: ECC counts change rarely and a board without ECC says NotSupported once
    *(
        Signal(
            f"ecc_{kind}_{counter}",
            "errors",
            "`nvmlDeviceGetTotalEccErrors` (memory error type corrected/uncorrected, counter volatile since "
            "the driver loaded or aggregate over the board's life); absent on boards without ECC or with "
            "ECC off",
            "gpu_ecc_errors",
            "ECC memory errors by type (corrected, uncorrected) and counter (volatile: since the driver "
            "loaded; aggregate: the board's life).",
            kind="counter",
            label=f'type="{kind}",counter="{counter}"',
            detail="ecc",
            column=f"ecc.errors.{kind}.{counter}.total",
            bounds=COUNTER,
            read=NvmlRead("nvmlDeviceGetTotalEccErrors", (kind_id, counter_id), slow=True),
        )
        for kind, kind_id in (("corrected", 0), ("uncorrected", 1))
        for counter, counter_id in (("volatile", 0), ("aggregate", 1))
    ),
    Signal(
        "process_count",
        "processes",
        "`nvmlDeviceGetComputeRunningProcesses`",
        "gpu_process_count",
        "Compute processes holding the GPU.",
        detail="processes",
    ),
)

# categories of --detail that catalog signals introduce (exporter/policy/detail.py adds them): name -> why
DETAIL_CATEGORIES: dict[str, str] = {
    "ecc": "ECC error counts by type and counter: which board's memory is wearing out",
}

READS: tuple[Signal, ...] = tuple(s for s in SIGNALS if s.read is not None)


def family_name(signal: Signal) -> str:
    """The exposed family name: counters end in _total."""
    assert signal.metric is not None
    return signal.metric + "_total" if signal.kind == "counter" else signal.metric


def detail_families() -> dict[str, tuple[str, ...]]:
    """--detail category -> the exposed families its catalog signals add, in catalog order."""
    out: dict[str, list[str]] = {}
    for s in SIGNALS:
        if s.metric is not None and s.detail is not None:
            names = out.setdefault(s.detail, [])
            if family_name(s) not in names:
                names.append(family_name(s))
    return {category: tuple(names) for category, names in out.items()}


# ---- metrics ------------------------------------------------------------------------------------

# (attribute or extra key, family, kind, help, ", label" to append to the GPU's labels, read from extra)
MetricRow = tuple[str, str, str, str, str, bool]


@functools.cache
def metric_rows(detail: frozenset[str]) -> tuple[MetricRow, ...]:
    """The families a render with these --detail categories exports, resolved once per category set so
    the per-GPU loop does a getattr and an append per signal."""
    return tuple(
        (s.name, s.metric, s.kind, s.help, f",{s.label}" if s.label else "", s.read is not None)
        for s in SIGNALS
        if s.metric is not None and (s.detail is None or s.detail in detail)
    )


# ---- traces -------------------------------------------------------------------------------------


def trace_signals() -> tuple[Signal, ...]:
    return tuple(s for s in SIGNALS if s.column is not None)


def gpu_columns() -> dict[str, tuple[str, str]]:
    """Column name (and alias) -> ("gpu", point attribute) or ("extra", key of GpuPoint.extra)."""
    out: dict[str, tuple[str, str]] = {}
    for s in trace_signals():
        target = ("gpu", s.point) if s.point else ("extra", s.name)
        for name in (s.column, *s.aliases):
            out[name] = target  # type: ignore[index]
    return out


def write_columns() -> tuple[tuple[str, str, str, float, str], ...]:
    """What the trace writer writes per GPU: (header, "gpu"|"extra", attribute, scale, format)."""
    out = []
    for s in trace_signals():
        header = f"{s.column} [{s.column_unit}]" if s.column_unit else str(s.column)
        out.append((header, "gpu" if s.point else "extra", s.trace_attr, _TO_UNIT[s.column_unit], s.fmt))
    return tuple(out)


def default_units() -> dict[str, str]:
    return {s.trace_attr: s.column_unit for s in trace_signals() if s.column_unit}


def bounds() -> dict[str, Bounds]:
    return {s.trace_attr: s.bounds for s in trace_signals() if s.bounds is not None}


def percent_fields() -> tuple[str, ...]:
    return tuple(s.trace_attr for s in trace_signals() if s.column_unit == "%")
