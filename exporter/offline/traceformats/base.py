"""What the log readers share: the sample they yield, cell and time parsing, and the bounds every reader
keeps (GPU indexes, timestamps). Nothing here knows a file or a path; exporter/offline/traces.py turns samples
into trace rows and names the file in its messages."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

MIB = float(1 << 20)
GIB = float(1 << 30)
# One node's trace: more distinct GPUs than this is a corrupt index column, and every GPU costs state.
MAX_GPUS = 1024
# Unix seconds a trace may carry: from the epoch to the end of year 9999 (what datetime can show).
MAX_TIMESTAMP = 253402300799.0
# A cell the tools print is a few dozen characters: a longer one is no value, and is refused before any
# pattern reads it (a pattern's time may grow with the length of what it reads).
MAX_CELL_CHARS = 1024

# what the tools print for a value they do not have
MISSING = frozenset(
    {
        "",
        "-",
        "n/a",
        "[n/a]",
        "err!",
        "??",
        "nan",
        "unknown",
        "[unknown error]",
        "[not supported]",
        "not supported",
        "[gpu is lost]",
    }
)
# a unit a cell or a header may carry -> factor to the base unit of its kind (the caller says the kind)
UNITS: dict[str, float] = {
    "%": 0.01,
    "w": 1.0,
    "b": 1.0,
    "bytes": 1.0,
    "kib": 1024.0,
    "mib": MIB,
    "mb": MIB,  # the tools print MiB as "MB" (gpustat, dmon)
    "gib": GIB,
    "gb": GIB,
    "hz": 1.0,
    "mhz": 1e6,
    "ghz": 1e9,
    "c": 1.0,
    "°c": 1.0,
    "'c": 1.0,
    "ratio": 1.0,  # a share written as 0-1
}

# escape sequences of a terminal (colours, cursor moves, titles) and the other control characters
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[()*+#].?|[ -/]*[0-~]?)")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# numbers: each digit can be read one way only (never ``\d+\.?\d*``, which splits a run of digits in n ways)
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_NUMBER_UNIT = re.compile(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%°']*)$")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
# C's asctime, what nvidia-smi, watch and gpustat print: "Tue Nov 24 10:00:00 2026", "Tue Nov  3 ..."
_CTIME = re.compile(
    r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+(\d{1,2})\s+"
    r"(\d{1,2}):(\d{2}):(\d{2})(?:\.\d+)?\s+(\d{4})\b",
    re.I,
)


class FormatError(Exception):
    """The whole file cannot be read as its format; ``line`` where one line says so."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


@dataclass(slots=True)
class Sample:
    """One GPU's values at one moment, in base units (ratios, watts, bytes, hertz, celsius), keyed by the
    GpuPoint attribute; ``labels`` names each attribute's column as the file calls it. ``ts`` is Unix
    seconds, or None where the file has no times: then ``tick`` counts the samples before this one and
    the reader places it at ``--start`` plus ``tick`` times ``--period``."""

    line: int
    gpu: str
    values: dict[str, float | None]
    labels: Mapping[str, str]
    name: str = ""
    ts: float | None = None
    tick: int = 0


@dataclass(frozen=True, slots=True)
class Skip:
    """A line that looked like data but could not be read: skipped with a warning naming it."""

    line: int
    message: str


@dataclass
class Context:
    """What the command line says about a log without times, and where a reader reports columns it does
    not use."""

    start: float = 0.0
    period: float = 1.0
    gpus: int | None = None
    unknown: Callable[[str], None] = field(default=lambda name: None)  # dedups and bounds the names
    # a process the log names on a GPU (its process table): (GPU, the process's name); dedups and bounds
    process: Callable[[str, str], None] = field(default=lambda gpu, name: None)


Lines = Callable[[], Iterator[tuple[int, str]]]  # a fresh pass over the file: (line number, text)


def strip_ansi(text: str) -> str:
    """The text a terminal would show: colour and cursor escapes and control characters removed."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return _CONTROL.sub("", text)


def bounded(cell: str) -> str:
    """The cell, stripped; a ValueError for one longer than MAX_CELL_CHARS."""
    if len(cell) > MAX_CELL_CHARS:
        raise ValueError(f"a cell of {len(cell)} characters (a value has at most {MAX_CELL_CHARS})")
    return cell.strip()


def number(cell: str) -> float | None:
    """A plain number; None for the tools' words for a missing value."""
    cell = bounded(cell)
    if cell.lower() in MISSING:
        return None
    if not _NUMBER.match(cell):
        raise ValueError(f"not a number: {_short(cell)}")
    value = float(cell)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {_short(cell)}")
    return value


