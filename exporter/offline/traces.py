"""Trace CSV in and out: what ``nvidia-smi --query-gpu=... --format=csv[,nounits] -lms N`` prints, plus
our extension columns. ``TraceReader`` turns any such file into points; ``TraceWriter`` writes the
points the live exporter samples in the same format, so anything seen live can be replayed.

Real logs parse as they are: units in the header or in the cells or nowhere, ``, `` or ``,``,
``[N/A]``/``[Not Supported]`` for missing values, nvidia-smi/ISO 8601/Unix timestamps, an ``index``
column or rows in index order (``--gpus N``), any subset of columns, repeated headers where nvidia-smi
was restarted into the same file. A gzip-compressed trace (``.csv.gz``) reads the same as its ``.csv``; one
cut short (a copy or an upload that stopped) reads up to its last complete line, and says where it ends.

Other GPU logs are read by the modules of exporter/offline/traceformats, one per format; ``TraceReader`` picks
the reader from the first few KiB of the file (never from its name) and turns what any of them yields
into the same rows, with the same bounds and accounting.
"""

from __future__ import annotations

import contextlib
import csv
import difflib
import gzip
import io
import math
import os
import re
import select
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO

from exporter.analysis.points import NO_EXTRA, GpuPoint, HostPoint
from exporter.offline import traceformats
from exporter.offline.files import open_input
from exporter.offline.traceformats import interleave
from exporter.offline.traceformats.base import (
    MAX_GPUS,
    Context,
    FormatError,
    Sample,
    Skip,
    parse_timestamp,
    split_header,
    strip_ansi,
)
from exporter.policy import catalog
from exporter.policy.thresholds import CLI_SUGGESTION_SIMILARITY, EVAL_INTERVAL, TRACE_GAP_PERIODS

MIB = catalog.MIB
UNIT_SCALE = {"%": 0.01, "mib": MIB, "mib/s": MIB, "w": 1.0, "mhz": 1e6, "": 1.0, "c": 1.0, "s": 1.0}
MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[gpu is lost]", "nan"}

# column name -> (point, attribute); units come from the file. The GPU's columns come from the signal
# catalog (exporter/policy/catalog.py), the node's are these.
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
# nvidia-smi query fields replay knows and has no use for (the SM clock is the one that shows a cap or
# heat): read past without calling them unknown
UNUSED_COLUMNS = frozenset(
    f"clocks.{which}{clock}"
    for which in ("", "current.", "max.", "applications.", "default_applications.")
    for clock in ("mem", "memory", "gr", "graphics", "video")
)
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
    **dict.fromkeys(("shm_used_bytes", "shm_size_bytes"), catalog.HOST_MEMORY),
    "disk_read_bps": catalog.DISK_RATE,
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
# MAX_GPUS (exporter/offline/traceformats/base.py): more distinct GPUs is a corrupt index/uuid column.
# A trace's rows follow each other closely: this many lines in a row without one (blank, or none of them a
# readable row) is not a trace, and reading stops there rather than run through the rest.
MAX_ROWLESS_LINES = 100_000
# A gzip trace expands 20-35 times (the example traces), `nvidia-smi -l` screens 100-150 times (their
# borders and headings repeat on every screen); one expanding more than this past its first MiB is a bomb
# of repeated bytes, not a trace: reading stops there (deflate's limit is about 1,000).
MAX_GZIP_RATIO = 250
GZIP_FREE_BYTES = 1 << 20
# Pipes, FIFOs, devices and stdin ('-') are read once, to their end, into a temporary file that the
# reader's passes then read like any file: at most this many bytes, waiting at most STREAM_WAIT_S for
# each chunk (a FIFO no one writes to would otherwise wait forever).
MAX_STREAM_BYTES = 1 << 30
STREAM_WAIT_S = 10.0
STREAM_CHUNK = 1 << 16
STDIN = "-"
# unknown column names remembered (and warned about): a header is read again at every restart
MAX_UNKNOWN_COLUMNS = 100
# the process names kept per GPU from a log's process tables, and each name's length: what a GPU runs
# names its class; a log of thousands of short-lived processes is no more evidence than its first few
MAX_PROCESS_NAMES = 8
MAX_PROCESS_NAME_CHARS = 200
# the largest clock event reasons mask: a 64-bit word
MAX_REASONS = float(1 << 64)
# A GPU's row at most this much earlier than its previous one is clock jitter (an NTP step; the rows of
# one sample, stamped ms apart, read as one GPU): skipped, as always. Further back is another run appended
# to the file: it starts a new segment and is kept whole (see _see_step).
BACK_JITTER_S = 1.0
# the cells fixed per GPU: in a log without an index they repeat with the GPUs (interleave.guess's evidence)
PER_GPU_COLUMNS = ("name", "uuid", "pci.bus_id", "serial", "memory.total", "power.limit")
# --columns: a column not to read, and bounds on the list (a header is a few dozen names of a few dozen
# characters)
SKIP_COLUMN = "-"
MAX_COLUMN_NAMES = 512
MAX_COLUMN_NAME_CHARS = 100
# what --columns suggests when a name resembles none it knows
COMMON_COLUMNS = (
    "timestamp",
    "index",
    "name",
    "utilization.gpu",
    "power.draw",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "clocks.sm",
)

