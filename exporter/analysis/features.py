"""Features: what the detectors look at, computed from the points of the evidence window. Pure.

Every feature is None when its input column never had a value in the window, so a detector can tell
"the signal says no" from "there is no signal".
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from exporter.analysis.envelope import board_power
from exporter.analysis.points import GpuPoint, HostPoint
from exporter.analysis.window import HIGH_Q, LOW_Q, Window, central, fraction_below, quantile, summarize
from exporter.policy.nvml_vocab import HW_SLOWDOWN, POWER_CAP_BITS, THERMAL_BITS
from exporter.policy.thresholds import LEDGER_BUSY_UTIL, TEMP_HOT, UTIL_IDLE_LINE

BUSY_LINE = LEDGER_BUSY_UTIL.value
FLAT = 1e-12  # a variance this small is no spread at all: no slope
PER_MINUTE = 60.0
RECENT_S = 10.0  # thermal reasons are judged on the last 10 s: they switch fast
MIN_POINTS = 5  # fewer points in the evidence window show no rhythm and no busy power level
SLOPE_POINTS = 32  # a slope is fitted to at most this many evenly spaced points...
SLOPE_MIN_POINTS = 3  # ...and to no fewer than this: two points are a line whatever the noise


@dataclass(slots=True)  # not frozen: made three times for every GPU every evaluation (frozen costs 3x)
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


@dataclass(slots=True)  # not frozen: made for every GPU every evaluation, and frozen costs 7x to make
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
    cycle_cv: float | None = None  # how the cycles (one dip's start to the next) vary (None: too few)
    cycles: int = 0  # ...over this many cycles
    util_cv: float | None = None  # how utilization varies sample to sample (None: never above zero)
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
    sm_clock_max_hz: float | None = None

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


def slope(pairs: Sequence[tuple[float, float]], most: int = SLOPE_POINTS) -> float | None:
    """Least-squares slope of (t, value) pairs, over at most ``most`` evenly spaced ones (the signals
    it is used for change once per collection, not per sample)."""
    if len(pairs) > most:
        pairs = [pairs[i] for i in _spaced(len(pairs), most)]
    return _fit_columns([t for t, _ in pairs], [v for _, v in pairs])


def slope_of(times: list[float], values: list[float], most: int = SLOPE_POINTS) -> float | None:
    """``slope`` of two columns, pairing only the points it fits (not every point of the window)."""
    if len(times) > most:
        spaced = _spaced(len(times), most)
        return _fit_columns([times[i] for i in spaced], [values[i] for i in spaced])
    return _fit_columns(times, values)


@functools.cache  # a window holds about the same number of points every second
def _spaced(n: int, most: int) -> tuple[int, ...]:
    """The indexes of ``most`` evenly spaced points of ``n`` and of the last one."""
    step = n / most
    return (*[int(i * step) for i in range(most)], n - 1)


def _fit_columns(times: list[float], values: list[float]) -> float | None:
    """The least-squares slope about the means. Times are Unix seconds (about 1.7e9): the one-pass form
    (sum of t*t less the square of the sum over n) loses every digit of a ten-second spread to rounding."""
    n = len(times)
    if n < SLOPE_MIN_POINTS:
        return None
    mean_t = sum(times) / n
    mean_v = sum(values) / n
    var = cov = 0.0
    for t, v in zip(times, values, strict=True):
        dt = t - mean_t
        var += dt * dt
        cov += dt * (v - mean_v)
    if var <= FLAT:
        return None
    return cov / var


# ---- the per-point parts, kept as points arrive ---------------------------------------------------

# a utilization sample's class: idle (under the idle line), low (under the busy line), busy. One letter
# each, so that counts and runs over a window are string operations, not a loop per sample per second.
IDLE, LOW, BUSY = "i", "l", "b"
if UTIL_IDLE_LINE.value > BUSY_LINE:  # the classes nest: idle is a part of low
    raise ValueError("the utilization idle line must not be above the busy line")


_DIP_START = re.compile(BUSY + "(?=[" + IDLE + LOW + "])")


def util_class(u: float) -> str:
    if u < UTIL_IDLE_LINE.value:
        return IDLE
    return LOW if u < BUSY_LINE else BUSY


class _Column:
    """Some per-point values (one list per field) with the sequence numbers of their points. Lists, not
    deques: the evidence rows are read whole every second and dropped from the front a few at a time."""

    __slots__ = ("fields", "seqs", "values")

    def __init__(self, *names: str) -> None:
        self.seqs: list[int] = []
        self.fields: tuple[list[Any], ...] = tuple([] for _ in names or ("value",))
        self.values = self.fields[0]

    def put(self, seq: int, value: object) -> None:
        """One point's value, for a column of one field (this runs for every point)."""
        self.seqs.append(seq)
        self.values.append(value)

    def add2(self, seq: int, first: object, second: object) -> None:
        """One point's values, for a column of two fields (this runs for every point)."""
        self.seqs.append(seq)
        fields = self.fields
        fields[0].append(first)
        fields[1].append(second)

    def add3(self, seq: int, first: object, second: object, third: object) -> None:
        """One point's values, for a column of three fields."""
        self.seqs.append(seq)
        fields = self.fields
        fields[0].append(first)
        fields[1].append(second)
        fields[2].append(third)

    def prune(self, first: int) -> None:
        start = bisect.bisect_left(self.seqs, first)
        if start:
            del self.seqs[:start]
            for column in self.fields:
                del column[:start]


