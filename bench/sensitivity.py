"""Which numbers of the threshold table carry the detection results, and which change nothing.

    python bench/sensitivity.py [--jobs N] [--key AREA.KEY ...] [--out PATH] [--write-docs] [TRACES_DIR ...]

Every labelled example set (bench/detection.py's: examples/traces and the sets below it), with two
made under out/ by bench/extra_sets.py (the simulator's scenarios recorded as traces, and every example
thinned to one sample per 30 s, the step of a Prometheus history), is replayed once as it is (the
baseline), watching which thresholds each trace's replay and judging read. Then, for every threshold
some replay read, the traces that read it are replayed with its value moved down and up by a quarter (a
count to the whole number a quarter away, at least one; a ratio at most halfway to 1) and judged as
bench/detection.py judges them. Per threshold and move it prints the pages lost and gained, the false
pages added and removed, the largest shift of an episode's time to detect and to page, of when it says
its loss began or ended and of its time to resolve, and the largest change of its held share and of a
ledger's error, and classifies the number:

- load-bearing: a quarter either way changes a result (a page, a false verdict, an episode's time to
  detect, page or resolve, when it says its loss began or ended, its held share, the cause an episode
  names, a ledger error);
- fragile: load-bearing, and a move of a tenth either way (over the traces a quarter changed) already
  flips a page or a false page, or carries a ledger across its 5-point target;
- dead: a quarter either way changes nothing on any set; such a number is then moved by a half either
  way, which says whether it acts at all on the examples (it then guards with a wide margin) or is inert;
- unread: no replay of the example sets reads it (a path no example reaches, or a number only the live
  exporter reads); it is not probed;
- not judged: read, but nothing judging compares can see it (a bound on what a row may claim, which the
  hardening tests probe; the most points a window keeps, which the fault tests do; a price, which the
  cost tests do); it is not probed.

A threshold a module copies when it is imported (a kind's fire and resolve times) would not see a value
moved later, so every replay with a moved value runs in a process of its own that moves the value
before it imports the analysis (``--jobs`` of them at once). Choices (an alert's severity) are not
probed: judging reads none. Reading a trace costs three times what judging it does, so the baseline
keeps each trace's rows (out/sensitivity-rows/) and a probe judges those, reading the file afresh only
for a threshold the reading itself read on that trace.

The results go to ``--out`` (bench/sensitivity.json, which docs/thresholds.md's sensitivity column is
generated from: ``--write-docs`` regenerates it) and a table on stdout. ``--key`` probes the named keys
only and merges them into the stored results; the baseline is kept under out/ with a fingerprint of the
analysis' code and the traces, and reused while neither changes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import pickle
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# nothing of the analysis is imported here: a worker moves its value first (see ``_fresh``)
from exporter.policy.thresholds import Threshold, table  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "sensitivity.json"
BASELINE_CACHE = REPO / "out" / "sensitivity-baseline.json"
QUARTER = 0.25  # the move every threshold gets
TENTH = 0.10  # the move that, still changing a page, makes a load-bearing threshold fragile
HALF = 0.5  # the move a dead threshold gets: does it act at all on the examples, or is it inert?
LEDGER_TARGET_POINTS = 5.0  # bench/detection.py's target: a ledger crossing it flips a result
SHIFT_RESOLUTION = 0.05  # seconds and points: a difference below it is float noise, not a change
ROWS_CACHE = REPO / "out" / "sensitivity-rows"  # each trace's rows, as the baseline read them
BASELINE_FORMAT = "6"  # what a stored baseline holds; a new one is replayed when it changes
CLASSES = ("fragile", "load-bearing", "dead", "unread", "not judged")
# read, but outside what judging compares: bounds on what a row may claim (tests/test_*hardening*), on
# how many points a window keeps (memory, tests/faults) and prices (the cost tests); probing them would
# only call them dead
NOT_JUDGED = ("replay.bound.", "cost.", "analysis.window_max_points_per_second")


# ---- watching and moving values ------------------------------------------------------------------


class _Watched(Threshold):
    """A threshold that notes every read of its value in ``_READS`` (the baseline learns who reads what)."""

    @property
    def value(self) -> float:  # type: ignore[override]
        _READS.add(self.key)
        return vars(self)["value"]


_READS: set[str] = set()


def _watch() -> None:
    for entry in table().values():
        object.__setattr__(entry, "__class__", _Watched)


@contextmanager
def moved(values: dict[str, float]) -> Iterator[None]:
    """The named thresholds read ``values`` until the block ends: the registry's own objects change, so
    every module that holds one reads the moved value when it reads ``.value``; a module that copied the
    value when it was imported sees it only if it is imported inside the block (a fresh process)."""
    entries = table()
    saved = {key: vars(entries[key])["value"] for key in values}
    try:
        for key, value in values.items():
            vars(entries[key])["value"] = float(value)
        yield
    finally:
        for key, value in saved.items():
            vars(entries[key])["value"] = value


# ---- one trace's result --------------------------------------------------------------------------


@dataclass
class Outcome:
    """What judging one trace says, in comparable form."""

    paged: list[str] = field(default_factory=list)  # the labels that paged
    onset: dict[str, float] = field(default_factory=dict)  # label -> time to detect
    to_page: dict[str, float] = field(default_factory=dict)  # label -> time to page
    said_onset: dict[str, float] = field(default_factory=dict)  # label -> when it says the loss began
    said_end: dict[str, float] = field(default_factory=dict)  # label -> when it says the loss ended
    to_resolve: dict[str, float] = field(default_factory=dict)  # label -> time to resolve
    held: dict[str, float] = field(default_factory=dict)  # label -> held share, in points
    causes: list[str] = field(default_factory=list)  # "GPU kind cause" of every episode the replay gave
    false: list[str] = field(default_factory=list)  # false verdicts, "GPU kind"
    false_pages: list[str] = field(default_factory=list)  # those of them that paged
    ledger: float | None = None  # worst |share - truth| in points; None: no truth
    error: str = ""  # the replay failed (a moved value the analysis refuses)


@dataclass
class Rows:
    """A trace's rows as read once (a RowSource for ``replay``)."""

    stats: object
    rows: list

    def __iter__(self) -> Iterator:
        return iter(self.rows)