_NUMBER = re.compile(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]*)$")


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
    # GPU -> the process names its log's process tables showed (a few per GPU, each bounded): evidence of
    # the workload's class (exporter/offline/replay.py reads them)
    processes: dict[str, list[str]] = field(default_factory=dict)
    process_names: int = 0  # how many names ``processes`` holds: it changed when this did
    backwards: int = 0  # rows skipped: their time is up to BACK_JITTER_S before their GPU's previous row's
    gap_count: int = 0  # gaps in the samples and times going back, each starting a new segment
    gaps: list[tuple[int, float]] = field(default_factory=list)  # (line, seconds) of the first few
    back_steps: int = 0  # of gap_count, the times that went back (their seconds in gaps are negative)
    gpus_hint: int | None = None  # a log without an index that looks like this many GPUs, not surely
    first_timestamp: float | None = None
    last_timestamp: float | None = None
    gpus: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    clipped: dict[str, int] = field(default_factory=dict)  # column -> impossible values read as missing
    clipped_attrs: dict[str, str] = field(default_factory=dict)  # such a column -> its point attribute
    format: str = ""  # what the file was read as (traceformats.names())
    period: float | None = None  # seconds between samples placed by --period (a log without times)
    cut_after_line: int | None = None  # a gzip file cut short: its last complete line (None: whole)
    position: str = "line"  # what a gap's place in ``gaps`` counts: a file's lines, a Prometheus' steps
    gap_s: float | None = None  # silence longer than this is a gap (None: ``gap_seconds()``)


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


def parse_columns(text: str) -> list[str]:
    """``--columns``: a headerless CSV's column names, comma-separated, checked (``check_columns``)."""
    return check_columns(text.split(","))


def check_columns(names: list[str] | tuple[str, ...]) -> list[str]:
    """Column names for a CSV without a header: nvidia-smi's query fields, each with or without its unit
    (``utilization.gpu [%]``), ``-`` for a column not to read. A mistake is a ValueError of one line."""
    if len(names) > MAX_COLUMN_NAMES:
        raise ValueError(f"{len(names)} names; a trace has at most {MAX_COLUMN_NAMES} columns")
    seen: set[str] = set()
    for raw in names:
        name = _column_name(raw)
        if not name:
            raise ValueError(f"an empty name among {len(names)}: write {SKIP_COLUMN} for a column to skip")
        if name == SKIP_COLUMN:
            continue
        if name not in GPU_COLUMNS and name not in META_COLUMNS | UNUSED_COLUMNS:
            raise ValueError(_unknown_column(raw.strip()))
        if name in seen:
            raise ValueError(f"{name} is named twice")
        seen.add(name)
    if "timestamp" not in seen:
        raise ValueError("no timestamp: name the column with each row's time (replay places rows by it)")
    if not seen & set(GPU_COLUMNS):
        raise ValueError("no column with a GPU's values (utilization.gpu, power.draw, memory.used, ...)")
    return [raw.strip() for raw in names]


def _column_name(raw: str) -> str:
    """A header cell's name without its unit, lower case: ``utilization.gpu [%]`` -> ``utilization.gpu``."""
    return split_header(raw)[0].lower()


def _unknown_column(raw: str) -> str:
    """One line for a --columns name replay does not know, with the names it resembles or starts."""
    word = _column_name(raw)[:MAX_COLUMN_NAME_CHARS]
    known = [*GPU_COLUMNS, *sorted(META_COLUMNS)]
    close = difflib.get_close_matches(word, known, n=3, cutoff=CLI_SUGGESTION_SIMILARITY.value)
    if len(word) >= 3:  # "util", "power": the fields it abbreviates
        close += [name for name in known if name.startswith(word) and name not in close]
    hint = f"did you mean {', '.join(close[:4])}?" if close else f"such as {', '.join(COMMON_COLUMNS)}"
    return (
        f"{raw[:MAX_COLUMN_NAME_CHARS]!r} is not a column replay reads ({hint}); names are nvidia-smi's "
        f"query fields (docs/commands.md), '{SKIP_COLUMN}' for a column to skip"
    )


