"""The host source on constructed /proc trees and on this machine's real /proc and /dev/shm."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil
import pytest

from exporter.sources.errors import ErrorCounter
from exporter.sources.host import HostSource

STAT_1 = """cpu  1000 0 500 8000 100 0 0 0 0 0
cpu0 500 0 250 4000 50 0 0 0 0 0
cpu1 500 0 250 4000 50 0 0 0 0 0
intr 1 2 3
"""
# 200 jiffies later per core: cpu0 busy the whole time, cpu1 half idle half iowait
STAT_2 = """cpu  1200 0 500 8050 150 0 0 0 0 0
cpu0 700 0 250 4000 50 0 0 0 0 0
cpu1 500 0 250 4050 100 0 0 0 0 0
intr 1 2 3
"""
DISKSTATS = """ 259 0 nvme0n1 100 0 2048 10 50 0 4096 20 0 30 30 0 0 0 0
 259 1 nvme0n1p1 100 0 2000 10 50 0 4000 20 0 30 30 0 0 0 0
   7 0 loop0 5 0 40 0 0 0 0 0 0 0 0 0 0 0 0
   8 0 sda 10 0 1000 1 0 0 0 0 0 1 1
   8 1 sda1 10 0 1000 1 0 0 0 0 0 1 1
"""
PSI = "some avg10=12.50 avg60=3.00 avg300=1.00 total=123\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=4\n"
MOUNTS = r"""overlay / overlay rw 0 0
tmpfs /dev tmpfs rw,size=65536k 0 0
tmpfs /dev/shm tmpfs rw,size=1048576k 0 0
tmpfs /run tmpfs rw 0 0
tmpfs /var/lib/kubelet/pods/abc/volumes/kubernetes.io~empty-dir/dshm tmpfs rw 0 0
tmpfs /var/lib/kubelet/pods/abc/volumes/kubernetes.io~projected/kube-api-access-x tmpfs rw 0 0
tmpfs /mnt/scratch\040space tmpfs rw 0 0
proc /proc proc rw 0 0
"""


def tree(tmp_path: Path, with_psi: bool = True, with_sys: bool = True) -> tuple[str, str]:
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    (proc / "1").mkdir(parents=True)
    (proc / "stat").write_text(STAT_1)
    (proc / "diskstats").write_text(DISKSTATS)
    (proc / "1" / "mounts").write_text(MOUNTS)
    if with_psi:
        (proc / "pressure").mkdir()
        for res in ("io", "cpu", "memory"):
            (proc / "pressure" / res).write_text(PSI)
    if with_sys:
        for name in ("nvme0n1", "sda", "loop0"):
            (sys / "block" / name).mkdir(parents=True)
    return str(proc), str(sys)


def fake_statvfs(sizes: dict[str, tuple[int, int]]):
    def statvfs(path: str) -> os.statvfs_result:
        for suffix, (size, used) in sizes.items():
            if path.endswith(suffix):
                return os.statvfs_result(
                    (4096, 4096, size // 4096, (size - used) // 4096, 0, 0, 0, 0, 0, 255)
                )
        raise FileNotFoundError(path)

    return statvfs


def test_cpu_iowait_and_busiest_core_from_two_readings(tmp_path):
    proc, sys = tree(tmp_path)
    source = HostSource(ErrorCounter(), proc_root=proc, sys_root=sys, statvfs=fake_statvfs({}))
    first = source.collect()
    assert first.iowait is None and first.core_busy_max is None and first.cpu_count == 2  # no rate yet
    Path(proc, "stat").write_text(STAT_2)
    second = source.collect()
    assert second.iowait == pytest.approx(50 / 300)
    assert second.core_busy_max == pytest.approx(1.0)


def test_disks_are_whole_physical_devices(tmp_path):
    proc, sys = tree(tmp_path)
    r = HostSource(ErrorCounter(), proc_root=proc, sys_root=sys, statvfs=fake_statvfs({})).collect()
    assert {d.device: d.read_bytes for d in r.disks} == {"nvme0n1": 2048 * 512, "sda": 1000 * 512}


def test_disks_without_sys_fall_back_to_name_rules(tmp_path):
    proc, _ = tree(tmp_path, with_sys=False)
    r = HostSource(
        ErrorCounter(), proc_root=proc, sys_root=str(tmp_path / "nosys"), statvfs=fake_statvfs({})
    ).collect()
    assert sorted(d.device for d in r.disks) == ["nvme0n1", "sda"]


def test_pressure_some_avg10_as_ratio(tmp_path):
    proc, sys = tree(tmp_path)
    r = HostSource(ErrorCounter(), proc_root=proc, sys_root=sys, statvfs=fake_statvfs({})).collect()
    assert r.pressure == {"io": 0.125, "cpu": 0.125, "memory": 0.125}


def test_kernel_without_psi_is_left_out_without_errors(tmp_path):
    proc, sys = tree(tmp_path, with_psi=False)
    errors = ErrorCounter()
    statvfs = fake_statvfs({"/dev/shm": (1 << 30, 0)})
    r = HostSource(errors, proc_root=proc, sys_root=sys, statvfs=statvfs).collect()
    assert r.pressure == {} and errors.snapshot() == {}


def test_shm_mounts_discovered_and_system_tmpfs_skipped(tmp_path):
    proc, sys = tree(tmp_path)
    statvfs = fake_statvfs(
        {"/dev/shm": (1 << 30, 1 << 29), "/dshm": (8 << 30, 1 << 30), "scratch space": (1 << 20, 0)}
    )
    r = HostSource(ErrorCounter(), proc_root=proc, sys_root=sys, host_root="/host", statvfs=statvfs).collect()
    found = {s.mountpoint: (s.size_bytes, s.used_bytes) for s in r.shm}
    assert found == {
        "/dev/shm": (1 << 30, 1 << 29),
        "/var/lib/kubelet/pods/abc/volumes/kubernetes.io~empty-dir/dshm": (8 << 30, 1 << 30),
        "/mnt/scratch space": (1 << 20, 0),
    }


def test_mounts_that_come_and_go_are_followed_and_an_unchanged_table_is_not_parsed_again(
    tmp_path, monkeypatch
):
    proc, sys = tree(tmp_path)
    sizes = {
        "/dev/shm": (1 << 30, 0),
        "/dshm": (8 << 30, 0),
        "scratch space": (1 << 20, 0),
        "/new": (1 << 20, 0),
    }
    source = HostSource(
        ErrorCounter(), proc_root=proc, sys_root=sys, host_root="/h", statvfs=fake_statvfs(sizes)
    )
    parsed = []
    wanted = source._wanted
    monkeypatch.setattr(source, "_wanted", lambda text: parsed.append(text) or wanted(text))

    def seen() -> set[str]:
        return {s.mountpoint.rsplit("/", 1)[-1] for s in source.collect().shm}

    assert seen() == seen() == {"shm", "dshm", "scratch space"} and len(parsed) == 1
    mounts = Path(proc) / "1" / "mounts"
    mounts.write_text(MOUNTS + "tmpfs /new tmpfs rw 0 0\n")  # a pod starts with a memory-backed volume
    assert seen() == {"shm", "dshm", "scratch space", "new"} and len(parsed) == 2
    mounts.write_text(MOUNTS.replace("dshm", "gone"))  # its pod went away, another came
    assert seen() == {"shm", "scratch space"} and len(parsed) == 3
    mounts.unlink()  # the table cannot be read: the configured paths alone
    assert seen() == {"shm"} and len(parsed) == 4


def test_missing_proc_files_are_counted_and_the_rest_reported(tmp_path):
    proc, sys = tree(tmp_path)
    os.remove(Path(proc, "stat"))
    errors = ErrorCounter()
    statvfs = fake_statvfs({"/dev/shm": (1 << 30, 0)})
    r = HostSource(errors, proc_root=proc, sys_root=sys, statvfs=statvfs).collect()
    assert r.iowait is None and r.cpu_count is None
    assert r.disks and r.shm and r.pressure
    assert errors.snapshot() == {("host", "FileNotFoundError"): 1}


def test_garbage_in_proc_stat_is_a_parse_error_not_a_crash(tmp_path):
    proc, sys = tree(tmp_path)
    Path(proc, "stat").write_text("cpu  a b c\ncpu0 1 2 3 4 5 6 7 8\n")
    errors = ErrorCounter()
    HostSource(errors, proc_root=proc, sys_root=sys, statvfs=fake_statvfs({})).collect()
    assert errors.snapshot()[("host", "ParseError")] == 1


def test_a_missing_diskstats_is_counted_and_no_other_disks_are_read(tmp_path):
    """Without the configured diskstats, no disk is reported (this machine's own /sys/block is not read
    in its place) and the rest of the reading stands."""
    proc, sys = tree(tmp_path)
    os.remove(Path(proc, "diskstats"))
    errors = ErrorCounter()
    statvfs = fake_statvfs({"/dev/shm": (1 << 30, 0)})
    r = HostSource(errors, proc_root=proc, sys_root=sys, statvfs=statvfs).collect()
    assert r.disks == () and r.cpu_count == 2 and r.pressure
    assert errors.snapshot() == {("host", "FileNotFoundError"): 1}


def test_sources_on_different_roots_read_their_own_proc_at_once(tmp_path):
    """Two nodes' sources in one process (the simulated fleet) collecting on two threads: each reads its
    own /proc every time, and psutil's /proc is this machine's again afterwards."""
    proc_a, sys_a = tree(tmp_path / "a")
    proc_b, sys_b = tree(tmp_path / "b")
    Path(proc_b, "stat").write_text(STAT_1.replace("intr", "cpu2 1 0 0 1 0 0 0 0 0 0\nintr"))
    Path(proc_b, "diskstats").write_text(DISKSTATS.replace(" 100 0 2048 ", " 100 0 4096 "))
    seen: dict[str, set[tuple[int | None, int]]] = {"a": set(), "b": set()}

    def collect(name: str, proc: str, sys: str) -> None:
        source = HostSource(ErrorCounter(), proc_root=proc, sys_root=sys, statvfs=fake_statvfs({}))
        for _ in range(200):
            r = source.collect()
            seen[name].add((r.cpu_count, {d.device: d.read_bytes for d in r.disks}["nvme0n1"]))

    threads = [
        threading.Thread(target=collect, args=("a", proc_a, sys_a)),
        threading.Thread(target=collect, args=("b", proc_b, sys_b)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {"a": {(2, 2048 * 512)}, "b": {(3, 4096 * 512)}}
    assert psutil.PROCFS_PATH == "/proc"


def test_this_machines_real_proc():
    """The default roots on a real Linux machine: no errors, sane values."""
    errors = ErrorCounter()
    source = HostSource(errors)
    source.collect()
    r = source.collect()
    assert r.cpu_count and r.cpu_count >= 1
    assert r.iowait is None or 0 <= r.iowait <= 1
    shm = {s.mountpoint: s for s in r.shm}
    if os.path.ismount("/dev/shm"):
        real = os.statvfs("/dev/shm")
        assert shm["/dev/shm"].size_bytes == real.f_frsize * real.f_blocks
    assert errors.snapshot() == {}


def test_real_tmpfs_fill_is_seen(tmp_path):
    """Writing into the real /dev/shm moves the used bytes the source reports."""
    if not os.path.ismount("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    source = HostSource(ErrorCounter(), shm_paths=("/dev/shm",))
    before = {s.mountpoint: s.used_bytes for s in source.collect().shm}["/dev/shm"]
    path = Path("/dev/shm") / f"gbe-test-{os.getpid()}"
    try:
        path.write_bytes(b"\0" * (32 << 20))
        after = {s.mountpoint: s.used_bytes for s in source.collect().shm}["/dev/shm"]
    finally:
        path.unlink(missing_ok=True)
    assert after - before >= 30 << 20
