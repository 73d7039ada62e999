"""``nvidia-smi -l N`` or ``watch -n N nvidia-smi`` saved to a file: screen after screen of nvidia-smi's
table. Each screen starts with a date line (``Tue Nov 24 10:00:00 2026``; watch adds its own ``Every
2.0s: nvidia-smi  host: Tue Nov 24 ...`` above it), which times the screen's GPUs. Per GPU the table
has two lines:

    |   0  NVIDIA RTX A5000    Off  | 00000000:01:00.0 Off |                  Off |
    | 30%   45C    P2    84W / 230W |   8123MiB / 24564MiB |     78%      Default |

(index and name; fan, temperature, performance state, power draw and cap; memory used and total;
utilization), in the column widths of every driver generation. ``N/A``, ``[N/A]`` and ``ERR!`` are
missing values. The MIG table after it is skipped; the process table's names (``ollama.exe``,
``tritonserver``, ``python``) are reported per GPU: what a GPU runs is evidence of its workload's class.

    |    0   N/A  N/A     18324      C   /usr/bin/tritonserver                     30154MiB |
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
    find_ctime,
    gpu_index,
    with_unit,
)

NAME = "nvidia-smi screens"
COMMAND = "nvidia-smi -l 5 > smi.log   (or: watch -n 5 nvidia-smi > smi.log)"
TIMED = True  # every screen has its date
NAMES_GPUS = True
DEFAULT_PERIOD = 1.0  # only for screens that lack their date

_BANNER = re.compile(r"^\|\s*NVIDIA-SMI\s+\S")
_TABLE_HEAD = re.compile(r"^\|\s*GPU\s+Name\b")
_BUS_ID = re.compile(r"\b[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]\b")
# "   0  NVIDIA H100 80GB HBM3          On  ": index, name, then persistence mode (or Windows' driver model)
_INDEX = re.compile(r"\d+")
_MODES = frozenset(("On", "Off", "N/A", "WDDM", "TCC", "MCDM"))
_SUBTABLES = ("processes:", "mig devices:")
# a process line's type: compute, graphics, both, MPS (after the GPU, and GI, CI and PID where printed)
_PROCESS_TYPES = frozenset(("C", "G", "C+G", "M", "M+C", "M+C+G"))
LABELS = {
    "util": "GPU-Util",
    "mem_used_bytes": "Memory-Usage (used)",
    "mem_total_bytes": "Memory-Usage (total)",
    "power_w": "Pwr:Usage",
    "power_limit_w": "Pwr:Cap",
    "temp_c": "Temp",
}


def sniff(head: list[str]) -> bool:
    return any(_BANNER.match(line) or _TABLE_HEAD.match(line) for line in head)


def read(lines: Lines, ctx: Context) -> Iterator[Sample | Skip]:
    ticker = Ticker()
    ts: float | None = None
    dated = False  # a date line came since the last banner
    in_subtable = ""  # "processes" or "mig" after their heading, until the next screen
    pending: tuple[str, str] | None = None  # (index, name) of the GPU whose second line comes next
    for number, line in lines():
        text = line.strip()
        if not text.startswith(("|", "+")):
            found = find_ctime(text)
            if found is not None:
                ts, dated, pending = found, True, None
            continue
        if _BANNER.match(text):  # a new screen
            if not dated:
                ts = None  # a screen without its date: placed by --period
            dated, in_subtable, pending = False, "", None
            ticker.next()
            continue
        if any(word in text.lower() for word in _SUBTABLES):
            in_subtable, pending = "processes" if "processes:" in text.lower() else "mig", None
            continue
        if in_subtable:
            if in_subtable == "processes" and len(text) <= MAX_CELL_CHARS:
                found = _process(text)
                if found is not None:
                    ctx.process(*found)
            continue
        cells = text.split("|")
        if len(cells) < 5:  # not a GPU line of the main table (borders, the banner's continuation)
            continue
        if any(len(cell) > MAX_CELL_CHARS for cell in cells):  # before any pattern reads them
            pending = None
            yield Skip(number, f"a table cell longer than {MAX_CELL_CHARS} characters")
            continue
        if _BUS_ID.search(cells[2]):
            identity = _identity(cells[1])
            if identity is None:
                yield Skip(number, f"a GPU line without an index and a name: {cells[1].strip()[:40]!r}")
                continue
            try:
                pending = (gpu_index(identity[0]), identity[1])
            except ValueError as exc:
                yield Skip(number, str(exc))
            continue
        if pending is None or "/" not in cells[2]:
            continue
        gpu, name = pending
        pending = None
        try:
            values = _values(cells)
        except ValueError as exc:
            yield Skip(number, f"GPU {gpu}: {exc}")
            continue
        yield Sample(number, gpu, values, LABELS, name=name, ts=ts, tick=ticker.see(gpu))


def _identity(cell: str) -> tuple[str, str] | None:
    """``   0  NVIDIA H100 80GB HBM3   On  `` -> ("0", "NVIDIA H100 80GB HBM3"): the index, and the name
    without the persistence mode after it. None without an index followed by a blank."""
    text = cell.lstrip()
    index = _INDEX.match(text)
    if not index or not text[index.end() : index.end() + 1].isspace():
        return None
    name = text[index.end() :].strip()
    words = name.rsplit(None, 1)
    if len(words) == 2 and words[1] in _MODES:
        name = words[0]
    return index.group(), name


def _process(line: str) -> tuple[str, str] | None:
    """``|    0   N/A  N/A  18324  C   C:\\...\\ollama.exe   N/A |`` -> ("0", "C:\\...\\ollama.exe"): the GPU
    and the process's name (spaces kept), between its type and its memory. None for the heading, the
    borders and "No running processes found"."""
    words = line.strip("|").split()
    if len(words) < 4 or not words[0].isdigit():
        return None
    for i in range(1, min(len(words) - 1, 6)):
        if words[i] in _PROCESS_TYPES and words[i - 1].isdigit():
            name = " ".join(words[i + 1 : -1])
            return (str(int(words[0])), name) if name else None
    return None


def _pair(cell: str) -> tuple[str, str] | None:
    """``84W / 230W``, ``N/A /  N/A``, ``8123MiB / 24564MiB``: the words either side of the last `` / ``."""
    words = cell.split()
    if len(words) < 3 or words[-2] != "/":
        return None
    return words[-3], words[-1]


def _values(cells: list[str]) -> dict[str, float | None]:
    """The second line of a GPU: | fan temp perf draw / cap | used / total | util compute-mode |"""
    tokens = cells[1].split()
    if len(tokens) < 2:
        raise ValueError(f"no fan and temperature in {cells[1].strip()[:40]!r}")
    power = _pair(cells[1])
    memory = _pair(cells[2])
    if not memory:
        raise ValueError(f"memory {cells[2].strip()[:40]!r} is not USED / TOTAL")
    util = cells[3].split()
    return {
        "temp_c": with_unit(tokens[1], "c", ("c",)),
        "power_w": with_unit(power[0], "w", ("w",)) if power else None,
        "power_limit_w": with_unit(power[1], "w", ("w",)) if power else None,
        "mem_used_bytes": with_unit(memory[0], "mib", ("mib", "gib", "kib")),
        "mem_total_bytes": with_unit(memory[1], "mib", ("mib", "gib", "kib")),
        "util": with_unit(util[0], "%", ("%",)) if util else None,
    }
