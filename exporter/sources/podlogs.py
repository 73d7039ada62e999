"""The logs of the pods that hold GPUs: the kubelet's CRI files under ``--pod-logs`` (``/var/log/pods``),
``<namespace>_<pod>_<uid>/<container>/<n>.log``, followed on a thread of their own.

Only derived numbers leave this module (the last line's time, the step, seconds per step, NCCL's version,
network and transports, warning and error counts, an inference server's newest load, what the pod runs
with the fixed text of the table entry that said so); log text never does. It follows what the kubelet and
the runtime do to the files: partial records (``P``) are joined; a rotated file (renamed to
``<n>.log.<timestamp>``, later gzipped) is drained through the descriptor still open on it before the new
``<n>.log`` is opened; a restarted container's ``<n+1>.log`` takes over; a truncated file is read again
from its start. A log is first read from its last ``podlogs.tail_bytes`` only, never whole; its lines
older than the source give state (time, step, transports) but are not counted as warnings or errors.
Reads, lines and joined lines are bounded per container (what is skipped is counted), and so is the
number of containers followed.

Nothing is read outside ``--pod-logs``: below it no symbolic link is followed (every directory and file is
opened from the one above it with ``O_NOFOLLOW``, so a directory swapped for a link between a listing and
an open leads nowhere either), and a log must be a regular file (a FIFO or a device named ``0.log`` is not
opened for reading). CRI runtimes (containerd, CRI-O) write the logs there as plain files; what is skipped,
a link (cri-dockerd's links into Docker's own JSON logs, which are not CRI records) or a name that is not
UTF-8 (it would become a label value), is counted once per path in
``gpu_exporter_collect_errors_total{source="podlogs"}`` and named in the log.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import BinaryIO

from exporter.podlogs.logparse import (
    PATTERNS,
    WORKLOAD_RANK,
    LogState,
    Pattern,
    Progress,
    ServerLoad,
    WorkloadHint,
    match_one,
    parse_timestamp,
    window,
)
from exporter.policy.thresholds import (
    PODLOG_LINE_BYTES,
    PODLOG_LINES_PER_SECOND,
    PODLOG_MAX_CONTAINERS,
    PODLOG_POLL,
    PODLOG_PROGRESS_CPU,
    PODLOG_READ_BYTES,
    PODLOG_TAIL_BYTES,
)
from exporter.sources.errors import ErrorCounter
from exporter.sources.registry import Inputs, Registration, Round, Schedule, register

log = logging.getLogger(__name__)
SOURCE = "podlogs"
_LOG = re.compile(r"^(\d+)\.log$")
PROGRESS_LOOKBACK = 64  # the newest lines of a read tried against the progress table, newest first
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO never blocks the open
# what a skipped entry is counted as (the ``error`` label of gpu_exporter_collect_errors_total)
LINK = "SymlinkSkipped"  # a symbolic link below the root: it could lead anywhere
NOT_FILE = "NotRegularFile"  # a log that is a FIFO, a device or a socket (a directory: IsADirectoryError)
BAD_NAME = "UndecodableName"  # a name that is not UTF-8: it cannot be a label value


def utf8_name(name: str) -> bool:
    """Whether a name from the file system is UTF-8 (os.listdir gives other bytes as lone surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(path: str) -> str:
    """A path for a log line: bytes that are not UTF-8 as escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def open_below(root: str, names: Sequence[str], flags: int) -> int:
    """A descriptor for ``root/names[0]/.../names[-1]`` that follows no symbolic link below ``root``: each
    step is opened from the descriptor of the one above with ``O_NOFOLLOW`` (``root`` itself is the
    operator's choice and may be a link). Raises OSError: ELOOP or ENOTDIR where a step is a link."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in names[:-1]:
            step = os.open(_one(name), _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = step
        return os.open(_one(names[-1]), flags, dir_fd=fd)
    finally:
        os.close(fd)


def _one(name: str) -> str:
    """A single entry of a directory: never a path, never '.' or '..'."""
    if not name or "/" in name or name in (".", ".."):
        raise OSError(errno.EINVAL, "not a directory entry", name)
    return name


def _why(exc: OSError, dir_fd: int | None, name: str) -> str:
    """The error a failed open is counted as: a link, or the OS error's name."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        try:
            if dir_fd is None or stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                return LINK
        except OSError:
            pass
    return type(exc).__name__


@dataclass(frozen=True)
class ContainerLog:
    namespace: str
    pod: str
    container: str
    last_line_t: float | None
    step: int | None
    step_seconds: float | None
    load: ServerLoad | None = None  # the newest load line of an inference server
    load_t: float | None = None  # that line's time
    workload: WorkloadHint | None = None  # what the container's log says it runs


@dataclass(frozen=True)
class PodLog:
    """What the containers of one pod say together (NCCL runs in each rank's container)."""

    namespace: str
    pod: str
    version: str
    network: str
    transports: tuple[tuple[str, str], ...]  # (scope, transport)
    warnings: int
    errors: tuple[tuple[str, int], ...]  # (kind, count)


@dataclass(frozen=True)
class PodLogsView:
    containers: tuple[ContainerLog, ...] = ()
    pods: tuple[PodLog, ...] = ()
    lines: int = 0  # records read
    skipped_lines: int = 0  # records over the per-second budget, not parsed
    skipped_bytes: int = 0  # backlog beyond a read's bound, and over-long lines
    junk: int = 0  # records that are not CRI
    rdma_devices: int | None = None  # /sys/class/infiniband entries (IB HCAs, EFA devices)
    duration_s: float | None = None  # how long the last pass took
    collected_t: float | None = None  # when it ended (wall clock)
    # container-passes whose newest lines waited for a later pass: the pass's pattern CPU was spent
    progress_deferred: int = 0
    progress_wait_s: float = 0.0  # how long the longest-waiting container's lines have waited (0: none)

    def last_line(self, namespace: str, pod: str) -> float | None:
        """The newest line of any container of the pod."""
        times = [c.last_line_t for c in self.containers if c.namespace == namespace and c.pod == pod]
        known = [t for t in times if t is not None]
        return max(known) if known else None

    def server_load(self, namespace: str, pod: str) -> tuple[float, ServerLoad] | None:
        """The newest load line of an inference server in any container of the pod, with its time."""
        best: tuple[float, ServerLoad] | None = None
        for c in self.containers:
            if c.namespace != namespace or c.pod != pod or c.load is None or c.load_t is None:
                continue
            if best is None or c.load_t > best[0]:
                best = (c.load_t, c.load)
        return best

    def workload(self, namespace: str, pod: str) -> WorkloadHint | None:
        """What the pod's logs say it runs: the strongest hint of its containers (of equals, the first)."""
        hints = [
            c.workload
            for c in self.containers
            if c.namespace == namespace and c.pod == pod and c.workload is not None
        ]
        return max(hints, key=lambda hint: WORKLOAD_RANK[hint.kind]) if hints else None


@dataclass
class Counts:
    lines: int = 0
    skipped_lines: int = 0
    skipped_bytes: int = 0
    junk: int = 0
    progress_deferred: int = 0


class CpuBudget:
    """The CPU a pass may spend on progress patterns (``podlogs.progress_cpu_seconds``), on the thread's
    own CPU clock (injected in tests): a regex search is the one costly step, so it is checked before
    each, and a pass overruns by at most one search."""

    def __init__(self, seconds: float, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.end = clock() + seconds

    def spent(self) -> bool:
        return self.clock() >= self.end


SPENT = object()  # the budget ran out before a line was tried whole


@dataclass(eq=False)
class Follower:
    """One container's log directory: ``root/names[0]/names[1]``, opened without following links."""

    root: str
    names: tuple[str, str]  # (the pod's directory, the container's)
    since: float  # when the source started (wall clock): older lines are the past, state only
    counting: bool = False  # True once the first read is done: from then on every line is new
    state: LogState = field(default_factory=LogState)
    number: int = -1
    fh: BinaryIO | None = None
    inode: int = 0
    pos: int = 0
    partial: bytes = b""
    pending: list[str] = field(default_factory=list)  # text of P records waiting for their F
    pending_len: int = 0
    last_poll: float | None = None
    drop_first: bool = False  # after a jump into the middle of a file: its first record is a fragment
    error: str = ""  # why the newest file could not be opened (counted once by the source)
    counted_error: bool = False
    # the newest lines (text, timestamp) not yet tried against the progress table, at most
    # PROGRESS_LOOKBACK; they wait here when a pass's budget ran out before their turn
    untried: list[tuple[str, bytes]] = field(default_factory=list)
    waiting_since: float | None = None  # when (monotonic) the oldest of them arrived
    tried: int = -1  # the pass that last tried them: the least recent goes first

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    # ---- files -------------------------------------------------------------------------------------

    @property
    def directory(self) -> str:
        return os.path.join(self.root, *self.names)

    @staticmethod
    def newest(dir_fd: int) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        try:
            names = os.listdir(dir_fd)
        except OSError:
            return None
        for name in names:
            m = _LOG.match(name)
            if m and (best is None or int(m.group(1)) > best[0]):
                best = (int(m.group(1)), name)
        return best

    def _open(self, number: int, name: str, dir_fd: int, tail: bool, counts: Counts) -> None:
        self.close()
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            self.error = _why(exc, dir_fd, name)
            return
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            self.error = "IsADirectoryError" if stat.S_ISDIR(st.st_mode) else NOT_FILE
            return
        self.error = ""
        fh = os.fdopen(fd, "rb")  # kept open across polls to drain a rotated file
        self.fh, self.number, self.inode = fh, number, st.st_ino
        self.partial, self.pending, self.pending_len = b"", [], 0
        self.pos = 0
        if tail and st.st_size > PODLOG_TAIL_BYTES.value:
            self._skip_to(st.st_size - int(PODLOG_TAIL_BYTES.value), counts, count_skip=False)

    def _skip_to(self, pos: int, counts: Counts, count_skip: bool = True) -> None:
        """Jump ahead; the line the jump lands in is incomplete and dropped."""
        assert self.fh is not None
        if count_skip:
            counts.skipped_bytes += pos - self.pos
        self.fh.seek(pos)
        self.pos = pos
        self.partial, self.pending, self.pending_len = b"", [], 0
        self.drop_first = True

    def poll(self, now: float, patterns: tuple[Pattern, ...], counts: Counts) -> None:
        try:
            dir_fd: int | None = open_below(self.root, self.names, _DIR_FLAGS)
        except OSError:
            dir_fd = None  # gone (the pod was deleted) or no longer a directory: drain what is open
        try:
            self._poll(dir_fd, now, patterns, counts)
        finally:
            if dir_fd is not None:
                os.close(dir_fd)

    def _poll(self, dir_fd: int | None, now: float, patterns: tuple[Pattern, ...], counts: Counts) -> None:
        newest = self.newest(dir_fd) if dir_fd is not None else None
        if self.fh is None:
            if newest is None or dir_fd is None:
                return
            # a log present when the exporter starts is the past: its tail gives state, not counts; a log
            # that appears later is read from its start (up to the tail bound)
            self._open(*newest, dir_fd=dir_fd, tail=True, counts=counts)
            if self.fh is None:
                return
        budget = PODLOG_LINES_PER_SECOND.value * min(
            max(now - self.last_poll, PODLOG_POLL.value) if self.last_poll is not None else PODLOG_POLL.value,
            2 * PODLOG_POLL.value,
        )
        self.last_poll = now
        records = self._read(counts)
        switched = self._follow(newest, dir_fd, counts)
        if switched:
            records += self._read(counts)
        self._parse(records, int(budget), patterns, counts)

    def _read(self, counts: Counts) -> list[bytes]:
        """Complete records appended since the last read, at most the read bound."""
        fh = self.fh
        if fh is None:
            return []
        size = os.fstat(fh.fileno()).st_size
        if size < self.pos:  # truncated (copytruncate): read it again from its start
            self._skip_to(0, counts, count_skip=False)
            self.drop_first = False
        limit = int(PODLOG_READ_BYTES.value)
        if size - self.pos > limit:
            self._skip_to(size - limit, counts)
        data = fh.read(limit)
        self.pos += len(data)
        if not data:
            return []
        chunk = self.partial + data
        records = chunk.split(b"\n")
        self.partial = records.pop()
        if len(self.partial) > PODLOG_LINE_BYTES.value:  # a record without end: drop it, count it
            counts.skipped_bytes += len(self.partial)
            self.partial = b""
        if self.drop_first and records:
            records.pop(0)
            self.drop_first = False
        return records

    def _follow(self, newest: tuple[int, str] | None, dir_fd: int | None, counts: Counts) -> bool:
        """After draining the open file: a rotation or a restart opens the new file from its start."""
        if newest is None or dir_fd is None:
            return False
        number, name = newest
        if number > self.number:  # the container restarted: <n+1>.log
            self._open(number, name, dir_fd, tail=False, counts=counts)
            return True
        try:
            inode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino
        except OSError:
            return False  # rotated, the new file not created yet: keep draining the old one
        if inode != self.inode:
            self._open(number, name, dir_fd, tail=False, counts=counts)
            return True
        return False

    # ---- records -----------------------------------------------------------------------------------

    def _parse(
        self, records: list[bytes], budget: int, patterns: tuple[Pattern, ...], counts: Counts
    ) -> None:
        counts.lines += len(records)
        if not records:
            return
        if len(records) > budget:  # the oldest are skipped; the newest still carry time and progress
            counts.skipped_lines += len(records) - budget
            records = records[-budget:]
            self.pending, self.pending_len = [], 0
        state = self.state
        first = state.lines  # the number of the line before this read's first
        lines: list[tuple[str, bytes]] = []  # (text, timestamp bytes) of whole lines
        for record in records:
            parts = record.split(b" ", 3)
            if len(parts) < 3 or parts[2] not in (b"F", b"P") or parts[1] not in (b"stdout", b"stderr"):
                counts.junk += 1
                continue
            text = parts[3].decode("utf-8", "replace") if len(parts) == 4 else ""
            if parts[2] == b"P":
                if self.pending_len + len(text) <= PODLOG_LINE_BYTES.value:
                    self.pending.append(text)
                    self.pending_len += len(text)
                else:
                    counts.skipped_bytes += len(text)
                continue
            if self.pending:
                text = "".join(self.pending) + text
                self.pending, self.pending_len = [], 0
            lines.append((text, parts[0]))
        if self.counting:
            for text, _ in lines:
                state.feed(text, None, count=True, progress=False)
        else:  # the first read of a file: what was written before the exporter started is not counted
            for text, stamp in lines:
                t = parse_timestamp(stamp.decode("ascii", "replace"))
                state.feed(text, None, count=t is not None and t >= self.since, progress=False)
            self.counting = True
        if state.load_line > first:  # a load line in this read: the newest one's own time, parsed once
            stamp = lines[state.load_line - first - 1][1]
            state.load_t = parse_timestamp(stamp.decode("ascii", "replace"))
        # time of the last line, and the newest line that shows progress
        for _, stamp in reversed(lines):
            t = parse_timestamp(stamp.decode("ascii", "replace"))
            if t is not None:
                state.last_t = t if state.last_t is None else max(state.last_t, t)
                break
        if lines:  # tried after every container is read, within the pass's CPU budget
            self.untried = (self.untried + lines)[-PROGRESS_LOOKBACK:]

    def try_progress(self, patterns: tuple[Pattern, ...], budget: CpuBudget) -> bool:
        """The waiting lines, newest first, until one shows progress; False when the budget ran out
        first (the lines not tried whole wait for the next pass)."""
        lines = self.untried
        for i in range(len(lines) - 1, -1, -1):
            found = _progress(lines[i][0], patterns, budget)
            if found is SPENT:
                self.untried = lines[: i + 1]
                return False
            if isinstance(found, Progress):
                self.state.see_progress(found, parse_timestamp(lines[i][1].decode("ascii", "replace")))
                break
        self.untried, self.waiting_since = [], None
        return True


def _progress(text: str, patterns: tuple[Pattern, ...], budget: CpuBudget) -> Progress | object | None:
    """The first pattern the line matches, or SPENT when the budget ran out before a search."""
    text = window(text)
    for p in patterns:
        if p.key not in text:
            continue
        if budget.spent():
            return SPENT
        found = match_one(p, text)
        if found is not None:
            return found
    return None


class PodLogSource:
    """Follows the logs of the GPU pods the sampler names (``set_pods``) on its own thread; ``view`` is the
    latest immutable result. ``poll`` is one pass (the thread's, or a test's)."""

    def __init__(
        self,
        root: str,
        errors: ErrorCounter,
        patterns: tuple[Pattern, ...] = PATTERNS,
        sys_root: str = "/sys",
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], float] = time.time,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.clock = clock
        self.cpu_clock = cpu_clock  # the pod-log thread's own CPU: what the pattern budget counts
        self.root = root
        self.errors = errors
        self.patterns = patterns
        self.sys_root = sys_root
        self.monotonic = monotonic
        self._pods: frozenset[tuple[str, str]] = frozenset()
        self._followers: dict[tuple[str, str, str], Follower] = {}
        self._counts = Counts()
        self._view = PodLogsView()
        self._round: Round | None = None  # how the thread's last pass went
        self._since = clock()  # lines older than this are the past: read for state, never counted
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False
        self._passes = 0
        self._wait_s = 0.0  # the longest wait of a container's lines for the progress table, last pass
        self._skipped: set[str] = set()  # paths skipped and counted (links, names that are not UTF-8)

    @property
    def view(self) -> PodLogsView:
        return self._view

    def last_round(self) -> Round | None:
        return self._round

    def set_pods(self, pods: frozenset[tuple[str, str]]) -> None:
        """The (namespace, pod) pairs that hold GPUs on this node; only their logs are read."""
        self._pods = pods

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="podlogs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=PODLOG_POLL.value * 2 + 1)
        for follower in self._followers.values():
            follower.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = self.monotonic()
            try:
                self.poll()
            except Exception:
                log.exception("reading pod logs failed")
                self.errors.inc(SOURCE, "InternalError")
                self._round = Round(False, self.clock(), self.monotonic() - started)
            self._stop.wait(max(0.0, PODLOG_POLL.value - (self.monotonic() - started)))

    def _skip(self, why: str, path: str) -> None:
        """Count a skipped entry once (at most PODLOG_MAX_CONTAINERS remembered; past that, again)."""
        if path in self._skipped:
            return
        if len(self._skipped) >= PODLOG_MAX_CONTAINERS.value:
            self._skipped.clear()
        self._skipped.add(path)
        self.errors.inc(SOURCE, why, f"{shown(path)} skipped: nothing outside {shown(self.root)} is read")

    def _usable(self, entry: os.DirEntry[str], path: str) -> bool:
        """A directory entry to descend into: a directory itself (not a link to one) with a UTF-8 name."""
        try:
            if entry.is_symlink():
                self._skip(LINK, path)
                return False
            if not entry.is_dir(follow_symlinks=False):
                return False
        except OSError:
            return False
        if not utf8_name(entry.name):
            self._skip(BAD_NAME, path)
            return False
        return True

    def _directories(self) -> dict[tuple[str, str, str], tuple[str, str]]:
        """(namespace, pod, container) -> the names of its log directory below the root (the pod's, the
        container's), for the GPU pods; the newest pod UID wins. Links and names that are not UTF-8 are
        skipped (counted once each)."""
        found: dict[tuple[str, str], tuple[float, str]] = {}
        try:
            entries = list(os.scandir(self.root))
        except OSError as exc:
            if not self._warned:
                self._warned = True
                self.errors.inc(SOURCE, type(exc).__name__, f"{shown(self.root)}: {exc.strerror}")
            return {}
        for entry in entries:
            parts = entry.name.split("_")
            if len(parts) != 3 or (parts[0], parts[1]) not in self._pods:
                continue
            if not self._usable(entry, entry.path):
                continue
            try:
                mtime = entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            key = (parts[0], parts[1])
            if key not in found or mtime > found[key][0]:
                found[key] = (mtime, entry.name)
        out: dict[tuple[str, str, str], tuple[str, str]] = {}
        for (namespace, pod), (_, name) in sorted(found.items()):
            try:
                fd = open_below(self.root, (name,), _DIR_FLAGS)
            except OSError as exc:
                if _why(exc, None, name) == LINK:  # swapped for a link since the listing
                    self._skip(LINK, os.path.join(self.root, name))
                continue
            try:
                with os.scandir(fd) as listing:
                    containers = sorted(
                        e.name for e in listing if self._usable(e, os.path.join(self.root, name, e.name))
                    )
            except OSError:
                continue
            finally:
                os.close(fd)
            for container in containers:
                if len(out) >= PODLOG_MAX_CONTAINERS.value:
                    return out
                out[(namespace, pod, container)] = (name, container)
        return out

    def poll(self) -> PodLogsView:
        now = self.monotonic()
        wanted = self._directories()
        for key in [k for k, f in self._followers.items() if wanted.get(k) != f.names]:
            self._followers.pop(key).close()  # the pod is gone (or replaced by a new UID)
        for key, names in wanted.items():
            follower = self._followers.get(key)
            if follower is None:
                follower = self._followers[key] = Follower(self.root, names, since=self._since)
            follower.poll(now, self.patterns, self._counts)
            if follower.untried and follower.waiting_since is None:
                follower.waiting_since = now
            if follower.error and not follower.counted_error:
                follower.counted_error = True
                self.errors.inc(SOURCE, follower.error, shown(follower.directory))
        self._progress(now)
        view = replace(self._publish(), duration_s=self.monotonic() - now, collected_t=self.clock())
        self._view, self._round = view, Round(True, view.collected_t or 0.0, view.duration_s)
        return view

    def _progress(self, now: float) -> None:
        """Try the containers' newest lines against the progress table within the pass's CPU budget,
        the container tried longest ago first; those not reached wait for the next pass (counted)."""
        self._passes += 1
        budget = CpuBudget(PODLOG_PROGRESS_CPU.value, self.cpu_clock)
        waiting = sorted((f for f in self._followers.values() if f.untried), key=lambda f: f.tried)
        for follower in waiting:
            if not budget.spent():
                follower.tried = self._passes
                if follower.try_progress(self.patterns, budget):
                    continue
            self._counts.progress_deferred += 1
        since = [f.waiting_since for f in waiting if f.untried and f.waiting_since is not None]
        self._wait_s = max(0.0, now - min(since)) if since else 0.0

    def _rdma_devices(self) -> int | None:
        try:
            return len(os.listdir(os.path.join(self.sys_root, "class", "infiniband")))
        except FileNotFoundError:
            return 0
        except OSError:
            return None

    def _publish(self) -> PodLogsView:
        containers = []
        pods: dict[tuple[str, str], list[LogState]] = {}
        for (namespace, pod, container), f in sorted(self._followers.items()):
            s = f.state
            containers.append(
                ContainerLog(
                    namespace, pod, container, s.last_t, s.step, s.step_seconds, s.load, s.load_t, s.workload
                )
            )
            pods.setdefault((namespace, pod), []).append(s)
        pod_views = []
        for (namespace, pod), states in pods.items():
            errors: dict[str, int] = {}
            for s in states:
                for kind, n in s.errors.items():
                    errors[kind] = errors.get(kind, 0) + n
            pod_views.append(
                PodLog(
                    namespace,
                    pod,
                    version=next((s.version for s in states if s.version), ""),
                    network=next((s.network for s in states if s.network), ""),
                    transports=tuple(
                        sorted(
                            {
                                (scope, name)
                                for s in states
                                for scope, names in s.transports.items()
                                for name in names
                            }
                        )
                    ),
                    warnings=sum(s.warnings for s in states),
                    errors=tuple(sorted(errors.items())),
                )
            )
        c = self._counts
        return PodLogsView(
            tuple(containers),
            tuple(pod_views),
            c.lines,
            c.skipped_lines,
            c.skipped_bytes,
            c.junk,
            self._rdma_devices(),
            progress_deferred=c.progress_deferred,
            progress_wait_s=self._wait_s,
        )


def _build(inputs: Inputs) -> PodLogSource | None:
    """Follows the pod logs when --pod-logs names a directory, with the user's patterns first."""
    settings = inputs.settings
    if not settings.pod_logs:
        return None
    extra: tuple[Pattern, ...] = ()
    if settings.log_patterns:  # the command line checked it; read within the same bounds
        from exporter.podlogs.logparse import read_patterns

        extra = read_patterns(settings.log_patterns)
    sys_root = str(inputs.host()["sys_root"])
    return PodLogSource(settings.pod_logs, inputs.errors, extra + PATTERNS, sys_root=sys_root)


# its own thread, every podlogs.poll_seconds
REGISTRATION = register(Registration[PodLogsView](SOURCE, Schedule.OWN_THREAD, PodLogsView, _build))
