"""Trace CSV in and out: what ``nvidia-smi --query-gpu=... --format=csv[,nounits] -lms N`` prints, plus
our extension columns. ``TraceReader`` turns any such file into points; ``TraceWriter`` writes the
points the live exporter samples in the same format, so anything seen live can be replayed.

Real logs parse as they are: units in the header or in the cells or nowhere, ``, `` or ``,``,
``[N/A]``/``[Not Supported]`` for missing values, nvidia-smi/ISO 8601/Unix timestamps, an ``index``
column or rows in index order (``--gpus N``), any subset of columns, repeated headers where nvidia-smi
was restarted into the same file. A gzip-compressed trace (``.csv.gz``) reads the same as its ``.csv``.
"""

from __future__ import annotations

import csv
import gzip
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from exporter import catalog
from exporter.analysis.points import NO_EXTRA, GpuPoint, HostPoint
from exporter.thresholds import EVAL_INTERVAL, TRACE_GAP_PERIODS

MIB = catalog.MIB
UNIT_SCALE = {"%": 0.01, "mib": MIB, "mib/s": MIB, "w": 1.0, "mhz": 1e6, "": 1.0, "c": 1.0, "s": 1.0}
MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[gpu is lost]", "nan"}

# column name -> (point, attribute); units come from the file. The GPU's columns come from the signal
# catalog (exporter/catalog.py), the node's are these.
GPU_COLUMNS: dict[str, tuple[str, str]] = {
    **catalog.gpu_columns(),
    "host.cpu.iowait": ("host", "iowait"),
    "host.cpu.max_core": ("host", "core_busy_max"),
    "host.shm.used": ("host", "shm_used_bytes"),
    "host.shm.total": ("host", "shm_size_bytes"),
    "host.disk.read": ("host", "disk_read_bps"),
    "host.psi.io": ("host", "psi_io"),
    "host.psi.cpu": ("host", "psi_cpu"),
    "host.psi.memory": ("host", "psi_memory"),
}
META_COLUMNS = {"timestamp", "index", "name", "uuid", "pci.bus_id", "driver_version", "pstate", "serial"}
# the columns that are shares of time or capacity, written in percent
PERCENT_FIELDS = (
    *catalog.percent_fields(),
    "iowait",
    "core_busy_max",
    "psi_io",
    "psi_cpu",
    "psi_memory",
)

# the unit a column has when neither its header nor its cells say (nvidia-smi's own units)
DEFAULT_UNITS: dict[str, str] = {
    **catalog.default_units(),
    **dict.fromkeys(PERCENT_FIELDS, "%"),
    **dict.fromkeys(("shm_used_bytes", "shm_size_bytes"), "MiB"),
    "disk_read_bps": "MiB/s",
}

# Physically possible values, in the base units points hold: (low, high, as shown, why). A cell outside is a
# corrupt or mis-scaled value (9999 C, -40 W, 250 %); it is read as missing, never fed to the detectors,
# and counted per column (a warning each, ``clipped_values`` in the replay summary).
BOUNDS: dict[str, tuple[float, float, str, str]] = {
    **catalog.bounds(),
    **dict.fromkeys(PERCENT_FIELDS, catalog.SHARE),
    **dict.fromkeys(("shm_used_bytes", "shm_size_bytes"), catalog.MEMORY),
}

# what record writes: (header, point, attribute, scale from base units to the header's unit, format);
# "extra": a catalog signal carried in GpuPoint.extra
WRITE_COLUMNS: tuple[tuple[str, str, str, float, str], ...] = (
    *catalog.write_columns(),
    ("host.cpu.iowait [%]", "host", "iowait", 100.0, "{:.1f}"),
    ("host.cpu.max_core [%]", "host", "core_busy_max", 100.0, "{:.1f}"),
    ("host.shm.used [MiB]", "host", "shm_used_bytes", 1 / MIB, "{:.0f}"),
    ("host.shm.total [MiB]", "host", "shm_size_bytes", 1 / MIB, "{:.0f}"),
    ("host.disk.read [MiB/s]", "host", "disk_read_bps", 1 / MIB, "{:.0f}"),
    ("host.psi.io [%]", "host", "psi_io", 100.0, "{:.1f}"),
    ("host.psi.cpu [%]", "host", "psi_cpu", 100.0, "{:.1f}"),
    ("host.psi.memory [%]", "host", "psi_memory", 100.0, "{:.1f}"),
)

