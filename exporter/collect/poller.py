"""One place that runs the polled sources and books every source: deadlines, durations, errors, success.

A polled source (``exporter.sources.registry.Source``: a ``name``, an ``interval_s``, a ``timeout_s`` and a
``collect()`` that returns its reading, node_exporter's collector model) is started by the ``Poller`` on a
worker thread of its own (``Workers``: long-lived, one call at a time), so that a hung call blocks nothing
and is never started twice; the poller takes back what finished, counts an exception as ``InternalError``
and an overdue call (once) as ``CollectTimeout``. The books hold, per source, whether its last attempt
succeeded and how long it took (``gpu_exporter_source_up``, ``gpu_exporter_source_duration_seconds``),
whatever its schedule: NVML's per-GPU calls book through ``observe``, a source with a thread of its own or
a pushed one through ``observe_round``. The sources the sampler starts on its own cadence are also stamped
at their last success, for the stale-collection alert.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic

from exporter.sources.errors import ErrorCounter
from exporter.sources.registry import ReadingT, Round, Source

log = logging.getLogger(__name__)


class Call:
    """A function running on a worker thread of its own, so that a hung driver call blocks nothing."""

    def __init__(
        self,
        fn: Callable[..., object],
        *args: object,
        name: str,
        monotonic: Callable[[], float],
        workers: Workers | None = None,
    ) -> None:
        self._prepare(monotonic, started=monotonic())
        (workers or _WORKERS).run(self, fn, args, name)

    def _prepare(self, monotonic: Callable[[], float], started: float | None) -> None:
        self._mono = monotonic
        self.started = started  # None: not started yet (a turn waiting in its chain)
        self.finished: float | None = None
        self.result: object = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.timed_out = False

    def _run(self, fn: Callable[..., object], args: tuple[object, ...]) -> None:
        try:
            self.result = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the sampler thread
            self.error = exc
        finally:
            self.finished = self._mono()
            self.done.set()

    @property
    def elapsed(self) -> float:
        if self.started is None:  # not running yet
            return 0.0
        return (self.finished if self.finished is not None else self._mono()) - self.started

    def overdue(self, limit_s: float) -> bool:
        """True once, the first time the call has run past its limit (a call not started never has)."""
        if self.started is None or self.timed_out or self.done.is_set() or self.elapsed <= limit_s:
            return False
        self.timed_out = True
        return True


class Turn(Call):
    """A call that waits its turn in a chain (``run_chain``): it runs on the chain's worker thread after
    the turn before it. Until it starts it can be withdrawn, and a turn not started is not running: its
    elapsed time is zero and it is never overdue."""

    def __init__(self, fn: Callable[..., object], *args: object, monotonic: Callable[[], float]) -> None:
        self._prepare(monotonic, started=None)
        self._job: tuple[Callable[..., object], tuple[object, ...]] | None = (fn, args)
        self._lock = threading.Lock()

    def begin(self) -> bool:
        """Start now, on the chain's thread; False if the turn was withdrawn."""
        with self._lock:
            if self._job is None:
                return False
            self.started = self._mono()
        fn, args = self._job
        self._job = None
        self._run(fn, args)
        return True

    def withdraw(self) -> bool:
        """Take the turn back if it has not started (True), so that it can be run elsewhere."""
        with self._lock:
            if self.started is None:
                self._job = None
            return self.started is None


def run_chain(turns: list[Turn]) -> None:
    """Run the turns one after another (those withdrawn are skipped). One thread for calls that would
    otherwise each take a worker: threads that call into a C library at once hand the GIL to one another
    at every call, which cost more CPU than the calls."""
    for turn in turns:
        turn.begin()


_Job = tuple[Call, Callable[..., object], tuple[object, ...], str]


class Workers:
    """Long-lived daemon threads that run calls: a call takes an idle worker, or starts one when none is
    idle (every worker busy, or one stuck in a hung driver call: it is never handed another call until
    it returns). Starting a thread per call cost about 0.07 s of CPU a minute on an 8-GPU node at 1 s
    sampling (about ten calls a second); a handoff to a waiting thread costs a fraction of that."""

    def __init__(self, keep_idle: int = 32) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[_Job]] = []
        self._keep_idle = keep_idle  # more idle workers than this (after a burst of hung calls) exit
        self._count = 0

    def run(self, call: Call, fn: Callable[..., object], args: tuple[object, ...], name: str) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                self._count += 1
                number = self._count
        if inbox is None:
            inbox = queue.SimpleQueue()
            thread = threading.Thread(target=self._serve, args=(inbox,), name=f"call-{number}", daemon=True)
            thread.start()
        inbox.put((call, fn, args, name))

    def _serve(self, inbox: queue.SimpleQueue[_Job]) -> None:
        me = threading.current_thread()
        while True:
            call, fn, args, name = inbox.get()
            me.name = name  # what a thread dump shows: the call it is in
            call._run(fn, args)
            del call, fn, args  # hold no reading while idle
            with self._lock:
                if len(self._idle) >= self._keep_idle:
                    return
                self._idle.append(inbox)


_WORKERS = Workers()