def _looks_like_data(fields: list[str]) -> bool:
    """A first line of values, not names: most cells are numbers, times or missing values."""
    cells = [f.strip() for f in fields if f.strip()]
    return len(cells) >= 2 and 2 * sum(map(_is_value, cells)) >= len(cells)


def _is_value(cell: str) -> bool:
    for parse in (parse_timestamp, lambda text: parse_cell(text, "")):
        try:
            parse(cell[:MAX_FIELD_CHARS])
        except (ValueError, OverflowError):
            continue
        return True
    return False


def clipped_warnings(stats: ReadStats) -> list[str]:
    """One line per column that had impossible values."""
    lines = []
    for name, count in stats.clipped.items():
        _, _, shown, why = BOUNDS[stats.clipped_attrs.get(name) or GPU_COLUMNS[name][1]]
        lines.append(f"{name}: {count} value(s) outside {shown} ({why}) read as missing")
    return lines


def gap_seconds() -> float:
    """The longest step between samples that is not a gap (TRACE_GAP_PERIODS evaluation periods)."""
    return TRACE_GAP_PERIODS.value * EVAL_INTERVAL.value


def reading_notes(stats: ReadStats) -> list[str]:
    """One line each for what a person should know of how the rows were placed: the times that went
    back (each a run kept as a new segment) and a GPU count the rows suggest but do not prove."""
    notes = []
    if stats.back_steps:
        back = [(line, -seconds) for line, seconds in stats.gaps if seconds < 0]
        shown = ", ".join(f"line {line} ({seconds:.0f} s back)" for line, seconds in back[:5])
        more = f" and {stats.back_steps - min(len(back), 5)} more" if stats.back_steps > len(back[:5]) else ""
        notes.append(
            f"time went back {stats.back_steps} time(s), at {shown}{more}: each later run is kept as a new "
            f"segment, placed {gap_seconds():.0f} s after the samples before it"
        )
    if stats.gpus_hint is not None:
        hint = stats.gpus_hint
        notes.append(
            f"the rows look like {hint} GPUs interleaved without an index column (most samples are {hint} "
            f"rows with one timestamp, but not all); read as {len(stats.gpus)} GPU(s): if the log has {hint} "
            f"GPUs, pass --gpus {hint}"
        )
    return notes


class _CutGzip(io.RawIOBase):
    """A gzip file's decompressed bytes, ending quietly where the compressed file ends early (``cut`` is
    then True): what was decompressed before the cut is kept, where ``gzip.open`` would raise and lose the
    text it had buffered. A corrupt stream is a BadGzipFile; one expanding past MAX_GZIP_RATIO a
    TraceError naming ``name``."""

    def __init__(self, path: Path, name: Path) -> None:
        self._raw = open(path, "rb")  # noqa: SIM115 - closed with the gzip stream
        self._gz = gzip.GzipFile(fileobj=self._raw, mode="rb")
        self.name = name
        self.cut = False
        self.expanded = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.cut:
            return 0
        try:
            data = self._gz.read1(len(buffer))
        except EOFError:
            self.cut = True
            return 0
        except zlib.error as exc:  # a corrupt body (its header read well)
            raise gzip.BadGzipFile(f"corrupt compressed data: {exc}") from None
        self.expanded += len(data)
        if self.expanded > GZIP_FREE_BYTES and self.expanded > MAX_GZIP_RATIO * self._raw.tell():
            raise TraceError(
                f"{self.name}: expands more than {MAX_GZIP_RATIO} times ({self._raw.tell()} bytes to "
                f"{self.expanded} so far): not a trace (traces expand 20-150 times)"
            )
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._gz.close()
        self._raw.close()
        super().close()


def _poller(fd: int) -> select.poll:
    """A poll object for ``fd``, made non-blocking: every read waits in ``_wait``, bounded."""
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return poller


def _wait(name: str, fd: int, poller: select.poll) -> None:
    if poller.poll(STREAM_WAIT_S * 1000):
        return
    if _no_writer(fd):
        raise TraceError(
            f"{name}: no program opened this FIFO for writing within {STREAM_WAIT_S:g} s (start its writer "
            "within that time, or replay a saved file)"
        )
    raise TraceError(f"{name}: nothing to read for {STREAM_WAIT_S:g} s")


