"""The pod-log source on CRI logs written here in the kubelet's layout: start at the end, partial
records, rotation (renamed and gzipped), a restarted container, truncation, binary junk, a 1 GiB log
that must not be read whole, bounds with counted skips, and only the pods that hold GPUs."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest

from exporter.policy.thresholds import (
    PODLOG_LINE_BYTES,
    PODLOG_LINES_PER_SECOND,
    PODLOG_READ_BYTES,
)
from exporter.sources.errors import ErrorCounter
from exporter.sources.podlogs import PodLogSource

POD = ("ml", "llm-train-0")
T0 = 1714557600.0
NCCL = "gpu-node-1:4021:4021 [0] NCCL INFO "


def stamp(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


def rec(t: float, text: str, tag: str = "F", stream: str = "stdout") -> str:
    return f"{stamp(t)} {stream} {tag} {text}\n"


class Node:
    """A /var/log/pods tree, a source over it and a hand-driven monotonic clock."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mono = 1000.0
        self.source = PodLogSource(
            str(root), ErrorCounter(), sys_root=str(root / "sys"), monotonic=lambda: self.mono
        )
        self.source.set_pods(frozenset({POD}))

    def dir(
        self, ns: str = "ml", pod: str = "llm-train-0", uid: str = "uid-1", container: str = "trainer"
    ) -> Path:
        d = self.root / f"{ns}_{pod}_{uid}" / container
        d.mkdir(parents=True, exist_ok=True)
        return d

    def write(self, path: Path, *records: str) -> None:
        with path.open("a") as f:
            f.write("".join(records))

    def poll(self):
        self.mono += 1.0
        return self.source.poll()

    def container(self, name: str = "trainer"):
        view = self.source.view
        return next(c for c in view.containers if c.container == name)

    def pod(self):
        return self.source.view.pods[0]


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "pods")
    n.root.mkdir()
    yield n
    n.source.stop()


def test_starts_at_the_end_and_follows_new_lines(node):
    log = node.dir() / "0.log"
    node.write(log, *(rec(T0 + i, f"step {i}") for i in range(100)))
    node.write(log, rec(T0 + 100, "gpu-node-1:4021:4188 [0] NCCL WARN NET/IB : something old"))
    node.poll()
    c = node.container()
    assert (c.last_line_t, c.step) == (pytest.approx(T0 + 100.000123), 99)
    assert node.pod().warnings == 0  # the tail found at start is the past: state, not counts
    node.write(log, rec(T0 + 101, "step 100"), rec(T0 + 103, "step 102"))
    node.write(log, rec(T0 + 104, "gpu-node-1:4021:4188 [0] NCCL WARN NET/IB : something new"))
    node.poll()
    c = node.container()
    assert (c.step, c.step_seconds, c.last_line_t) == (
        102,
        pytest.approx(4 / 3),  # step 99 at +99 (the tail), 102 at +103: the newest progress line of a read
        pytest.approx(T0 + 104.000123),
    )
    assert node.pod().warnings == 1


def test_partial_records_are_joined_across_reads(node):
    log = node.dir() / "0.log"
    node.write(log, rec(T0, "start"))
    node.poll()
    node.write(log, rec(T0 + 1, NCCL + "Channel 00/0 : 0[0] -> 1[1] ", "P"))
    node.write(log, rec(T0 + 1, "via P2P/CUMEM", "P")[:-1])  # the writer is mid-record
    node.poll()
    assert node.pod().transports == ()
    node.write(log, "/read\n" + rec(T0 + 1, " ", "F"))
    node.poll()
    assert node.pod().transports == (("intra", "P2P/CUMEM/read"),)


def test_rotation_is_drained_through_the_old_file_then_the_new_one_is_read(node):
    d = node.dir()
    log = d / "0.log"
    node.write(log, rec(T0, "step 1"))
    node.poll()
    node.write(log, rec(T0 + 1, "step 2"), rec(T0 + 2, "DataLoader worker (pid 7) exited unexpectedly"))
    rotated = d / "0.log.20240501-100002"
    os.rename(log, rotated)  # the kubelet rotates: the lines written before are only in the old file
    node.write(log, rec(T0 + 3, "step 3"))
    node.poll()
    assert node.container().step == 3
    assert dict(node.pod().errors)["dataloader_killed"] == 1
    rotated.write_bytes(gzip.compress(rotated.read_bytes()))  # ...and later compresses it
    os.rename(rotated, d / "0.log.20240501-100002.gz")
    node.write(log, rec(T0 + 4, "step 4"))
    node.poll()
    assert node.container().step == 4
    assert dict(node.pod().errors)["dataloader_killed"] == 1  # not counted twice


