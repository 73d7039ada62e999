"""A Weights & Biases run: its ``.wandb`` transaction log (a run directory, ``wandb/latest-run``, or the
file itself), or a CSV its UI or API exported.

The ``.wandb`` file is the records the run's service wrote, in LevelDB's log framing (32 KiB blocks,
each record behind a 7-byte header: checksum, length, type, split across blocks when long), after a
7-byte W&B header. The framing is read here; every record is decoded with the ``wandb`` package's own
protobuf types (``wandb.proto.wandb_internal_pb2.Record``): the run (name, id, config), its history (what
it logged: ``_timestamp``, ``_step`` and its own metrics) and its system stats. W&B's collector averages
its samples over 15 s (``x_stats_sampling_interval``) and keeps each GPU as ``gpu.N.gpu`` (utilization
%), ``gpu.N.memory`` (memory busy %), ``gpu.N.memoryAllocatedBytes``, ``gpu.N.memoryAllocated`` (%),
``gpu.N.powerWatts``, ``gpu.N.enforcedPowerLimitWatts``, ``gpu.N.temp`` and ``gpu.N.smClock`` (MHz);
the UI shows them as ``system.gpu.N.*``.
"""

from __future__ import annotations

import csv
import json
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from exporter.offline.trackers.run import (
    TrackerError,
    TrackerRun,
    counter_like,
    missing_extra,
    step_counter,
)

MAGIC = b":W&B"
HEADER = struct.Struct("<4sHB")  # magic, W&B's 0xBEE1, version
RECORD = struct.Struct("<IHB")  # checksum, length, type
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
MAX_RECORD_BYTES = 64 << 20  # a record split over blocks longer than this is a corrupt file

_GPU = re.compile(r"^(?:system[./])?gpu\.(?P<gpu>\d+)\.(?P<what>[A-Za-z]+)$")
# W&B's GPU stat -> (the point's field, scale to base units)
FIELDS = {
    "gpu": ("util", 0.01),
    "memory": ("mem_util", 0.01),
    "memoryAllocatedBytes": ("mem_used_bytes", 1.0),
    "powerWatts": ("power_w", 1.0),
    "enforcedPowerLimitWatts": ("power_limit_w", 1.0),
    "temp": ("temp_c", 1.0),
    "smClock": ("sm_clock_hz", 1e6),
}


