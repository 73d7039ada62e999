"""Host source: /dev/shm and other memory-backed mounts, CPU I/O wait and the busiest core, disk reads,
and pressure stall information, read from /proc, /sys and statvfs.

Disk counters come through psutil, pointed at the configured /proc; CPU times are read from its stat
directly, as psutil reads them (once for the machine and every core, where psutil reads the file twice);
the mount table is read directly, as PID 1 sees it (psutil reads this process's own, which in a container
lists none of the pods' volumes), and so are PSI (psutil has none) and statvfs.

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
_SOME_AVG10 = re.compile(rb"^some avg10=([0-9.]+)", re.MULTILINE)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # what /proc/stat counts in (psutil's CLOCK_TICKS)


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
        self._bundle_errors = runtime.OncePerPath(errors)  # a bad bundle is counted once, not every scan
        self._bundles: runtime.BundleCache = {}  # each spec is parsed once, not every scan
        self._pod_index_at = float("-inf")
        self._mounts_raw: bytes | None = None  # the mount table last parsed, and what was found in it
        self._mounts: list[tuple[str, str, bool]] = self._points(self._wanted(""))
        # the files read every second, named once (their names as the errors counted against them say)
        self._stat = str(self.proc / "stat")
        self._diskstats = str(self.proc / "diskstats")
        self._block = str(self.sys / "block")
        self._mount_tables = (str(self.proc / "1" / "mounts"), str(self.proc / "self" / "mounts"))
        self._psi = tuple((res, str(self.proc / "pressure" / res)) for res in PSI_RESOURCES)
        self._pod_shm: tuple[runtime.PodIndex | None, dict[tuple[str, str], frozenset[str]]] = (None, {})

    def collect(self) -> HostReading:
        iowait, busy_max, cpus = self._cpu()
        shm = self._shm()
        index = self._pods()  # the pods' containers' images are wanted whatever is mounted
        pod_mounts = any(runtime.is_pod_mount(s.mountpoint) for s in shm)
        return HostReading(
            t=self.clock(),
            shm=shm,
            iowait=iowait,
            core_busy_max=busy_max,
            cpu_count=cpus,
            disks=self._disks(),
            pressure=self._pressure(),
            pod_dev_shm=self._pod_dev_shm(index) if pod_mounts else {},
            pod_images=index.images,
        )

    def _pod_dev_shm(self, index: runtime.PodIndex) -> dict[tuple[str, str], frozenset[str]]:
        """Each pod's own /dev/shm volumes, made once per pod index (it is re-read every few seconds;
        the readings share the dict, which nothing changes)."""
        if self._pod_shm[0] is not index:
            shm = {(b.namespace, b.pod): frozenset(b.dev_shm) for b in index.by_sandbox.values()}
            self._pod_shm = (index, shm)
        return self._pod_shm[1]

    def _pods(self) -> runtime.PodIndex:
        """The runtime's pod index (the pods' /dev/shm, their containers' images), re-read every few
        seconds (pods come and go slowly)."""
        now = self.clock()
        if self._pod_index is None or now - self._pod_index_at >= self.pod_index_every_s:
            self._pod_index = runtime.scan(
                self.host_root, self.bundle_dirs, self._bundle_errors, self._bundles
            )
            self._pod_index_at = now
        return self._pod_index

    # ---- CPU ---------------------------------------------------------------------------------

    def _cpu(self) -> tuple[float | None, float | None, int | None]:
        """I/O-wait share of all CPU time, and the busiest core's busy share, since the last call."""
        try:
            times = self._cpu_times()
        except OSError as exc:
            self.errors.inc(SOURCE, type(exc).__name__, self._stat)
            return None, None, None
        except (ValueError, TypeError, IndexError):  # a line that cannot be parsed, or short of fields
            self.errors.inc(SOURCE, "ParseError", self._stat)
            return None, None, None
        now = dict(zip(["cpu", *(f"cpu{n}" for n in range(len(times) - 1))], times, strict=True))
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

    def _cpu_times(self) -> list[tuple[float, float, float]]:
        """(busy, iowait, total) seconds of all CPUs, then of each core, from one read of /proc/stat, as
        psutil's cpu_times and cpu_times(percpu=True) give them (their two reads of the file cost more
        than the rest of the CPU figures): the first line, then every later line named cpu*, each field
        in seconds of CLOCK_TICKS. A line needs user to softirq (7 fields); steal counts where given.
        Raises OSError, or ValueError/TypeError on a line that is not that."""
        with open(self._stat, "rb") as f:
            lines = f.read().splitlines()
        rows = [lines[0] if lines else b"", *(line for line in lines[1:] if line.startswith(b"cpu"))]
        out = []
        for line in rows:
            values = line.split()[1:9]
            if len(values) < 7:
                raise TypeError(f"{len(values)} CPU time fields")
            user, nice, system, idle, iowait, irq, softirq, *rest = [float(x) / _CLOCK_TICKS for x in values]
            busy = user + nice + system + irq + softirq + (rest[0] if rest else 0.0)
            out.append((busy, iowait, busy + idle + iowait))  # guest time is inside user and nice
        return out

    # ---- disks -------------------------------------------------------------------------------

    def _whole_disks(self) -> set[str] | None:
        try:
            return set(os.listdir(self._block))
        except OSError:
            return None

    def _disks(self) -> tuple[DiskReading, ...]:
        path = self._diskstats
        if not os.path.exists(path):  # psutil would read this container's own /sys/block instead
            self.errors.inc(SOURCE, "FileNotFoundError", str(path))
            return ()
        try:
            with _procfs(self.proc):
                counters = psutil.disk_io_counters(perdisk=True, nowrap=False)
        except OSError as exc:
            self.errors.inc(SOURCE, type(exc).__name__, path)
            return ()
        except ValueError:  # a line psutil cannot parse
            self.errors.inc(SOURCE, "ParseError", path)
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
        for res, path in self._psi:
            if res in self._no_psi:
                continue
            try:
                with open(path, "rb") as f:
                    text = f.read()
            except FileNotFoundError:
                self._no_psi.add(res)  # kernel without PSI (or PSI disabled): leave it out
                log.info("no pressure stall information at %s; PSI metrics left out", path)
                continue
            except OSError as exc:
                self.errors.inc(SOURCE, type(exc).__name__, path)
                continue
            match = _SOME_AVG10.search(text)
            if match:
                out[res] = float(match.group(1)) / 100.0
            else:
                self.errors.inc(SOURCE, "ParseError", path)
        return out

    # ---- shared memory -----------------------------------------------------------------------

    def _mount_table(self) -> tuple[bytes, str] | tuple[None, None]:
        """The node's mount table: PID 1's view when the host /proc is mounted (its bytes, and the path
        they came from)."""
        for path in self._mount_tables:
            try:
                with open(path, "rb") as f:
                    return f.read(), path
            except OSError:
                continue
        return None, None

    def _memory_mounts(self) -> list[tuple[str, str, bool]]:
        """The configured shm paths, then the table's memory-backed mounts worth watching, each with the
        path its statvfs takes and whether it is a pod's. The table is parsed again only when it changes:
        a node with a hundred pods lists over a thousand mounts, and parsing and matching them every
        second cost more than the rest of the collection."""
        raw, path = self._mount_table()
        if raw != self._mounts_raw:
            text = ""
            if raw is not None:
                try:
                    text = Path(path).read_text()  # type: ignore[arg-type]
                except OSError:
                    raw = None  # gone since: parsed again next time
            self._mounts_raw, self._mounts = raw, self._points(self._wanted(text))
        return self._mounts

    def _points(self, mountpoints: list[str]) -> list[tuple[str, str, bool]]:
        return [
            (m, os.path.join(self.host_root, m.lstrip("/")), runtime.is_pod_mount(m)) for m in mountpoints
        ]

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
        for mountpoint, path, of_pod in points:
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
            if of_pod:
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
