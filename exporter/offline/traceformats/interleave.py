"""How many GPUs a log interleaves when no column names them: nvidia-smi with N GPUs and no ``index`` (or a
poller looping over its GPUs) prints N rows per sample, in index order, stamped with the same time or
nearly (each GPU is queried in turn: 3 ms apart on the two-GPU node of examples/traces/real/r05).

``guess`` reads the start of such a log. Consecutive rows within SAME_SAMPLE_S of their group's first row
are one sample; groups of one constant size N are N GPUs. The cells fixed per GPU (name, uuid, bus id,
memory.total, power.limit), where the log has them, are further evidence: they repeat every N rows. Where
the evidence is mixed (group sizes vary), ``guess`` gives no count, only the size most groups have.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice

from exporter.offline.traceformats.base import MAX_GPUS

# A sample's rows are a few ms apart; 50 ms leaves room for slow queries on many GPUs and is half of
# nvidia-smi's shortest usual interval (-lms 100). Faster logs are caught by the spacing check in ``guess``.
SAME_SAMPLE_S = 0.05
SCAN_ROWS = 16 * MAX_GPUS  # the rows read at most: a bound on time and memory whatever the log is
SCAN_GROUPS = 32  # samples enough to see the pattern: the scan stops after these
MOST = 0.75  # "most groups": the share that must have one size for a hint
CYCLE_MISMATCH = 0.1  # pairs N rows apart that may differ in a per-GPU cell (a power limit changed)
KEY_CHARS = 64  # per-GPU cells are compared by their first characters (bounds the memory held)


@dataclass(frozen=True)
class Guess:
    """``gpus``: the count the rows show (None: no sure answer); ``looks_like``: with ``gpus`` None, the
    count most samples have (for a hint), else None."""

    gpus: int | None = None
    looks_like: int | None = None


@dataclass
class _Groups:
    sizes: list[int] = field(default_factory=list)  # rows per sample, of the samples closed
    last: int = 0  # rows of the sample open when the scan ended
    ended: bool = True  # the log ended within the scan (else it stopped at a bound)
    spread: float = 0.0  # the longest time between the rows of one sample
    step: float | None = None  # the shortest step forward from one sample to the next
    keys: list[tuple[str, ...]] = field(default_factory=list)  # each row's per-GPU cells


def guess(rows: Iterable[tuple[float, tuple[str, ...]]]) -> Guess:
    """The GPU count of a log from its rows in order: (Unix seconds, the row's per-GPU cells)."""
    groups = _group(iter(rows))
    if not groups.sizes:  # the scan saw one sample: all its rows are GPUs (as when stamped alike)
        return Guess(groups.last) if groups.ended and 1 <= groups.last <= MAX_GPUS else Guess()
    if groups.step is not None and groups.step <= 2 * groups.spread:
        return Guess()  # samples no further apart than a sample is long: one GPU sampled fast, not groups
    sizes = Counter(groups.sizes)
    if len(sizes) == 1 and groups.last <= groups.sizes[0]:
        count = groups.sizes[0]
        if count == 1 or _repeat(groups.keys, count):
            return Guess(count)
        return Guess(looks_like=count)
    common = [(n, seen) for n, seen in sizes.most_common() if n >= 2]
    if not common:
        return Guess()
    count, seen = common[0]
    if _tells(groups.keys, count) and _repeat(groups.keys, count):
        return Guess(count)  # sample times too ragged to group, but every GPU's own cells cycle
    return Guess(looks_like=count) if seen >= MOST * len(groups.sizes) else Guess()


def _group(rows: Iterator[tuple[float, tuple[str, ...]]]) -> _Groups:
    """The rows cut into samples, up to SCAN_ROWS rows or SCAN_GROUPS samples."""
    found = _Groups()
    first = low = high = 0.0
    read = 0
    for ts, key in islice(rows, SCAN_ROWS):
        read += 1
        if found.last and abs(ts - first) <= SAME_SAMPLE_S:
            found.last += 1
            low, high = min(low, ts), max(high, ts)
        else:
            if found.last:
                found.sizes.append(found.last)
                found.spread = max(found.spread, high - low)
                if ts > high:  # time going back is another run, not a step between samples
                    found.step = ts - high if found.step is None else min(found.step, ts - high)
                if len(found.sizes) >= SCAN_GROUPS:
                    found.last, found.ended = 0, False
                    return found
            first = low = high = ts
            found.last = 1
        found.keys.append(tuple(cell[:KEY_CHARS] for cell in key))
    found.ended = read < SCAN_ROWS
    return found


def _repeat(keys: list[tuple[str, ...]], count: int) -> bool:
    """Every per-GPU cell equals the one ``count`` rows later, but for a few (a limit changed once)."""
    if not keys or not keys[0]:
        return True
    for column in range(len(keys[0])):
        pairs = [(a[column], b[column]) for a, b in zip(keys, keys[count:], strict=False)]
        pairs = [(a, b) for a, b in pairs if a and b]
        if sum(a != b for a, b in pairs) > CYCLE_MISMATCH * len(pairs):
            return False
    return True


def _tells(keys: list[tuple[str, ...]], count: int) -> bool:
    """Some per-GPU cell differs between the first ``count`` rows: GPUs that can be told apart."""
    first = keys[:count]
    columns = range(len(first[0]) if first else 0)
    return any(len({key[column] for key in first} - {""}) >= 2 for column in columns)
