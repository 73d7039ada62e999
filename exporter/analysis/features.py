"""Features: what the detectors look at, computed from the points of the evidence window. Pure.

Every feature is None when its input column never had a value in the window, so a detector can tell
"the signal says no" from "there is no signal".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.analysis.points import GpuPoint, HostPoint
from exporter.analysis.window import quantile
from exporter.thresholds import UTIL_IDLE_LINE, board_tdp

THERMAL_BITS = 0x20 | 0x40  # sw_thermal, hw_thermal
HW_SLOWDOWN = 0x8
POWER_CAP_BITS = 0x4 | 0x80  # sw_power_cap, hw_power_brake
BUSY_LINE = 0.5
RECENT_S = 10.0  # thermal reasons are judged on the last 10 s: they switch fast


@dataclass(frozen=True)
class UtilStats:
    """Utilization over a stretch of samples."""

    mean: float
    p05: float
    p95: float
    idle_fraction: float
    gaps: int

    @property
    def spread(self) -> float:
        return self.p95 - self.p05


def util_stats(utils: Sequence[float]) -> UtilStats | None:
    if not utils:
        return None
    ordered = sorted(utils)
    return UtilStats(
        mean=sum(utils) / len(utils),
        p05=quantile(ordered, 0.05),
        p95=quantile(ordered, 0.95),
        idle_fraction=sum(1 for u in utils if u < UTIL_IDLE_LINE.value) / len(utils),
        gaps=count_gaps(utils),
    )


@dataclass(frozen=True)
class GpuFeatures:
    n: int = 0
    span_s: float = 0.0
    util_mean: float | None = None
    util_p05: float | None = None
    util_p95: float | None = None
    idle_fraction: float | None = None
    busy_fraction: float | None = None
    gaps: int = 0
    halves: tuple[UtilStats | None, UtilStats | None] = (None, None)  # older and newer half of the window
    trailing_idle_s: float = 0.0  # how long the GPU has been idle up to the last sample
    power_mean: float | None = None
    power_cv: float | None = None
    power_ref_w: float | None = None  # what the GPU may draw: enforced limit, else default, else board TDP
    limit_w: float | None = None
    default_w: float | None = None
    sm_mean: float | None = None
    nvlink_bps: float | None = None
    pcie_bps: float | None = None
    mem_util_mean: float | None = None
    mem_util_in_gaps: float | None = None
    temp_last: float | None = None
    temp_mean: float | None = None
    temp_slope: float | None = None  # celsius per second over the window
    busy_clock_ratio: float | None = None
    thermal_share: float | None = None  # busy samples of the last 10 s with a thermal reason
    cap_share: float | None = None  # busy samples with the power cap holding the clocks
    mem_used_bytes: float | None = None
    mem_total_bytes: float | None = None
    nvlink_active: float | None = None
    nvlink_links: float | None = None
    nvlink_error_rate: float | None = None  # per minute
    p2p_failed: float | None = None
    fabric_ready: bool | None = None

    @property
    def power_ratio(self) -> float | None:
        if self.power_mean is None or not self.power_ref_w:
            return None
        return self.power_mean / self.power_ref_w


@dataclass(frozen=True)
class HostFeatures:
    iowait: float | None = None
    core_busy_max: float | None = None
    psi_io: float | None = None
    psi_cpu: float | None = None
    shm_ratio: float | None = None
    shm_seconds_to_full: float | None = None
    disk_read_bps: float | None = None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _last(points: Sequence[object], attr: str) -> float | None:
    for p in reversed(points):
        value = getattr(p, attr)
        if value is not None:
            return value
    return None


def slope(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (t, value) pairs."""
    if len(pairs) < 3:
        return None
    n = len(pairs)
    mt = sum(t for t, _ in pairs) / n
    mv = sum(v for _, v in pairs) / n
    var = sum((t - mt) ** 2 for t, _ in pairs)
    if var <= 0:
        return None
    return sum((t - mt) * (v - mv) for t, v in pairs) / var