@dataclass(slots=True)  # not frozen: made for every GPU every second, and frozen costs 4x to make
class Rows:
    """The per-point parts of the features over a stretch of points, oldest first. The lists are the
    columns' own: read them, never change them (nor the fields)."""

    util_t: list[float]
    util: list[float]
    util_class: list[str]
    idle_mem: list[float]  # memory utilization of idle samples
    clocks: list[float]  # SM clock over its maximum, busy samples
    reason_t: list[float]  # busy samples with clock reasons: their times...
    capped: list[bool]  # ...power cap holding the clocks...
    hot: list[bool]  # ...a thermal reason
    power: list[float]
    sm: list[float]
    mem: list[float]
    temp_t: list[float]
    temp: list[float]
    nvlink: list[float]  # tx + rx bytes/s
    pcie: list[float]
    error_t: list[float]
    errors: list[float]
    last: dict[str, Any]  # LAST_VALUES: each one's newest value in these points (absent: none has one)


# the fields a GPU's features take as their newest value in the window; kept as points arrive, since a
# field most points lack (all but one point per collection, or every point on a board without it) would
# otherwise be searched for back through the whole window every second
LAST_FEATURES = (  # features named as their field
    "mem_used_bytes",
    "mem_total_bytes",
    "nvlink_active",
    "nvlink_links",
    "p2p_failed",
    "fabric_ready",
    "sm_clock_max_hz",
)
LAST_VALUES = ("power_limit_w", "power_default_w", *LAST_FEATURES)
_LAST_OF = operator.attrgetter(*LAST_VALUES)
_NO_LAST: tuple[Any, ...] = (None,) * len(LAST_VALUES)


