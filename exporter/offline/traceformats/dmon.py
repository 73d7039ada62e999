"""``nvidia-smi dmon`` saved to a file: a header naming the columns, a units line, then one line per GPU
per sample; the header comes again every screen.

    # gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk
    # Idx      W      C      C      %      %      %      %    MHz    MHz
        0     69     32     39     97     45      0      0   2619   1980

Any ``-s`` selection reads (``pucvmet``: power and temperatures, utilizations, clocks, violations, frame
buffer, ECC and PCIe columns); ``sm`` is the utilization, ``mem`` the memory utilization, ``pwr`` the power
draw, ``gtemp``/``mtemp`` the temperatures, ``pclk`` the SM clock, ``fb`` the memory used (MiB, printed
as MB), ``rxpci``/``txpci`` the PCIe traffic. ``-`` is a missing value. ``-o DT`` adds date and time
columns (``#Date Time gpu ...``, ``20261124 10:00:00``), which time the rows; with ``-o T`` alone the date
is that of ``--start`` and a time earlier than the last by more than 12 h is the next day. Without a time
column (the default, or ``-o D``) the samples come every ``-d`` seconds, 1 by default: ``--period``.
``--format csv`` output (the same columns with commas) reads too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

from exporter.offline.traceformats.base import (
    MAX_CELL_CHARS,
    MIB,
    Context,
    Lines,
    Sample,
    Skip,
    Ticker,
    gpu_index,
    number,
)

NAME = "nvidia-smi dmon"
COMMAND = "nvidia-smi dmon -o DT > dmon.log"
TIMED = False  # only with -o DT / -o T
NAMES_GPUS = True
DEFAULT_PERIOD = 1.0  # dmon -d

# column -> (GpuPoint attribute, factor from the column's unit to the base unit)
COLUMNS: dict[str, tuple[str, float]] = {
    "sm": ("util", 0.01),
    "mem": ("mem_util", 0.01),
    "pwr": ("power_w", 1.0),
    "gtemp": ("temp_c", 1.0),
    "mtemp": ("temp_mem_c", 1.0),
    "pclk": ("sm_clock_hz", 1e6),
    "fb": ("mem_used_bytes", MIB),
    "rxpci": ("pcie_rx_bps", MIB),
    "txpci": ("pcie_tx_bps", MIB),
}
# dmon's other columns: read as what they are, used for nothing here
KNOWN = frozenset(
    ("enc", "dec", "jpg", "ofa", "mclk", "pviol", "tviol", "bar1", "ccpm", "sbecc", "dbecc", "pci", "fan")
)
_SPLIT = re.compile(r"[,\s]+")


def _tokens(text: str) -> list[str]:
    return [t for t in _SPLIT.split(text.strip()) if t]


def sniff(head: list[str]) -> bool:
    for line in head:
        text = line.strip()
        if text.startswith("#") and not text[1:].lstrip().lower().startswith("entity"):
            names = [t.lower() for t in _tokens(text[1:])]
            if "gpu" in names and any(n in COLUMNS for n in names):
                return True
    return False


class _Header:
    def __init__(self, names: list[str]) -> None:
        self.size = len(names)
        self.gpu = names.index("gpu")
        self.date = names.index("date") if "date" in names else None
        self.time = names.index("time") if "time" in names else None
        self.columns = [(i, COLUMNS[n]) for i, n in enumerate(names) if n in COLUMNS]
        self.labels = {attr: names[i] for i, (attr, _) in self.columns}


def read(lines: Lines, ctx: Context) -> Iterator[Sample | Skip]:
    ticker = Ticker()
    header: _Header | None = None
    day0 = _midnight(ctx.start)
    days, last_seconds = 0, None  # -o T: days passed since the first row, and the time of the last row
    for number_, line in lines():
        text = line.strip()
        if not text:
            continue
        if text.startswith("#"):
            names = [t.lower() for t in _tokens(text[1:])]
            if "gpu" in names:  # the header (the units line has "Idx" there)
                header = _Header(names)
                for name in names:
                    if name not in COLUMNS and name not in KNOWN and name not in ("gpu", "date", "time"):
                        ctx.unknown(name)  # remembered once, a bounded number of them
            continue
        if header is None:
            yield Skip(number_, "a row before dmon's header line")
            continue
        cells = _tokens(text)
        if len(cells) != header.size:
            yield Skip(number_, f"{len(cells)} fields where dmon's header has {header.size}")
            continue
        if any(len(cell) > MAX_CELL_CHARS for cell in cells):  # before any parsing reads them
            yield Skip(number_, f"a field longer than {MAX_CELL_CHARS} characters")
            continue
        try:
            gpu = gpu_index(cells[header.gpu])
            values: dict[str, float | None] = {}
            for i, (attr, scale) in header.columns:
                value = number(cells[i])
                values[attr] = None if value is None else value * scale
            ts = None
            if header.time is not None:
                seconds = _seconds_of_day(cells[header.time])
                if header.date is not None:
                    ts = _date(cells[header.date]) + seconds
                else:
                    if last_seconds is not None and seconds < last_seconds - 43200:
                        days += 1  # past midnight
                    last_seconds = seconds
                    ts = day0 + days * 86400 + seconds
        except ValueError as exc:
            yield Skip(number_, str(exc))
            continue
        yield Sample(number_, gpu, values, header.labels, ts=ts, tick=ticker.see(gpu))


def _seconds_of_day(text: str) -> float:
    try:
        moment = datetime.strptime(text, "%H:%M:%S")
    except ValueError:
        raise ValueError(f"time {text[:20]!r} is not HH:MM:SS") from None
    return moment.hour * 3600.0 + moment.minute * 60.0 + moment.second


def _date(text: str) -> float:
    try:
        return datetime.strptime(text, "%Y%m%d").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise ValueError(f"date {text[:20]!r} is not YYYYMMDD") from None


def _midnight(t: float) -> float:
    return t - t % 86400