def read_rows(path: Path) -> Rows:
    from exporter.offline.traces import TraceReader

    reader = TraceReader(path)
    return Rows(reader.stats, list(reader))


def rows_file(path: str, mark: str) -> Path:
    return ROWS_CACHE / mark[:12] / f"{hashlib.sha256(path.encode()).hexdigest()[:16]}.pickle"


def _outcome(path: Path, rows: Rows | None = None) -> Outcome:
    from bench.detection import judge_replay

    try:
        score, ledger, result = judge_replay(path, rows)
    except Exception as exc:  # noqa: BLE001  a moved value may be refused: that is a result too
        return Outcome(error=f"{type(exc).__name__}: {exc}")
    out = Outcome(ledger=round(ledger.points, 2) if ledger else None)
    for i, e in enumerate(score.episodes):
        name = f"{i}:{e.label}"
        if e.paged:
            out.paged.append(name)
        if e.ttd is not None:
            out.onset[name] = round(e.ttd, 1)
        if e.ttp is not None:
            out.to_page[name] = round(e.ttp, 1)
        if e.onset_err is not None:
            out.said_onset[name] = round(e.onset_err, 1)
        if e.end_err is not None:
            out.said_end[name] = round(e.end_err, 1)
        if e.ttr is not None:
            out.to_resolve[name] = round(e.ttr, 1)
        out.held[name] = round(e.held * 100, 1)
    out.causes = sorted(f"{e.gpu} {e.kind} {e.cause or '-'}" for e in result.episodes)
    for f in score.false:
        out.false.append(f"{f.verdict.gpu} {f.verdict.kind}")
        if f.paged:
            out.false_pages.append(f"{f.verdict.gpu} {f.verdict.kind}")
    return out


# ---- the workers (each in a process of its own) --------------------------------------------------


def _baseline(paths: list[str], mark: str = "") -> tuple[list[str], dict[str, dict]]:
    """Judge ``paths`` unmoved, noting the keys each one's reading and judging read (and those read at
    import); with ``mark``, keep each trace's rows under it for the probes."""
    _watch()
    import bench.detection  # noqa: F401  imported while watched: its copies count as read

    imported = sorted(_READS)
    found = {}
    for path in paths:
        _READS.clear()
        rows = read_rows(Path(path))
        parse_reads = sorted(_READS)
        if mark:  # kept before judging: nothing the analysis does to a row reaches a probe
            rows_file(path, mark).parent.mkdir(parents=True, exist_ok=True)
            rows_file(path, mark).write_bytes(pickle.dumps(rows, pickle.HIGHEST_PROTOCOL))
        _READS.clear()
        started = time.monotonic()
        outcome = _outcome(Path(path), rows)
        seconds = round(time.monotonic() - started, 2)
        found[path] = {
            "outcome": asdict(outcome),
            "reads": sorted(_READS | set(parse_reads)),
            "parse_reads": parse_reads,
            "seconds": seconds,
        }
    return imported, found


