"""Host source: /dev/shm and other memory-backed mounts, CPU I/O wait and the busiest core, disk reads,
and pressure stall information, read from /proc, /sys and statvfs.

CPU times and disk counters come through psutil, pointed at the configured /proc; the mount table is
read directly, as PID 1 sees it (psutil reads this process's own, which in a container lists none of the
pods' volumes), and so are PSI (psutil has none) and statvfs.

The roots are configurable because a DaemonSet sees the node's /proc and / under other paths. A file
that cannot be read costs its signal for that collection and is counted; it never raises. A kernel
without PSI, or a mount table we may not read, is simply not reported.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from exporter.sources import runtime
from exporter.sources.errors import ErrorCounter
from exporter.sources.readings import DiskReading, HostReading, ShmReading
from exporter.sources.registry import Inputs, Registration, Schedule, register

log = logging.getLogger(__name__)

SOURCE = "host"
MEMORY_FS = ("tmpfs", "ramfs")
# system tmpfs mounts and per-pod secret/token volumes: numerous, tiny, and nothing to do with shm
DEFAULT_MOUNT_EXCLUDE = (
    r"^/(proc|sys)(/|$)|^/dev(/(?!shm(/|$)).*)?$|^/run(/|$)"
    r"|/volumes/kubernetes\.io~(secret|projected|configmap|downward-api)/"
)
VIRTUAL_DISKS = re.compile(r"^(loop|ram|zram|fd|sr|nbd)\d*$")
PARTITION = re.compile(r"^((sd|vd|xvd|hd)[a-z]+\d+|(nvme\d+n\d+|mmcblk\d+)p\d+)$")
PSI_RESOURCES = ("io", "cpu", "memory")


# psutil reads /proc at the module-wide psutil.PROCFS_PATH: one reader at a time points it at its root
_PROCFS = threading.Lock()


@contextmanager
def _procfs(root: Path) -> Iterator[None]:
    with _PROCFS:
        before, psutil.PROCFS_PATH = psutil.PROCFS_PATH, str(root)
        try:
            yield
        finally:
            psutil.PROCFS_PATH = before


def _octal_unescape(path: str) -> str:
    """Mount tables escape spaces and friends as \\040."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


