"""Features: what the detectors look at, computed from the points of the evidence window. Pure.

Every feature is None when its input column never had a value in the window, so a detector can tell
"the signal says no" from "there is no signal".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.analysis.points import GpuPoint, HostPoint
from exporter.analysis.window import HIGH_Q, fraction_below, quantile, summarize
from exporter.policy.nvml_vocab import HW_SLOWDOWN, POWER_CAP_BITS, THERMAL_BITS
from exporter.policy.thresholds import LEDGER_BUSY_UTIL, TEMP_HOT, UTIL_IDLE_LINE, board_tdp

BUSY_LINE = LEDGER_BUSY_UTIL.value
FLAT = 1e-12  # a variance this small is no spread at all: no slope
PER_MINUTE = 60.0
RECENT_S = 10.0  # thermal reasons are judged on the last 10 s: they switch fast
MIN_POINTS = 5  # fewer points in the evidence window show no rhythm and no busy power level
SLOPE_POINTS = 32  # a slope is fitted to at most this many evenly spaced points...
SLOPE_MIN_POINTS = 3  # ...and to no fewer than this: two points are a line whatever the noise


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
    """The window statistics (``window.summarize``, also exported) plus what only the detectors need."""
    values = list(utils)
    whole, idle = summarize(values), fraction_below(values, UTIL_IDLE_LINE.value)
    if whole is None or idle is None:
        return None
    return UtilStats(
        mean=whole.mean,
        p05=whole.p05,
        p95=whole.p95,
        idle_fraction=idle,
        gaps=count_gaps(utils),
    )


@dataclass(frozen=True)
class GpuFeatures:
    n: int = 0
    span_s: float = 0.0
    util_mean: float | None = None
    util_p05: float | None = None
    idle_fraction: float | None = None
    busy_fraction: float | None = None
    gaps: int = 0
    halves: tuple[UtilStats | None, UtilStats | None] = (None, None)  # older and newer half of the window
    trailing_idle_s: float = 0.0  # how long the GPU has been idle up to the last sample
    power_mean: float | None = None
    power_p95: float | None = None
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


def slope(pairs: Sequence[tuple[float, float]], most: int = SLOPE_POINTS) -> float | None:
    """Least-squares slope of (t, value) pairs, over at most ``most`` evenly spaced ones (the signals
    it is used for change once per collection, not per sample)."""
    if len(pairs) > most:
        step = len(pairs) / most
        pairs = [pairs[int(i * step)] for i in range(most)] + [pairs[-1]]
    n = len(pairs)
    if n < SLOPE_MIN_POINTS:
        return None
    st = sv = stt = stv = 0.0
    for t, v in pairs:
        st += t
        sv += v
        stt += t * t
        stv += t * v
    var = stt - st * st / n
    if var <= FLAT:
        return None
    return (stv - st * sv / n) / var


def gpu_features(points: Sequence[GpuPoint], name: str = "", ceiling_w: float | None = None) -> GpuFeatures:
    """Features of one GPU's points (oldest first) over the evidence window. ``ceiling_w`` is the top of
    the GPU's learned power envelope: the power reference of last resort, for logs without a power limit
    column or a known board name."""
    if not points:
        return GpuFeatures()
    last_t = points[-1].t
    utils: list[float] = []
    powers: list[float] = []
    sm: list[float] = []
    mem: list[float] = []
    idle_mem: list[float] = []
    temps: list[tuple[float, float]] = []
    clocks: list[float] = []
    traffic: list[float] = []
    pcie: list[float] = []
    errors: list[tuple[float, float]] = []
    busy = busy_reasons = capped = recent_reasons = hot = 0
    for p in points:  # one pass: this runs for every GPU every second
        u = p.util
        if u is not None:
            utils.append(u)
            if u < UTIL_IDLE_LINE.value and p.mem_util is not None:
                idle_mem.append(p.mem_util)
            if u >= BUSY_LINE:
                busy += 1
                if p.sm_clock_hz and p.sm_clock_max_hz:
                    clocks.append(p.sm_clock_hz / p.sm_clock_max_hz)
                if p.reasons is not None:
                    busy_reasons += 1
                    capped += bool(p.reasons & POWER_CAP_BITS)
                    if p.t > last_t - RECENT_S:
                        recent_reasons += 1
                        hot += bool(p.reasons & THERMAL_BITS or _hw_slowdown_hot(p))
        if p.power_w is not None:
            powers.append(p.power_w)
        if p.sm_active is not None:
            sm.append(p.sm_active)
        if p.mem_util is not None:
            mem.append(p.mem_util)
        if p.temp_c is not None:
            temps.append((p.t, p.temp_c))
        if p.nvlink_tx_bps is not None:
            traffic.append(p.nvlink_tx_bps + (p.nvlink_rx_bps or 0.0))
        if p.pcie_tx_bps is not None:
            pcie.append(p.pcie_tx_bps + (p.pcie_rx_bps or 0.0))
        if p.nvlink_errors is not None:
            errors.append((p.t, p.nvlink_errors))
    trailing_start = None
    for p in reversed(points):
        if p.util is None:
            continue
        if p.util >= UTIL_IDLE_LINE.value:
            break
        trailing_start = p.t
    power_mean = _mean(powers)
    power_cv = None
    if power_mean and len(powers) > 1:
        power_cv = math.sqrt(sum((x - power_mean) ** 2 for x in powers) / len(powers)) / power_mean
    error_rate = None
    if len(errors) >= 2 and errors[-1][0] > errors[0][0]:
        error_rate = max(0.0, errors[-1][1] - errors[0][1]) / (errors[-1][0] - errors[0][0]) * PER_MINUTE
    whole = util_stats(utils)
    limit, default = _last(points, "power_limit_w"), _last(points, "power_default_w")
    return GpuFeatures(
        n=len(points),
        span_s=last_t - points[0].t,
        util_mean=whole.mean if whole else None,
        util_p05=whole.p05 if whole else None,
        idle_fraction=whole.idle_fraction if whole else None,
        busy_fraction=busy / len(utils) if utils else None,
        gaps=whole.gaps if whole else 0,
        halves=(util_stats(utils[: len(utils) // 2]), util_stats(utils[len(utils) // 2 :])),
        trailing_idle_s=last_t - trailing_start if trailing_start is not None else 0.0,
        power_mean=power_mean,
        power_p95=quantile(sorted(powers), HIGH_Q) if powers else None,
        power_cv=power_cv,
        power_ref_w=limit or default or board_tdp(name) or ceiling_w,
        limit_w=limit,
        default_w=default or board_tdp(name),
        sm_mean=_mean(sm),
        nvlink_bps=_mean(traffic),
        pcie_bps=_mean(pcie),
        mem_util_mean=_mean(mem),
        mem_util_in_gaps=_mean(idle_mem),
        temp_last=temps[-1][1] if temps else None,
        temp_mean=_mean([v for _, v in temps]),
        temp_slope=slope(temps),
        busy_clock_ratio=_mean(clocks),
        thermal_share=hot / recent_reasons if recent_reasons else None,
        cap_share=capped / busy_reasons if busy_reasons else None,
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
    return bool(p.reasons and p.reasons & HW_SLOWDOWN and p.temp_c is not None and p.temp_c >= TEMP_HOT.value)


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
