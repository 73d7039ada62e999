"""``nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory --format=csv -l 5`` saved
to a file beside a GPU log: the processes each GPU ran, whose names say what the job is (``ollama``,
``tritonserver``, ``python -m vllm...``). ``replay LOG --processes APPS.csv`` reads it for the job's class;
it carries no GPU samples of its own.

    timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]
    2026/11/24 10:00:00.000, GPU-3f2c..., 18324, /opt/tritonserver/bin/tritonserver, 30154 MiB
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

from exporter.offline.files import NotRegularFile, open_regular
from exporter.offline.traceformats.base import MAX_CELL_CHARS, MISSING

# what is read of such a log: its names are a handful, repeated every interval, so the first lines say it
MAX_LINES = 200_000
MAX_NAMES_PER_GPU = 8


class ProcessLogError(Exception):
    """The file is not a compute-apps log replay can read (the message is one line)."""


def read_process_names(path: str | Path) -> dict[str, list[str]]:
    """GPU (its uuid or bus id as the log names it; ``*`` where it names none) -> the distinct process
    names the log lists on it, in the order first seen, a few per GPU."""
    path = Path(path)
    try:
        raw = open(open_regular(path), "rb")  # noqa: SIM115 - closed below; a FIFO or a device is refused
    except NotRegularFile:
        raise ProcessLogError(f"{path}: not a regular file (a compute-apps log is a file)") from None
    except OSError as exc:
        raise ProcessLogError(f"{path}: cannot read ({exc.strerror or exc})") from None
    with raw:
        stream = gzip.GzipFile(fileobj=raw) if path.suffix == ".gz" else raw
        text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")
        try:
            return _names(path, text)
        except (OSError, EOFError, csv.Error) as exc:
            raise ProcessLogError(f"{path}: not a readable compute-apps log ({exc})") from None


def _names(path: Path, text: io.TextIOWrapper) -> dict[str, list[str]]:
    rows = csv.reader(text, skipinitialspace=True)
    header = next(rows, None)
    columns = [_column(cell) for cell in header or []]
    if "process_name" not in columns:
        raise ProcessLogError(
            f"{path}: no process_name column in its header: not a log of nvidia-smi "
            "--query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory --format=csv"
        )
    name_at = columns.index("process_name")
    gpu_at = next((columns.index(c) for c in ("gpu_uuid", "gpu_bus_id") if c in columns), None)
    out: dict[str, list[str]] = {}
    for number, row in enumerate(rows, 2):
        if number > MAX_LINES:
            break
        if len(row) != len(columns) or any(len(cell) > MAX_CELL_CHARS for cell in row):
            continue  # a torn or foreign line: the next interval lists the same names
        name = row[name_at].strip()
        if name.lower() in MISSING:
            continue
        gpu = row[gpu_at].strip() if gpu_at is not None else "*"
        names = out.setdefault(gpu, [])
        if name not in names and len(names) < MAX_NAMES_PER_GPU:
            names.append(name)
    return out


def _column(cell: str) -> str:
    """``process_name``, ``used_gpu_memory [MiB]`` -> the name without its unit, lower case."""
    return cell.split("[", 1)[0].strip().lower()
