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
    Context,
    Lines,
    Sample,
    Skip,
    Ticker,
    find_ctime,
    gpu_index,
    with_unit,
)

NAME = "gpustat"
COMMAND = "gpustat -i 1 --show-power > gpustat.log"
TIMED = False  # only with its header lines
NAMES_GPUS = True
DEFAULT_PERIOD = 1.0  # gpustat -i

_GPU = re.compile(r"^\s*\[(\d+)\]\s*([^|]*?)\s*\|([^|]*)\|([^|]*)(?:\|.*)?$")
_TEMPERATURE = re.compile(r"^(\S+?)\s*(?:°|')\s*C$")
_MEMORY = re.compile(r"^\s*(\S+)\s*/\s*(\S+)\s*MB\s*$")
_PARENS = re.compile(r"\([^)]*\)")
LABELS = {
    "temp_c": "temperature",
    "util": "utilization",
    "power_w": "power",
    "power_limit_w": "power limit",
    "mem_used_bytes": "memory used",
    "mem_total_bytes": "memory total",
}


def sniff(head: list[str]) -> bool:
    for line in head:
        match = _GPU.match(line)
        if match and re.search(r"(?:°|')\s*C\b", match.group(3)) and _MEMORY.match(match.group(4)):
            return True
    return False


def read(lines: Lines, ctx: Context) -> Iterator[Sample | Skip]:
    ticker = Ticker()
    ts: float | None = None
    for number_, line in lines():
        text = line.strip()
        if not text:
            continue
        match = _GPU.match(text)
        if not match:  # a screen's header: host, time, driver version
            ticker.next()
            ts = find_ctime(text)
            continue
        try:
            gpu = gpu_index(match.group(1))
            values = _stats(match.group(3))
            memory = _MEMORY.match(match.group(4))
            if not memory:
                raise ValueError(f"memory {match.group(4).strip()[:40]!r} is not USED / TOTAL MB")
            values["mem_used_bytes"] = with_unit(memory.group(1), "mib", ("mib",))
            values["mem_total_bytes"] = with_unit(memory.group(2), "mib", ("mib",))
        except ValueError as exc:
            yield Skip(number_, str(exc))
            continue
        yield Sample(number_, gpu, values, LABELS, name=match.group(2)[:200], ts=ts, tick=ticker.see(gpu))


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
