"""The workload class of a job: what its GPUs' idle time means. Pure: no clocks, no I/O.

A training step waits for its input when the GPU has no kernel; an inference server with no kernel has
no request, which is idle capacity, not a pipeline that cannot keep up; a notebook waits for its user;
a stage of a layer-split model waits for its turn. The class comes from what the job says of itself
(``--workload`` in replay; live, the pod's log, processes, image or name: a *hint*), else from the
telemetry's shape:

* ``pipeline``: the GPUs of one job take turns, one busy while the others wait, their utilizations
  summing to about one GPU's, steadily (data-parallel ranks move together instead);
* ``serving``: the framebuffer reserved up front and never moved, and the GPU idle past a step-level
  wait while holding it (no request came);
* ``interactive``: a GPU alone in its job whose work comes in bursts between stretches without work,
  longer than any step-level wait, that hold most of its time and come irregularly (a person's cells
  and thinking; a training loop's saves come every so many steps, alike).

Everything else is judged as training (``""``: not known). A serving GPU whose requests are waiting in
its queue (the server's log says so) while it has no kernel *is* starved: its gaps are input waits.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.policy.thresholds import (
    INTERACTIVE_IDLE_SHARE,
    INTERACTIVE_IRREGULAR,
    INTERACTIVE_STRETCHES,
    INTERACTIVE_WINDOW,
    LIFTED_DRAW,
    LOOP_ALIASED_CYCLES,
    LOOP_MULTIPLE_SHARE,
    LOOP_MULTIPLE_TOLERANCE,
    LOOP_PERIOD_SHARE,
    PIPELINE_HOLD,
    PIPELINE_MIN_STAGES,
    PIPELINE_STAGE_MAX,
    PIPELINE_TOGETHER,
    PIPELINE_TURNS_CV,
    PIPELINE_TURNS_SUM,
    PIPELINE_TURNS_SUM_MAX,
    SERVING_CYCLES,
    SERVING_FLAT,
    SERVING_PENDING,
    SERVING_QUIET,
    SERVING_RESERVED,
    STARVATION_PAUSE,
)

CLASSES: tuple[str, ...] = ("training", "serving", "batch", "evaluation", "interactive", "pipeline")
# what each class means, for the docs, the replay summary and the dashboards
CLASS_MEANING: dict[str, str] = {
    "training": "a step rhythm; with peers, collectives: idle time is waiting for input or for peers",
    "serving": "an inference server: memory reserved up front, request-shaped bursts; idle time is idle "
    "capacity, unless requests wait in its queue",
    "batch": "batch inference: long busy stretches with natural pauses",
    "evaluation": "an evaluation pass: long busy stretches with natural pauses",
    "interactive": "a notebook or shell: long idle stretches holding memory, waiting for its user",
    "pipeline": "a model split layer-wise over the job's GPUs: the stages take turns",
}
# classes whose no-kernel time is idle capacity (the ledger's `idle`), not waiting for input
IDLE_GAPS: frozenset[str] = frozenset({"serving", "interactive", "pipeline"})
SOURCES: tuple[str, ...] = ("flag", "log", "process", "image", "name", "shape")  # strongest first
HOLD_FULL = 0.9  # the hold window counts as full at 90 % (a missed second or two)
HOLD_PENDING = 1 / 6  # ...and as suggestive from a sixth of it
HALF_SPACING = 0.45  # GPUs' samples of one moment lie within half a sample period (less a margin)


@dataclass(frozen=True, slots=True)
class Workload:
    """A job's class and what decided it (``kind`` "" while nothing has: judged as training)."""

    kind: str = ""
    source: str = ""  # one of SOURCES
    evidence: str = ""  # a short text: the flag, the log line's kind, the shape that decided it

    @property
    def idle_gaps(self) -> bool:
        return self.kind in IDLE_GAPS


UNKNOWN = Workload()
# nothing said otherwise, and the trace cannot show a server (a log without memory.total): say so
UNSIZED = Workload(evidence="nothing said otherwise; a server's shape needs memory.total")