def test_a_restarted_container_continues_in_the_next_file(node):
    d = node.dir()
    node.write(d / "0.log", rec(T0, "step 500"))
    node.poll()
    node.write(
        d / "0.log", rec(T0 + 1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    )
    node.write(d / "1.log", rec(T0 + 30, "step 0"), rec(T0 + 31, "step 1"))
    node.poll()
    c = node.container()
    assert (c.step, c.last_line_t) == (1, pytest.approx(T0 + 31.000123))
    assert dict(node.pod().errors)["cuda_oom"] == 1  # the old file was drained first


def test_truncation_reads_the_file_again_from_its_start(node):
    log = node.dir() / "0.log"
    node.write(log, *(rec(T0 + i, f"step {i}") for i in range(50)))
    node.poll()
    log.write_text(rec(T0 + 60, "step 60"))  # copytruncate: the same file, shorter
    node.poll()
    assert node.container().step == 60


def test_binary_junk_is_counted_and_skipped(node):
    log = node.dir() / "0.log"
    node.write(log, rec(T0, "start"))
    node.poll()
    with log.open("ab") as f:
        f.write(b"\x00\xff\xfe garbage \x80\n" + os.urandom(200).replace(b"\n", b"") + b"\n")
        f.write(
            rec(
                T0 + 1, "step 7 \udcff".encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            ).encode()
        )
    view = node.poll()
    assert view.junk == 2
    assert node.container().step == 7


def test_a_1_gib_log_is_not_read_whole(node):
    log = node.dir() / "0.log"
    with log.open("wb") as f:
        f.truncate(1 << 30)  # sparse: 1 GiB of NULs without a newline
        f.seek(1 << 30)
        f.write(rec(T0, "iteration 41/100 | elapsed time per iteration (ms): 900.0 |").encode())
        f.write(rec(T0 + 1, "iteration 42/100 | elapsed time per iteration (ms): 950.0 |").encode())
    view = node.poll()
    follower = node.source._followers[(*POD, "trainer")]
    assert follower.pos == log.stat().st_size  # it is at the end...
    assert view.lines <= 2  # ...having read only the tail: a fragment and the last record
    c = node.container()
    assert (c.step, c.step_seconds) == (42, pytest.approx(0.95))


def test_a_backlog_beyond_the_read_bound_is_skipped_and_counted(node):
    log = node.dir() / "0.log"
    node.write(log, rec(T0, "start"))
    node.poll()
    line = rec(T0 + 1, "x" * 200)
    node.write(log, line * (int(PODLOG_READ_BYTES.value) // len(line) * 2), rec(T0 + 2, "step 9"))
    view = node.poll()
    assert view.skipped_bytes >= PODLOG_READ_BYTES.value * 0.9
    assert node.container().step == 9


def test_lines_over_the_budget_are_skipped_and_counted_newest_kept(node):
    log = node.dir() / "0.log"
    node.write(log, rec(T0, "start"))
    node.poll()
    n = int(PODLOG_LINES_PER_SECOND.value) + 500
    node.write(
        log, *(rec(T0 + 1, "NCCL WARN old" if i == 0 else "noise") for i in range(n)), rec(T0 + 2, "step 5")
    )
    view = node.poll()
    assert view.skipped_lines == n + 1 - PODLOG_LINES_PER_SECOND.value
    assert node.container().step == 5
    assert node.pod().warnings == 0  # the skipped one was the oldest


def test_an_endless_record_is_dropped_and_counted(node):
    log = node.dir() / "0.log"
    node.write(log, rec(T0, "start"))
    node.poll()
    with log.open("a") as f:
        f.write(rec(T0 + 1, "y" * int(PODLOG_LINE_BYTES.value * 1.5))[:-1])  # no newline yet
    view = node.poll()
    assert view.skipped_bytes > PODLOG_LINE_BYTES.value
    node.write(log, "\n" + rec(T0 + 2, "step 3"))
    node.poll()
    assert node.container().step == 3


def test_only_gpu_pods_are_read_and_gone_pods_forgotten(node):
    node.write(node.dir() / "0.log", rec(T0, "step 1"))
    node.write(node.dir(pod="web-0") / "0.log", rec(T0, "step 99"))
    node.write(node.dir(uid="uid-0-old") / "0.log", rec(T0 - 999, "step 0"))
    os.utime(node.root / "ml_llm-train-0_uid-0-old", (T0 - 999, T0 - 999))
    view = node.poll()
    assert [(c.pod, c.step) for c in view.containers] == [("llm-train-0", 1)]
    node.source.set_pods(frozenset())
    assert node.poll().containers == ()


def test_a_missing_directory_is_counted_once_and_rdma_devices_are_counted(tmp_path):
    errors = ErrorCounter()
    (tmp_path / "sys" / "class" / "infiniband" / "efa_0").mkdir(parents=True)
    source = PodLogSource(str(tmp_path / "nope"), errors, sys_root=str(tmp_path / "sys"))
    source.set_pods(frozenset({POD}))
    for _ in range(3):
        view = source.poll()
    assert errors.snapshot() == {("podlogs", "FileNotFoundError"): 1}
    assert view.rdma_devices == 1 and view.containers == ()


def test_an_unreadable_log_is_counted_once(node):
    (node.dir() / "0.log").mkdir()  # unreadable as a file, whoever runs the test
    for _ in range(3):
        view = node.poll()
    assert node.source.errors.snapshot() == {("podlogs", "IsADirectoryError"): 1}
    assert view.duration_s is not None and view.collected_t is not None


def test_a_log_found_late_counts_only_what_was_written_after_the_start(node):
    node.source.set_pods(frozenset())
    node.poll()  # the first pass, before the kubelet named any pod
    log = node.dir() / "0.log"
    now = time.time()
    node.write(
        log,
        rec(now - 3600, "gpu-node-1:4021:4188 [0] NCCL WARN an hour ago, before the exporter started"),
        rec(now + 1, "gpu-node-1:4021:4188 [0] NCCL WARN after the exporter started"),
    )
    node.source.set_pods(frozenset({POD}))
    node.poll()
    assert node.pod().warnings == 1


def test_a_pod_on_sockets_across_nodes_shows_in_the_metrics_the_alerts_read(node):
    """No IB device in the pod, two nodes: the inter-node transport is NET/Socket (what
    GpuNcclSocketsWithRdma reads beside gpu_node_rdma_devices); NCCL's own out-of-memory is a cuda_oom
    (GpuPodCudaOom), a closed peer connection and the remote allocator a peer_lost (GpuNcclNetworkError)."""
    from dataclasses import replace

    from exporter.collect.snapshot import EMPTY_SNAPSHOT
    from exporter.serve.metrics import Renderer

    (node.root / "sys" / "class" / "infiniband" / "rdmap0s6").mkdir(parents=True)  # the node has EFA
    log = node.dir() / "0.log"
    node.write(log, rec(T0, "start"))
    node.poll()
    warn = "gpu-node-1:4021:4190 [0] "
    node.write(
        log,
        rec(T0 + 1, NCCL + "NCCL version 2.21.5+cuda12.4"),
        rec(T0 + 1, NCCL + "NET/IB : No device found."),
        rec(T0 + 1, NCCL + "NET/Socket : Using [0]eth0:10.0.0.11<0>"),
        rec(T0 + 1, NCCL + "Using network Socket"),
        rec(T0 + 2, NCCL + "comm 0x55d0c8a0 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0"),
        rec(T0 + 60, warn + "include/alloc.h:103 NCCL WARN Cuda failure 2 'out of memory'"),
        rec(
            T0 + 61,
            warn + "misc/socket.cc:49 NCCL WARN Net : Connection closed by remote peer 10.0.0.12<45678>",
        ),
        rec(T0 + 61, warn + "bootstrap.cc:93 NCCL WARN [Rem Allocator] Allocation failed (segment 0, fd 57)"),
    )
    view = node.poll()
    pod = node.pod()
    assert pod.network == "Socket" and ("inter", "NET/Socket") in pod.transports
    assert dict(pod.errors) == {"cuda_oom": 1, "peer_lost": 2} and pod.warnings == 3
    text = Renderer().render(replace(EMPTY_SNAPSHOT, pod_logs=view))[0].decode()
    ml = 'namespace="ml",pod="llm-train-0"'
    for series in (
        f'gpu_pod_nccl_transport{{{ml},scope="inter",transport="NET/Socket"}} 1.0',
        'gpu_pod_nccl_info{namespace="ml",network="Socket",pod="llm-train-0",version="2.21.5"} 1.0',
        "gpu_node_rdma_devices 1.0",
        f'gpu_pod_log_errors_total{{kind="cuda_oom",{ml}}} 1.0',
        f'gpu_pod_log_errors_total{{kind="peer_lost",{ml}}} 2.0',
        f'gpu_pod_log_errors_total{{kind="ib_completion_error",{ml}}} 0.0',
    ):
        assert series in text.splitlines(), series


class CpuClock:
    """The pod-log thread's CPU clock, by hand: every read of it (one before each regex search) costs
    ``cost`` seconds, so the budget is counted in searches rather than timed."""

    def __init__(self, cost: float) -> None:
        self.t, self.cost, self.reads = 0.0, cost, 0

    def __call__(self) -> float:
        self.t += self.cost
        self.reads += 1
        return self.t


def test_the_progress_patterns_keep_to_a_cpu_budget_per_pass_and_containers_take_turns(tmp_path):
    """A tenant's log of lines that pass a pattern's prefilter and never match makes each line a search;
    a pass stops searching once its budget (podlogs.progress_cpu_seconds) is spent: the rest waits for
    the next pass, is counted, and shows as the wait; the other container is served first next pass."""
    from exporter.podlogs.logparse import load_patterns
    from exporter.policy.thresholds import PODLOG_PROGRESS_CPU

    budget = PODLOG_PROGRESS_CPU.value
    searches = 10  # what the budget buys at the hand clock's cost
    clock, mono = CpuClock(budget / searches), [1000.0]
    regex = r"(?:step|it)\s*(?P<step>\d+)\s*\S*\s*loss"  # the worst pattern accepted in 30 tries
    worst = load_patterns(json.dumps([{"name": "mine", "regex": regex, "step": "step"}]))
    root = tmp_path / "pods"
    source = PodLogSource(
        str(root), ErrorCounter(), worst, sys_root=str(tmp_path / "sys"), monotonic=lambda: mono[0],
        cpu_clock=clock,
    )  # fmt: skip
    source.set_pods(frozenset({POD}))
    pod_dir = root / "ml_llm-train-0_uid-1"
    for container in ("costly", "trainer"):
        (pod_dir / container).mkdir(parents=True)
    # 64 lines of the hostile container: each passes the prefilter and fails the search
    (pod_dir / "costly" / "0.log").write_text(
        "".join(rec(T0 + i / 100, "step " + "9" * 1020) for i in range(64))
    )
    (pod_dir / "trainer" / "0.log").write_text(rec(T0, "it 7 x loss 0.5"))

    def poll():
        mono[0] += 1.0
        before = clock.reads
        view = source.poll()
        return view, clock.reads - before

    # reads of the clock a pass: the budget's start, one check per container, one before each search
    most = 1 + 2 + searches
    view, reads = poll()
    assert reads <= most
    steps = {c.container: c.step for c in view.containers}
    assert steps == {"costly": None, "trainer": None}  # the costly one came first and spent the pass
    assert view.progress_deferred == 2 and view.progress_wait_s == 0.0

    view, reads = poll()
    assert reads <= most
    assert {c.container: c.step for c in view.containers}["trainer"] == 7  # its turn came first
    assert view.progress_deferred == 3  # the costly one waits again
    assert view.progress_wait_s == pytest.approx(1.0)  # its lines arrived a pass ago

    for _ in range(8):  # 64 searches at 10 a pass: the costly log is worked through, never dropped
        view, reads = poll()
        assert reads <= most
    assert view.progress_wait_s == 0.0 and view.progress_deferred == 8
    assert {c.container: c.step for c in view.containers} == {"costly": None, "trainer": 7}
    source.stop()
