"""Telemetry points: the one shape that live sampling, recorded traces and the detectors share.

A ``GpuPoint`` is what one row of a trace CSV holds for one GPU; a ``HostPoint`` the node-wide columns.
Live readings become points here (one point per driver utilization sample, other signals carried),
so that what ``record`` writes and ``replay`` reads is exactly what the live detectors saw.
All values are in base units: ratios 0-1, watts, bytes, bytes/s, hertz, celsius.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from exporter.sources.readings import GpuReading, HostReading, NvLinkReading, Sample


class _NoExtra(Mapping[str, float]):
    """The empty mapping every point without catalog signals shares, which nobody can fill; unlike a
    MappingProxyType it pickles (replay's process pool hands points back), as the one shared instance."""

    __slots__ = ()

    def __getitem__(self, key: str) -> float:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __reduce__(self) -> tuple[object, tuple[()]]:
        return (_no_extra, ())


def _no_extra() -> Mapping[str, float]:
    return NO_EXTRA


NO_EXTRA: Mapping[str, float] = _NoExtra()


# not frozen, like the readings' samples: five to ten are made for every GPU each second, and a frozen
# dataclass costs five times as much to make (every field set through object.__setattr__); never changed
# once made
@dataclass(slots=True)
class GpuPoint:  # gpu_points builds these positionally: a new field goes into _SHARED's order too
    t: float
    util: float | None = None
    mem_util: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    power_default_w: float | None = None
    mem_used_bytes: float | None = None
    mem_total_bytes: float | None = None
    temp_c: float | None = None
    temp_mem_c: float | None = None
    sm_clock_hz: float | None = None
    sm_clock_max_hz: float | None = None
    reasons: int | None = None
    sm_active: float | None = None
    tensor_active: float | None = None
    nvlink_tx_bps: float | None = None
    nvlink_rx_bps: float | None = None
    pcie_tx_bps: float | None = None
    pcie_rx_bps: float | None = None
    nvlink_active: float | None = None  # links up
    nvlink_links: float | None = None  # links present
    nvlink_errors: float | None = None  # cumulative replay + recovery + CRC errors over all links
    p2p_failed: float | None = None  # peers this GPU cannot reach peer-to-peer
    fabric_ready: bool | None = None  # NVSwitch fabric registration completed
    log_silent_s: float | None = None  # seconds since the job's last log line or progress report
    # an inference server's own count of requests in flight and queued (its periodic log line)
    requests_running: float | None = None
    requests_waiting: float | None = None
    # catalog signals read generically (exporter/policy/catalog.py), by name; the reading's, never copied
    extra: Mapping[str, float] = field(default_factory=lambda: NO_EXTRA, hash=False)


@dataclass(frozen=True, slots=True)
class HostPoint:
    t: float
    iowait: float | None = None
    core_busy_max: float | None = None
    shm_used_bytes: float | None = None
    shm_size_bytes: float | None = None
    disk_read_bps: float | None = None
    psi_io: float | None = None
    psi_cpu: float | None = None
    psi_memory: float | None = None


def _rate(now: float | None, before: float | None, dt: float) -> float | None:
    """Per-second rate of a counter; None across a reset or without a previous value."""
    if now is None or before is None or dt <= 0 or now < before:
        return None
    return (now - before) / dt


def _at(samples: tuple[Sample, ...], times: list[float], t: float) -> float | None:
    """The latest sample at or before t (or the first one, for points before it)."""
    if not samples:
        return None
    i = bisect.bisect_right(times, t) - 1
    return samples[max(i, 0)].value


# the fields every point of one collection shares, in GpuPoint's order: points are built positionally,
# five to ten per GPU each second, which costs a third of building them by keyword from a shared dict
_SHARED = (
    "power_limit_w",
    "power_default_w",
    "mem_used_bytes",
    "mem_total_bytes",
    "temp_c",
    "temp_mem_c",
    "sm_clock_hz",
    "sm_clock_max_hz",
    "reasons",
    "sm_active",
    "tensor_active",
    "nvlink_tx_bps",
    "nvlink_rx_bps",
    "pcie_tx_bps",
    "pcie_rx_bps",
    "nvlink_active",
    "nvlink_links",
    "nvlink_errors",
    "p2p_failed",
    "fabric_ready",
)


def _link_totals(links: tuple[NvLinkReading, ...]) -> tuple[int | None, int | None]:
    """Bytes sent and received over all links (None: no link counted any)."""
    tx = rx = None
    for link in links:
        if link.tx_bytes is not None:
            tx = link.tx_bytes if tx is None else tx + link.tx_bytes
        if link.rx_bytes is not None:
            rx = link.rx_bytes if rx is None else rx + link.rx_bytes
    return tx, rx


def _traffic(reading: GpuReading) -> tuple[int | None, int | None]:
    """NVLink bytes over every link: the source's sums, or the counters of the links that gave one added up.
    Unlike the exposed counter (GpuReading.nvlink_traffic), a link without one leaves a sum here: the rate
    is taken between two readings and dropped across a decrease (``_rate``), so a link that stops counting
    costs a point, not a spike, and a GPU with a link down keeps its traffic."""
    if reading.nvlink_tx_bytes is not None or reading.nvlink_rx_bytes is not None:
        return reading.nvlink_tx_bytes, reading.nvlink_rx_bytes
    return _link_totals(reading.nvlinks)


def _link_states(links: tuple[NvLinkReading, ...]) -> tuple[int | None, int | None, int | None]:
    """Links up (None: no state known), links present (None: no state known), errors over all links."""
    up = errors = None
    for link in links:
        if link.up is not None:
            up = (up or 0) + link.up
        if link.errors:
            count = sum(link.errors.values())
            errors = count if errors is None else errors + count
    return up, len(links) if up is not None else None, errors


def gpu_points(
    reading: GpuReading,
    prev: GpuReading | None,
    p2p_failed: int | None = None,
    last_sign: float | None = None,
    load: tuple[float, float] | None = None,
) -> list[GpuPoint]:
    """Points for one collection: one per new utilization sample, or one at the collection time.
    ``p2p_failed``: the GPU's NVLink peers it cannot reach (``p2p_failures``; None: not checked);
    ``last_sign``: wall time of the job's last sign of life (None: no log signal); ``load``: its inference
    server's requests (running, waiting) from its latest load line (None: no such line)."""
    running, waiting = load if load is not None else (None, None)
    dt = reading.t - prev.t if prev is not None else 0.0
    nv_tx, nv_rx = _traffic(reading)
    prev_tx, prev_rx = _traffic(prev) if prev else (None, None)
    active, links, errors = _link_states(reading.nvlinks)
    shared = (  # in _SHARED's order
        reading.power_limit_w,
        reading.power_default_limit_w,
        reading.mem_used_bytes,
        reading.mem_total_bytes,
        reading.temp_c,
        reading.temp_mem_c,
        reading.clock_sm_hz,
        reading.clock_sm_max_hz,
        reading.clock_reasons,
        reading.sm_active,
        reading.tensor_active,
        _rate(nv_tx, prev_tx, dt),
        _rate(nv_rx, prev_rx, dt),
        _rate(reading.pcie_tx_bytes, prev.pcie_tx_bytes if prev else None, dt),
        _rate(reading.pcie_rx_bytes, prev.pcie_rx_bytes if prev else None, dt),
        active,
        links,
        errors,
        p2p_failed,
        None if reading.fabric_state is None else reading.fabric_state == "completed",
    )
    extra = reading.extra or NO_EXTRA
    if not reading.util_samples:
        silent = _silent(reading.t, last_sign)
        return [
            GpuPoint(
                reading.t, None, reading.mem_util, reading.power_w, *shared, silent, running, waiting, extra
            )
        ]
    mem_times = [s.t for s in reading.mem_util_samples]
    power_times = [s.t for s in reading.power_samples]
    points = []
    for sample in reading.util_samples:
        mem = _at(reading.mem_util_samples, mem_times, sample.t)
        power = _at(reading.power_samples, power_times, sample.t)
        points.append(
            GpuPoint(
                sample.t,
                sample.value,
                mem if mem is not None else reading.mem_util,
                power if power is not None else reading.power_w,
                *shared,
                _silent(sample.t, last_sign),
                running,
                waiting,
                extra,
            )
        )
    return points


def _silent(t: float, last_sign: float | None) -> float | None:
    return max(0.0, t - last_sign) if last_sign is not None else None


def host_point(reading: HostReading, prev: HostReading | None) -> HostPoint:
    fullest = max(reading.shm, key=lambda s: s.used_bytes / s.size_bytes, default=None)
    read_now = sum(d.read_bytes for d in reading.disks) if reading.disks else None
    read_before = sum(d.read_bytes for d in prev.disks) if prev and prev.disks else None
    return HostPoint(
        t=reading.t,
        iowait=reading.iowait,
        core_busy_max=reading.core_busy_max,
        shm_used_bytes=fullest.used_bytes if fullest else None,
        shm_size_bytes=fullest.size_bytes if fullest else None,
        disk_read_bps=_rate(read_now, read_before, reading.t - prev.t) if prev else None,
        psi_io=reading.pressure.get("io"),
        psi_cpu=reading.pressure.get("cpu"),
        psi_memory=reading.pressure.get("memory"),
    )


def p2p_failures(p2p: Mapping[tuple[int, int, str], bool]) -> dict[int, int]:
    """Per GPU with NVLink P2P results, how many peers it cannot reach over NVLink."""
    failed: dict[int, int] = {}
    for (a, _, cap), ok in p2p.items():
        if cap == "nvlink":
            failed[a] = failed.get(a, 0) + (not ok)
    return failed
