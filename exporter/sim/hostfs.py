"""The host side of the simulated node as the files the host source reads.

``SimHost`` writes a small /proc and /sys tree (stat, diskstats, pressure, mounts, block devices) into a
private directory and offers a ``statvfs`` for the simulated tmpfs mounts, so the real host source
parses simulated data exactly as it parses a node's.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from exporter.sim.conditions import EFA_DEVICES, PCIE_GEN, PCIE_WIDTH, NodeConditions
from exporter.sim.kubelet import SimPod
from exporter.sim.physics import GiB, MiB, NodeModel

_SHM_BLOCK = 4096
DISKS = ("nvme0n1", "nvme1n1")
DEFAULT_NODE_SHM = 64 * GiB
CONTAINERD_TASKS = "run/containerd/io.containerd.runtime.v2.task/k8s.io"
SANDBOX_SHM = "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/{id}/shm"
EMPTY_DIR = "/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~empty-dir/{volume}"
BOOTED_BEFORE_S = 3600  # the node booted an hour before the simulation starts
PROCESS_AGE_S = 60  # its GPU processes started a minute before
LIMITS = (  # every GPU process's /proc/PID/limits: locked memory unlimited, as EFA/RDMA needs
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max open files            1048576              1048576              files     \n"
    "Max locked memory         unlimited            unlimited            bytes     \n"
)


class SimHost:
    def __init__(
        self,
        model: NodeModel,
        root: str | None = None,
        pods: list[SimPod] | None = None,
        conditions: NodeConditions | None = None,
        ghosts: list[SimPod] | None = None,
    ) -> None:
        self.model = model
        self.pods = pods if pods is not None else []
        self.ghosts = ghosts or []  # deleted pods whose task lives on (a process still runs in it)
        self._procs: dict[int, str] = {}  # the GPU processes' /proc files as last written: pid -> cgroup
        self._started: dict[int, float] = {}  # when each GPU process started (seconds since the epoch)
        self.before_refresh: Callable[[], object] | None = None  # lets the node change its pods first
        self.conditions = conditions or NodeConditions()
        self._own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="gbe-sim-host-"))
        self.proc_root = str(self.root / "proc")
        self.sys_root = str(self.root / "sys")
        self.host_root = str(self.root / "host")
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._files_lock = threading.Lock()  # a refresh and a change of pods write the same files
        self.cpu_s = 0.0  # the writer's and statvfs' CPU (two threads: added under _cpu_lock)
        self._cpu_lock = threading.Lock()
        for d in ("proc/pressure", "proc/1", *(f"sys/block/{name}" for name in DISKS), "host/dev/shm"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "sys/block/loop0").mkdir(exist_ok=True)
        self._write_bundles()
        self._write_devices()
        self._write_own_stat()
        self.refresh()

    # ---- files -------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Advance the model to now and rewrite every file atomically."""
        started = time.thread_time()
        try:
            self._update()
        finally:
            self._count_cpu(started)

    def _update(self) -> None:
        if self.before_refresh is not None:
            self.before_refresh()
        self._refresh()

    def _count_cpu(self, started: float) -> None:
        self._add_cpu(time.thread_time() - started)

    def _add_cpu(self, spent: float) -> None:
        with self._cpu_lock:
            self.cpu_s += spent

    def _refresh(self) -> None:
        with self._files_lock:
            self._refresh_files()

    def _processes(self) -> dict[int, tuple[object, str, str]]:
        with self.model.lock:
            return {p.pid: (g, p.pod, p.command) for g in self.model.gpus for p in self.model.processes(g)}

    def _refresh_files(self) -> None:
        with self.model.lock:
            self.model.advance()
            h = self.model.host
            xids = list(self.model.xid_events)
            procs = self._processes()
            stat = self._stat(h.jiffies, self._btime())
            diskstats = self._diskstats(h.disk_read_bytes, h.disk_write_bytes)
            pressure = {
                res: self._pressure(res, h.psi_avg10[res], h.psi_total_us[res]) for res in h.psi_avg10
            }
        self._write("proc/stat", stat)
        self._write("proc/diskstats", diskstats)
        for res, text in pressure.items():
            self._write(f"proc/pressure/{res}", text)
        self._write("proc/1/mounts", self._mounts())
        self._write("host/dev/kmsg", self._kmsg(xids))
        self._write_processes(procs)

    def _btime(self) -> int:
        return int(self.model.start) - BOOTED_BEFORE_S

    def _owner(self, uuid: str) -> SimPod | None:
        """The pod (or the deleted one) a process on the GPU ``uuid`` runs in; None: a host process."""
        for pod in (*self.pods, *self.ghosts):
            if uuid in pod.devices.get("nvidia.com/gpu", ()):
                return pod
        return None

    def _pod(self, name: str) -> SimPod | None:
        """A pod by name: the one a process on a GPU pods share runs in."""
        return next((pod for pod in self.pods if pod.name == name), None)

    def _write_processes(self, procs: dict[int, tuple[object, str, str]]) -> None:
        """/proc/PID/{cgroup,cmdline,comm,stat} of the GPU processes: cgroup v2 under the systemd driver, as
        containerd writes a Guaranteed pod's container; rewritten only when a process or its pod changes."""
        cgroups = {}
        commands = {pid: command for pid, (_, _, command) in procs.items() if command}
        pods: dict[int, str] = {}  # PID -> the command its pod's job runs
        for pid, (g, name, command) in procs.items():
            pod = self._pod(name) if name else self._owner(g.uuid)  # type: ignore[attr-defined]
            if pod is not None:
                pods[pid] = pod.command
            if command:  # a daemon of the node's (the MPS server): its systemd service
                cgroups[pid] = f"0::/system.slice/{command}.service\n"
            elif pod is None:
                cgroups[pid] = "0::/system.slice/gpu-burn.service\n"
            else:
                slice_ = f"kubepods-pod{pod.uid.replace('-', '_')}.slice"
                cgroups[pid] = f"0::/kubepods.slice/{slice_}/cri-containerd-{pod.sandbox_id[::-1]}.scope\n"
        if cgroups == self._procs:
            return
        for pid in set(self._procs) - set(cgroups):  # ended: its /proc entry goes
            shutil.rmtree(self.root / f"proc/{pid}", ignore_errors=True)
        # the first processes started a minute before the simulation; later ones (new pods') as they appear
        started = self.model.t if self._procs else self.model.start - PROCESS_AGE_S
        self._started = {pid: self._started.get(pid, started) for pid in cgroups}
        btime, hz = self._btime(), os.sysconf("SC_CLK_TCK")
        for pid, cgroup in cgroups.items():
            ticks = int((self._started[pid] - btime) * hz)
            command = commands.get(pid)
            comm = command[:15] if command else "python"  # the kernel keeps 15 characters of the name
            self._write(f"proc/{pid}/cgroup", cgroup)
            self._write(f"proc/{pid}/cmdline", f"{command}\0" if command else _job_command(pods.get(pid)))
            self._write(f"proc/{pid}/comm", f"{comm}\n")
            self._write(f"proc/{pid}/limits", LIMITS)
            self._write(
                f"proc/{pid}/stat",
                f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560" + " 0" * 12 + f" {ticks} 0\n",
            )
        self._procs = cgroups

    def _write_own_stat(self) -> None:
        """The reader's own /proc entry, and the kernel's thread parent: the simulated node shares its PID
        namespace with the exporter, as a node's exporter with hostPID does."""
        try:
            own = Path("/proc/self/stat").read_text()
        except OSError:
            return
        self._write(f"proc/{os.getpid()}/stat", own)
        self._write("proc/2/stat", "2 (kthreadd) S 0 0 0 0 -1 2129984" + " 0" * 13 + "\n")

    def _shm_mounts(self) -> dict[str, tuple[int, int]]:
        """Memory-backed mounts of the node: mountpoint -> (size, used). The job's shm volume is the
        one the model fills (the first pod's emptyDir, or the node's /dev/shm without pods)."""
        h = self.model.host
        mounts = {"/dev/shm": (DEFAULT_NODE_SHM, 1 * GiB)}
        if not self.pods:
            mounts["/dev/shm"] = (h.shm_size, h.shm_used)
        for i, pod in enumerate(self.pods):
            mounts[SANDBOX_SHM.format(id=pod.sandbox_id)] = (64 * MiB, 1 * MiB)
            if pod.shm_volume:
                path = EMPTY_DIR.format(uid=pod.uid, volume=pod.shm_volume)
                mounts[path] = (h.shm_size, h.shm_used) if i == 0 else (DEFAULT_NODE_SHM, 1 * GiB)
        return mounts

    def statvfs(self, path: str) -> os.statvfs_result:
        """statvfs for the simulated memory-backed mounts; other paths are the real ones. The model's
        work here is the simulator's CPU (the kernel's on a node), like the writer's."""
        started = time.thread_time()
        try:
            rel = "/" + os.path.relpath(os.path.normpath(path), self.host_root)
            with self.model.lock:
                self.model.advance()
                found = self._shm_mounts().get(rel)
        finally:
            self._count_cpu(started)
        if found is None:
            return os.statvfs(path)
        size, used = found
        blocks, free = size // _SHM_BLOCK, (size - used) // _SHM_BLOCK
        return os.statvfs_result(
            (_SHM_BLOCK, _SHM_BLOCK, blocks, free, free, 1 << 20, 1 << 20, 1 << 20, 0, 255)
        )

    def pods_changed(self, pods: list[SimPod]) -> None:
        """New pods took the GPUs: containerd writes the new tasks' bundles, the new pods' processes (new
        processes) start, and the ended tasks' bundles go. In that order, and apart from a refresh: a reader
        at any moment finds each process the driver lists with its /proc entry and its bundle."""
        with self._files_lock:
            self.pods[:] = pods
            kept = self._write_bundles()
            self.model.renew_processes()
            self._write_processes(self._processes())
            tasks = self.root / "host" / CONTAINERD_TASKS
            for stale in tasks.iterdir():
                if stale.name not in kept:
                    shutil.rmtree(stale, ignore_errors=True)

    def _write_bundles(self) -> set[str]:
        """containerd's task bundles for the pods: sandbox and container OCI specs with their annotations;
        returns the bundles' IDs."""
        written: set[str] = set()
        for pod in (*self.pods, *self.ghosts):
            sandbox = {
                "io.kubernetes.cri.container-type": "sandbox",
                "io.kubernetes.cri.sandbox-id": pod.sandbox_id,
                "io.kubernetes.cri.sandbox-name": pod.name,
                "io.kubernetes.cri.sandbox-namespace": pod.namespace,
                "io.kubernetes.cri.sandbox-uid": pod.uid,
            }
            shm = (
                EMPTY_DIR.format(uid=pod.uid, volume=pod.shm_volume)
                if pod.shm_volume
                else SANDBOX_SHM.format(id=pod.sandbox_id)
            )
            container = sandbox | {
                "io.kubernetes.cri.container-type": "container",
                "io.kubernetes.cri.container-name": pod.container,
            }
            if pod.image:
                container["io.kubernetes.cri.image-name"] = pod.image
            # hostIPC: the runtime leaves the IPC namespace out of the spec (the host's is shared)
            namespaces = [
                {"type": t} for t in ("pid", "network", "mount", "uts") + (() if pod.host_ipc else ("ipc",))
            ]
            caps = ["CAP_CHOWN", "CAP_KILL", *pod.capabilities]
            process = {"env": ["PATH=/usr/bin:/bin", *(f"{k}={v}" for k, v in pod.env)]}
            process["capabilities"] = {"bounding": caps, "effective": caps}  # type: ignore[assignment]
            for bundle_id, notes, mounts, proc in (
                (pod.sandbox_id, sandbox, [], {}),
                (
                    pod.sandbox_id[::-1],
                    container,
                    [{"destination": "/dev/shm", "type": "bind", "source": shm}],
                    process,
                ),
            ):
                spec = {"annotations": notes, "mounts": mounts, "linux": {"namespaces": namespaces}}
                if proc:
                    spec["process"] = proc
                self._write(f"host/{CONTAINERD_TASKS}/{bundle_id}/config.json", json.dumps(spec))
                written.add(bundle_id)
        return written

    def _write_devices(self) -> None:
        """/sys/bus/pci/devices for every GPU (NVML may not see them all), the EFA devices under
        /sys/class/infiniband, and the memlock limit of the GPU processes under /proc."""
        cond = self.conditions
        speed = {5: "32.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 1: "2.5 GT/s PCIe"}
        for g in self.model.gpus:
            bdf = g.pci_bus_id[4:].lower()  # sysfs spells the domain with four digits
            files = {
                "vendor": "0x10de",
                "device": "0x2330",
                "class": "0x030200",
                "numa_node": str(g.index * 2 // self.model.n_gpus),
                "current_link_speed": speed[PCIE_GEN],
                "max_link_speed": speed[PCIE_GEN],
                "current_link_width": str(cond.pcie_width.get(g.index, PCIE_WIDTH)),
                "max_link_width": str(PCIE_WIDTH),
            }
            for name, text in files.items():
                self._write(f"sys/bus/pci/devices/{bdf}/{name}", text + "\n")
        for name in EFA_DEVICES:
            (self.root / "sys/class/infiniband" / name).mkdir(parents=True, exist_ok=True)
        for g in self.model.gpus:
            self._write(f"proc/{4242 + g.index * 10}/limits", LIMITS)

    @staticmethod
    def _stat(jiffies: list[list[float]], btime: int) -> str:
        total = [sum(core[i] for core in jiffies) for i in range(8)]
        lines = ["cpu  " + " ".join(str(int(v)) for v in total) + " 0 0"]
        lines += [f"cpu{n} " + " ".join(str(int(v)) for v in core) + " 0 0" for n, core in enumerate(jiffies)]
        lines += [
            "intr 0",
            "ctxt 123456",
            f"btime {btime}",
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

    def _kmsg(self, xids: list[tuple[float, int, int]]) -> str:
        """The kernel log as /dev/kmsg records: the driver's XID lines (the doctor reads them)."""
        lines = []
        for n, (t, gpu, xid) in enumerate(xids):
            bus = self.model.gpus[gpu].pci_bus_id[4:-2].lower()  # 0000:18:00, as NVRM prints it
            stamp = int((t - self.model.start) * 1e6)
            lines.append(f"3,{1000 + n},{stamp},-;NVRM: Xid (PCI:{bus}): {xid}, pid=4242, name=python")
        return "".join(line + "\n" for line in lines)

    def _mounts(self) -> str:
        lines = [
            "overlay / overlay rw,relatime 0 0",
            "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0",
            "tmpfs /dev tmpfs rw,nosuid,size=65536k,mode=755 0 0",
            "tmpfs /run tmpfs rw,nosuid,nodev,size=52428800k,mode=755 0 0",
            "/dev/nvme0n1p1 /var/lib/kubelet ext4 rw,relatime 0 0",
        ]
        for pod in self.pods:
            token = f"/var/lib/kubelet/pods/{pod.uid}/volumes/kubernetes.io~projected/kube-api-access"
            lines.append(f"tmpfs {token} tmpfs rw 0 0")  # every pod has one; the exporter must skip it
        lines += [
            f"tmpfs {path} tmpfs rw,nosuid,nodev,size={size // 1024}k 0 0"
            for path, (size, _) in self._shm_mounts().items()
        ]
        return "\n".join(lines) + "\n"

    def _write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    # ---- background refresh (demo) -----------------------------------------------------------

    def start(self, period_s: float = 0.5) -> None:
        def run() -> None:
            # the whole thread is the simulation's (on a node the kernel keeps these files): its waking
            # and waiting count with its refreshes, not only the refreshes
            mark = time.thread_time()
            while not self._stop.wait(period_s):
                self._update()
                now = time.thread_time()
                self._add_cpu(now - mark)
                mark = now

        self._thread = threading.Thread(target=run, name="sim-host", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)


def _job_command(command: str | None) -> str:
    """The command line the host shows for a pod's GPU process (``SimPod.command``); a training script's
    where the pod names none."""
    return command or "python\0train.py\0--config\0llama.yaml\0"
