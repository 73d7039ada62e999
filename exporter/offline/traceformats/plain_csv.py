"""A CSV from a custom poller: a header line, then one row per GPU per sample. The header needs a
utilization column and a time column, a GPU column or both; power, memory, temperature, SM clock and
the GPU's name are read when present. Names are matched loosely: case, spaces, dots and dashes do not
matter, and a unit may follow in brackets (``util [%]``, ``power (W)``), as a suffix (``util_pct``,
``power_w``, ``mem_used_mib``, ``time_ms``) or after a blank (``util %``).

- time: ``time``, ``timestamp``, ``ts``, ``t``, ``date``, ``datetime``: Unix seconds (milliseconds when
  the header says ``ms`` or the values are above 1e11), ISO 8601, ``2026/11/24 10:00:00`` or
  ``Tue Nov 24 10:00:00 2026``; zone-less times are UTC.
- GPU: ``gpu``, ``gpu_id``, ``gpu_index``, ``index``, ``device``, ``idx``: ``0``, ``GPU 1``, ``cuda:2``
  read as indexes, anything else (a uuid, a bus id) numbered in order of appearance.
- utilization: ``util``, ``utilization``, ``gpu_util``, ``utilization_gpu``, ``gpu_utilization``,
  ``usage``, ``load``; memory utilization ``mem_util``, ``memory_util``, ``utilization_memory``. Percent
  (0-100) or a 0-1 fraction: a header that says ``%``/``pct``/``percent`` means percent and one that says
  ``ratio``/``fraction`` a fraction; otherwise the values decide: the column is a fraction when none
  exceeds 1 and some are not whole numbers (0.97), else percent. (An idle GPU's 0 and 1 are percent.)
- ``power``/``power_draw`` (W), ``power_limit``/``power_cap`` (W), ``mem_used``/``memory_used`` and
  ``mem_total``/``memory_total`` (MiB unless the header says GiB, MB, GB or bytes), ``temp``/
  ``temperature`` (C), ``sm_clock``/``clock`` (MHz unless it says Hz or GHz), ``name``/``gpu_name``.

Without a GPU column the rows go round-robin: ``--gpus N``, or as many GPUs as rows share the first
time. Without a time column the samples are ``--period`` apart (1 s by default) from ``--start``.
Commas, tabs or semicolons separate the cells. Other columns are listed as unknown and ignored.
"""

from __future__ import annotations

import contextlib
import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass

from exporter.offline.traceformats.base import (
    MAX_CELL_CHARS,
    MAX_GPUS,
    MAX_TIMESTAMP,
    Context,
    FormatError,
    Lines,
    Sample,
    Skip,
    Ticker,
    gpu_index,
    parse_time,
    with_unit,
)

NAME = "a poller's CSV (a time or GPU column and a utilization column)"
COMMAND = "a poller's CSV with a header such as time,gpu,util,power,mem_used,mem_total,temp,name"
TIMED = False  # only with a time column
NAMES_GPUS = False  # only with a GPU column; it checks --gpus itself
DEFAULT_PERIOD = 1.0

