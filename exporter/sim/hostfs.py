"""The host side of the simulated node as the files the host source reads.

``SimHost`` writes a small /proc and /sys tree (stat, diskstats, pressure, mounts, block devices) into a
private directory and offers a ``statvfs`` for the simulated tmpfs mounts, so the real host source
parses simulated data exactly as it parses a node's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from exporter.sim.physics import NodeModel

_SHM_BLOCK = 4096
DISKS = ("nvme0n1", "nvme1n1")


class SimHost:
    def __init__(self, model: NodeModel, root: str | None = None) -> None:
        self.model = model
        self._own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="gbe-sim-host-"))
        self.proc_root = str(self.root / "proc")
        self.sys_root = str(self.root / "sys")
        self.host_root = str(self.root / "host")
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.cpu_s = 0.0
        for d in ("proc/pressure", "proc/1", *(f"sys/block/{name}" for name in DISKS), "host/dev/shm"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "sys/block/loop0").mkdir(exist_ok=True)
        self.refresh()

    # ---- files -------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Advance the model to now and rewrite every file atomically."""
        started = time.thread_time()
        try:
            self._refresh()
        finally:
            self.cpu_s += time.thread_time() - started

    def _refresh(self) -> None:
        with self.model.lock:
            self.model.advance()
            h = self.model.host
            stat = self._stat(h.jiffies)
            diskstats = self._diskstats(h.disk_read_bytes, h.disk_write_bytes)
            pressure = {
                res: self._pressure(res, h.psi_avg10[res], h.psi_total_us[res]) for res in h.psi_avg10
            }
        self._write("proc/stat", stat)
        self._write("proc/diskstats", diskstats)
        for res, text in pressure.items():
            self._write(f"proc/pressure/{res}", text)
        self._write("proc/1/mounts", self._mounts())

    def statvfs(self, path: str) -> os.statvfs_result:
        """statvfs for the simulated /dev/shm; other paths are the real ones."""
        if os.path.normpath(path) == os.path.join(self.host_root, "dev/shm"):
            with self.model.lock:
                self.model.advance()
                size, used = self.model.host.shm_size, self.model.host.shm_used
            blocks, free = size // _SHM_BLOCK, (size - used) // _SHM_BLOCK
            return os.statvfs_result(
                (_SHM_BLOCK, _SHM_BLOCK, blocks, free, free, 1 << 20, 1 << 20, 1 << 20, 0, 255)
            )
        return os.statvfs(path)

    @staticmethod
    def _stat(jiffies: list[list[float]]) -> str:
        total = [sum(core[i] for core in jiffies) for i in range(8)]
        lines = ["cpu  " + " ".join(str(int(v)) for v in total) + " 0 0"]
        lines += [f"cpu{n} " + " ".join(str(int(v)) for v in core) + " 0 0" for n, core in enumerate(jiffies)]
        lines += [
            "intr 0",
            "ctxt 123456",
            "btime 1767225600",
            "processes 4242",
            "procs_running 3",
            "procs_blocked 0",
        ]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _diskstats(read_bytes: float, write_bytes: float) -> str:
        rows = []
        for minor, name in enumerate(DISKS):
            share = 0.5
            sectors_r, sectors_w = int(read_bytes * share / 512), int(write_bytes * share / 512)
            rows.append(
                f" 259 {minor * 2} {name} 1000 0 {sectors_r} 500 2000 0 {sectors_w} 900 0 800 1400 0 0 0 0"
            )
            rows.append(f" 259 {minor * 2 + 1} {name}p1 10 0 80 1 0 0 0 0 0 1 1 0 0 0 0")
        rows.append("   7 0 loop0 5 0 40 0 0 0 0 0 0 0 0 0 0 0 0")
        return "\n".join(rows) + "\n"

    @staticmethod
    def _pressure(resource: str, avg10: float, total_us: float) -> str:
        pct = avg10 * 100.0
        some = f"some avg10={pct:.2f} avg60={pct:.2f} avg300={pct:.2f} total={int(total_us)}"
        full = f"full avg10={pct / 2:.2f} avg60={pct / 2:.2f} avg300={pct / 2:.2f} total={int(total_us / 2)}"
        return some + "\n" + full + "\n"

    def _mounts(self) -> str:
        return (
            "overlay / overlay rw,relatime 0 0\n"
            "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
            "tmpfs /dev tmpfs rw,nosuid,size=65536k,mode=755 0 0\n"
            f"tmpfs /dev/shm tmpfs rw,nosuid,nodev,size={self.model.host.shm_size // 1024}k 0 0\n"
            "tmpfs /run tmpfs rw,nosuid,nodev,size=52428800k,mode=755 0 0\n"
            "/dev/nvme0n1p1 /var/lib/kubelet ext4 rw,relatime 0 0\n"
        )

    def _write(self, rel: str, text: str) -> None:
        path = self.root / rel
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    # ---- background refresh (demo) -----------------------------------------------------------

    def start(self, period_s: float = 0.5) -> None:
        def run() -> None:
            while not self._stop.wait(period_s):
                self.refresh()

        self._thread = threading.Thread(target=run, name="sim-host", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