def _probe(
    key: str, value: float, paths: list[str], mark: str = "", fresh: Iterable[str] = ()
) -> dict[str, dict]:
    """Judge ``paths`` with ``key`` moved to ``value``, moved before the analysis is imported: from the
    rows the baseline kept under ``mark``, or from the file for a path in ``fresh`` (its reading read
    ``key``) or without ``mark``."""
    fresh = set(fresh)
    with moved({key: value}):
        found = {}
        for path in paths:
            kept = rows_file(path, mark) if mark and path not in fresh else None
            rows = pickle.loads(kept.read_bytes()) if kept is not None and kept.exists() else None
            found[path] = asdict(_outcome(Path(path), rows))
        return found


def _pool(jobs: int) -> ProcessPoolExecutor:
    """Fresh processes: one task each, so no import of the analysis outlives the value it copied."""
    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), max_tasks_per_child=1)


# ---- the baseline --------------------------------------------------------------------------------


def trace_paths(folders: Iterable[Path]) -> list[Path]:
    from bench.detection import find_traces

    return [p for folder in folders if folder.is_dir() for p in find_traces(folder)]


def fingerprint(paths: list[Path]) -> str:
    """The analysis' code, the judging and the traces: a stored baseline stands while this does."""
    from bench.detection import trace_name

    digest = hashlib.sha256(BASELINE_FORMAT.encode())
    sources = [*sorted((REPO / "exporter").rglob("*.py")), REPO / "bench" / "detection.py"]
    for path in [*sources, *paths, *(p.parent / f"{trace_name(p)}.labels.json" for p in paths)]:
        digest.update(str(path.relative_to(REPO) if path.is_relative_to(REPO) else path).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def baseline(paths: list[Path], jobs: int) -> dict:
    """Each trace's outcome and reads, from the cache when its fingerprint still holds."""
    mark = fingerprint(paths)
    if BASELINE_CACHE.exists():
        cached = json.loads(BASELINE_CACHE.read_text())
        if cached.get("fingerprint") == mark:
            return cached
    found: dict[str, dict] = {}
    imported: set[str] = set()
    shutil.rmtree(ROWS_CACHE, ignore_errors=True)  # rows kept for an older baseline
    with _pool(jobs) as pool:  # a process per trace: a value one trace cached is read afresh by the next
        for reads, part in pool.map(_baseline, [[str(p)] for p in paths], [mark] * len(paths)):
            imported.update(reads)
            found.update(part)
    cached = {"fingerprint": mark, "imported": sorted(imported), "traces": found}
    BASELINE_CACHE.parent.mkdir(parents=True, exist_ok=True)
    BASELINE_CACHE.write_text(json.dumps(cached))
    return cached


def readers(base: dict) -> dict[str, list[str]]:
    """Key -> the traces whose result may depend on it (all of them for a key read at import)."""
    everyone = sorted(base["traces"])
    out: dict[str, set[str]] = {key: set(everyone) for key in base["imported"]}
    for path, seen in base["traces"].items():
        for key in seen["reads"]:
            out.setdefault(key, set()).add(path)
    return {key: sorted(paths) for key, paths in out.items()}


def fresh_for(base: dict, key: str) -> list[str]:
    """The traces whose reading read ``key``: a probe of it reads them afresh."""
    return sorted(p for p, seen in base["traces"].items() if key in seen.get("parse_reads", ()))


def not_judged(key: str) -> bool:
    return key.startswith(NOT_JUDGED)


# ---- moves and their effect ----------------------------------------------------------------------


def moves(entry: Threshold, share: float) -> list[float]:
    """The values ``share`` below and above ``entry``'s (those that differ from it and make sense)."""
    v = vars(entry)["value"]
    if v == 0:
        return []  # nothing is a quarter away from zero
    if entry.unit == "count" and float(v).is_integer():
        down, up = max(0.0, float(round(v * (1 - share)))), float(round(v * (1 + share)))
        if share >= QUARTER:  # the neighbouring whole number at least
            down, up = min(down, v - 1), max(up, v + 1)
        return [m for m in (down, up) if m != v and m >= 0]
    down, up = v * (1 - share), v * (1 + share)
    if entry.unit == "ratio" and v <= 1:
        up = min(up, (1 + v) / 2)
    return [round(m, 6) for m in (down, up) if m != v]


@dataclass
class Effect:
    """One move of one threshold against the baseline, over the traces that read it."""

    value: float
    pages_lost: int = 0
    pages_gained: int = 0
    false_added: int = 0  # false pages
    false_removed: int = 0
    false_verdicts: int = 0  # the change in false verdicts (paged or not)
    onset_shift_s: float = 0.0  # the largest |change| of an episode's time to detect
    to_page_shift_s: float = 0.0  # the largest |change| of an episode's time to page
    said_shift_s: float = 0.0  # ... of when an episode says its loss began or ended
    resolve_shift_s: float = 0.0  # ... of an episode's time to resolve
    held_points: float = 0.0  # ... of an episode's held share, in points
    causes_changed: int = 0  # traces where an episode names another cause (or a cause comes or goes)
    ledger_points: float = 0.0  # the largest change of a trace's ledger error (signed)
    crossed_ledger_target: bool = False
    errors: int = 0  # traces whose replay failed
    changed: list[str] = field(default_factory=list)  # the traces whose result changed

    @property
    def flips(self) -> bool:
        """A page or a false page changed, a ledger crossed its target, or a replay failed."""
        pages = self.pages_lost or self.pages_gained or self.false_added or self.false_removed
        return bool(pages or self.crossed_ledger_target or self.errors)

    @property
    def changes(self) -> bool:
        return bool(self.flips or self.changed)


def _shift(before: dict[str, float], after: dict[str, float]) -> float:
    return max((abs(after[k] - before[k]) for k in before.keys() & after.keys()), default=0.0)


def _compare(effect: Effect, name: str, base: dict, moved_: dict) -> None:
    """Add what moving changed on one trace to ``effect``."""
    if moved_["error"]:
        effect.errors += 1
        effect.changed.append(name)
        return
    before, after = set(base["paged"]), set(moved_["paged"])
    lost, gained = len(before - after), len(after - before)
    fp_before, fp_after = Counter(base["false_pages"]), Counter(moved_["false_pages"])
    added, removed = sum((fp_after - fp_before).values()), sum((fp_before - fp_after).values())
    false_delta = len(moved_["false"]) - len(base["false"])
    onset = _shift(base["onset"], moved_["onset"])
    to_page = _shift(base["to_page"], moved_["to_page"])
    said = max(_shift(base[k], moved_[k]) for k in ("said_onset", "said_end"))
    resolve = _shift(base["to_resolve"], moved_["to_resolve"])
    held = _shift(base["held"], moved_["held"])
    causes = Counter(base["causes"]) != Counter(moved_["causes"])
    ledger = 0.0
    if base["ledger"] is not None and moved_["ledger"] is not None:
        ledger = moved_["ledger"] - base["ledger"]
        if (base["ledger"] > LEDGER_TARGET_POINTS) != (moved_["ledger"] > LEDGER_TARGET_POINTS):
            effect.crossed_ledger_target = True
    effect.pages_lost += lost
    effect.pages_gained += gained
    effect.false_added += added
    effect.false_removed += removed
    effect.false_verdicts += false_delta
    effect.onset_shift_s = max(effect.onset_shift_s, onset)
    effect.to_page_shift_s = max(effect.to_page_shift_s, to_page)
    effect.said_shift_s = max(effect.said_shift_s, said)
    effect.resolve_shift_s = max(effect.resolve_shift_s, resolve)
    effect.held_points = max(effect.held_points, held)
    effect.causes_changed += causes
    if abs(ledger) > abs(effect.ledger_points):
        effect.ledger_points = round(ledger, 2)
    if (
        lost
        or gained
        or added
        or removed
        or false_delta
        or causes
        or max(onset, to_page, said, resolve, held, abs(ledger)) >= SHIFT_RESOLUTION
    ):
        effect.changed.append(name)


def effect(value: float, base: dict, probed: dict[str, dict]) -> Effect:
    from bench.detection import trace_name

    out = Effect(value)
    for path, outcome in sorted(probed.items()):
        _compare(out, trace_name(Path(path)), base["traces"][path]["outcome"], outcome)
    return out


def classify(quarter: list[Effect], tenth: list[Effect]) -> str:
    if not any(e.changes for e in quarter):
        return "dead"
    return "fragile" if any(e.flips for e in tenth) else "load-bearing"


# ---- the sweep -----------------------------------------------------------------------------------


def _run(pool: ProcessPoolExecutor, base: dict, work: list[tuple[str, float, list[str]]]) -> list[Effect]:
    mark = base["fingerprint"]
    futures = [pool.submit(_probe, key, v, paths, mark, fresh_for(base, key)) for key, v, paths in work]
    return [effect(value, base, f.result()) for (_, value, _), f in zip(work, futures, strict=True)]


def estimate(keys: list[str], base: dict, jobs: int) -> float:
    """Seconds the quarter moves of ``keys`` take: their traces' baseline replays, ``jobs`` at once."""
    entries, read_by = table(), readers(base)
    replays = sum(
        len(moves(entries[k], QUARTER)) * sum(base["traces"][p].get("seconds", 0.0) for p in read_by[k])
        for k in keys
    )
    return replays / jobs


def _changed(effects: list[Effect], paths: list[str]) -> list[str]:
    """The traces (of ``paths``) whose result some of ``effects`` changed."""
    from bench.detection import trace_name

    names = {name for e in effects for name in e.changed}
    return [p for p in paths if trace_name(Path(p)) in names]


def sweep(keys: list[str], base: dict, jobs: int) -> dict[str, dict]:
    """Probe each key a quarter either way over the traces that read it; then the load-bearing ones a
    tenth either way, over the traces a quarter changed (a move that changes nothing at a quarter is not
    expected to flip a page at a tenth)."""
    entries, read_by = table(), readers(base)
    results: dict[str, dict] = {}
    with _pool(jobs) as pool:
        first = [(k, v, read_by[k]) for k in keys for v in moves(entries[k], QUARTER)]
        quarter = _run(pool, base, first)
        by_key: dict[str, list[Effect]] = {k: [] for k in keys}
        for (key, _, _), e in zip(first, quarter, strict=True):
            by_key[key].append(e)
        bearing = [k for k in keys if any(e.changes for e in by_key[k])]
        second = [(k, v, _changed(by_key[k], read_by[k])) for k in bearing for v in moves(entries[k], TENTH)]
        tenth: dict[str, list[Effect]] = {k: [] for k in keys}
        for (key, _, _), e in zip(second, _run(pool, base, second), strict=True):
            tenth[key].append(e)
        dead = [k for k in keys if by_key[k] and k not in bearing]
        third = [(k, v, read_by[k]) for k in dead for v in moves(entries[k], HALF)]
        half: dict[str, list[Effect]] = {k: [] for k in keys}
        for (key, _, _), e in zip(third, _run(pool, base, third), strict=True):
            half[key].append(e)
    for key in keys:
        results[key] = {
            "value": vars(entries[key])["value"],
            "unit": entries[key].unit,
            "class": classify(by_key[key], tenth[key]) if by_key[key] else "dead",
            "traces": len(read_by[key]),
            "baseline": base["fingerprint"][:12],  # the code and traces it was measured on
            "quarter": [asdict(e) for e in by_key[key]],
            "tenth": [asdict(e) for e in tenth[key]],
            "half": [asdict(e) for e in half[key]],
        }
    return results


# ---- output --------------------------------------------------------------------------------------


def _row(key: str, entry: dict, move: str, e: dict) -> str:
    return (
        f"  {key:48s} {entry['value']:>10g} {entry['class']:>12s} {move:>5s} {e['value']:>10g} "
        f"{e['pages_lost']:4d} {e['pages_gained']:6d} {e['false_added']:6d} {e['false_removed']:6d} "
        f"{e['onset_shift_s']:7.1f} {e['to_page_shift_s']:7.1f} {e['ledger_points']:+7.2f} {e['errors']:4d}"
    )


def render(results: dict[str, dict], unread: list[str]) -> str:
    lines = [
        f"  {'key':48s} {'value':>10s} {'class':>12s} {'move':>5s} {'to':>10s} {'lost':>4s} {'gained':>6s} "
        f"{'false+':>6s} {'false-':>6s} {'onset':>7s} {'to-page':>7s} {'ledger':>7s} {'err':>4s}"
    ]
    for key, entry in results.items():
        if "quarter" not in entry:  # not probed: unread or not judged
            lines.append(f"  {key:48s} {entry['value']:>10g} {entry['class']:>12s}  (not probed)")
            continue
        moves_ = [("1/4", e) for e in entry["quarter"]] + [("1/10", e) for e in entry["tenth"]]
        moves_ += [("1/2", e) for e in entry.get("half", [])]
        if not moves_:
            lines.append(f"  {key:48s} {entry['value']:>10g} {entry['class']:>12s}  (no move: zero)")
        lines += [_row(key, entry, move, e) for move, e in moves_]
    count = Counter(e["class"] for e in results.values())
    lines.append(
        "  "
        + ", ".join(f"{count[c]} {c}" for c in CLASSES if count[c])
        + f"; {len(unread)} unread by any replay"
    )
    return "\n".join(lines)


def store(out: Path, results: dict[str, dict], unread: list[str], traces: int, merge: bool) -> dict:
    stored = json.loads(out.read_text()) if merge and out.exists() else {"keys": {}}
    keys = {k: v for k, v in {**stored.get("keys", {}), **results}.items() if k in table()}  # none gone
    for key in unread:
        keys[key] = {"value": vars(table()[key])["value"], "unit": table()[key].unit, "class": "unread"}
    order = list(table())
    data = {
        "about": "bench/sensitivity.py: each threshold moved a quarter (and a tenth) either way over the "
        "labelled example sets; docs/thresholds.md's sensitivity column is generated from this file",
        "traces": traces,
        "keys": {
            k: keys[k] for k in sorted(keys, key=lambda k: order.index(k) if k in order else len(order))
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/sensitivity.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "folders",
        nargs="*",
        type=Path,
        help="trace sets (default: bench/detection.py's and bench/extra_sets.py's, made under out/)",
    )
    p.add_argument("--jobs", type=int, default=2, help="replays at once, each in its own process")
    p.add_argument("--key", action="append", default=[], help="probe this key only (repeatable)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the results (JSON)")
    p.add_argument("--write-docs", action="store_true", help="regenerate docs/thresholds.md from --out")
    args = p.parse_args(argv)
    unknown = [k for k in args.key if k not in table()]
    if unknown:
        p.error(f"not a threshold key: {', '.join(unknown)}")
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    return args


def main(argv: list[str]) -> int:
    from bench.detection import DEFAULT_DIRS

    args = parse(argv)
    if not args.folders:
        from bench.extra_sets import make

        args.folders = [*DEFAULT_DIRS, *make(jobs=args.jobs)]
    paths = trace_paths(args.folders)
    if not paths:
        print("no labelled traces", file=sys.stderr)
        return 1
    started = time.monotonic()
    base = baseline(paths, args.jobs)
    read_by = readers(base)
    print(
        f"baseline: {len(paths)} traces, {len(read_by)} thresholds read ({time.monotonic() - started:.1f} s)"
    )
    keys = args.key or [k for k in table() if k in read_by]
    unread = [] if args.key else [k for k in table() if k not in read_by]
    missing = [k for k in keys if k not in read_by]
    results = {
        k: {"value": vars(table()[k])["value"], "unit": table()[k].unit, "class": "unread"} for k in missing
    }
    results |= {
        k: {"value": vars(table()[k])["value"], "unit": table()[k].unit, "class": "not judged"}
        for k in keys
        if k in read_by and not_judged(k)
    }
    probed = [k for k in keys if k in read_by and not not_judged(k)]
    print(f"{len(probed)} thresholds to probe: about {estimate(probed, base, args.jobs):.0f} s of replays")
    started = time.monotonic()
    results |= sweep(probed, base, args.jobs)
    seconds = time.monotonic() - started
    print(render(results, unread))
    print(f"{len(keys)} thresholds probed in {seconds:.1f} s with --jobs {args.jobs}")
    store(args.out, results, unread, len(paths), merge=bool(args.key))
    print(f"wrote {args.out}")
    if args.write_docs:
        subprocess.run([sys.executable, "-m", "devtools.artifacts"], cwd=REPO, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
