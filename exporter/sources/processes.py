"""Who runs the GPU processes: each PID the driver lists, mapped to its container and pod through the
host's ``/proc/PID/cgroup`` and ``/proc/PID/cmdline``, and the container runtime's bundle files.

The cgroup path names the container (containerd ``cri-containerd-<id>.scope`` or ``.../<id>``, CRI-O
``crio-<id>.scope``, docker ``docker-<id>.scope`` or ``/docker/<id>``) and the pod's UID (the kubepods
``pod<uid>`` component, Guaranteed, Burstable or BestEffort, systemd or cgroupfs driver, cgroup v1 or
v2); the runtime's bundle of that container (``runtime.py``'s files) names the pod and the container. A
bundle outlives its pod while a process of it still runs, and a container seen once is remembered, so a
process left behind by a deleted pod still names its last pod.

NVML names only the processes of the caller's PID namespace: the PIDs mean something only when the
exporter shares the host's (``hostPID``): the /proc it reads must show this process as itself, and the
kernel's threads (``kthreadd``, PID 2), which a container's PID namespace does not show. When it does
not, or the host's /proc cannot be read, the source says so once (a log line, one counted error) and
reports nothing: the GPUs keep today's attribution by the kubelet alone, and
``gpu_exporter_source_up{source="processes"}`` is 0.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from exporter.config.settings import Settings
from exporter.policy.thresholds import PROCESS_COMMAND_CHARS, PROCESS_OWNERS_REMEMBERED
from exporter.sources.errors import ErrorCounter
from exporter.sources.registry import Inputs, Registration, Schedule, register
from exporter.sources.runtime import BUNDLE_DIRS, CONTAINERD, CRIO, read_annotations

SOURCE = "processes"
KTHREADD = "(kthreadd)"  # PID 2 of the node's own PID namespace, parent of the kernel's threads
log = logging.getLogger(__name__)

# the last component of a container's cgroup: a runtime's scope unit, or the bare id (cgroupfs driver)
_CONTAINER = re.compile(r"^(?:(cri-containerd|crio|docker|containerd)-)?([0-9a-f]{64})(?:\.scope)?$")
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_RUNTIMES = {"cri-containerd": "containerd", "containerd": "containerd", "crio": "cri-o", "docker": "docker"}


@dataclass(frozen=True)
class CgroupOwner:
    """What a process's cgroup says: its container (id and runtime) and its pod's UID, where it has one."""

    container_id: str = ""
    runtime: str = ""
    pod_uid: str = ""


def parse_cgroup(text: str) -> CgroupOwner:
    """The container and pod of a ``/proc/PID/cgroup`` (v1: one line per hierarchy; v2: ``0::path``).
    A host process (no container in any line) gives an empty owner."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        parts = [p for p in path.split("/") if p]
        if not parts or parts[-1].startswith("crio-conmon-"):  # CRI-O's monitor, not the container
            continue
        match = _CONTAINER.match(parts[-1])
        if match is None:
            continue
        prefix, container_id = match.groups()
        uid = _POD_UID.search(path)
        runtime = _RUNTIMES.get(prefix or "", "docker" if "docker" in parts[:-1] else "")
        return CgroupOwner(container_id, runtime, uid.group(1).replace("_", "-") if uid else "")
    return CgroupOwner()


@dataclass(frozen=True)
class PodName:
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True)
class ProcessOwner:
    """One GPU process as the host knows it."""

    pid: int
    command: str
    container_id: str = ""
    runtime: str = ""
    pod_uid: str = ""
    namespace: str = ""  # of the container's pod (its last pod, when the pod is gone); "" when unknown
    pod: str = ""
    container: str = ""
    start_t: float | None = None  # when the process started (seconds since the epoch)


@dataclass(frozen=True)
class ProcessOwners:
    """The reading: the owners of the PIDs asked for (a PID gone from /proc is left out)."""

    owners: Mapping[int, ProcessOwner]