def decide(
    hint: Workload | None, pipeline: Workload | None, serving: Workload | None, unknown: Workload = UNKNOWN
) -> Workload:
    """The flag is the user's word; the turns of a pipeline are physics whatever the job says it is;
    then the job's own word (its log, its processes, its image, its name); then a server's shape; else
    ``unknown``."""
    if hint is not None and hint.source == "flag":
        return hint
    return pipeline or hint or serving or unknown


# ---- a server, by its shape ----------------------------------------------------------------------


@dataclass(slots=True)
class ServingShape:
    """One GPU's memory reservation and the quiet stretches while it holds it. Reserved and flat memory
    alone is no evidence of a server (a training job holds its memory as flat): the quiet stretches must
    come like arrivals over several cycles, or right after a reservation made at the GPU's start (a KV
    cache waiting for its first request). A GPU whose job's peers wait in a collective while it stops is
    a rank of their job, whatever its memory."""

    since: float | None = None  # when the reservation began (None: not reserved)
    low: float = 0.0  # the least and most memory used since then
    high: float = 0.0
    quiet_s: float = 0.0  # the current run of seconds without work
    quiet_seen: bool = False  # a run longer than a step-level wait happened while reserved
    total: float = 0.0  # the framebuffer's size
    seen_below: bool = False  # a sample under the reserved line came before: the reservation was seen made
    grown: bool = False  # ...so this reservation began within the record (its start is known)
    stretches: list[tuple[float, float]] = field(default_factory=list)  # (start, seconds), while reserved
    first_quiet: float | None = None  # when its first quiet stretch began, after the reservation
    rank: bool = False  # its job's peers sat in a collective while it stopped: a rank of their job
    decided: Workload | None = None

    def see(
        self,
        t: float,
        used: float | None,
        total: float | None,
        stopped: bool,
        span: float,
        peers_wait: bool = False,
    ) -> None:
        """One second: ``peers_wait`` when another GPU of its job sat in a collective this second."""
        self.total = total or self.total
        if used is None or not total or used < SERVING_RESERVED.value * total:
            self._reset()
            self.seen_below = self.seen_below or used is not None
            return
        if self.since is None or max(self.high, used) - min(self.low, used) > SERVING_FLAT.value * total:
            # a new reservation: made at the GPU's start where its memory rose from under the line to it (a
            # reservation that moved, as a caching allocator's memory creeps, was not made at a start)
            grown = self.since is None and self.seen_below
            self._reset()
            self.since, self.low, self.high, self.grown = t, used, used, grown
        self.low, self.high = min(self.low, used), max(self.high, used)
        if stopped and peers_wait:
            self.rank = True
        if stopped:
            self.quiet_s += span
            if self.quiet_s > SERVING_QUIET.value and not self.quiet_seen:
                self.quiet_seen = True
                self.first_quiet = t - self.quiet_s if self.first_quiet is None else self.first_quiet
            return
        if self.quiet_s > SERVING_QUIET.value:
            self.stretches.append((t - self.quiet_s, self.quiet_s))
            del self.stretches[: -int(SERVING_CYCLES.value)]
        self.quiet_s = 0.0

    def _reset(self) -> None:
        self.since, self.quiet_s, self.quiet_seen, self.first_quiet = None, 0.0, False, None
        self.stretches, self.rank, self.decided, self.grown = [], False, None, False

    def _quiet_at_start(self) -> bool:
        """Reserved within the record and quiet soon after: a KV cache waiting for its first request."""
        return (
            self.grown
            and self.since is not None
            and self.first_quiet is not None
            and self.first_quiet - self.since < SERVING_PENDING.value
        )

    def _arrivals(self) -> bool:
        """Quiet stretches over enough cycles, varying like arrivals, not a loop's period."""
        if len(self.stretches) < SERVING_CYCLES.value:
            return False
        lengths = [s for _, s in self.stretches]
        starts = [a for a, _ in self.stretches]
        cycles = [b - a for a, b in itertools.pairwise(starts)]
        if max(_cv(lengths), _cv(cycles)) < INTERACTIVE_IRREGULAR.value:
            return False
        return not whole_multiples(cycles)

    def pending(self, now: float) -> bool:
        """Reserved like a server, too recently to know: no quiet stretch yet, but not for long."""
        if self.since is None or self.rank or self.decided is not None:
            return False
        if not self.quiet_seen:
            return now - self.since < SERVING_PENDING.value
        # quiet soon after the reservation, too few cycles yet to tell arrivals from a loop
        return self.first_quiet is not None and self.first_quiet - self.since < SERVING_PENDING.value

    def unknown(self) -> Workload:
        """The class when nothing decided it: unknown, and why when the framebuffer's size never came."""
        return UNKNOWN if self.total else UNSIZED

    def workload(self) -> Workload | None:
        if self.since is None or not self.total:
            return None
        if self.rank:
            return RANK
        if self.decided is None and self.quiet_seen:
            share = self.high / self.total
            if self._arrivals():
                self.decided = Workload(
                    "serving",
                    "shape",
                    f"{share:.0%} of memory reserved and flat, quiet {len(self.stretches)} times at "
                    "irregular intervals (arrivals)",
                )
            elif self._quiet_at_start():
                evidence = f"{share:.0%} of memory reserved at its start, quiet at once and since"
                self.decided = Workload("serving", "shape", evidence)
        return self.decided