# Input bounds, checked before anything is parsed: a real nvidia-smi line is a few hundred characters and a
# cell a few dozen, so a line or a field far longer is not a trace (``/dev/zero``, a binary, a corrupt
# gzip stream). Reading stops at the bound; a line is never read whole first.
MAX_LINE_CHARS = 64 * 1024
MAX_FIELD_CHARS = 1024
# One node's trace: more distinct GPUs than this is a corrupt index/uuid column, and every GPU costs state.
MAX_GPUS = 1024
# Unix seconds a trace may carry: from the epoch to the end of year 9999 (what datetime can show).
MAX_TIMESTAMP = 253402300799.0
# unknown column names remembered (and warned about): a header is read again at every restart
MAX_UNKNOWN_COLUMNS = 100
# the largest clock event reasons mask: a 64-bit word
MAX_REASONS = float(1 << 64)

_NUMBER = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]*)$")
_HEADER = re.compile(r"^(.*?)\s*(?:\[(.*)\])?$")


class TraceError(Exception):
    """A trace that cannot be read; the message names the file and, where it applies, the line."""


@dataclass(frozen=True)
class Column:
    index: int
    name: str
    unit: str
    target: tuple[str, str] | None


@dataclass
class TraceRow:
    line: int
    t: float  # seconds since the first row
    gpu: str
    point: GpuPoint
    host: HostPoint | None
    name: str = ""
    segment: int = 0  # counts the gaps before this row (see TRACE_GAP_PERIODS)


@dataclass
class ReadStats:
    rows: int = 0
    skipped: int = 0
    unknown_columns: list[str] = field(default_factory=list)
    backwards: int = 0  # rows skipped because their timestamp is earlier than the previous row's
    gap_count: int = 0  # gaps in the samples, each starting a new segment
    gaps: list[tuple[int, float]] = field(default_factory=list)  # (line, seconds) of the first few
    first_timestamp: float | None = None
    last_timestamp: float | None = None
    gpus: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    clipped: dict[str, int] = field(default_factory=dict)  # column -> impossible values read as missing