class FeatureRows:
    """What each point adds to the features, computed once when it arrives instead of every second for
    as long as it stays in the evidence window. Numbered by arrival, so the rows of the newest points of
    a window are a suffix of each column whatever the window evicted or dropped."""

    def __init__(self) -> None:
        self.next_seq = 0
        self.kept_from = 0  # the first point whose rows are still kept
        self._util, self._idle_mem, self._clocks = _Column("t", "util", "class"), _Column(), _Column()
        self._reasons = _Column("t", "capped", "hot")
        self._power, self._sm, self._mem = _Column(), _Column(), _Column()
        self._temps, self._nvlink, self._pcie = _Column("t", "temp"), _Column(), _Column()
        self._errors = _Column("t", "errors")
        self._last: dict[str, tuple[int, Any]] = {}  # field -> (seq, value) of its newest point with one
        # the LAST_VALUES of the newest points while they stay the same (the points of one collection share
        # them, and so do most collections in a row), and the newest of those points: put in ``_last``
        # when they change or are read, instead of field by field at every point
        self._run: tuple[Any, ...] = _NO_LAST
        self._run_seq = -1
        # in the order of Rows' fields
        self._columns = (
            self._util,
            self._idle_mem,
            self._clocks,
            self._reasons,
            self._power,
            self._sm,
            self._mem,
            self._temps,
            self._nvlink,
            self._pcie,
            self._errors,
        )
        # Rows' lists, made once: the columns keep their lists (pruned in place)
        self._fields = tuple(values for column in self._columns for values in column.fields)

    def add(self, p: GpuPoint) -> None:
        seq = self.next_seq
        self.next_seq = seq + 1
        if p.util is not None:
            self._add_util(seq, p, p.util)
        if p.power_w is not None:
            self._power.put(seq, p.power_w)
        if p.sm_active is not None:
            self._sm.put(seq, p.sm_active)
        if p.mem_util is not None:
            self._mem.put(seq, p.mem_util)
        if p.nvlink_tx_bps is not None:
            self._nvlink.put(seq, p.nvlink_tx_bps + (p.nvlink_rx_bps or 0.0))
        if p.pcie_tx_bps is not None:
            self._pcie.put(seq, p.pcie_tx_bps + (p.pcie_rx_bps or 0.0))
        if p.temp_c is not None:
            self._temps.add2(seq, p.t, p.temp_c)
        if p.nvlink_errors is not None:
            self._errors.add2(seq, p.t, p.nvlink_errors)
        values = _LAST_OF(p)
        if values != self._run:
            self._end_run()
            self._run = values
        self._run_seq = seq

    def _end_run(self) -> None:
        """The run of points with the same LAST_VALUES into ``_last``, at the newest point of the run."""
        seq = self._run_seq
        for name, value in zip(LAST_VALUES, self._run, strict=True):
            if value is not None:
                self._last[name] = (seq, value)

    def _add_util(self, seq: int, p: GpuPoint, u: float) -> None:
        cls = util_class(u)
        self._util.add3(seq, p.t, u, cls)
        if cls == IDLE and p.mem_util is not None:
            self._idle_mem.put(seq, p.mem_util)
        if cls != BUSY:
            return
        if p.sm_clock_hz and p.sm_clock_max_hz:
            self._clocks.put(seq, p.sm_clock_hz / p.sm_clock_max_hz)
        if p.reasons is not None:
            hot = bool(p.reasons & THERMAL_BITS or _hw_slowdown_hot(p))
            self._reasons.add3(seq, p.t, bool(p.reasons & POWER_CAP_BITS), hot)

    def newest(self, count: int) -> Rows | None:
        """The rows of the newest ``count`` points, forgetting older ones: the evidence window only moves
        forward. None if some were forgotten already (the caller computes them again)."""
        if self.next_seq - count < self.kept_from:
            return None
        self.keep(count)
        self._end_run()
        first = self.next_seq - count
        last = {name: value for name, (seq, value) in self._last.items() if seq >= first}
        return Rows(*self._fields, last=last)

    def keep(self, count: int) -> None:
        """Forget the rows of all but the newest ``count`` points."""
        first = self.next_seq - count
        if first <= self.kept_from:
            return
        self.kept_from = first
        for column in self._columns:
            if column.seqs and column.seqs[0] < first:  # (most boards leave some columns empty)
                column.prune(first)

    def clear(self) -> None:
        self.keep(0)