def is_run_file(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def run_file(path: Path) -> Path | None:
    """The ``.wandb`` file of a run directory, of ``wandb/`` (its latest run), or the file itself."""
    if path.is_file():
        return path if is_run_file(path) else None
    if not path.is_dir():
        return None
    if (path / "latest-run").is_dir():
        path = path / "latest-run"
    found = sorted(path.glob("run-*.wandb"))
    return found[-1] if found else None


def records(path: Path) -> Iterator[bytes]:
    """The records of a ``.wandb`` file, whole, in order; a file cut short ends at its last whole one."""
    with path.open("rb") as f:
        head = f.read(HEADER.size)
        if len(head) < HEADER.size or HEADER.unpack(head)[0] != MAGIC:
            raise TrackerError(f"{path}: not a W&B run file (no :W&B header)")
        pos, pending = HEADER.size, b""
        while True:
            left = BLOCK - pos % BLOCK
            if left < RECORD.size:  # a block's tail too short for a header is padding
                f.read(left)
                pos += left
                continue
            head = f.read(RECORD.size)
            if len(head) < RECORD.size:
                return
            checksum, length, kind = RECORD.unpack(head)
            data = f.read(length)
            pos += RECORD.size + length
            if len(data) < length or kind == 0:
                return  # cut short, or the zeros past the last record
            if zlib.crc32(data, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
                raise TrackerError(f"{path}: a record's checksum is wrong at byte {pos - length}")
            if kind == FULL:
                yield data
            elif kind == FIRST:
                pending = data
            elif kind in (MIDDLE, LAST):
                pending += data
                if len(pending) > MAX_RECORD_BYTES:
                    raise TrackerError(f"{path}: a record longer than {MAX_RECORD_BYTES >> 20} MiB")
                if kind == LAST:
                    yield pending
                    pending = b""


def read_file(path: Path, label: str) -> TrackerRun:
    """A ``.wandb`` run file."""
    try:
        from google.protobuf.message import DecodeError
        from wandb.proto import wandb_internal_pb2 as pb
    except ImportError:
        raise missing_extra("wandb") from None
    run = TrackerRun("W&B", "run file", label)
    own: dict[str, list[tuple[float, float]]] = {}
    for data in records(path):
        record = pb.Record()
        try:
            record.ParseFromString(data)
        except DecodeError:  # one record we cannot read
            continue
        kind = record.WhichOneof("record_type")
        if kind == "run":
            _run(run, record.run)
        elif kind == "config":
            _config(run, record.config.update)
        elif kind == "history":
            _history(run, record.history.item, own)
        elif kind == "stats" and record.stats.stats_type == pb.StatsRecord.StatsType.SYSTEM:
            t = record.stats.timestamp.seconds + record.stats.timestamp.nanos / 1e9
            for item in record.stats.item:
                _stat(run, t, item.key, _number(item.value_json))
    _finish(run, own)
    return run


def _run(run: TrackerRun, r: object) -> None:
    run.run_id = getattr(r, "run_id", "") or run.run_id
    run.name = getattr(r, "display_name", "") or run.name
    _config(run, r.config.update)  # type: ignore[attr-defined]


def _config(run: TrackerRun, items: object) -> None:
    for item in items:  # type: ignore[attr-defined]
        key = item.key or "/".join(item.nested_key)
        if key.startswith("_"):
            continue
        try:
            value = json.loads(item.value_json)
        except ValueError:
            continue
        if isinstance(value, dict) and set(value) == {"desc", "value"}:  # the older layout
            value = value["value"]
        run.config[key] = str(value)[:200]


def _history(run: TrackerRun, items: object, own: dict[str, list[tuple[float, float]]]) -> None:
    values = {(i.key or "/".join(i.nested_key)): _number(i.value_json) for i in items}  # type: ignore[attr-defined]
    t = values.get("_timestamp")
    if t is None:
        return
    run.logged.append(t)
    run.count()
    for key, value in values.items():
        if value is not None and counter_like(key):  # the rest of what it logged is not read
            own.setdefault(key, []).append((t, value))
            run.count()


def _number(text: str) -> float | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _stat(run: TrackerRun, t: float, key: str, value: float | None) -> None:
    match = _GPU.match(key)
    if match is None or value is None:
        return
    what = match["what"]
    if what in FIELDS:
        attr, scale = FIELDS[what]
        run.put(match["gpu"], t, attr, value * scale)
    elif what == "memoryAllocated":
        run.put(match["gpu"], t, "_allocated", value)


def _finish(run: TrackerRun, own: dict[str, list[tuple[float, float]]]) -> None:
    for times in run.samples.values():
        for values in times.values():
            share = values.pop("_allocated", None)
            if share and values.get("mem_used_bytes"):
                values["mem_total_bytes"] = values["mem_used_bytes"] / (share / 100)
    run.progress_key, run.progress = step_counter({k: v for k, v in own.items() if k != "_step"})
    if not run.progress and own.get("_step"):  # W&B's own count of log calls: a sign of life
        run.progress_key, run.progress = "_step", sorted(own["_step"])
    if not run.samples:
        raise TrackerError(
            f"{run.label}: the run has no GPU system metrics (gpu.N.* stats: W&B records them where it "
            "sees the GPUs)"
        )


# ---- a CSV export --------------------------------------------------------------------------------------
# the time column of an export, and what its values are: the UI's panel export ("Wall Time" in ms,
# "Relative Time (Process)" in s from the start) or the API's history (_timestamp, _runtime)
TIME_COLUMNS = {
    "_timestamp": 1.0,
    "wall time": 0.001,
    "relative time (process)": 1.0,
    "relative time (wall)": 1.0,
    "_runtime": 1.0,
}
_PREFIXED = re.compile(r"^(?:(?P<run>.+?) - )?(?P<key>.+?)(?P<agg>__MIN|__MAX)?$")


def sniff_csv(head: str) -> bool:
    """A CSV whose header names W&B's GPU stats (``system/gpu.0.gpu``, ``RUN - system.gpu.0.gpu``...)."""
    first = head.splitlines()[0] if head else ""
    return "," in first and any(_GPU.match(_column(c)[1]) for c in first.split(","))


def _column(cell: str) -> tuple[str, str, str]:
    """(run name, key, __MIN/__MAX or '') of a header cell."""
    match = _PREFIXED.match(cell.strip().strip('"'))
    if match is None:
        return "", cell, ""
    key = match["key"].replace("system/", "system.")
    return match["run"] or "", key, match["agg"] or ""


def read_csv(path: Path, label: str) -> TrackerRun:
    """A W&B CSV export of system metrics: a time column and ``gpu.N.*`` columns (the __MIN/__MAX beside
    a panel's series are left out)."""
    run = TrackerRun("W&B", "CSV export", label)
    with path.open(newline="", errors="replace") as f:
        rows = csv.reader(f)
        header = next(rows, [])
        cols = [_column(c) for c in header]
        at = next((i for i, c in enumerate(header) if c.strip().lower() in TIME_COLUMNS), None)
        if at is None:
            raise TrackerError(
                f"{label}: a W&B export needs a time column (_timestamp, Wall Time, Relative Time (Process) "
                "or _runtime)"
            )
        scale = TIME_COLUMNS[header[at].strip().lower()]
        run.name = next((name for name, _, _ in cols if name), "")
        for line, row in enumerate(rows, start=2):
            _csv_row(run, row, cols, at, scale, line)
    _finish(run, {})
    return run


def _csv_row(
    run: TrackerRun, row: list[str], cols: list[tuple[str, str, str]], at: int, scale: float, line: int
) -> None:
    if len(row) <= at or not row[at].strip():
        return
    try:
        t = float(row[at]) * scale
    except ValueError:
        raise TrackerError(f"{run.label}: line {line}: the time {row[at][:40]!r} is not a number") from None
    for cell, (_, key, agg) in zip(row, cols, strict=False):
        if agg or not cell.strip():
            continue
        try:
            value = float(cell)
        except ValueError:
            continue
        _stat(run, t, key, value)