@dataclass(frozen=True)
class Every(Generic[ReadingT]):
    """A plain function as a source: ``collect`` every ``interval_s`` (0: every cycle)."""

    name: str
    interval_s: float
    timeout_s: float
    collect: Callable[[], ReadingT | None]


@dataclass(frozen=True)
class Outcome:
    """A finished call of one source: its reading (None when it failed) and how long it took."""

    source: str
    reading: object
    elapsed: float
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.reading is not None


@dataclass
class _Slot:
    source: Source[object]
    call: Call | None = None
    next_due: float = 0.0


@dataclass
class Books:
    """What the poller knows of every source, by name."""

    up: dict[str, bool] = field(default_factory=dict)  # did the source's last attempt succeed
    durations: dict[str, float] = field(default_factory=dict)  # seconds its last attempt took, failed or not
    # wall time of its last success; only sources on the sampler's cadence (the stale-collection alert)
    last_success: dict[str, float] = field(default_factory=dict)
    # seconds between its attempts, for those same sources: how old a last success may be depends on it
    intervals: dict[str, float] = field(default_factory=dict)

    def copy(self) -> Books:
        return Books(dict(self.up), dict(self.durations), dict(self.last_success), dict(self.intervals))


@dataclass
class Poller:
    errors: ErrorCounter
    clock: Callable[[], float]
    monotonic: Callable[[], float]
    books: Books = field(default_factory=Books)
    _slots: dict[str, _Slot] = field(default_factory=dict)

    def add(self, source: Source[object]) -> None:
        self._slots[source.name] = _Slot(source)

    def remove(self, name: str) -> None:
        self._slots.pop(name, None)

    def call(self, fn: Callable[..., object], *args: object, name: str) -> Call:
        return Call(fn, *args, name=name, monotonic=self.monotonic)

    def start_due(self, mono: float) -> None:
        for name, slot in self._slots.items():
            if slot.call is None and mono >= slot.next_due:
                slot.call = self.call(slot.source.collect, name=f"{name}-collect")
                slot.next_due = mono + slot.source.interval_s

    def delay(self, name: str, until: float) -> None:
        """Do not start ``name`` again before ``until`` (monotonic), or start it at once if earlier."""
        if name in self._slots:
            self._slots[name].next_due = until

    def in_flight(self, name: str) -> bool:
        slot = self._slots.get(name)
        return slot is not None and slot.call is not None

    def pending(self) -> list[Call]:
        return [s.call for s in self._slots.values() if s.call is not None and not s.call.done.is_set()]

    def harvest(self) -> list[Outcome]:
        """The calls that finished since the last harvest; each one's success is booked."""
        out = []
        for name, slot in self._slots.items():
            call = slot.call
            if call is None or not call.done.is_set():
                continue
            slot.call = None
            if call.error is not None:
                self.errors.inc(name, "InternalError", repr(call.error))
                log.error("%s collection failed", name, exc_info=call.error)
            outcome = Outcome(name, call.result if call.error is None else None, call.elapsed, call.error)
            self.observe(name, outcome.ok, call.elapsed)
            out.append(outcome)
        return out

    def overdue(self) -> list[str]:
        """Sources whose call has just run past its timeout: counted once each and reported down."""
        late = []
        for name, slot in self._slots.items():
            if slot.call is not None and slot.call.overdue(slot.source.timeout_s):
                self.timed_out(name, "a call has not returned")
                late.append(name)
        return late

    def timed_out(self, name: str, detail: str) -> None:
        self.errors.inc(name, "CollectTimeout", detail)
        self.books.up[name] = False

    def observe_round(self, name: str, last: Round | None) -> None:
        """Book a source with a schedule of its own (a thread, or pushed): its last round's success and
        length; nothing before its first round."""
        # Not stamped as a success: such a source keeps a schedule of its own (minutes for the node
        # checks, whenever a job pushes for progress), so the stale-collection alert
        # (gpu_exporter_last_collect_timestamp_seconds) must not judge it by the sampler's cadence.
        if last is not None:
            self.books.up[name] = last.ok
            if last.duration_s is not None:
                self.books.durations[name] = last.duration_s

    def observe(self, name: str, ok: bool, elapsed: float | None = None, t: float | None = None) -> None:
        """Book one attempt of a source the sampler starts: its success and duration, and on success
        its time."""
        self.books.up[name] = ok
        if elapsed is not None:
            self.books.durations[name] = elapsed
        if ok:
            self.books.last_success[name] = self.clock() if t is None else t


def run_every(
    interval_s: float,
    step: Callable[[], object],
    stop: threading.Event,
    monotonic: Callable[[], float],
    errors: ErrorCounter,
) -> None:
    """Call ``step`` every ``interval_s`` until ``stop``; a step that overruns skips the missed ones."""
    next_t = monotonic()
    while not stop.is_set():
        try:
            step()
        except Exception:
            log.exception("sampler cycle failed")
            errors.inc("sampler", "InternalError")
        next_t += interval_s
        delay = next_t - monotonic()
        if delay < 0:  # fell behind: skip the missed cycles instead of bursting
            next_t, delay = monotonic(), 0.0
        stop.wait(delay)