# a GPU that stopped while its job's peers waited in a collective: positive evidence of a rank
RANK = Workload("training", "shape", "its peers waited in a collective while it stopped: a rank of their job")


# ---- a notebook, by its stretches ----------------------------------------------------------------


@dataclass(slots=True)
class InteractiveShape:
    """One GPU's stretches without work longer than a step-level wait, once it has worked: a person
    between cells, or a loop's saves?"""

    worked: bool = False  # it has worked since it was held alone
    start: float | None = None  # the current stopped run began (None: working)...
    run_s: float = 0.0  # ...and its seconds so far
    after_work: bool = False  # ...and it began after work (start-up is not a stretch)
    stretches: deque[tuple[float, float]] = field(default_factory=deque)  # (start, seconds), ended
    loop: bool = False  # its stretches came alike: a job's loop, until it is no longer held alone
    lifted: bool = False  # its work has drawn a good part of the board's power since it was held alone
    rhythm: bool = False  # its stretches began at whole multiples of one period: a loop, while held alone

    def see(
        self,
        t: float,
        stopped: bool,
        span: float,
        alone: bool,
        drawn: float | None = None,
        at_floor: bool = False,
    ) -> None:
        """One second of the GPU: ``stopped`` held without work; ``alone`` held, the job's only GPU;
        ``drawn`` where its power sat in the envelope, ``at_floor`` under the busy line at idle draw. A
        second at idle draw counts as without work once the job's work has lifted the power: what runs
        at the floor between bursts that draw the board's power is not the job's (a desktop's rendering);
        a job that never lifts it (a loop starved by its host) keeps its low duty as work."""
        if not alone:
            self.worked, self.start, self.run_s, self.loop = False, None, 0.0, False
            self.lifted = self.rhythm = False
            self.stretches.clear()
            return
        if drawn is not None and drawn >= LIFTED_DRAW.value:
            self.lifted = True
        stopped = stopped or (at_floor and self.lifted)
        if stopped:
            if self.start is None:
                self.start, self.run_s, self.after_work = t - span, 0.0, self.worked
            self.run_s += span
            return
        if self.start is not None and self.after_work and self.run_s > STARVATION_PAUSE.value:
            self.stretches.append((self.start, self.run_s))
        self.start, self.run_s, self.worked = None, 0.0, True
        while self.stretches and self.stretches[0][0] < t - INTERACTIVE_WINDOW.value:
            self.stretches.popleft()

    def _share(self, now: float) -> float:
        """The share of the time since the first stretch began spent in stretches (the current one too)."""
        current = self.run_s if self.after_work and self.run_s > STARVATION_PAUSE.value else 0.0
        first = self.stretches[0][0] if self.stretches else self.start if current else None
        if first is None or now <= first:
            return 0.0
        return (sum(s for _, s in self.stretches) + current) / (now - first)

    def _irregular(self) -> bool | None:
        """Do the last stretches, or the cycles between them, vary like a person's (None: too few)?"""
        last = list(self.stretches)[-int(INTERACTIVE_STRETCHES.value) :]
        if len(last) < INTERACTIVE_STRETCHES.value:
            return None
        cycles = [b[0] - a[0] for a, b in itertools.pairwise(last)]
        if max(_cv([s for _, s in last]), _cv(cycles)) < INTERACTIVE_IRREGULAR.value:
            return False
        return not self.periodic()

    def periodic(self) -> bool:
        """Its stretches of the window began at whole multiples of one period, over enough cycles to
        tell (a loop's steps, some of their bursts between the samples): a loop's evidence, unlike three
        alike cycles, which arrivals give by chance. A job does not turn from a loop into a server: once
        seen, it holds while the job holds the GPU alone (a loop's later stretches may vary, a save or an
        evaluation among them)."""
        if not self.rhythm:
            starts = [start for start, _ in self.stretches]
            self.rhythm = whole_multiples([b - a for a, b in itertools.pairwise(starts)])
        return self.rhythm

    def workload(self, now: float) -> Workload | None:
        if self.loop or self._share(now) < INTERACTIVE_IDLE_SHARE.value:
            return None
        irregular = self._irregular()
        if irregular is None:
            return None
        if not irregular:
            self.loop = True  # alike: a training loop's saves, whatever it does later
            return None
        lengths = [s for _, s in self.stretches]
        return Workload(
            "interactive",
            "shape",
            f"alone on its GPU, work in bursts between {len(lengths)} irregular stretches without work "
            f"({min(lengths):.0f}-{max(lengths):.0f} s)",
        )

    def pending(self, now: float) -> bool:
        """Stretches without work hold most of its time, too few yet to tell a person from a loop."""
        if self.loop or self._share(now) < INTERACTIVE_IDLE_SHARE.value:
            return False
        return self._irregular() is None