class GpuWindow(Window[GpuPoint]):
    """A GPU's window that keeps its points' feature rows beside them."""

    def __init__(self, span_s: float, max_points: int | None = None) -> None:
        super().__init__(span_s, max_points)
        self.rows = FeatureRows()

    def add(self, point: GpuPoint) -> bool:
        if not super().add(point):
            return False
        self.rows.add(point)
        return True

    def evict(self, now: float) -> None:
        super().evict(now)
        self.rows.keep(len(self))  # also the points the size bound dropped

    def clear(self) -> None:
        super().clear()
        self.rows.clear()


def rows_of(points: Sequence[GpuPoint]) -> Rows:
    rows = FeatureRows()
    for p in points:
        rows.add(p)
    return rows.newest(len(points))  # type: ignore[return-value]  # nothing forgotten yet


# ---- the features -----------------------------------------------------------------------------------


def gpu_features(
    points: Sequence[GpuPoint],
    name: str = "",
    ceiling_w: float | None = None,
    window: GpuWindow | None = None,
) -> GpuFeatures:
    """Features of one GPU's points (oldest first) over the evidence window. ``ceiling_w`` is the top of
    the GPU's learned power envelope: the power reference of last resort, for logs without a power limit
    column or a known board name. ``window``: the window whose newest points ``points`` are, to read
    their rows from instead of computing them again."""
    if not points:
        return GpuFeatures()
    rows = window.rows.newest(len(points)) if window is not None else None
    if rows is None:
        rows = rows_of(points)
    last_t = points[-1].t
    last = rows.last.get
    limit, default = last("power_limit_w"), last("power_default_w")
    tdp = board_power(name)[0]
    # the fields set one by one (a slotted object's attributes are cheap to set; keywords to a 35-field
    # constructor and merged keyword dictionaries were not, every GPU every evaluation); a column with no
    # value leaves its feature None
    f = GpuFeatures(len(points), last_t - points[0].t)
    f.power_ref_w = limit or default or tdp or ceiling_w
    f.limit_w = limit
    f.default_w = default or tdp
    if rows.sm:
        f.sm_mean = sum(rows.sm) / len(rows.sm)
    if rows.nvlink:
        f.nvlink_bps = sum(rows.nvlink) / len(rows.nvlink)
    if rows.pcie:
        f.pcie_bps = sum(rows.pcie) / len(rows.pcie)
    if rows.mem:
        f.mem_util_mean = sum(rows.mem) / len(rows.mem)
    if rows.idle_mem:
        f.mem_util_in_gaps = sum(rows.idle_mem) / len(rows.idle_mem)
    if rows.clocks:
        f.busy_clock_ratio = sum(rows.clocks) / len(rows.clocks)
    if rows.errors:
        f.nvlink_error_rate = _error_rate(rows.error_t, rows.errors)
    if rows.last:
        f.mem_used_bytes = last("mem_used_bytes")
        f.mem_total_bytes = last("mem_total_bytes")
        f.nvlink_active = last("nvlink_active")
        f.nvlink_links = last("nvlink_links")
        f.p2p_failed = last("p2p_failed")
        f.fabric_ready = last("fabric_ready")
        f.sm_clock_max_hz = last("sm_clock_max_hz")
    if rows.util:
        _util_features(f, rows, last_t)
    if rows.power:
        _power_features(f, rows.power)
    temps = rows.temp
    if temps:
        f.temp_last, f.temp_mean, f.temp_slope = (
            temps[-1],
            sum(temps) / len(temps),
            slope_of(rows.temp_t, temps),
        )
    if rows.capped:
        _reason_features(f, rows, last_t)
    return f