def parse_timestamp(text: str) -> float:
    """nvidia-smi's ``2026/03/01 10:00:00.200``, ISO 8601, or Unix seconds -> Unix seconds."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not 0.0 <= value <= MAX_TIMESTAMP:  # also nan and inf
            raise ValueError(f"timestamp {text!r} is not a time between 1970 and 9999")
        return value
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"unrecognised timestamp {text!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def parse_cell(text: str, unit: str) -> float | None:
    """A cell's value in the header's unit system, scaled to base units. None when missing."""
    cell = text.strip()
    if cell.lower() in MISSING:
        return None
    if cell[:2].lower() == "0x":
        try:
            return float(int(cell, 16))
        except OverflowError:
            raise ValueError(f"not a finite number: {cell[:20]!r}...") from None
    match = _NUMBER.match(cell)
    if not match:
        raise ValueError(f"not a number: {cell!r}")
    value = float(match.group(1))
    scale_unit = match.group(2).lower() or unit.lower()  # a unit in the cell says what it is
    if scale_unit not in UNIT_SCALE:
        raise ValueError(f"unknown unit {match.group(2)!r}")
    value *= UNIT_SCALE[scale_unit]
    if not math.isfinite(value):  # 1e999: a number too large for any reading
        raise ValueError(f"not a finite number: {cell!r}")
    return value


def clipped_warnings(stats: ReadStats) -> list[str]:
    """One line per column that had impossible values."""
    lines = []
    for name, count in stats.clipped.items():
        _, _, shown, why = BOUNDS[GPU_COLUMNS[name][1]]
        lines.append(f"{name}: {count} value(s) outside {shown} ({why}) read as missing")
    return lines


class TraceReader:
    """Iterates a trace's rows as points. Bad rows are skipped with a warning naming their line."""

    MAX_WARNINGS = 20

    def __init__(self, path: str | Path, gpus: int | None = None) -> None:
        self.path = Path(path)
        self.gpus = gpus
        self._gpus_given = gpus is not None
        self.stats = ReadStats()
        self._columns: list[Column] = []
        self._by_name: dict[str, int] = {}
        self._header_text = ""
        self._first_ts: float | None = None
        self._next_rr = 0
        self._uuids: dict[str, str] = {}
        self._last_host_t: float | None = None
        self._last_ts: dict[str, float] = {}  # each GPU's latest timestamp (Unix seconds)
        self._max_ts: float | None = None  # the latest of all
        self._restarted = False  # a header came again since the last row (nvidia-smi restarted)
        self._checked = False  # --gpus was compared with the log's own GPU column

    # ---- plumbing ------------------------------------------------------------------------------

    def _warn(self, message: str) -> None:
        self.stats.skipped += 1
        if len(self.stats.warnings) < self.MAX_WARNINGS:
            self.stats.warnings.append(message)

    def _open(self) -> IO[str]:
        """The file as text; a ``.gz`` file is decompressed on the fly."""
        try:
            if self.path.suffix.lower() == ".gz":
                return gzip.open(self.path, "rt", newline="", encoding="utf-8-sig")
            return self.path.open(newline="", encoding="utf-8-sig")  # a leading BOM is not data
        except OSError as exc:
            raise TraceError(f"{self.path}: cannot read ({exc.strerror or exc})") from None

    def _bounded(self, handle: IO[str]) -> Iterator[str]:
        """The file's lines, each read up to MAX_LINE_CHARS: a longer one ends the read with an error."""
        number = 0
        while line := handle.readline(MAX_LINE_CHARS + 2):
            number += 1
            if len(line.rstrip("\r\n")) > MAX_LINE_CHARS:
                raise TraceError(
                    f"{self.path}:{number}: a line longer than {MAX_LINE_CHARS} characters: not a trace "
                    "(nvidia-smi writes a few hundred per line)"
                )
            yield line

    def _lines(self) -> Iterator[tuple[int, list[str]]]:
        with self._open() as handle:
            reader = csv.reader(self._bounded(handle), skipinitialspace=True)
            try:
                for fields in reader:
                    if fields and any(f.strip() for f in fields):
                        yield reader.line_num, fields
            except UnicodeDecodeError as exc:
                raise TraceError(f"{self.path}: not a UTF-8 text file ({exc.reason})") from None
            except csv.Error as exc:
                raise TraceError(f"{self.path}:{reader.line_num}: {exc}") from None
            except (gzip.BadGzipFile, EOFError) as exc:
                raise TraceError(f"{self.path}: not a readable gzip file ({exc or 'truncated'})") from None

    def _is_header(self, fields: list[str]) -> bool:
        return fields[0].strip().lower().startswith("timestamp") or not self._columns

    def _parse_header(self, fields: list[str], line: int) -> None:
        columns, unknown = [], []
        for i, raw in enumerate(fields):
            match = _HEADER.match(raw.strip())
            name = (match.group(1) if match else raw).strip().lower()
            unit = ((match.group(2) if match else "") or "").strip()
            target = GPU_COLUMNS.get(name)
            if target is None and name not in META_COLUMNS:
                unknown.append(raw.strip())
            columns.append(
                Column(i, name, unit or DEFAULT_UNITS.get(target[1], "") if target else unit, target)
            )
        by_name = {c.name: c.index for c in columns}
        if "timestamp" not in by_name:
            raise TraceError(f"{self.path}:{line}: the first line is not a header with a timestamp column")
        if not any(c.target for c in columns):
            raise TraceError(f"{self.path}:{line}: the header names no column this tool understands")
        known = self.stats.unknown_columns
        known += [c for c in unknown if c not in known][: max(0, MAX_UNKNOWN_COLUMNS - len(known))]
        self._columns, self._by_name = columns, by_name

    def _infer_gpu_count(self) -> int:
        """Without index or uuid: rows sharing the first timestamp are one sample of every GPU."""
        first, count = None, 0
        for _, fields in self._lines():
            if fields[0].strip().lower().startswith("timestamp"):
                if first is not None:
                    break
                continue
            if first is None:
                first = fields[0].strip()
            if fields[0].strip() != first:
                break
            count += 1
            if count >= MAX_GPUS:
                break
        return max(count, 1)

    def _check_gpu_count(self) -> None:
        """--gpus given for a log that names its GPUs: they must agree."""
        key = "index" if "index" in self._by_name else "uuid"
        ids: set[str] = set()
        for _, fields in self._lines():
            if not fields[0].strip().lower().startswith("timestamp") and len(fields) > self._by_name[key]:
                ids.add(fields[self._by_name[key]].strip())
                if len(ids) > MAX_GPUS:
                    break
        if len(ids) != self.gpus:
            raise TraceError(
                f"{self.path}: the log has {len(ids)} GPUs (its {key} column says so), not the {self.gpus} "
                "of --gpus; --gpus is only for logs without an index or uuid column"
            )

    # ---- rows ----------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[TraceRow]:
        needs_count = self.gpus is None
        for line, fields in self._lines():
            if self._is_header(fields):
                self._restarted = self._max_ts is not None
                self._parse_header(fields, line)
                identified = "index" in self._by_name or "uuid" in self._by_name
                if needs_count and not identified:
                    self.gpus = self._infer_gpu_count()
                elif identified and self._gpus_given and not self._checked:
                    self._check_gpu_count()
                    self._checked = True  # once: the whole file was read for it
                needs_count = False
                continue
            if len(fields) != len(self._columns):
                self._warn(
                    f"{self.path}:{line}: {len(fields)} fields where the header has {len(self._columns)}"
                )
                continue
            if any(len(f) > MAX_FIELD_CHARS for f in fields):
                self._warn(f"{self.path}:{line}: a field longer than {MAX_FIELD_CHARS} characters")
                continue
            try:
                row = self._row(fields, line)
            except ValueError as exc:
                self._warn(f"{self.path}:{line}: {exc}")
                continue
            self.stats.rows += 1
            yield row

    def _gpu_id(self, fields: list[str]) -> str:
        if "index" in self._by_name:
            raw = fields[self._by_name["index"]].strip()
            try:
                index = float(raw)
            except ValueError:
                raise ValueError(f"index {raw!r} is not a number") from None
            if not (0 <= index < MAX_GPUS and index == int(index)):  # also nan and inf
                raise ValueError(f"index {raw!r} is not a GPU index (a whole number 0-{MAX_GPUS - 1})")
            return str(int(index))
        if "uuid" in self._by_name:
            uuid = fields[self._by_name["uuid"]].strip()
            if uuid not in self._uuids and len(self._uuids) >= MAX_GPUS:
                raise TraceError(f"{self.path}: more than {MAX_GPUS} GPU uuids: not one node's trace")
            return self._uuids.setdefault(uuid, str(len(self._uuids)))
        gpu = str(self._next_rr % (self.gpus or 1))
        self._next_rr += 1
        return gpu

    def _row(self, fields: list[str], line: int) -> TraceRow:
        ts = parse_timestamp(fields[self._by_name["timestamp"]])
        gpu_values: dict[str, float | None] = {}
        host_values: dict[str, float | None] = {}
        extra: dict[str, float] = {}  # catalog signals read generically (GpuPoint.extra)
        clipped: list[Column] = []
        for col in self._columns:
            if col.target is None:
                continue
            kind, attr = col.target
            try:
                value = parse_cell(fields[col.index], col.unit)
            except ValueError as exc:
                raise ValueError(f"column {col.name!r}: {exc}") from None
            if value is not None and attr in BOUNDS and not BOUNDS[attr][0] <= value <= BOUNDS[attr][1]:
                value = None
                clipped.append(col)
            if kind == "extra":
                if value is not None:
                    extra[attr] = value
                continue
            (gpu_values if kind == "gpu" else host_values)[attr] = value
        gpu = self._gpu_id(fields)
        last = self._last_ts.get(gpu)
        if last is not None and ts < last and not self._restarted:
            self.stats.backwards += 1
            raise ValueError(f"timestamp {ts - last:+g} s before GPU {gpu}'s previous row's (time goes back)")
        if "reasons" in gpu_values and gpu_values["reasons"] is not None:
            reasons = gpu_values["reasons"]
            if not (0 <= reasons < MAX_REASONS and reasons == int(reasons)):
                raise ValueError(f"column 'clocks_event_reasons.active': {reasons!r} is not a reasons mask")
            gpu_values["reasons"] = int(reasons)  # type: ignore[assignment]
        self._see_step(ts, gpu, line)
        for col in clipped:  # counted once the row is known to be read
            self.stats.clipped[col.name] = self.stats.clipped.get(col.name, 0) + 1
        if self._first_ts is None:
            self._first_ts = ts
            self.stats.first_timestamp = ts
        self.stats.last_timestamp = ts
        t = ts - self._first_ts
        if gpu not in self.stats.gpus:
            self.stats.gpus.append(gpu)
        name = fields[self._by_name["name"]].strip() if "name" in self._by_name else ""
        if name and gpu not in self.stats.names:
            self.stats.names[gpu] = name
        if "fabric_ready" in gpu_values and gpu_values["fabric_ready"] is not None:
            gpu_values["fabric_ready"] = bool(gpu_values["fabric_ready"])  # type: ignore[assignment]
        host = None
        if host_values and any(v is not None for v in host_values.values()) and t != self._last_host_t:
            host = HostPoint(t=t, **host_values)  # type: ignore[arg-type]
            self._last_host_t = t
        return TraceRow(
            line=line,
            t=t,
            gpu=gpu,
            point=GpuPoint(t=t, extra=extra or NO_EXTRA, **gpu_values),  # type: ignore[arg-type]
            host=host,
            name=name,
            segment=self.stats.gap_count,
        )

    def _see_step(self, ts: float, gpu: str, line: int) -> None:
        """A step past the latest timestamp longer than TRACE_GAP_PERIODS evaluation periods is a gap: the
        next segment starts. So does a restart of nvidia-smi into the same file (a repeated header) whose
        clock went back. (GPUs' rows may interleave in time; each GPU's own go forward.)"""
        if self._max_ts is not None:
            step = ts - self._max_ts
            if step > TRACE_GAP_PERIODS.value * EVAL_INTERVAL.value or (self._restarted and step < 0):
                self.stats.gap_count += 1
                if len(self.stats.gaps) < self.MAX_WARNINGS:
                    self.stats.gaps.append((line, step))
                self._max_ts = ts
                self._last_ts.clear()
        self._max_ts = ts if self._max_ts is None else max(self._max_ts, ts)
        self._last_ts[gpu] = ts
        self._restarted = False


