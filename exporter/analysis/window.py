"""Time windows of points and their statistics. Pure: no clocks, no I/O."""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

P = TypeVar("P")
LOW_Q, HIGH_Q = 0.05, 0.95  # the quantiles exported as p05/p95 and a window's spread is measured between


class Window(Generic[P]):
    """Points (anything with a ``t``) of the last ``span_s`` seconds, oldest first; at most ``max_points``
    (None: no bound): past it the oldest go first, whatever their times (``dropped`` counts them)."""

    def __init__(self, span_s: float, max_points: int | None = None) -> None:
        self.span_s = span_s
        self._points: deque[P] = deque(maxlen=max_points)
        self.dropped = 0

    def add(self, point: P) -> bool:
        """Add a point; False when it was refused."""
        points = self._points
        if points and point.t < points[-1].t:  # type: ignore[attr-defined]
            return False  # out of order (a clock step back): keep the window monotonic
        if len(points) == points.maxlen:
            self.dropped += 1  # the append below pushes the oldest out
        points.append(point)
        return True

    def extend(self, points: Iterable[P]) -> None:
        for point in points:
            self.add(point)

    def evict(self, now: float) -> None:
        cutoff = now - self.span_s
        points = self._points
        while points and points[0].t <= cutoff:  # type: ignore[attr-defined]  # window is (now - span, now]
            points.popleft()

    def clear(self) -> None:
        self._points.clear()

    def since(self, t: float) -> list[P]:
        """The points after ``t``, oldest first: the window is in time order, so this is a suffix, found
        by bisection instead of a test of every point (the analysis asks every GPU every second)."""
        points = self._points
        start = bisect.bisect_right(points, t, key=_time)  # type: ignore[call-overload]
        return list(itertools.islice(points, start, None)) if start else list(points)

    def values(self, attr: str) -> list[float]:
        return [v for p in self._points if (v := getattr(p, attr)) is not None]

    def last(self) -> P | None:
        return self._points[-1] if self._points else None

    def __iter__(self) -> Iterator[P]:
        return iter(self._points)

    def __reversed__(self) -> Iterator[P]:
        return reversed(self._points)

    def __len__(self) -> int:
        return len(self._points)


_time = operator.attrgetter("t")  # a point's time (C-level: bisection calls it about 9 times a search)


@dataclass(frozen=True, slots=True)
class Stats:
    mean: float
    min: float
    max: float
    p05: float
    p95: float
    count: int

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "min": self.min, "max": self.max, "p05": self.p05, "p95": self.p95}


def quantile(ordered: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted, non-empty list."""
    n = len(ordered)
    if n == 1:
        return ordered[0]
    lo, hi, frac = _spot(n, q)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * frac


@functools.cache  # a window holds about the same number of points every evaluation
def _spot(n: int, q: float) -> tuple[int, int, float]:
    """Where a quantile of ``n`` sorted values lies: the two values it is between, and how far."""
    pos = q * (n - 1)
    lo = math.floor(pos)
    return lo, min(lo + 1, n - 1), pos - lo


def summarize(values: list[float]) -> Stats | None:
    if not values:
        return None
    ordered = sorted(values)
    mean, p05, p95 = central(values, ordered)
    return Stats(mean=mean, min=ordered[0], max=ordered[-1], p05=p05, p95=p95, count=len(ordered))


def central(values: list[float], ordered: list[float]) -> tuple[float, float, float]:
    """The mean, p05 and p95 of ``summarize`` (``ordered``: the values sorted), for the detectors' own
    statistics, which need no ``Stats`` made. The quantiles are ``quantile``'s, inline (this runs for
    two halves of every GPU's window every evaluation)."""
    mean = sum(values) / len(values)  # in sample order, as the detectors have always summed
    n = len(ordered)
    if n == 1:
        return mean, ordered[0], ordered[0]
    lo, hi, frac = _spot(n, LOW_Q)
    low = ordered[lo]
    p05 = low + (ordered[hi] - low) * frac
    lo, hi, frac = _spot(n, HIGH_Q)
    low = ordered[lo]
    return mean, p05, low + (ordered[hi] - low) * frac


def fraction_below(values: list[float], line: float) -> float | None:
    return sum(1 for v in values if v < line) / len(values) if values else None
