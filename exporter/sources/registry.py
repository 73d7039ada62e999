"""Every source of the exporter, declared once (node_exporter's ``registerCollector``).

A source module registers itself at import: its name (the ``source`` label of the books), its schedule
(polled by the sampler's poller, NVML's per-GPU calls, a thread of its own, or pushed over HTTP), the
type of its reading, and how it is built from ``Settings`` (``None``: off under these settings). The
application builds every source from here (``build_sources``), and the sampler wires each one by its
schedule; the poller books every one of them in the same two families, whatever its schedule.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import ModuleType
from typing import Generic, Protocol, TypeVar, runtime_checkable

from exporter.config.settings import Settings
from exporter.sources.errors import ErrorCounter

ReadingT = TypeVar("ReadingT")
ReadingT_co = TypeVar("ReadingT_co", covariant=True)


class Source(Protocol[ReadingT_co]):
    """What the poller runs: ``collect()`` every ``interval_s`` (0: every cycle), bounded by ``timeout_s``.
    Raising is counted as ``InternalError``; ``None`` means the source failed and counted its own error."""

    @property
    def name(self) -> str: ...
    @property
    def interval_s(self) -> float: ...
    @property
    def timeout_s(self) -> float: ...
    def collect(self) -> ReadingT_co | None: ...


@dataclass(frozen=True)
class Round:
    """How a source the poller does not start fared last: its thread's last round, or the last push."""

    ok: bool
    t: float  # wall time it ended
    duration_s: float | None  # how long it took


class Reports(Protocol):
    """A source with a schedule of its own says how its last round went (None: no round yet)."""

    def last_round(self) -> Round | None: ...


@runtime_checkable
class Threaded(Reports, Protocol):
    """A source on a thread of its own: the sampler starts and stops it with itself."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


class Schedule(Enum):
    POLLED = "polled"  # the poller starts collect() on a worker thread every interval, bounded by a timeout
    PER_GPU = "per GPU"  # NVML: every GPU read each cycle, chained on one worker by collect/nvml_session.py
    OWN_THREAD = "own thread"  # keeps its own schedule; reports last_round()
    PUSHED = "pushed"  # readings arrive over HTTP; last_round() is the last report

    @property
    def stale_judged(self) -> bool:
        """Its last success is stamped for the stale-collection alert: only the sources the sampler
        starts on its own cadence (a source with minutes between rounds, or one that waits for a
        client to push, would look stale while healthy)."""
        return self in (Schedule.POLLED, Schedule.PER_GPU)


@dataclass(frozen=True)
class Inputs:
    """What any source may be built from."""

    settings: Settings
    errors: ErrorCounter
    nvml: ModuleType | None = None  # the NVML bindings (real or simulated); None: no NVML source
    host_options: Mapping[str, object] = field(default_factory=dict)  # roots and the simulator's hooks
    clock: Callable[[], float] = time.time
    xids: Callable[[], dict[int, dict[int, int]] | None] | None = None  # XIDs the exporter counted

    def host(self) -> dict[str, object]:
        """The node's roots from Settings, with the simulator's overrides."""
        s = self.settings
        roots = {"proc_root": s.proc_root, "sys_root": s.sys_root, "host_root": s.host_root}
        return roots | {"shm_paths": s.shm_paths} | dict(self.host_options)


def _every_cycle(settings: Settings) -> float:
    return 0.0


def _collect_timeout(settings: Settings) -> float:
    return settings.collect_timeout_s


@dataclass(frozen=True)
class Registration(Generic[ReadingT]):
    name: str
    schedule: Schedule
    reading: object  # the type of what it reads (a class, or an alias such as tuple[Assignment, ...])
    build: Callable[[Inputs], object | None]  # None: off under these settings
    interval: Callable[[Settings], float] = _every_cycle  # POLLED only
    timeout: Callable[[Settings], float] = _collect_timeout  # POLLED and PER_GPU


REGISTRY: dict[str, Registration] = {}


def register(entry: Registration[ReadingT]) -> Registration[ReadingT]:
    """Declare a source; a second source of the same name is a mistake."""
    known = REGISTRY.get(entry.name)
    if known is not None and known is not entry:
        raise ValueError(f"source {entry.name!r} is registered twice")
    REGISTRY[entry.name] = entry
    return entry


def registration(name: str) -> Registration:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no source {name!r} is registered (known: {', '.join(sorted(REGISTRY))})") from None


def build_sources(inputs: Inputs) -> dict[str, object]:
    """Every registered source that is on under ``inputs.settings``, by name."""
    built = {name: entry.build(inputs) for name, entry in REGISTRY.items()}
    return {name: source for name, source in built.items() if source is not None}