def _no_writer(fd: int) -> bool:
    """A FIFO or pipe with no writer: a non-blocking read ends at once, empty, where one with a quiet
    writer would have to wait (BlockingIOError). Asked only as the read is given up on."""
    try:
        return os.read(fd, 1) == b""
    except OSError:
        return False


def _spool(name: str, fd: int, into: IO[bytes]) -> None:
    """Copy what ``fd`` (a pipe, FIFO or device) sends into ``into``, to its end: within MAX_STREAM_BYTES,
    each chunk within STREAM_WAIT_S. Plain text stops early at a line longer than the reader takes (the
    reader then reports it: /dev/zero is one endless line)."""
    poller = _poller(fd)
    total, since_newline, text = 0, 0, None
    while True:
        _wait(name, fd, poller)
        try:
            chunk = os.read(fd, STREAM_CHUNK)
        except BlockingIOError:
            continue
        except OSError as exc:
            raise TraceError(f"{name}: cannot read ({exc.strerror or exc})") from None
        if not chunk:
            return
        into.write(chunk)
        total += len(chunk)
        if total > MAX_STREAM_BYTES:
            raise TraceError(
                f"{name}: more than {MAX_STREAM_BYTES >> 20} MiB from a pipe or device: save it to a file "
                "and replay that"
            )
        if text is None:
            text = not chunk.startswith(b"\x1f\x8b")  # gzip's magic: compressed, no lines to see
        if text:
            newline = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            since_newline = len(chunk) - 1 - newline if newline >= 0 else since_newline + len(chunk)
            if since_newline > 4 * MAX_LINE_CHARS:  # UTF-8: at most 4 bytes a character
                return


