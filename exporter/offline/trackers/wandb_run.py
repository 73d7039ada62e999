"""A Weights & Biases run: its ``.wandb`` transaction log (a run directory, ``wandb/latest-run``, or the
file itself, gzipped or not), the ``wandb-events.jsonl`` of an older client, or a CSV its UI or API
exported.

The ``.wandb`` file is the records the run's service wrote, in LevelDB's log framing (32 KiB blocks,
each record behind a 7-byte header: checksum, length, type, split across blocks when long), after a
7-byte W&B header. The framing is read here; every record is decoded with the ``wandb`` package's own
protobuf types (``wandb.proto.wandb_internal_pb2.Record``): the run (name, id, config), its history (what
it logged: ``_timestamp``, ``_step`` and its own metrics) and its system stats. W&B's collector averages
its samples over 15 s (``x_stats_sampling_interval``) and keeps each GPU as ``gpu.N.gpu`` (utilization
%), ``gpu.N.memory`` (memory busy %), ``gpu.N.memoryAllocatedBytes``, ``gpu.N.memoryAllocated`` (%),
``gpu.N.powerWatts``, ``gpu.N.enforcedPowerLimitWatts``, ``gpu.N.temp`` and ``gpu.N.smClock`` (MHz);
the UI shows them as ``system.gpu.N.*``.

Clients before the ``.wandb`` file kept the same stats as JSON lines in ``files/wandb-events.jsonl``
(``system.gpu.N.*`` with ``_timestamp`` and ``_runtime``, one line per 30 s average) and what the run logged
in ``wandb-history.jsonl`` beside it. Either time may be missing from a line: ``_runtime`` (seconds since
the run's start) places a line whose ``_timestamp`` is gone.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

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


GZIP = b"\x1f\x8b"
EVENTS = "wandb-events.jsonl"
HISTORY = "wandb-history.jsonl"
_RUN_DIR = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-(?P<id>[a-z0-9]+)$")


def _open(path: Path) -> IO[bytes]:
    """The file's bytes, through gzip when it is gzipped (a run kept small)."""
    f = path.open("rb")
    if f.read(2) == GZIP:
        f.close()
        return gzip.open(path, "rb")
    f.seek(0)
    return f


def is_run_file(path: Path) -> bool:
    try:
        with _open(path) as f:
            return f.read(4) == MAGIC
    except (OSError, EOFError, zlib.error):  # (a damaged gzip is not a run file: the log reader says why)
        return False


def is_events_file(path: Path) -> bool:
    """An older client's ``wandb-events.jsonl`` (by its name, or a first line of ``system.gpu.N`` stats)."""
    if path.name in (EVENTS, EVENTS + ".gz"):
        return path.is_file()
    try:
        with _open(path) as f:
            first = f.readline(65536).decode(errors="replace").strip()
        line = json.loads(first) if first.startswith("{") else None
    except (OSError, EOFError, ValueError, zlib.error):
        return False
    return isinstance(line, dict) and any(_GPU.match(str(k)) for k in line) and "_runtime" in line


def run_file(path: Path, run_id: str | None = None) -> Path | None:
    """The ``.wandb`` file (else the ``wandb-events.jsonl``) of a run directory, of ``wandb/`` (its latest
    run, or the run ``run_id``: ``run-*-ID``), or the file itself."""
    if path.is_file():
        return path if is_run_file(path) or is_events_file(path) else None
    if not path.is_dir():
        return None
    if run_id:
        picked = [d for d in path.glob(f"*run-*-{run_id}") if d.is_dir() and _RUN_DIR.match(d.name)]
        if picked:
            path = sorted(picked)[-1]
    elif (path / "latest-run").is_dir():
        path = path / "latest-run"
    elif runs := sorted(
        (d for d in path.iterdir() if d.is_dir() and _RUN_DIR.match(d.name)),
        key=lambda d: d.name.removeprefix("offline-"),
    ):
        path = runs[-1]  # wandb/ copied without its latest-run link: the newest run by its name's date
    found = sorted(path.glob("run-*.wandb")) or sorted(path.glob("run-*.wandb.gz"))
    if found:
        return found[-1]
    for events in (path / "files" / EVENTS, path / EVENTS, path / "files" / (EVENTS + ".gz")):
        if events.is_file():
            return events
    return None