TIME = frozenset(("time", "timestamp", "ts", "t", "date", "datetime", "date_time", "time_stamp", "epoch"))
GPU = frozenset(
    ("gpu", "gpu_id", "gpu_index", "gpu_idx", "index", "idx", "device", "device_id", "device_index")
)
NAME_COLUMNS = frozenset(("name", "gpu_name", "model", "product", "product_name", "device_name"))
# GpuPoint attribute -> (the names read as it, the unit when the header says none, the units it may have)
VALUES: dict[str, tuple[frozenset[str], str, tuple[str, ...]]] = {
    "util": (
        frozenset(
            (
                "util",
                "utilization",
                "gpu_util",
                "util_gpu",
                "utilization_gpu",
                "gpu_utilization",
                "gpu_usage",
                "usage",
                "gpu_load",
                "load",
            )
        ),
        "",
        ("%", "ratio"),
    ),
    "mem_util": (
        frozenset(("mem_util", "memory_util", "util_mem", "utilization_memory", "memory_utilization")),
        "",
        ("%", "ratio"),
    ),
    "power_w": (frozenset(("power", "power_draw", "gpu_power", "power_usage", "pwr")), "w", ("w",)),
    "power_limit_w": (frozenset(("power_limit", "power_cap", "enforced_power_limit")), "w", ("w",)),
    "mem_used_bytes": (
        frozenset(("mem_used", "memory_used", "used_memory", "fb_used", "vram_used", "gpu_mem_used")),
        "mib",
        ("b", "kib", "mib", "gib"),
    ),
    "mem_total_bytes": (
        frozenset(("mem_total", "memory_total", "total_memory", "fb_total", "vram_total", "gpu_mem_total")),
        "mib",
        ("b", "kib", "mib", "gib"),
    ),
    "temp_c": (
        frozenset(("temp", "temperature", "gpu_temp", "temp_gpu", "temperature_gpu", "gpu_temperature")),
        "c",
        ("c", "°c", "'c"),
    ),
    "sm_clock_hz": (
        frozenset(("sm_clock", "clock_sm", "clocks_sm", "sm_clk", "clock", "gpu_clock", "graphics_clock")),
        "mhz",
        ("hz", "mhz", "ghz"),
    ),
}
SHARES = ("util", "mem_util")
# a unit written as the last word of a name -> the unit
_SUFFIX_UNITS = {
    "pct": "%",
    "percent": "%",
    "ratio": "ratio",
    "fraction": "ratio",
    "frac": "ratio",
    "w": "w",
    "watts": "w",
    "mib": "mib",
    "mb": "mib",
    "gib": "gib",
    "gb": "gib",
    "kib": "kib",
    "bytes": "b",
    "c": "c",
    "celsius": "c",
    "hz": "hz",
    "mhz": "mhz",
    "ghz": "ghz",
    "s": "s",
    "sec": "s",
    "secs": "s",
    "ms": "ms",
}
_BRACKETED = re.compile(r"[\[(]([^\[\]()]*)[\])]")  # no bracket inside: each is read once
MS_FROM = 1e11  # Unix seconds this large are year 5138: the values are milliseconds


def normalise(raw: str) -> tuple[str, str]:
    """A header cell -> (name, unit): ``GPU Util [%]`` -> ("gpu_util", "%"), ``power_w`` -> ("power", "w")."""
    text = raw.strip().strip('"').lower()
    unit = ""
    bracketed = _BRACKETED.search(text)
    if bracketed:
        unit = bracketed.group(1).strip()
        text = _BRACKETED.sub(" ", text)
    if text.rstrip().endswith("%"):
        unit, text = unit or "%", text.rstrip()[:-1]
    parts = [p for p in re.split(r"[^a-z0-9]+", text) if p]
    while len(parts) > 1 and parts[-1] in _SUFFIX_UNITS:
        unit = unit or _SUFFIX_UNITS[parts.pop()]
    unit = {"percent": "%", "watts": "w", "mb": "mib", "gb": "gib", "bytes": "b"}.get(unit, unit)
    return "_".join(parts), unit


@dataclass
class _Header:
    delimiter: str
    size: int
    raw: list[str]
    time: int | None
    time_unit: str
    gpu: int | None
    name: int | None
    values: list[tuple[int, str, str]]  # (column, attribute, unit)
    labels: dict[str, str]
    unknown: list[str]


def _delimiter(line: str) -> str | None:
    for delimiter in (",", "\t", ";"):
        if delimiter in line:
            return delimiter
    return None


def _cells(line: str, delimiter: str) -> list[str]:
    return next(csv.reader([line], delimiter=delimiter, skipinitialspace=True), [])