class TraceReader:
    """Iterates a trace's rows as points. Bad rows are skipped with a warning naming their line.

    The format comes from the file's first few KiB (``traceformats.detect``). ``period`` and ``start``
    place the samples of a log without times: ``start`` (Unix seconds, default 0) plus the sample's number
    times ``period`` (default: the tool's own interval). Logs with times ignore both. ``columns`` names the
    columns of a CSV without a header line (``check_columns``): the file is then read as nvidia-smi's CSV
    under that header."""

    MAX_WARNINGS = 20

    def __init__(
        self,
        path: str | Path,
        gpus: int | None = None,
        period: float | None = None,
        start: float | None = None,
        columns: list[str] | tuple[str, ...] | None = None,
    ) -> None:
        if period is not None and not (math.isfinite(period) and period > 0):
            raise ValueError(f"period must be a positive number of seconds, not {period!r}")
        if start is not None and not (math.isfinite(start) and 0 <= start <= traceformats.base.MAX_TIMESTAMP):
            raise ValueError(f"start must be Unix seconds between 1970 and 9999, not {start!r}")
        self.path = Path(path)
        self.gpus = gpus
        self.period, self.start = period, start
        self.columns = check_columns(columns) if columns is not None else None
        self._offset = 0.0  # added to the times of the rows after a time going back (see _see_step)
        self.format: ModuleType | None = None  # the reader of a log other than nvidia-smi's CSV
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
        self._gz: _CutGzip | None = None  # the open gzip file, when the trace is one
        self._source = self.path  # what is read: the file, or the copy of a stream (_take_stream)
        self._gzip = self.path.suffix.lower() == ".gz"
        # the temporary copy of a stream: unlinked from the start (the kernel frees it however the
        # process ends, a kill included), read through this open descriptor's /proc path
        self._copy: IO[bytes] | None = None
        self._row_line = 0  # the line of the latest row (MAX_ROWLESS_LINES)

    # ---- plumbing ------------------------------------------------------------------------------

    def _warn(self, message: str) -> None:
        self.stats.skipped += 1
        if len(self.stats.warnings) < self.MAX_WARNINGS:
            self.stats.warnings.append(message)

    def _open(self) -> IO[str]:
        """The file as text; a ``.gz`` file is decompressed on the fly (and may end early: see _bounded)."""
        try:
            if self._gzip:
                self._gz = _CutGzip(self._source, self.path)
                return io.TextIOWrapper(io.BufferedReader(self._gz), encoding="utf-8-sig", newline="")
            return self._source.open(newline="", encoding="utf-8-sig")  # a leading BOM is not data
        except OSError as exc:
            raise TraceError(f"{self.path}: cannot read ({exc.strerror or exc})") from None

    def _take_stream(self) -> None:
        """A pipe, FIFO, device or stdin ('-') can be read once only, and the passes read the file two or
        three times: it is copied first (``_spool``), and the copy read. Regular files are read in place."""
        if str(self.path) == STDIN:
            if sys.stdin is None or sys.stdin.isatty():
                raise TraceError(f"{STDIN}: stdin is a terminal: pipe a log in (replay - < gpus.csv)")
            self._copy_from(sys.stdin.fileno(), close=False)
            return
        try:
            fd, regular = open_input(self.path)  # a FIFO: no wait for a writer here
        except IsADirectoryError:
            return  # _open says why, as for a file it cannot open
        except OSError as exc:
            raise TraceError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        if regular:
            os.close(fd)
            return
        self._copy_from(fd, close=True)

    def _copy_from(self, fd: int, close: bool) -> None:
        blocking = os.get_blocking(fd)
        try:
            _wait(str(self.path), fd, _poller(fd))  # a copy is made once there is something to copy
            self._copy = tempfile.TemporaryFile(prefix="replay-")  # noqa: SIM115 - closed in close()
            _spool(str(self.path), fd, self._copy)
            self._copy.flush()
        finally:
            if close:
                os.close(fd)
            else:
                os.set_blocking(fd, blocking)
        self._source = Path(f"/proc/self/fd/{self._copy.fileno()}")  # each open reads from the start
        with self._source.open("rb") as copy:
            self._gzip = copy.read(2) == b"\x1f\x8b"  # no name to go by: gzip's magic

    def close(self) -> None:
        """Free the copy of a stream, if one was made."""
        if self._copy is not None:
            self._copy.close()
            self._copy = None

    def _bounded(self, handle: IO[str]) -> Iterator[str]:
        """The file's lines, each read up to MAX_LINE_CHARS: a longer one ends the read with an error. In a
        gzip file cut short, the lines end with the last complete one (the cut one is partial: a value in it
        may have lost digits), and ``stats.cut_after_line`` says which that is."""
        number = blank = 0
        while line := handle.readline(MAX_LINE_CHARS + 2):
            partial = not line.endswith(("\n", "\r")) and len(line) <= MAX_LINE_CHARS
            if partial and self._gz is not None and self._gz.cut:
                break
            number += 1
            if len(line.rstrip("\r\n")) > MAX_LINE_CHARS:
                raise TraceError(
                    f"{self.path}:{number}: a line longer than {MAX_LINE_CHARS} characters: not a trace "
                    "(nvidia-smi writes a few hundred per line)"
                )
            blank = blank + 1 if line.isspace() else 0
            if blank > MAX_ROWLESS_LINES:
                raise TraceError(f"{self.path}:{number}: {blank} blank lines in a row: not a trace")
            yield line
        if self._gz is not None and self._gz.cut:
            self.stats.cut_after_line = number

    def _guarded(self, lines: Iterator[str]) -> Iterator[str]:
        """Reading errors as TraceErrors that name the file."""
        try:
            yield from lines
        except UnicodeDecodeError as exc:
            raise TraceError(f"{self.path}: not a UTF-8 text file ({exc.reason})") from None
        except (gzip.BadGzipFile, EOFError) as exc:
            raise TraceError(f"{self.path}: not a readable gzip file ({exc or 'truncated'})") from None
        except OSError as exc:  # a disk error while reading
            raise TraceError(f"{self.path}: cannot read ({exc.strerror or exc})") from None

    def _head(self) -> list[str]:
        """The complete lines within the first SNIFF_CHARS characters: what decides the format. A first
        line longer than that gives none (the CSV reader then reports the line's length)."""
        with self._open() as handle:

            def first() -> Iterator[str]:
                yield handle.read(traceformats.SNIFF_CHARS)

            text = "".join(self._guarded(first()))
        lines = text.splitlines()
        if len(text) == traceformats.SNIFF_CHARS and lines and not text.endswith(("\n", "\r")):
            lines.pop()  # cut short
        return lines

    def _text_lines(self) -> Iterator[tuple[int, str]]:
        """The file's lines for the other formats' readers: bounded, line ends and terminal escapes
        removed."""
        with self._open() as handle:
            for number, line in enumerate(self._guarded(self._bounded(handle)), 1):
                yield number, strip_ansi(line.rstrip("\r\n"))

    def _lines(self) -> Iterator[tuple[int, list[str]]]:
        with self._open() as handle:
            reader = csv.reader(self._guarded(self._bounded(handle)), skipinitialspace=True)
            try:
                for fields in reader:
                    if fields and any(f.strip() for f in fields):
                        yield reader.line_num, fields
            except csv.Error as exc:
                raise TraceError(f"{self.path}:{reader.line_num}: {exc}") from None

    def _rowless(self, line: int) -> None:
        """A line that gave no row: the read ends where too many came since the last row (or the start)."""
        if line - self._row_line > MAX_ROWLESS_LINES:
            since = f"since line {self._row_line}" if self._row_line else "from the start"
            raise TraceError(
                f"{self.path}:{line}: no readable row in {line - self._row_line} lines ({since}): not a "
                "trace, or not one in a format replay reads"
            )

    def _gpus_named(self) -> None:
        """--gpus given for a log whose every sample names its GPU: they must agree (one pass first)."""
        assert self.format is not None
        ids: set[str] = set()
        ctx = Context(start=self.start or 0.0, period=self.period or 1.0)
        for item in self.format.read(self._text_lines, ctx):
            if isinstance(item, Sample):
                ids.add(item.gpu)
        if len(ids) != self.gpus:
            raise TraceError(
                f"{self.path}: the log has {len(ids)} GPUs (its {self.format.NAME} rows say so), not the "
                f"{self.gpus} of --gpus; --gpus is only for logs without an index or uuid column"
            )

    def _take_header(self, fields: list[str], line: int, needs_count: bool) -> None:
        """A header read (or given by --columns): its columns, and the GPU count where no column names
        the GPUs."""
        self._parse_header(fields, line)
        identified = "index" in self._by_name or "uuid" in self._by_name
        if needs_count and not identified:
            self.gpus = self._infer_gpu_count()
        elif identified and self._gpus_given and not self._checked:
            self._check_gpu_count()
            self._checked = True  # once: the whole file was read for it

    def _is_header(self, fields: list[str]) -> bool:
        return fields[0].strip().lower().startswith("timestamp") or not self._columns

    def _parse_header(self, fields: list[str], line: int) -> None:
        columns, unknown = [], []
        for i, raw in enumerate(fields):
            name, bracketed = split_header(raw)
            name, unit = name.lower(), (bracketed or "").strip()
            target = GPU_COLUMNS.get(name)
            if target is None and name not in META_COLUMNS | UNUSED_COLUMNS and name != SKIP_COLUMN:
                unknown.append(raw.strip())
            columns.append(
                Column(i, name, unit or DEFAULT_UNITS.get(target[1], "") if target else unit, target)
            )
        by_name = {c.name: c.index for c in columns}
        if "timestamp" not in by_name and _looks_like_data(fields):
            count = len(fields)
            raise TraceError(
                f"{self.path}:{line}: no header line (the first line is data, {count} fields): name the "
                f"{count} columns with --columns, nvidia-smi's query fields in order, e.g. "
                "--columns timestamp,utilization.gpu,power.draw,memory.used,memory.total"
            )
        if "timestamp" not in by_name:
            raise TraceError(
                f"{self.path}:{line}: not a log replay reads: the first line is not a header with a "
                f"timestamp column ({traceformats.NVIDIA_SMI_CSV}), and the file is none of "
                f"{', '.join(traceformats.names()[1:])}"
            )
        if not any(c.target for c in columns):
            raise TraceError(f"{self.path}:{line}: the header names no column this tool understands")
        known = self.stats.unknown_columns
        known += [c for c in unknown if c not in known][: max(0, MAX_UNKNOWN_COLUMNS - len(known))]
        self._columns, self._by_name = columns, by_name

    def _infer_gpu_count(self) -> int:
        """Without index or uuid: the GPUs the rows interleave (traceformats/interleave.py). Where that is
        not clear, as many as rows share the first timestamp, as replay always read them, with a hint
        (``stats.gpus_hint``) when the rows look like another count."""
        with contextlib.closing(self._stamped_rows()) as rows:
            found = interleave.guess(rows)
        if found.gpus is not None:
            return found.gpus
        count = self._first_time_rows()
        if found.looks_like is not None and found.looks_like != count:
            self.stats.gpus_hint = found.looks_like
        return count

    def _data_rows(self) -> Iterator[list[str]]:
        """The rows under the first header (the first line; none under --columns) up to a repeated one,
        with as many fields as it has, each bounded."""
        lines = self._lines()
        if self.columns is None:
            next(lines, None)
        for _, fields in lines:
            if self.columns is None and fields[0].strip().lower().startswith("timestamp"):
                return  # a restart: what follows is another run
            if len(fields) == len(self._columns) and all(len(f) <= MAX_FIELD_CHARS for f in fields):
                yield fields

    def _stamped_rows(self) -> Iterator[tuple[float, tuple[str, ...]]]:
        """(time, per-GPU cells) of each row with a readable time: what interleave.guess reads."""
        at = self._by_name["timestamp"]
        keys = [self._by_name[name] for name in PER_GPU_COLUMNS if name in self._by_name]
        for fields in self._data_rows():
            try:
                ts = parse_timestamp(fields[at])
            except (ValueError, OverflowError):
                continue
            yield ts, tuple(fields[i].strip() for i in keys)

    def _first_time_rows(self) -> int:
        """The rows that share the first row's timestamp (exactly as written), up to MAX_GPUS."""
        at = self._by_name["timestamp"]
        first, count = None, 0
        with contextlib.closing(self._data_rows()) as rows:
            for fields in rows:
                stamp = fields[at].strip()
                if first is None:
                    first = stamp
                if stamp != first or count >= MAX_GPUS:
                    break
                count += 1
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
        try:
            self._take_stream()
            head = self._head()
            self.format = traceformats.detect(head, set(GPU_COLUMNS))
            self.stats.format = self.format.NAME if self.format else traceformats.NVIDIA_SMI_CSV
            if self.columns is not None:
                self._check_headerless(head)
                yield from self._csv_rows()
            elif self.format is None:
                yield from self._csv_rows()
            else:
                yield from self._format_rows(self.format)
        finally:
            self.close()

    def _check_headerless(self, head: list[str]) -> None:
        """--columns names the columns of a CSV without a header: a file with its own is refused, as its
        header and the flag could disagree."""
        if self.format is not None:
            raise TraceError(
                f"{self.path}: the file is {self.format.NAME}, not a CSV without a header line: "
                "--columns is only for those"
            )
        first = next((line for line in head if line.strip()), "")
        with contextlib.suppress(csv.Error):
            cells = next(csv.reader([first], skipinitialspace=True), [])
            if any(_column_name(c) in GPU_COLUMNS or _column_name(c) in META_COLUMNS for c in cells):
                raise TraceError(
                    f"{self.path}:1: the file has a header line of its own: --columns is only for a CSV "
                    "without one (leave it out)"
                )

    def _format_rows(self, reader: ModuleType) -> Iterator[TraceRow]:
        """The rows of a log another module reads: its samples, bounded and accounted like CSV rows."""
        unknown = self.stats.unknown_columns

        def note(name: str) -> None:
            if name not in unknown and len(unknown) < MAX_UNKNOWN_COLUMNS:
                unknown.append(name)

        def process(gpu: str, name: str) -> None:
            names = self.stats.processes.setdefault(gpu, []) if len(self.stats.processes) < MAX_GPUS else []
            name = name[:MAX_PROCESS_NAME_CHARS]
            if name not in names and len(names) < MAX_PROCESS_NAMES:
                names.append(name)
                self.stats.process_names += 1

        period = self.period or reader.DEFAULT_PERIOD
        ctx = Context(start=self.start or 0.0, period=period, gpus=self.gpus, unknown=note, process=process)
        try:
            if self._gpus_given and reader.NAMES_GPUS:
                self._gpus_named()
            for item in reader.read(self._text_lines, ctx):
                if isinstance(item, Skip):
                    self._warn(f"{self.path}:{item.line}: {item.message}")
                    self._rowless(item.line)
                    continue
                try:
                    row = self._sample_row(item, ctx)
                except ValueError as exc:
                    self._warn(f"{self.path}:{item.line}: {exc}")
                    self._rowless(item.line)
                    continue
                self.stats.rows += 1
                yield row
        except FormatError as exc:
            where = f"{self.path}:{exc.line}" if exc.line else str(self.path)
            raise TraceError(f"{where}: {reader.NAME}: {exc}") from None

    def _sample_row(self, sample: Sample, ctx: Context) -> TraceRow:
        ts = sample.ts
        if ts is None:
            ts = ctx.start + sample.tick * ctx.period
            self.stats.period = ctx.period
        if not 0.0 <= ts <= traceformats.base.MAX_TIMESTAMP:  # also nan and inf
            raise ValueError(f"time {ts!r} is not a time between 1970 and 9999")
        values: dict[str, float | None] = {}
        clipped: list[tuple[str, str]] = []
        for attr, value in sample.values.items():
            if value is not None and attr in BOUNDS and not BOUNDS[attr][0] <= value <= BOUNDS[attr][1]:
                value = None
                clipped.append((sample.labels.get(attr, attr), attr))
            values[attr] = value
        return self._finish(sample.line, ts, sample.gpu, sample.name, values, {}, {}, clipped)

    def _csv_rows(self) -> Iterator[TraceRow]:
        if self.columns is not None:  # the header --columns gives
            self._take_header(self.columns, 0, needs_count=self.gpus is None)
        needs_count = self.gpus is None and self.columns is None
        header = "--columns names" if self.columns is not None else "the header has"
        for line, fields in self._lines():
            if self.columns is None and self._is_header(fields):
                self._restarted = self._max_ts is not None
                self._take_header(fields, line, needs_count)
                needs_count = False
                continue
            if len(fields) != len(self._columns):
                self._warn(f"{self.path}:{line}: {len(fields)} fields where {header} {len(self._columns)}")
                self._rowless(line)
                continue
            if any(len(f) > MAX_FIELD_CHARS for f in fields):
                self._warn(f"{self.path}:{line}: a field longer than {MAX_FIELD_CHARS} characters")
                self._rowless(line)
                continue
            try:
                row = self._row(fields, line)
            except ValueError as exc:
                self._warn(f"{self.path}:{line}: {exc}")
                self._rowless(line)
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
        clipped: list[tuple[str, str]] = []  # (column, attribute)
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
                clipped.append((col.name, attr))
            if kind == "extra":
                if value is not None:
                    extra[attr] = value
                continue
            (gpu_values if kind == "gpu" else host_values)[attr] = value
        gpu = self._gpu_id(fields)
        name = fields[self._by_name["name"]].strip() if "name" in self._by_name else ""
        return self._finish(line, ts, gpu, name, gpu_values, host_values, extra, clipped)

    def _finish(
        self,
        line: int,
        ts: float,
        gpu: str,
        name: str,
        gpu_values: dict[str, float | None],
        host_values: dict[str, float | None],
        extra: dict[str, float],
        clipped: list[tuple[str, str]],
    ) -> TraceRow:
        """A row from its values, whatever the format: time order and gaps checked, counted."""
        last = self._last_ts.get(gpu)
        if last is not None and last - BACK_JITTER_S <= ts < last and not self._restarted:
            self.stats.backwards += 1
            raise ValueError(f"timestamp {ts - last:+g} s before GPU {gpu}'s previous row's (time goes back)")
        if "reasons" in gpu_values and gpu_values["reasons"] is not None:
            reasons = gpu_values["reasons"]
            if not (0 <= reasons < MAX_REASONS and reasons == int(reasons)):
                raise ValueError(f"column 'clocks_event_reasons.active': {reasons!r} is not a reasons mask")
            gpu_values["reasons"] = int(reasons)  # type: ignore[assignment]
        self._see_step(ts, gpu, line)
        self._row_line = line
        for column, attr in clipped:  # counted once the row is known to be read
            self.stats.clipped[column] = self.stats.clipped.get(column, 0) + 1
            self.stats.clipped_attrs[column] = attr
        if self._first_ts is None:
            self._first_ts = ts
            self.stats.first_timestamp = ts
        self.stats.last_timestamp = ts
        t = ts + self._offset - self._first_ts
        if gpu not in self.stats.gpus:
            self.stats.gpus.append(gpu)
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
        next segment starts. So does a time going back: a GPU's row more than BACK_JITTER_S before its
        previous one, or any step back after a restart of nvidia-smi into the same file (a repeated
        header): another run appended. (GPUs' rows may interleave in time; each GPU's own go forward.)"""
        if self._max_ts is not None:
            step = ts - self._max_ts
            back = ts < self._last_ts.get(gpu, ts) or (self._restarted and step < 0)
            if back or step > gap_seconds():
                self.stats.gap_count += 1
                if len(self.stats.gaps) < self.MAX_WARNINGS:
                    self.stats.gaps.append((line, step))
                if back:
                    self._place_after(ts)
                self._max_ts = ts
                self._last_ts.clear()
        self._max_ts = ts if self._max_ts is None else max(self._max_ts, ts)
        self._last_ts[gpu] = ts
        self._restarted = False

    def _place_after(self, ts: float) -> None:
        """Rows whose time went back are another run: replay's clock has no room for them where their
        times fall, so they are moved after everything read so far, one gap after the latest sample. The
        seam then reads as the shortest gap would: a segment apart, its silence never evaluated."""
        assert self._max_ts is not None
        self.stats.back_steps += 1
        self._offset += self._max_ts - ts + gap_seconds()


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