def _start_time(stat: str, boot_t: float, ticks_per_s: float) -> float | None:
    """Field 22 of /proc/PID/stat (clock ticks after boot), read after the command's closing paren."""
    fields = stat.rpartition(")")[2].split()
    try:
        return boot_t + int(fields[19]) / ticks_per_s
    except (IndexError, ValueError):
        return None


class ProcessSource:
    """Polled at the driver's lists' cadence, and at once when the driver lists a PID it was not handed
    (the sampler starts it); it reads only the PIDs it has not seen (a new process is attributed at
    once), and everything afresh every ``refresh_s`` (a PID reused, the PID namespace check)."""

    def __init__(
        self,
        errors: ErrorCounter,
        proc_root: str = "/proc",
        host_root: str = "/",
        own_proc: str = "/proc",
        bundle_dirs: tuple[str, ...] = BUNDLE_DIRS,
        refresh_s: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.errors = errors
        self.proc = Path(proc_root)
        self.host_root = host_root
        self.own_proc = Path(own_proc)
        self.bundle_dirs = bundle_dirs
        self.refresh_s = refresh_s
        self.monotonic = monotonic
        self._wanted: frozenset[int] = frozenset()
        self._lock = threading.Lock()
        self._pods: OrderedDict[str, PodName] = OrderedDict()  # container id -> its pod, as last seen
        self._down_reason = ""  # why it reports nothing; said once
        self._next_full = float("-inf")
        self._boot_t, self._ticks = 0.0, 100.0
        self._reading = ProcessOwners({})
        self._pid_dirs: dict[int, str] = {}  # each owned PID's /proc directory, made once

    def want(self, pids: Iterable[int]) -> None:
        """The PIDs the driver listed lately (the sampler hands them over from the GPU readings)."""
        with self._lock:
            self._wanted = frozenset(pids)

    def collect(self) -> ProcessOwners | None:
        now = self.monotonic()
        with self._lock:
            wanted = self._wanted
        known = self._reading.owners
        if now >= self._next_full:
            self._next_full = now + self.refresh_s
            if not self._usable():
                self._reading = ProcessOwners({})
                return None
            self._boot_t = self._boot_time()
            self._ticks = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else self._ticks
            known = {}
        elif self._down_reason:
            return None
        else:  # a process that has exited is no one's, though the driver's list (a slow read) still names it
            known = {pid: o for pid, o in known.items() if os.path.exists(self._pid_dirs.get(pid, ""))}
            if wanted == known.keys() and len(known) == len(self._reading.owners):
                return self._reading  # nothing new, nothing ended: one stat a process
        owners = {pid: known[pid] for pid in wanted if pid in known}
        for pid in sorted(wanted - owners.keys()):
            owner = self._owner(pid, self._boot_t, self._ticks)
            if owner is not None:
                owners[pid] = owner
        self._reading = ProcessOwners(owners)
        self._pid_dirs = {pid: str(self.proc / str(pid)) for pid in owners}
        return self._reading

    def _usable(self) -> bool:
        reason = self._unusable()
        if reason:
            if reason != self._down_reason:  # once per cause, not once per round
                log.warning("process owners are off: %s; GPUs are attributed by the kubelet alone", reason)
                self.errors.inc(SOURCE, "Unavailable", reason, level=logging.DEBUG)
            self._down_reason = reason
            return False
        if self._down_reason:
            log.info("process owners are back: the host's /proc is readable in its PID namespace")
            self._down_reason = ""
        return True

    def _unusable(self) -> str:
        """Why the PIDs cannot be read here ("" when they can)."""
        if not os.access(self.proc / "stat", os.R_OK):
            return f"{self.proc} is not the host's readable /proc"
        mine = os.getpid()
        try:
            own = (self.own_proc / "self" / "stat").read_text()
            seen = (self.proc / str(mine) / "stat").read_text()
        except OSError:
            return f"this process ({mine}) is not in {self.proc}: not the host's PID namespace (hostPID)"
        if _start_time(own, 0.0, 1.0) != _start_time(seen, 0.0, 1.0):
            return f"PID {mine} in {self.proc} is another process: not the host's PID namespace (hostPID)"
        try:  # the kernel's threads are seen only from the node's own PID namespace, not a container's
            kernel = KTHREADD in (self.proc / "2" / "stat").read_text()
        except OSError:
            kernel = False
        if not kernel:
            return (
                f"{self.proc} shows no kernel threads: a container's PID namespace, not the host's (hostPID)"
            )
        return ""

    def _boot_time(self) -> float:
        try:
            for line in (self.proc / "stat").read_text().splitlines():
                if line.startswith("btime "):
                    return float(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0.0

    def _owner(self, pid: int, boot_t: float, ticks: float) -> ProcessOwner | None:
        base = self.proc / str(pid)
        try:
            cgroup = parse_cgroup((base / "cgroup").read_text(errors="replace"))
            stat = (base / "stat").read_text(errors="replace")
        except OSError:
            return None  # ended since the driver listed it (or not ours to read)
        pod = self._pod(cgroup.container_id) if cgroup.container_id else None
        return ProcessOwner(
            pid,
            self._command(base),
            cgroup.container_id,
            cgroup.runtime,
            cgroup.pod_uid,
            pod.namespace if pod else "",
            pod.pod if pod else "",
            pod.container if pod else "",
            _start_time(stat, boot_t, ticks),
        )

    @staticmethod
    def _command(base: Path) -> str:
        """The command line, NULs as spaces, cut to a bounded label; the kernel's name where it is empty."""
        try:
            raw = (base / "cmdline").read_bytes()
            text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
            if not text:
                text = (base / "comm").read_text(errors="replace").strip()
        except OSError:
            return ""
        return text[: int(PROCESS_COMMAND_CHARS.value)]

    def _pod(self, container_id: str) -> PodName | None:
        """The container's pod from its runtime bundle; the one remembered when the bundle is gone."""
        found = self._bundle(container_id)
        if found is not None:
            self._pods[container_id] = found
            self._pods.move_to_end(container_id)
            while len(self._pods) > PROCESS_OWNERS_REMEMBERED.value:
                self._pods.popitem(last=False)
            return found
        return self._pods.get(container_id)

    def _bundle(self, container_id: str) -> PodName | None:
        for bundle_dir in self.bundle_dirs:
            root = Path(self.host_root, bundle_dir.lstrip("/"), container_id)
            for spec_path in (root / "config.json", root / "userdata" / "config.json"):
                notes = read_annotations(spec_path)
                if notes is None:
                    continue
                keys = CONTAINERD if CONTAINERD["type"] in notes else CRIO
                name_key = (
                    "io.kubernetes.cri.container-name"
                    if keys is CONTAINERD
                    else "io.kubernetes.container.name"
                )
                if notes.get(keys["pod"]):
                    return PodName(
                        notes.get(keys["namespace"], ""), notes[keys["pod"]], notes.get(name_key, "")
                    )
        return None


def _build(inputs: Inputs) -> ProcessSource | None:
    if inputs.nvml is None or not inputs.settings.process_owners:  # no GPU processes to own, or off
        return None
    roots = inputs.host()
    refresh = inputs.settings.slow_interval_s  # the driver's lists' cadence
    return ProcessSource(inputs.errors, str(roots["proc_root"]), str(roots["host_root"]), refresh_s=refresh)


def _lists_cadence(settings: Settings) -> float:
    """The driver's process lists are a slow read: what they name changes no more often (a new PID
    starts a round at once, see the sampler), and a process that exited in between is found here."""
    return settings.slow_interval_s


REGISTRATION = register(
    Registration[ProcessOwners](SOURCE, Schedule.POLLED, ProcessOwners, _build, interval=_lists_cadence)
)