def whole_multiples(cycles: list[float]) -> bool:
    """Do ``cycles`` come as whole multiples of one period: a loop some of whose steps fell between the
    samples (too few cycles to tell: no)?"""
    n = len(cycles)
    if n < LOOP_ALIASED_CYCLES.value:
        return False
    ordered, width = sorted(cycles), LOOP_MULTIPLE_TOLERANCE.value
    # the period: the cycle of the shorter half that most cycles lie near (the steps a sample caught)
    most, base = 0, 0.0
    for c in ordered[: n // 2 + 1]:
        if c > 0:
            near = bisect.bisect_right(ordered, c * (1 + width)) - bisect.bisect_left(
                ordered, c * (1 - width)
            )
            if near > most:
                most, base = near, c
    if most < LOOP_PERIOD_SHARE.value * n:
        return False
    multiples = sum(abs(c - max(1, round(c / base)) * base) <= width * base for c in cycles)
    return multiples >= LOOP_MULTIPLE_SHARE.value * n


def _cv(values: list[float]) -> float:
    mean = sum(values) / len(values)
    if mean <= 0:
        return 0.0
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) / mean


# ---- a pipeline, by its turns --------------------------------------------------------------------


@dataclass(slots=True)
class Second:
    """One second of a job for the turns: its summed utilization, each GPU's, and how many of its busy
    samples had another GPU busy at the same moment (within half a sample period)."""

    t: float
    total: float
    utils: dict[str, float]
    busy: int
    together: int


