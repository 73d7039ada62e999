"""``gpustat -i N`` (or gpustat in a loop) saved to a file: per screen an optional header line (host, the
time, the driver version), then one line per GPU:

    myhost                    Tue Nov 24 10:00:00 2026  550.54.15
    [0] NVIDIA RTX A5000 | 45°C,  78 % |  8123 / 24564 MB | alice(8000M)
    [1] Tesla V100-SXM2-32GB | 45'C,  78 %,  84 / 300 W |  8123 / 32510 MB | bob(8000M)

Read: index, name, temperature (°C or 'C), utilization (with ``--show-fan`` the fan's percentage comes
first; the last percentage is the utilization), power (``--show-power``: ``84 W`` or ``84 / 300 W``),
memory used and total (MiB, printed as MB). Encoder/decoder shares in parentheses and the processes are
ignored; ``??`` is a missing value. A header's time (C locale's ``Tue Nov 24 10:00:00 2026``) times its
screen; without headers (``--no-header``) or with a time in another locale's words, screens are
``--period`` apart (gpustat -i's default, 1 s) from ``--start``. Colour escapes are removed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from exporter.offline.traceformats.base import (
    MAX_CELL_CHARS,
    Context,
    Lines,
    Sample,
    Skip,
    Ticker,
    bounded,
    find_ctime,
    gpu_index,
    with_unit,
)

NAME = "gpustat"
COMMAND = "gpustat -i 1 --show-power > gpustat.log"
TIMED = False  # only with its header lines
NAMES_GPUS = True
DEFAULT_PERIOD = 1.0  # gpustat -i

_INDEX = re.compile(r"\[(\d+)\]")
_TEMPERATURE = re.compile(r"^(\S+?)\s*(?:°|')\s*C$")
_PARENS = re.compile(r"\([^()]*\)")
LABELS = {
    "temp_c": "temperature",
    "util": "utilization",
    "power_w": "power",
    "power_limit_w": "power limit",
    "mem_used_bytes": "memory used",
    "mem_total_bytes": "memory total",
}


def _gpu_line(line: str) -> tuple[str, str, str, str] | None:
    """``[0] NAME | STATS | MEMORY [| PROCESSES]`` -> (index, name, stats, memory); None for another line.
    Split by hand: patterns over its blanks took time cubic in their number."""
    text = line.lstrip()
    index = _INDEX.match(text)
    if not index:
        return None
    cells = text[index.end() :].split("|", 3)
    if len(cells) < 3:
        return None
    return index.group(1), cells[0].strip(), cells[1], cells[2]


def sniff(head: list[str]) -> bool:
    for line in head:
        found = _gpu_line(line)
        if found is None or len(found[2]) > MAX_CELL_CHARS or len(found[3]) > MAX_CELL_CHARS:
            continue
        if re.search(r"(?:°|')\s*C\b", found[2]) and _memory(found[3]):
            return True
    return False


def read(lines: Lines, ctx: Context) -> Iterator[Sample | Skip]:
    ticker = Ticker()
    ts: float | None = None
    for number_, line in lines():
        text = line.strip()
        if not text:
            continue
        found = _gpu_line(text)
        if found is None:  # a screen's header: host, time, driver version
            ticker.next()
            ts = find_ctime(text)
            continue
        index, name, stats, memory_cell = found
        try:
            gpu = gpu_index(index)
            values = _stats(bounded(stats))
            memory = _memory(bounded(memory_cell))
            if not memory:
                raise ValueError(f"memory {memory_cell.strip()[:40]!r} is not USED / TOTAL MB")
            values["mem_used_bytes"] = with_unit(memory[0], "mib", ("mib",))
            values["mem_total_bytes"] = with_unit(memory[1], "mib", ("mib",))
        except ValueError as exc:
            yield Skip(number_, str(exc))
            continue
        yield Sample(number_, gpu, values, LABELS, name=name[:200], ts=ts, tick=ticker.see(gpu))


def _memory(cell: str) -> tuple[str, str] | None:
    """``  8123 / 24564 MB `` -> ("8123", "24564"); None for another cell."""
    text = cell.strip()
    if not text.endswith("MB"):
        return None
    used, slash, total = (part.strip() for part in text[:-2].rpartition("/"))
    if not (slash and used and total) or len(used.split()) > 1 or len(total.split()) > 1:
        return None
    return used, total


def _stats(cell: str) -> dict[str, float | None]:
    """``45°C,  30 %,  78 % (E: 0 % D: 0 %),  84 / 300 W``: temperature, [fan], utilization, [power]."""
    values: dict[str, float | None] = {}
    percents: list[str] = []
    for item in (i.strip() for i in _PARENS.sub("", cell).split(",")):
        temperature = _TEMPERATURE.match(item)
        if temperature:
            values["temp_c"] = with_unit(temperature.group(1), "c", ("c",))
        elif item.endswith("%"):
            percents.append(item)
        elif item.endswith("W"):
            draw, _, limit = item[:-1].partition("/")
            values["power_w"] = with_unit(draw, "w", ("w",))
            if limit:
                values["power_limit_w"] = with_unit(limit, "w", ("w",))
        elif item:
            raise ValueError(f"unexpected {item[:40]!r} among temperature, utilization and power")
    if percents:
        values["util"] = with_unit(percents[-1], "%", ("%",))
    return values
