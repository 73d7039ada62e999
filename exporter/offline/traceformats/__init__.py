"""The GPU logs ``replay`` reads besides nvidia-smi's ``--query-gpu`` CSV (exporter/offline/traces.py reads
that one itself), each in its own module, listed in ``READERS``. ``detect`` picks one from the first few KiB
of the file, never from its name.

A module has ``NAME`` and ``COMMAND`` (for help and messages), ``TIMED`` (every sample has its time) and
``DEFAULT_PERIOD`` (the tool's own interval, for logs without times), ``NAMES_GPUS`` (every sample names
its GPU), ``sniff(head)`` and ``read(lines, ctx)``, which yields ``Sample``s and ``Skip``s
(exporter/offline/traceformats/base.py) and raises ``FormatError`` for a file it cannot read at all.
"""

from __future__ import annotations

import csv
from types import ModuleType

from exporter.offline.traceformats import dcgmi, dmon, gpustat, plain_csv, smi_screen
from exporter.offline.traceformats.base import split_header, strip_ansi

NVIDIA_SMI_CSV = "nvidia-smi CSV"
NVIDIA_SMI_CSV_COMMAND = (
    "nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,... --format=csv -lms 200 > gpus.csv"
)
# tried in this order, after nvidia-smi's CSV; the poller's CSV last, as it is the loosest
READERS: tuple[ModuleType, ...] = (smi_screen, dmon, dcgmi, gpustat, plain_csv)
SNIFF_CHARS = 8192  # how much of the file decides its format


def names() -> list[str]:
    """Every format, for messages: nvidia-smi's CSV first."""
    return [NVIDIA_SMI_CSV, *(m.NAME for m in READERS)]


def detect(head: list[str], smi_columns: frozenset[str] | set[str]) -> ModuleType | None:
    """The reader for a file whose first lines are ``head``; None for nvidia-smi's CSV, which is also
    what a file no reader claims is read as (its errors say what a trace must look like).
    ``smi_columns``: the column names nvidia-smi's CSV reader knows."""
    lines = [strip_ansi(line) for line in head]
    first = next((line for line in lines if line.strip()), "")
    if _is_smi_csv(first, smi_columns):
        return None
    for module in READERS:
        if module.sniff(lines):
            return module
    return None


def _is_smi_csv(line: str, smi_columns: frozenset[str] | set[str]) -> bool:
    """A header with nvidia-smi's ``timestamp`` and at least one of its (or our) value columns."""
    if "," not in line:
        return False
    try:
        cells = next(csv.reader([line], skipinitialspace=True), [])
    except csv.Error:
        return False
    found = {split_header(cell)[0].lower() for cell in cells}
    return "timestamp" in found and bool(found & set(smi_columns))
