"""CPU of one host collection on nodes of different sizes: CPUs in /proc/stat and pods in the mount table.

    python bench/host.py                  # 32 and 224 CPUs; 0, 50 and 200 pods
    python bench/host.py --cpus 96 --pods 110

The host source reads a constructed /proc (``/proc/stat`` with one line per CPU, ``diskstats``, PSI and
PID 1's mount table, where each pod adds the mounts a kubelet and containerd give it: its service-account
token and a secret, an overlay root, a container mount, and its sandbox's 64 MiB /dev/shm). statvfs is
the real system call, on this machine's /, so what is printed is the source's own work plus the kernel's
answer for each memory-backed mount, without a simulator's. Per size: microseconds of this thread's CPU
per collection, and what that is in CPU seconds a minute at the default 1 s interval.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exporter.sources.errors import ErrorCounter
from exporter.sources.host import HostSource


def stat_text(cpus: int, tick: int) -> str:
    rows = [f"cpu  {1000 * cpus + tick} 0 {500 * cpus} {8000 * cpus} {100 * cpus} 0 0 0 0 0"]
    rows += [f"cpu{i} {1000 + tick} 0 500 8000 100 0 0 0 0 0" for i in range(cpus)]
    return "\n".join([*rows, "intr 1 2 3", ""])


def mounts_text(pods: int) -> str:
    rows = [
        "overlay / overlay rw 0 0",
        "tmpfs /dev tmpfs rw,size=65536k 0 0",
        "tmpfs /dev/shm tmpfs rw,size=1048576k 0 0",
        "tmpfs /run tmpfs rw 0 0",
        "proc /proc proc rw 0 0",
    ]
    for p in range(pods):
        uid = f"{p:08d}-aaaa-bbbb-cccc-{p:012d}"
        volumes = f"/var/lib/kubelet/pods/{uid}/volumes"
        task = f"{p:064d}"
        rows += [
            f"tmpfs {volumes}/kubernetes.io~projected/kube-api-access-{p:05d} tmpfs rw,size=1048576k 0 0",
            f"tmpfs {volumes}/kubernetes.io~secret/credentials tmpfs rw 0 0",
            f"overlay /run/containerd/io.containerd.runtime.v2.task/k8s.io/{task}/rootfs overlay rw 0 0",
            f"shm /run/containerd/io.containerd.grpc.v1.cri/sandboxes/{task}/shm tmpfs rw,size=65536k 0 0",
            f"/dev/nvme0n1p1 /var/lib/kubelet/pods/{uid}/etc-hosts ext4 rw 0 0",
            f"/dev/nvme0n1p1 /var/lib/kubelet/pods/{uid}/containers/trainer/{p:08x} ext4 rw 0 0",
        ]
    return "\n".join([*rows, ""])


def measure(cpus: int, pods: int, rounds: int) -> float:
    """Microseconds of CPU per collection, the stat file changing between collections as a kernel's does."""
    with tempfile.TemporaryDirectory(prefix="gbe-bench-host-") as tmp:
        proc = Path(tmp) / "proc"
        (proc / "1").mkdir(parents=True)
        (proc / "pressure").mkdir()
        for res in ("io", "cpu", "memory"):
            (proc / "pressure" / res).write_text("some avg10=1.50 avg60=1.00 avg300=0.50 total=1\n")
        (proc / "diskstats").write_text(" 259 0 nvme0n1 100 0 2048 10 50 0 4096 20 0 30 30 0 0 0 0\n")
        (proc / "1" / "mounts").write_text(mounts_text(pods))
        (Path(tmp) / "sys" / "block" / "nvme0n1").mkdir(parents=True)
        source = HostSource(
            ErrorCounter(),
            proc_root=str(proc),
            sys_root=str(Path(tmp) / "sys"),
            host_root="/",
            statvfs=lambda _path: os.statvfs("/"),
            bundle_dirs=(),
        )
        texts = [stat_text(cpus, tick) for tick in range(2)]
        spent = 0.0
        for i in range(rounds + 20):  # the first 20 warm up
            (proc / "stat").write_text(texts[i % 2])
            started = time.thread_time()
            source.collect()
            if i >= 20:
                spent += time.thread_time() - started
        return spent / rounds * 1e6


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--cpus", type=int, nargs="+", default=[32, 224])
    parser.add_argument("--pods", type=int, nargs="+", default=[0, 50, 200])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    print(f"{'CPUs':>5} {'pods':>5} {'us per collection':>18} {'s/min at 1 s':>13}")
    for cpus in args.cpus:
        for pods in args.pods:
            us = measure(cpus, pods, args.rounds)
            print(f"{cpus:5d} {pods:5d} {us:18.0f} {us * 60 / 1e6:13.3f}")


if __name__ == "__main__":
    main()