def _header(line: str) -> _Header | None:
    delimiter = _delimiter(line)
    if delimiter is None:
        return None
    try:
        raw = _cells(line, delimiter)
    except csv.Error:
        return None
    time = gpu = name = None
    time_unit = ""
    values: list[tuple[int, str, str]] = []
    labels: dict[str, str] = {}
    unknown: list[str] = []
    taken: set[str] = set()
    for i, cell in enumerate(raw):
        key, unit = normalise(cell)
        if key in TIME and time is None:
            time, time_unit = i, unit
            continue
        if key in GPU and gpu is None:
            gpu = i
            continue
        if key in NAME_COLUMNS and name is None:
            name = i
            continue
        column = _value_column(key, unit, taken)
        if column is not None:
            attr, attr_unit = column
            taken.add(attr)
            values.append((i, attr, attr_unit))
            labels[attr] = cell.strip()
        elif cell.strip():
            unknown.append(cell.strip())
    if "util" not in taken or (time is None and gpu is None):
        return None
    return _Header(delimiter, len(raw), raw, time, time_unit, gpu, name, values, labels, unknown)


def _value_column(key: str, unit: str, taken: set[str]) -> tuple[str, str] | None:
    """The value a header cell names and its unit (the column's default when it says none); None for a
    name no value column still free has, or a unit that column cannot have (util in W)."""
    for attr, (names, default, allowed) in VALUES.items():
        if key in names and attr not in taken:
            return None if unit and unit not in allowed else (attr, unit or default)
    return None


def sniff(head: list[str]) -> bool:
    first = next((line for line in head if line.strip()), "")
    return _header(first) is not None


class _Ids:
    """GPU cells -> indexes: ``0``, ``GPU 1``, ``cuda:2`` as written; other ids numbered as they come."""

    def __init__(self) -> None:
        self.others: dict[str, str] = {}

    def __call__(self, cell: str) -> str:
        cell = cell.strip()
        digits = _trailing_digits(cell)
        if digits and (cell.isdigit() or not re.search(r"[0-9a-f]{4}", cell.lower()[: -len(digits)])):
            return gpu_index(digits)
        if not cell:
            raise ValueError("no GPU id")
        if cell not in self.others:
            if len(self.others) >= MAX_GPUS:
                raise FormatError(f"more than {MAX_GPUS} GPU ids: not one node's trace")
            self.others[cell] = str(len(self.others))
        return self.others[cell]


def _trailing_digits(cell: str) -> str:
    """The digits that end the cell ("cuda:2" -> "2"; "" without), found from the end: a pattern searching
    a long run of digits not at the end read the run once per digit."""
    start = len(cell)
    while start and cell[start - 1].isdecimal():
        start -= 1
    return cell[start:]


def _time(cell: str, unit: str) -> float:
    text = cell.strip()
    try:
        value = float(text)
    except ValueError:
        return parse_time(text)
    if unit == "ms" or value >= MS_FROM:
        value /= 1000.0
    if not 0.0 <= value <= MAX_TIMESTAMP:
        raise ValueError(f"time {text[:30]!r} is not a time between 1970 and 9999")
    return value


def _rows(lines: Lines, header: _Header) -> Iterator[tuple[int, list[str] | None]]:
    """The data rows after the header (a repeated header is skipped); None for a row csv cannot read."""
    first = True
    for number, line in lines():
        if not line.strip():
            continue
        if first:
            first = False
            continue
        try:
            cells = _cells(line, header.delimiter)
        except csv.Error:
            yield number, None
            continue
        if any(len(cell) > MAX_CELL_CHARS for cell in cells):  # before any parsing reads them
            yield number, None
            continue
        if [c.strip() for c in cells] == [c.strip() for c in header.raw]:
            continue
        yield number, cells