class TraceWriter:
    """Writes points in the trace format: one row per GPU point, with the node's latest host values."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._host: HostPoint | None = None
        self._header_written = False
        self.rows = 0

    def host(self, point: HostPoint) -> None:
        self._host = point

    def gpu(self, gpu: str, name: str, point: GpuPoint) -> None:
        if not self._header_written:
            header = ["timestamp", "index", "name", *(c[0] for c in WRITE_COLUMNS)]
            self.stream.write(", ".join(header) + "\n")
            self._header_written = True
        cells = [format_timestamp(point.t), gpu, name]
        for _, kind, attr, scale, fmt in WRITE_COLUMNS:
            if kind == "extra":
                value = point.extra.get(attr)
            else:
                source = point if kind == "gpu" else self._host
                value = getattr(source, attr) if source is not None else None
            if value is None or (isinstance(value, float) and math.isnan(value)):
                cells.append("[N/A]")
            elif fmt == "hex":
                cells.append(f"0x{int(value):016X}")
            else:
                cells.append(fmt.format(float(value) * scale))
        self.stream.write(", ".join(cells) + "\n")
        self.rows += 1


def format_timestamp(t: float) -> str:
    """nvidia-smi's own format, in UTC (replay only uses differences)."""
    ms = round(t * 1000)
    return time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}"


def read_text(text: str, gpus: int | None = None) -> list[TraceRow]:
    """Parse a trace given as text (tests, small fixtures)."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as handle:
        handle.write(text)
    try:
        return list(TraceReader(handle.name, gpus))
    finally:
        Path(handle.name).unlink(missing_ok=True)