def gpu_features(
    points: Sequence[GpuPoint], name: str = "", power_seen_w: float | None = None
) -> GpuFeatures:
    """Features of one GPU's points (oldest first) over the evidence window. ``power_seen_w`` is the
    most the GPU has been seen drawing while busy: the power reference of last resort, for logs
    without a power limit column or a known board name."""
    if not points:
        return GpuFeatures()
    utils = [p.util for p in points if p.util is not None]
    idle = [u < UTIL_IDLE_LINE.value for u in utils]
    gaps = count_gaps(utils)
    ordered = sorted(utils)
    trailing_start = None
    for p in reversed(points):
        if p.util is None:
            continue
        if p.util >= UTIL_IDLE_LINE.value:
            break
        trailing_start = p.t
    powers = [p.power_w for p in points if p.power_w is not None]
    power_mean = _mean(powers)
    power_cv = None
    if power_mean and len(powers) > 1:
        power_cv = math.sqrt(sum((x - power_mean) ** 2 for x in powers) / len(powers)) / power_mean
    limit, default = _last(points, "power_limit_w"), _last(points, "power_default_w")
    busy = [p for p in points if p.util is not None and p.util >= BUSY_LINE]
    recent = [p for p in busy if p.t > points[-1].t - RECENT_S]
    reasons_busy = [p.reasons for p in busy if p.reasons is not None]
    reasons_recent = [p for p in recent if p.reasons is not None]
    thermal_share = None
    if reasons_recent:
        hot = sum(1 for p in reasons_recent if p.reasons & THERMAL_BITS or _hw_slowdown_hot(p))  # type: ignore[operator]
        thermal_share = hot / len(reasons_recent)
    clocks = [p.sm_clock_hz / p.sm_clock_max_hz for p in busy if p.sm_clock_hz and p.sm_clock_max_hz]
    temps = [(p.t, p.temp_c) for p in points if p.temp_c is not None]
    idle_mem = [
        p.mem_util
        for p in points
        if p.util is not None and p.util < UTIL_IDLE_LINE.value and p.mem_util is not None
    ]
    traffic = [
        (p.nvlink_tx_bps or 0.0) + (p.nvlink_rx_bps or 0.0) for p in points if p.nvlink_tx_bps is not None
    ]
    pcie = [(p.pcie_tx_bps or 0.0) + (p.pcie_rx_bps or 0.0) for p in points if p.pcie_tx_bps is not None]
    errors = [(p.t, p.nvlink_errors) for p in points if p.nvlink_errors is not None]
    error_rate = None
    if len(errors) >= 2 and errors[-1][0] > errors[0][0]:
        error_rate = max(0.0, errors[-1][1] - errors[0][1]) / (errors[-1][0] - errors[0][0]) * 60.0
    return GpuFeatures(
        n=len(points),
        span_s=points[-1].t - points[0].t,
        util_mean=_mean(utils),
        util_p05=quantile(ordered, 0.05) if ordered else None,
        util_p95=quantile(ordered, 0.95) if ordered else None,
        idle_fraction=sum(idle) / len(idle) if idle else None,
        busy_fraction=len(busy) / len(utils) if utils else None,
        gaps=gaps,
        halves=(util_stats(utils[: len(utils) // 2]), util_stats(utils[len(utils) // 2 :])),
        trailing_idle_s=points[-1].t - trailing_start if trailing_start is not None else 0.0,
        power_mean=power_mean,
        power_cv=power_cv,
        power_ref_w=limit or default or board_tdp(name) or power_seen_w,
        limit_w=limit,
        default_w=default or board_tdp(name),
        sm_mean=_mean([p.sm_active for p in points if p.sm_active is not None]),
        nvlink_bps=_mean(traffic),
        pcie_bps=_mean(pcie),
        mem_util_mean=_mean([p.mem_util for p in points if p.mem_util is not None]),
        mem_util_in_gaps=_mean(idle_mem),
        temp_last=temps[-1][1] if temps else None,
        temp_mean=_mean([v for _, v in temps]),
        temp_slope=slope(temps),
        busy_clock_ratio=_mean(clocks),
        thermal_share=thermal_share,
        cap_share=(sum(1 for r in reasons_busy if r & POWER_CAP_BITS) / len(reasons_busy))
        if reasons_busy
        else None,
        mem_used_bytes=_last(points, "mem_used_bytes"),
        mem_total_bytes=_last(points, "mem_total_bytes"),
        nvlink_active=_last(points, "nvlink_active"),
        nvlink_links=_last(points, "nvlink_links"),
        nvlink_error_rate=error_rate,
        p2p_failed=_last(points, "p2p_failed"),
        fabric_ready=_last(points, "fabric_ready"),  # type: ignore[arg-type]
    )


def count_gaps(utils: Sequence[float]) -> int:
    """Separate waits: stretches below the busy line that reach the idle line. Samples flickering
    around the idle line inside one dip are one gap; the GPU must get back to work between two."""
    gaps, in_low, touched = 0, False, False
    for u in utils:
        if u < BUSY_LINE:
            in_low = True
            touched = touched or u < UTIL_IDLE_LINE.value
            continue
        if in_low and touched:
            gaps += 1
        in_low = touched = False
    return gaps + (1 if in_low and touched else 0)


def _hw_slowdown_hot(p: GpuPoint) -> bool:
    """HW slowdown (0x8) is thermal or a power brake; count it as thermal only when the GPU is hot."""
    return bool(p.reasons and p.reasons & HW_SLOWDOWN and p.temp_c is not None and p.temp_c >= 80)


def host_features(points: Sequence[HostPoint]) -> HostFeatures:
    if not points:
        return HostFeatures()
    shm = [
        (p.t, p.shm_used_bytes, p.shm_size_bytes)
        for p in points
        if p.shm_used_bytes is not None and p.shm_size_bytes
    ]
    ratio = to_full = None
    if shm:
        _, used, size = shm[-1]
        ratio = used / size  # type: ignore[operator]
        rate = slope([(t, u) for t, u, _ in shm])  # type: ignore[misc]
        if rate and rate > 0:
            to_full = (size - used) / rate  # type: ignore[operator]
    return HostFeatures(
        iowait=_mean([p.iowait for p in points if p.iowait is not None]),
        core_busy_max=_mean([p.core_busy_max for p in points if p.core_busy_max is not None]),
        psi_io=_mean([p.psi_io for p in points if p.psi_io is not None]),
        psi_cpu=_mean([p.psi_cpu for p in points if p.psi_cpu is not None]),
        shm_ratio=ratio,
        shm_seconds_to_full=to_full,
        disk_read_bps=_mean([p.disk_read_bps for p in points if p.disk_read_bps is not None]),
    )