def together(busy_at: Mapping[str, tuple[float, ...]], span: float) -> tuple[int, int]:
    """Busy samples, and those with another GPU busy within ``span`` of them: data-parallel ranks
    compute at the same moments, pipeline stages in turn."""
    busy = together_n = 0
    # another GPU busy within the span: more busy samples of every GPU within it than of this one (one
    # sort of them all, not one of the others' for each GPU)
    every = sorted(t for ts in busy_at.values() for t in ts)
    left, right = bisect.bisect_left, bisect.bisect_right
    for times in busy_at.values():
        own = sorted(times)
        for t in times:
            busy += 1
            low, high = t - span, t + span
            together_n += right(every, high) - left(every, low) > right(own, high) - left(own, low)
    return busy, together_n


@dataclass(slots=True)
class Turns:
    """A job's seconds over the hold window: are its GPUs taking turns?"""

    seconds: deque[Second] = field(default_factory=deque)
    decided: Workload | None = None  # turns decided hold while the job keeps its GPUs

    def see(
        self, t: float, utils: Mapping[str, float], busy_at: Mapping[str, tuple[float, ...]], samples: int
    ) -> None:
        """One second of the job: each held GPU's utilization and busy sample times, and the most samples
        any GPU had in it (too few GPUs for turns: reset)."""
        changed = bool(self.seconds) and set(utils) != set(self.seconds[-1].utils)
        if len(utils) < PIPELINE_MIN_STAGES.value or changed:
            self.seconds.clear()  # too few GPUs for turns, or the job's GPUs changed: a new job's shape
            self.decided = None
            if len(utils) < PIPELINE_MIN_STAGES.value:
                return
        # under half the finest sample spacing of the second: samples of one moment, not neighbours
        slack = HALF_SPACING / samples if samples else 0.0
        busy, with_other = together(busy_at, slack) if any(busy_at.values()) else (0, 0)
        self.seconds.append(Second(t, sum(utils.values()), dict(utils), busy, with_other))
        while self.seconds and self.seconds[0].t <= t - PIPELINE_HOLD.value:
            self.seconds.popleft()

    def workload(self) -> Workload | None:
        """Pipeline once the hold window was (nearly) full of steady turns, for as long as the job holds
        the same GPUs: a layer split is how the job was built, its turns only get uneven at its ends."""
        self.decided = self.decided or self._turns(PIPELINE_HOLD.value * HOLD_FULL)
        return self.decided

    def pending(self) -> bool:
        """The turns so far (a sixth of the hold window or more) look like a pipeline's, not yet for
        long enough to decide: what the job loses meanwhile is not called starvation yet."""
        return self._turns(PIPELINE_HOLD.value * HOLD_PENDING) is not None

    def _turns(self, span: float) -> Workload | None:
        """Turns over the last ``span`` seconds (the window must reach that far back: its first second
        stands for the spacing between seconds, a coarse history's step)."""
        if len(self.seconds) < 2:
            return None
        reach = self.seconds[-1].t - self.seconds[0].t
        if reach + reach / (len(self.seconds) - 1) < span:
            return None
        recent = [s for s in self.seconds if s.t >= self.seconds[-1].t - span]
        n = len(recent)
        sums = [s.total for s in recent]
        mean = sum(sums) / n
        if not PIPELINE_TURNS_SUM.value <= mean <= PIPELINE_TURNS_SUM_MAX.value:
            return None
        cv = math.sqrt(sum((s - mean) ** 2 for s in sums) / n) / mean
        if cv > PIPELINE_TURNS_CV.value:
            return None
        members = set(recent[-1].utils)
        per_gpu = {g: sum(s.utils.get(g, 0.0) for s in recent) / n for g in members}
        if max(per_gpu.values()) > PIPELINE_STAGE_MAX.value:
            return None
        busy = sum(s.busy for s in recent)
        if busy >= n and sum(s.together for s in recent) > PIPELINE_TOGETHER.value * busy:
            return None  # fine samples show the GPUs busy at the same moments: ranks, not stages
        return Workload(
            "pipeline", "shape", f"{len(members)} GPUs take turns: utilization sums to {mean:.2f} of one GPU"
        )