class HostSource:
    def __init__(
        self,
        errors: ErrorCounter,
        proc_root: str = "/proc",
        sys_root: str = "/sys",
        host_root: str = "/",
        shm_paths: tuple[str, ...] = ("/dev/shm",),
        mount_exclude: str = DEFAULT_MOUNT_EXCLUDE,
        statvfs: Callable[[str], os.statvfs_result] = os.statvfs,
        clock: Callable[[], float] = time.time,
        bundle_dirs: tuple[str, ...] = runtime.BUNDLE_DIRS,
        pod_index_every_s: float = 10.0,
    ) -> None:
        self.errors = errors
        self.proc = Path(proc_root)
        self.sys = Path(sys_root)
        self.host_root = host_root
        self.shm_paths = shm_paths
        self.mount_exclude = re.compile(mount_exclude)
        self.statvfs = statvfs
        self.clock = clock
        self._prev_cpu: dict[str, tuple[float, float, float]] | None = None  # name -> busy, iowait, total
        self._no_psi: set[str] = set()
        self.bundle_dirs = bundle_dirs
        self.pod_index_every_s = pod_index_every_s
        self._pod_index: runtime.PodIndex | None = None
        self._pod_index_at = float("-inf")
        self._mounts_text: str | None = None  # the mount table last parsed, and what was found in it
        self._mounts: list[str] = list(shm_paths)

    def collect(self) -> HostReading:
        iowait, busy_max, cpus = self._cpu()
        shm = self._shm()
        index = self._pods() if any(runtime.is_pod_mount(s.mountpoint) for s in shm) else None
        return HostReading(
            t=self.clock(),
            shm=shm,
            iowait=iowait,
            core_busy_max=busy_max,
            cpu_count=cpus,
            disks=self._disks(),
            pressure=self._pressure(),
            pod_dev_shm={(b.namespace, b.pod): frozenset(b.dev_shm) for b in index.by_sandbox.values()}
            if index
            else {},
        )

    def _pods(self) -> runtime.PodIndex:
        """The runtime's pod index, re-read every few seconds (pods come and go slowly)."""
        now = self.clock()
        if self._pod_index is None or now - self._pod_index_at >= self.pod_index_every_s:
            self._pod_index = runtime.scan(self.host_root, self.bundle_dirs)
            self._pod_index_at = now
        return self._pod_index

    # ---- CPU ---------------------------------------------------------------------------------

    def _cpu(self) -> tuple[float | None, float | None, int | None]:
        """I/O-wait share of all CPU time, and the busiest core's busy share, since the last call."""
        path = self.proc / "stat"
        try:
            with _procfs(self.proc):
                times = [psutil.cpu_times(), *psutil.cpu_times(percpu=True)]
        except OSError as exc:
            self.errors.inc(SOURCE, type(exc).__name__, str(path))
            return None, None, None
        except (ValueError, TypeError, IndexError):  # a line psutil cannot parse, or short of fields
            self.errors.inc(SOURCE, "ParseError", str(path))
            return None, None, None
        now: dict[str, tuple[float, float, float]] = {}
        for name, t in zip(["cpu", *(f"cpu{n}" for n in range(len(times) - 1))], times, strict=True):
            busy = t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)
            now[name] = (busy, t.iowait, busy + t.idle + t.iowait)  # guest time is inside user and nice
        cores = [name for name in now if name != "cpu"]
        prev, self._prev_cpu = self._prev_cpu, now
        if prev is None or "cpu" not in now or "cpu" not in prev:
            return None, None, len(cores) or None
        d_total = now["cpu"][2] - prev["cpu"][2]
        iowait = (now["cpu"][1] - prev["cpu"][1]) / d_total if d_total > 0 else None
        shares = []
        for name in cores if len(now) == len(prev) else ():  # a core went on or offline: no pairs
            if name in prev:
                total = now[name][2] - prev[name][2]
                if total > 0:
                    shares.append((now[name][0] - prev[name][0]) / total)
        clamp = lambda x: max(0.0, min(x, 1.0))  # noqa: E731 - counters may jitter across hotplug
        return (
            clamp(iowait) if iowait is not None else None,
            clamp(max(shares)) if shares else None,
            len(cores) or None,
        )

    # ---- disks -------------------------------------------------------------------------------

    def _whole_disks(self) -> set[str] | None:
        try:
            return set(os.listdir(self.sys / "block"))
        except OSError:
            return None

    def _disks(self) -> tuple[DiskReading, ...]:
        path = self.proc / "diskstats"
        if not path.exists():  # psutil would read this container's own /sys/block instead
            self.errors.inc(SOURCE, "FileNotFoundError", str(path))
            return ()
        try:
            with _procfs(self.proc):
                counters = psutil.disk_io_counters(perdisk=True, nowrap=False)
        except OSError as exc:
            self.errors.inc(SOURCE, type(exc).__name__, str(path))
            return ()
        except ValueError:  # a line psutil cannot parse
            self.errors.inc(SOURCE, "ParseError", str(path))
            return ()
        whole = self._whole_disks()
        return tuple(
            DiskReading(name, c.read_bytes, c.write_bytes)
            for name, c in counters.items()
            if not VIRTUAL_DISKS.match(name)
            and (name in whole if whole is not None else not PARTITION.match(name))
        )

    # ---- pressure ----------------------------------------------------------------------------

    def _pressure(self) -> dict[str, float]:
        out = {}
        for res in PSI_RESOURCES:
            if res in self._no_psi:
                continue
            path = self.proc / "pressure" / res
            try:
                text = path.read_text()
            except FileNotFoundError:
                self._no_psi.add(res)  # kernel without PSI (or PSI disabled): leave it out
                log.info("no pressure stall information at %s; PSI metrics left out", path)
                continue
            except OSError as exc:
                self.errors.inc(SOURCE, type(exc).__name__, str(path))
                continue
            match = re.search(r"^some avg10=([0-9.]+)", text, re.MULTILINE)
            if match:
                out[res] = float(match.group(1)) / 100.0
            else:
                self.errors.inc(SOURCE, "ParseError", str(path))
        return out

    # ---- shared memory -----------------------------------------------------------------------

    def _mount_text(self) -> str | None:
        """The node's mount table: PID 1's view when the host /proc is mounted."""
        for path in (self.proc / "1" / "mounts", self.proc / "self" / "mounts"):
            try:
                return path.read_text()
            except OSError:
                continue
        return None

    def _memory_mounts(self) -> list[str]:
        """The configured shm paths, then the table's memory-backed mounts worth watching. The table is
        parsed again only when its text changes: a node with a hundred pods lists over a thousand mounts,
        and parsing and matching them every second cost more than the rest of the collection."""
        text = self._mount_text()
        if text != self._mounts_text:
            self._mounts_text, self._mounts = text, self._wanted(text or "")
        return self._mounts

    def _wanted(self, table: str) -> list[str]:
        points = dict.fromkeys(self.shm_paths)  # in order, once each
        for line in table.splitlines():
            parts = line.split()
            if len(parts) < 3 or parts[2] not in MEMORY_FS:
                continue
            mountpoint = _octal_unescape(parts[1])
            if runtime.is_pod_mount(mountpoint) or not self.mount_exclude.search(mountpoint):
                points.setdefault(mountpoint)
        return list(points)

    def _shm(self) -> tuple[ShmReading, ...]:
        points = self._memory_mounts()
        index = None
        out = []
        for mountpoint in points:
            path = os.path.join(self.host_root, mountpoint.lstrip("/"))
            try:
                st = self.statvfs(path)
            except FileNotFoundError:
                if mountpoint in self.shm_paths:
                    self.errors.inc(SOURCE, "FileNotFoundError", path)
                continue  # a discovered mount outside what this container can see
            except OSError as exc:
                self.errors.inc(SOURCE, type(exc).__name__, path)
                continue
            size = st.f_frsize * st.f_blocks
            if size <= 0:
                continue
            owner = ("", "", "")
            if runtime.is_pod_mount(mountpoint):
                index = index or self._pods()
                owner = index.owner(mountpoint) or owner
            out.append(
                ShmReading(
                    mountpoint=mountpoint,
                    size_bytes=size,
                    used_bytes=st.f_frsize * (st.f_blocks - st.f_bfree),
                    namespace=owner[0],
                    pod=owner[1],
                    volume=owner[2],
                )
            )
        return tuple(out)


def _build(inputs: Inputs) -> HostSource:
    return HostSource(inputs.errors, clock=inputs.clock, **inputs.host())  # type: ignore[arg-type]


# every cycle, never two at once
REGISTRATION = register(Registration[HostReading](SOURCE, Schedule.POLLED, HostReading, _build))