def run_ids(path: Path) -> list[str]:
    """The ids of the runs under ``wandb/`` (its ``run-*-ID`` directories)."""
    if not path.is_dir():
        return []
    return sorted({m["id"] for d in path.iterdir() if (m := _RUN_DIR.match(d.name)) and d.is_dir()})


def file_run_id(path: Path) -> str:
    """The run id its file or directory name says (``run-ID.wandb``, ``run-*-ID/``), '' when none."""
    for part in (path.name, path.parent.name, path.parent.parent.name):
        if match := _RUN_DIR.match(part):
            return match["id"]
        if part.startswith("run-") and ".wandb" in part:
            return part[4:].split(".wandb")[0]
    return ""


def records(path: Path) -> Iterator[bytes]:
    """The records of a ``.wandb`` file, whole, in order; a file cut short ends at its last whole one."""
    try:
        yield from _records(path)
    except EOFError:  # a gzipped copy cut short: as a file cut short
        return
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise TrackerError(f"{path}: a damaged gzip file ({exc})") from None


def _records(path: Path) -> Iterator[bytes]:
    with _open(path) as f:
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
    run = TrackerRun("W&B", "run file", label, run_id=file_run_id(path))
    clock = Clock()
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
            _history(run, record.history.item, clock)
        elif kind == "stats" and record.stats.stats_type == pb.StatsRecord.StatsType.SYSTEM:
            t = record.stats.timestamp.seconds + record.stats.timestamp.nanos / 1e9
            for item in record.stats.item:
                _stat(run, t, item.key, _number(item.value_json))
    _finish(run, clock.own(run))
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


class Clock:
    """When each logged line was: its ``_timestamp``, else the run's start plus its ``_runtime`` (the start
    from a line that has both; without one, the times stay seconds from the start)."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.lines: list[tuple[float | None, float | None, dict[str, float]]] = []

    def add(self, stamp: float | None, runtime: float | None, counters: dict[str, float]) -> None:
        if stamp is not None and runtime is not None and self.start is None:
            self.start = stamp - runtime
        if stamp is not None or runtime is not None:
            self.lines.append((stamp, runtime, counters))

    def at(self, stamp: float | None, runtime: float | None) -> float:
        return stamp if stamp is not None else (self.start or 0.0) + (runtime or 0.0)

    def own(self, run: TrackerRun | None = None) -> dict[str, list[tuple[float, float]]]:
        """The counters' series, each point at its time (``run``: its logged times are filled too)."""
        out: dict[str, list[tuple[float, float]]] = {}
        for stamp, runtime, counters in self.lines:
            t = self.at(stamp, runtime)
            if run is not None:
                run.logged.append(t)
            for key, value in counters.items():
                out.setdefault(key, []).append((t, value))
        return out


def _history(run: TrackerRun, items: object, clock: Clock) -> None:
    values = {(i.key or "/".join(i.nested_key)): _number(i.value_json) for i in items}  # type: ignore[attr-defined]
    _logged(run, values, clock)


def _logged(run: TrackerRun, values: dict[str, float | None], clock: Clock) -> None:
    """One line the run logged: its time and its step counters (the rest of what it logged is not read)."""
    counters = {k: v for k, v in values.items() if v is not None and counter_like(k)}
    run.count(1 + len(counters))
    clock.add(values.get("_timestamp"), values.get("_runtime"), counters)


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


# ---- an older client's JSON lines -----------------------------------------------------------------------
MAX_LINE_BYTES = 1 << 20  # a longer line is not W&B's (its stats lines are a few hundred bytes)


def read_events(path: Path, label: str) -> TrackerRun:
    """An older client's ``wandb-events.jsonl``, with the ``wandb-history.jsonl`` (the run's step counter)
    and ``config.yaml`` kept beside it when they are."""
    run = TrackerRun("W&B", "events file", label, run_id=file_run_id(path))
    stats, kept = Clock(), []
    for values in _json_lines(path, label):
        stamp, runtime = values.get("_timestamp"), values.get("_runtime")
        if stamp is not None and runtime is not None and stats.start is None:
            stats.start = stamp - runtime  # the run's start, for the lines without their _timestamp
        gpus = {k: v for k, v in values.items() if v is not None and _GPU.match(k)}
        if gpus and (stamp is not None or runtime is not None):
            run.count(len(gpus))  # bounded while the lines wait for their times
            kept.append((stamp, runtime, gpus))
    run.points = 0  # counted again as each point is put
    history = Clock()
    beside = path.parent / HISTORY
    if beside.is_file():
        for values in _json_lines(beside, str(beside)):
            _logged(run, values, history)
    history.start = history.start if history.start is not None else stats.start
    stats.start = stats.start if stats.start is not None else history.start
    for stamp, runtime, gpus in kept:
        t = stats.at(stamp, runtime)
        for key, value in gpus.items():
            _stat(run, t, key, value)
    _events_config(run, path.parent / "config.yaml")
    _finish(run, history.own(run))
    return run