def _util_features(f: GpuFeatures, rows: Rows, last_t: float) -> None:
    utils = rows.util
    classes = "".join(rows.util_class)
    n = len(utils)
    half = n // 2
    older, newer = utils[:half], utils[half:]
    older_sorted, newer_sorted = sorted(older), sorted(newer)
    # two sorted runs: sorting them together is a merge (a stable sort, so the same list as sorting utils)
    ordered = sorted(older_sorted + newer_sorted)
    last_working = max(classes.rfind(LOW), classes.rfind(BUSY))  # the trailing idle run starts after it
    idle_from = rows.util_t[last_working + 1] if last_working + 1 < n else None
    # the whole window's ``_util_stats``, only the figures read
    f.util_mean = sum(utils) / n
    f.util_p05 = quantile(ordered, LOW_Q)
    f.idle_fraction = classes.count(IDLE) / n
    f.busy_fraction = classes.count(BUSY) / n
    f.gaps = _gaps(classes)
    f.halves = (
        _util_stats(older, classes[:half], older_sorted),
        _util_stats(newer, classes[half:], newer_sorted),
    )
    f.trailing_idle_s = last_t - idle_from if idle_from is not None else 0.0
    _loop_features(f, rows.util_t, classes, utils)


def _loop_features(f: GpuFeatures, times: list[float], classes: str, utils: list[float]) -> None:
    """How alike the cycles are (a loop's steps) and how steady utilization is (steps finer than the
    samples): what tells a loop from work that follows its arrivals."""
    mean = f.util_mean or 0.0
    if mean > 0:
        spread = sum((u - mean) * (u - mean) for u in utils) / len(utils)
        f.util_cv = math.sqrt(spread) / mean
    # a dip starts where a busy sample is followed by one under the busy line
    starts = [times[m.start() + 1] for m in _DIP_START.finditer(classes)]
    cycles = [b - a for a, b in itertools.pairwise(starts)]
    f.cycles = len(cycles)
    if cycles:
        cycle_mean = sum(cycles) / len(cycles)
        if cycle_mean > 0:
            var = sum((c - cycle_mean) * (c - cycle_mean) for c in cycles) / len(cycles)
            f.cycle_cv = math.sqrt(var) / cycle_mean


def _util_stats(utils: list[float], classes: str, ordered: list[float] | None = None) -> UtilStats | None:
    """``util_stats`` from the samples' classes: the same figures without a loop over the samples.
    ``ordered``: the utilizations sorted, when the caller has them."""
    if not utils:
        return None
    mean, p05, p95 = central(utils, sorted(utils) if ordered is None else ordered)
    return UtilStats(mean, p05, p95, classes.count(IDLE) / len(classes), _gaps(classes))


def _gaps(classes: str) -> int:
    """``count_gaps`` over classes: without the low samples, every run of idle ones is a gap."""
    waits = classes.replace(LOW, "")
    return waits.count(BUSY + IDLE) + waits.startswith(IDLE)


def _power_features(f: GpuFeatures, powers: list[float]) -> None:
    """Mean, p95 and coefficient of variation of a non-empty column of power readings."""
    n = len(powers)
    mean = sum(powers) / n
    f.power_mean = mean
    f.power_p95 = quantile(sorted(powers), HIGH_Q)
    if mean and n > 1:
        # (x - mean) ** 2 summed in sample order, without a Python loop
        squares = map(pow, map(operator.sub, powers, itertools.repeat(mean)), itertools.repeat(2))
        f.power_cv = math.sqrt(sum(squares) / n) / mean


def _reason_features(f: GpuFeatures, rows: Rows, last_t: float) -> None:
    """Power cap over the busy samples with reasons, thermal reasons over those of the last 10 s."""
    # the rows are in time order: the last 10 s are a suffix
    recent = rows.hot[bisect.bisect_right(rows.reason_t, last_t - RECENT_S) :]
    f.thermal_share = sum(recent) / len(recent) if recent else None
    f.cap_share = sum(rows.capped) / len(rows.capped)


def _error_rate(times: list[float], errors: list[float]) -> float | None:
    """NVLink errors per minute, from the first and the last count of the window."""
    if len(errors) < 2 or times[-1] <= times[0]:
        return None
    return max(0.0, errors[-1] - errors[0]) / (times[-1] - times[0]) * PER_MINUTE


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