def _survey(lines: Lines, header: _Header, ctx: Context) -> tuple[dict[str, bool], int]:
    """One pass before the rows: whether each share column is a fraction, and how many GPUs a log without
    a GPU column has (rows sharing the first time; ``--gpus`` when given). Checks ``--gpus`` against a GPU
    column."""
    shares = _ShareScan([(i, attr) for i, attr, unit in header.values if attr in SHARES and unit == ""])
    counting = header.gpu is None and header.time is not None and ctx.gpus is None
    sharing = _FirstTimeRows(header.time if counting else None)
    gpu_column = header.gpu if ctx.gpus is not None else None  # a GPU column to check --gpus against
    ids, seen = _Ids(), set()
    for _, cells in _rows(lines, header):
        if cells is None or len(cells) != header.size:
            continue
        shares.see(cells)
        sharing.see(cells)
        if gpu_column is not None and len(seen) <= MAX_GPUS:
            with contextlib.suppress(ValueError):
                seen.add(ids(cells[gpu_column]))
    if gpu_column is not None and len(seen) != ctx.gpus:
        raise FormatError(
            f"the log has {len(seen)} GPUs (its GPU column says so), not the {ctx.gpus} of --gpus; "
            "--gpus is only for logs without a GPU column"
        )
    gpus = ctx.gpus or (sharing.rows if header.gpu is None and header.time is not None else 1) or 1
    return shares.percent(), gpus


class _ShareScan:
    """Share columns whose header gives no unit: a column is a fraction when none of its values exceeds 1
    and some are not whole numbers, else percent."""

    def __init__(self, columns: list[tuple[int, str]]) -> None:
        self.columns = columns  # (column, attribute)
        self.high = {attr: 0.0 for _, attr in columns}
        self.fractional = dict.fromkeys(self.high, False)

    def see(self, cells: list[str]) -> None:
        for i, attr in self.columns:
            try:
                value = float(cells[i])
            except ValueError:
                continue
            if value == value and abs(value) != float("inf"):
                self.high[attr] = max(self.high[attr], value)
                self.fractional[attr] = self.fractional[attr] or value != int(value)

    def percent(self) -> dict[str, bool]:
        return {attr: not (self.high[attr] <= 1.0 and self.fractional[attr]) for attr in self.high}


class _FirstTimeRows:
    """Rows sharing the first time, up to MAX_GPUS: the GPUs of a log without a GPU column. ``column``:
    the time column, None when not counting."""

    def __init__(self, column: int | None) -> None:
        self.column = column
        self.first: str | None = None
        self.rows = 0

    def see(self, cells: list[str]) -> None:
        if self.column is None:
            return
        stamp = cells[self.column].strip()
        if self.first is None:
            self.first = stamp
        if stamp == self.first and self.rows < MAX_GPUS:
            self.rows += 1
        else:
            self.column = None  # the first time is over: stop counting


def read(lines: Lines, ctx: Context) -> Iterator[Sample | Skip]:
    first = next((line for _, line in lines() if line.strip()), "")
    header = _header(first)
    if header is None:
        raise FormatError("the header names no utilization column, or neither a time nor a GPU column", 1)
    for name in header.unknown:
        ctx.unknown(name)
    percent, gpus = _survey(lines, header, ctx)
    units = [
        (i, attr, ("%" if percent[attr] else "ratio") if attr in percent else unit)
        for i, attr, unit in header.values
    ]
    ticker, ids, round_robin = Ticker(), _Ids(), 0
    for number, cells in _rows(lines, header):
        if cells is None:
            yield Skip(number, f"not a CSV row, or a cell longer than {MAX_CELL_CHARS} characters")
            continue
        if len(cells) != header.size:
            yield Skip(number, f"{len(cells)} fields where the header has {header.size}")
            continue
        try:
            values = {attr: with_unit(cells[i], unit, VALUES[attr][2]) for i, attr, unit in units}
            ts = _time(cells[header.time], header.time_unit) if header.time is not None else None
            if header.gpu is not None:
                gpu = ids(cells[header.gpu])
                tick = ticker.see(gpu)
            else:
                gpu, tick = str(round_robin % gpus), round_robin // gpus
        except ValueError as exc:
            yield Skip(number, str(exc))
            continue
        if header.gpu is None:
            round_robin += 1
        name = cells[header.name].strip()[:200] if header.name is not None else ""
        yield Sample(number, gpu, values, header.labels, name=name, ts=ts, tick=tick)