def with_unit(cell: str, default: str, allowed: tuple[str, ...]) -> float | None:
    """A number with an optional unit (``45C``, ``84 W``, ``8123MiB``, ``78 %``) in base units; a cell
    without one has ``default``. ``allowed`` lists the units that fit the column (lower case)."""
    cell = bounded(cell)
    if cell.lower() in MISSING or cell.rsplit(None, 1)[0].lower() in MISSING:  # also "?? %", "N/A W"
        return None
    match = _NUMBER_UNIT.match(cell)
    if not match:
        raise ValueError(f"not a number: {_short(cell)}")
    unit = match.group(2).lower() or default
    if unit not in allowed or unit not in UNITS:
        raise ValueError(f"unexpected unit in {_short(cell)}")
    value = float(match.group(1)) * UNITS[unit]
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {_short(cell)}")
    return value


def gpu_index(text: str) -> str:
    """A GPU index as the tools print it ("0", "1", ...), checked."""
    text = bounded(text)
    if not text.isdigit() or len(text) > 6 or int(text) >= MAX_GPUS:
        raise ValueError(f"GPU {_short(text)} is not a GPU index (a whole number 0-{MAX_GPUS - 1})")
    return str(int(text))


def parse_timestamp(text: str) -> float:
    """nvidia-smi's ``2026/03/01 10:00:00.200``, ISO 8601, or Unix seconds -> Unix seconds."""
    text = bounded(text)
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return _in_range(text, value)
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            moment = datetime.strptime(text, fmt)
        except ValueError:
            continue
        return _in_range(text, moment.replace(tzinfo=UTC).timestamp())
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"unrecognised timestamp {_short(text)}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return _in_range(text, parsed.timestamp())


def _in_range(text: str, value: float) -> float:
    """A time between the epoch and the end of year 9999: the only ones replay can place and show (an ISO
    time in year 9999 with a negative offset is already year 10000 in UTC)."""
    if not 0.0 <= value <= MAX_TIMESTAMP:  # also nan and inf
        raise ValueError(f"timestamp {_short(text)} is not a time between 1970 and 9999")
    return value


def split_header(cell: str) -> tuple[str, str | None]:
    """A header cell's name and its bracketed unit: ``utilization.gpu [%]`` -> ("utilization.gpu", "%");
    None for a cell without one. Read by hand, not by a pattern: a cell may be long."""
    text = cell.strip()
    start = text.find("[")
    if start < 0 or not text.endswith("]"):
        return text, None
    return text[:start].rstrip(), text[start + 1 : -1]


def find_ctime(text: str) -> float | None:
    """The first ``Tue Nov 24 10:00:00 2026`` in a line, as Unix seconds (UTC); None without one."""
    match = _CTIME.search(text)
    if not match:
        return None
    month, day, hour, minute, second, year = match.groups()
    try:
        month_number = _MONTHS.index(month.lower()) + 1
        moment = datetime(int(year), month_number, int(day), int(hour), int(minute), int(second), tzinfo=UTC)
    except ValueError:  # Feb 30, hour 25
        return None
    return moment.timestamp()


def parse_time(text: str) -> float:
    """Any time these logs or the command line write: Unix seconds, ISO 8601, nvidia-smi's CSV style or
    ``Tue Nov 24 10:00:00 2026``. Times without a zone are UTC."""
    try:
        return parse_timestamp(text)
    except ValueError:
        found = find_ctime(text)
        if found is not None and _CTIME.fullmatch(text.strip()):
            return _in_range(text, found)
        raise


class Ticker:
    """Counts the samples of a log without times: a GPU seen again, or a new screen, starts the next."""

    def __init__(self) -> None:
        self.tick = 0
        self._seen: set[str] = set()

    def see(self, gpu: str) -> int:
        if gpu in self._seen:
            self.next()
        self._seen.add(gpu)
        return self.tick

    def next(self) -> None:
        if self._seen:
            self.tick += 1
            self._seen.clear()


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")