def _json_lines(path: Path, label: str) -> Iterator[dict[str, float | None]]:
    """Each line's numbers (a line that is not a JSON object is passed over)."""
    try:
        with _open(path) as f:
            for number, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
                if len(raw) > MAX_LINE_BYTES:
                    raise TrackerError(f"{label}: line {number} is longer than {MAX_LINE_BYTES >> 20} MiB")
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(line, dict):
                    yield {str(k): _value(v) for k, v in line.items()}
    except (
        EOFError,
        gzip.BadGzipFile,
        zlib.error,
    ):  # a gzipped copy cut short or damaged: what was read stands
        return


def _value(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _events_config(run: TrackerRun, path: Path) -> None:
    """``config.yaml``'s ``key: {desc, value}`` entries (W&B's own ``_wandb`` and the like left out)."""
    if not path.is_file() or path.stat().st_size > MAX_LINE_BYTES:
        return
    import yaml

    try:
        config = yaml.safe_load(path.read_text(errors="replace"))
    except yaml.YAMLError:
        return
    for key, entry in (config or {}).items() if isinstance(config, dict) else ():
        if str(key).startswith("_") or str(key) == "wandb_version":
            continue
        value = entry.get("value") if isinstance(entry, dict) and "value" in entry else entry
        run.config[str(key)] = str(value)[:200]


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
    """(run name, key, __MIN/__MAX or '') of a header cell; a grouped panel's ``Group: NAME - key`` is
    the group's."""
    match = _PREFIXED.match(cell.strip().strip('"'))
    if match is None:
        return "", cell, ""
    key = match["key"].replace("system/", "system.")
    return match["run"] or "", key, match["agg"] or ""


def read_csv(path: Path, label: str, run_id: str | None = None) -> TrackerRun:
    """A W&B CSV export of system metrics: a time column and ``gpu.N.*`` columns (the __MIN/__MAX beside
    a panel's series are left out). A panel of several runs is one run's replay: ``run_id`` names it."""
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
        picked = _pick(label, cols, run_id)
        run.name = picked.removeprefix("Group: ")
        cols = [(name, key, agg) if name == picked else (name, "", "x") for name, key, agg in cols]
        for line, row in enumerate(rows, start=2):
            _csv_row(run, row, cols, at, scale, line)
    _finish(run, {})
    return run


def _pick(label: str, cols: list[tuple[str, str, str]], wanted: str | None) -> str:
    """The run (or group) whose GPU columns are read: the only one, or the one ``wanted`` names."""
    names = list(dict.fromkeys(name for name, key, agg in cols if not agg and _GPU.match(key)))
    if wanted:
        found = [n for n in names if wanted in (n, n.removeprefix("Group: "))]
        if not found:
            raise TrackerError(f"{label}: no run {wanted!r} in this export (its runs: {_listed(names)})")
        return found[0]
    if len(names) > 1:
        raise TrackerError(
            f"{label}: this export holds {len(names)} runs ({_listed(names)}): name one with --run NAME"
        )
    return names[0] if names else ""


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "") if names else "none"


def _seconds(text: str) -> float:
    """A time cell: a number, or the UI's H:MM:SS(.fff) for a relative time."""
    try:
        return float(text)
    except ValueError:
        parts = text.strip().split(":")
        if len(parts) not in (2, 3):
            raise
        total = 0.0
        for part in parts:
            total = total * 60 + float(part)
        return total


def _csv_row(
    run: TrackerRun, row: list[str], cols: list[tuple[str, str, str]], at: int, scale: float, line: int
) -> None:
    if len(row) <= at or not row[at].strip():
        return
    try:
        t = _seconds(row[at]) * scale
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
