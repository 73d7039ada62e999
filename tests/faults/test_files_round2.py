"""Files and offline commands on hostile input: names in the pod-log tree that are not UTF-8 or are links
leading out of it, a trace whose rows share one timestamp, a trace with impossible values, and `record`
whose reader goes away or which is killed. Each ends in bounded time and memory, with what was skipped
counted or said, and the exporter keeps serving."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.analysis.engine import Analyzer
from exporter.analysis.points import GpuPoint
from exporter.collect.sampler import EMPTY_SNAPSHOT
from exporter.offline import replay as replay_module
from exporter.offline.replay import replay
from exporter.offline.traces import TraceReader, clipped_warnings
from exporter.policy.thresholds import EVIDENCE_WINDOW, WINDOW_POINTS_PER_SECOND
from exporter.serve.metrics import Renderer
from exporter.sources.errors import ErrorCounter
from exporter.sources.podlogs import PodLogSource, PodLogsView, open_below
from tests.conftest import REPO
from tests.sources.test_podlogs import rec

POD = ("ml", "train")
NOW = time.time()


def _exporter(*args: str) -> list[str]:
    return [sys.executable, "-m", "exporter", *args]


def _source(root: Path, *pods: tuple[str, str]) -> PodLogSource:
    source = PodLogSource(str(root), ErrorCounter(), sys_root=str(root / "sys"))
    source.set_pods(frozenset(pods or (POD,)))
    return source


def _log(directory: Path | bytes, text: str) -> None:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, b"0.log" if isinstance(directory, bytes) else "0.log"), "w") as f:
        f.write(text)


def _render(view: PodLogsView) -> str:
    snapshot = replace(EMPTY_SNAPSHOT, seq=1, pod_logs=view)
    body = Renderer().render(snapshot)[0].decode("utf-8")  # strict: the body is UTF-8
    list(text_string_to_metric_families(body))  # and parses
    return body


# ---- 5: names that are not UTF-8 ----------------------------------------------------------------------


def test_the_renderer_cannot_fail_on_a_label_value_that_is_not_utf8():
    """Whatever a source lets through (a byte 0xff in a file name is the lone surrogate U+DCFF in Python),
    every scrape still renders: the byte is exported as U+FFFD."""
    view = PodLogsView(containers=(), pods=())
    from exporter.sources.podlogs import ContainerLog

    view = replace(view, containers=(ContainerLog("ml", "train", "ctr\udcff", NOW, 7, None),))
    body = _render(view)
    assert 'gpu_pod_training_step{container="ctr\ufffd",namespace="ml",pod="train"} 7.0' in body


def test_pod_log_names_that_are_not_utf8_are_skipped_and_counted_once(tmp_path):
    root = tmp_path / "pods"
    good = root / "ml_train_uid-1" / "trainer"
    _log(good, rec(NOW, "step 5"))
    _log(os.fsencode(root / "ml_train_uid-1") + b"/ctr\xff", rec(NOW, "step 6"))  # a container
    _log(os.fsencode(root) + b"/ml_other_uid\xff/worker", rec(NOW, "step 7"))  # a pod's UID
    source = _source(root, POD, ("ml", "other"))
    for _ in range(3):
        view = source.poll()
    assert [(c.pod, c.container, c.step) for c in view.containers] == [("train", "trainer", 5)]
    assert source.errors.snapshot() == {("podlogs", "UndecodableName"): 2}
    assert "trainer" in _render(view)


# ---- 9: links that leave the log tree -------------------------------------------------------------------


def test_links_below_the_log_root_are_never_followed(tmp_path):
    """cri-dockerd's /var/log/pods holds links into Docker's JSON logs; an attacker's link may point
    anywhere (/etc/shadow). None is followed: not a log, not a container's directory, not a pod's."""
    outside = tmp_path / "outside"
    secret = outside / "secret.log"
    _log(outside / "ctr", rec(NOW, "step 999"))
    _log(outside / "pod" / "worker", rec(NOW, "step 999"))
    secret.write_text(rec(NOW, "step 999"))
    root = tmp_path / "pods"
    pod = root / "ml_train_uid-1"
    _log(pod / "good", rec(NOW, "step 5"))
    (pod / "linked-log").mkdir(parents=True)
    (pod / "linked-log" / "0.log").symlink_to(secret)
    (pod / "linked-dir").symlink_to(outside / "ctr")
    (root / "ml_linked_uid-2").symlink_to(outside / "pod")
    (pod / "fifo").mkdir()
    os.mkfifo(pod / "fifo" / "0.log")  # opening it for reading must not wait for a writer
    source = _source(root, POD, ("ml", "linked"))
    views: list[PodLogsView] = []
    poller = threading.Thread(target=lambda: views.extend(source.poll() for _ in range(3)), daemon=True)
    poller.start()
    poller.join(timeout=30)  # only keeps a regression from hanging the suite
    assert not poller.is_alive(), "a poll blocked on the FIFO"
    steps = {(c.pod, c.container): c.step for c in views[-1].containers}
    assert steps == {("train", "fifo"): None, ("train", "good"): 5, ("train", "linked-log"): None}
    assert source.errors.snapshot() == {("podlogs", "SymlinkSkipped"): 3, ("podlogs", "NotRegularFile"): 1}


def test_a_directory_swapped_for_a_link_after_the_listing_leads_nowhere(tmp_path):
    """The follower opens every step below the root without following links, so replacing a container's
    directory with a link between two polls reads nothing from where the link points."""
    root = tmp_path / "pods"
    container = root / "ml_train_uid-1" / "trainer"
    _log(container, rec(NOW, "step 5"))
    source = _source(root)
    assert source.poll().containers[0].step == 5
    source.poll()
    _log(tmp_path / "elsewhere", rec(NOW + 1, "step 999") + rec(NOW + 2, "step 1000"))
    moved = container.rename(root / "old")  # the open log is drained; nothing new comes through the link
    container.symlink_to(tmp_path / "elsewhere")
    try:
        for _ in range(2):
            view = source.poll()
        assert all(c.step != 1000 for c in view.containers)
        with pytest.raises(OSError):
            open_below(str(root), ("ml_train_uid-1", "trainer", "0.log"), os.O_RDONLY | os.O_NOFOLLOW)
        with pytest.raises(OSError):
            open_below(str(root), ("..", "elsewhere", "0.log"), os.O_RDONLY)  # never a step up
    finally:
        assert moved.exists()


# ---- 7: replay memory whatever the timestamps do ---------------------------------------------------------


def test_points_sharing_one_time_are_held_up_to_the_windows_bound():
    analyzer = Analyzer()
    bound = math.ceil(EVIDENCE_WINDOW.value * WINDOW_POINTS_PER_SECOND.value)
    analyzer.add_gpu_points("0", (GpuPoint(t=5.0, util=0.5) for _ in range(3 * bound)))
    assert len(analyzer.window("0")) == bound
    assert analyzer.window("0").dropped == 2 * bound
    analyzer.evaluate(5.0)  # and the analysis still runs over what is held


@pytest.mark.parametrize(
    "times",
    [
        pytest.param(lambda i: 1000.0, id="equal"),
        pytest.param(lambda i: 1000.0 - i, id="decreasing"),
        pytest.param(lambda i: 1000.0 + (i // 4000) * 1e6, id="equal-then-jumping"),
    ],
)
def test_replay_holds_a_bounded_number_of_rows_whatever_the_timestamps_do(tmp_path, monkeypatch, times):
    """12,000 rows of one GPU: equal times (memory grew with every row), going back (skipped, with a
    bounded list of warnings), or equal within segments that jump apart."""
    analyzers: list[Analyzer] = []

    class Watched(Analyzer):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            analyzers.append(self)

    monkeypatch.setattr(replay_module, "Analyzer", Watched)
    path = tmp_path / "t.csv"
    rows = "".join(f"{times(i)}, 0, 97 %, 600 W\n" for i in range(12_000))
    path.write_text("timestamp, index, utilization.gpu [%], power.draw [W]\n" + rows)
    result = replay(path)
    bound = math.ceil(EVIDENCE_WINDOW.value * WINDOW_POINTS_PER_SECOND.value)
    assert analyzers and all(len(a.window("0")) <= bound for a in analyzers)
    assert len(result.stats.warnings) <= TraceReader.MAX_WARNINGS


# ---- 8: record's reader goes away, record is killed -----------------------------------------------------

RECORD = ("record", "--simulate", "healthy", "--sim-gpus", "1", "--interval", "0.2")


def test_record_into_a_pipe_whose_reader_goes_away_ends_quietly_by_sigpipe():
    """`record -o - | head -1`: the reader goes away; record ends as Unix tools do (killed by SIGPIPE,
    status 141 in a shell), without a traceback."""
    proc = subprocess.Popen(
        _exporter(*RECORD, "-o", "-"), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith("timestamp, index, name")
        proc.stdout.close()  # what head does after its line
        status = proc.wait(timeout=60)  # only keeps a regression from hanging the suite
    finally:
        proc.kill()
    stderr = proc.stderr.read()
    assert status == -signal.SIGPIPE, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and "Exception ignored" not in stderr


def test_a_killed_record_leaves_its_rows_in_the_named_file(tmp_path):
    """The named file is written as rows come (no hidden temporary file): SIGKILL leaves a trace that
    replay reads."""
    out = tmp_path / "node.csv"
    proc = subprocess.Popen(
        _exporter(*RECORD, "-o", str(out)), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_text().count("\n") >= 3):
            assert time.monotonic() < deadline, f"no rows in {out}: {sorted(os.listdir(tmp_path))}"
            assert proc.poll() is None
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert sorted(os.listdir(tmp_path)) == ["node.csv"]  # nothing hidden beside it
    text = out.read_text()
    complete = text[: text.rindex("\n") + 1]  # the kill may land in the middle of a line
    (tmp_path / "complete.csv").write_text(complete)
    assert replay(tmp_path / "complete.csv").stats.rows >= 2


# ---- 10: values outside physical bounds ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "cell"),
    [
        ("memory.used [MiB]", "1e30"),
        ("memory.total [MiB]", "1e30 MiB"),
        ("host.shm.used [MiB]", "1e30"),
        ("nvlink.tx [MiB/s]", "1e30"),
        ("pcie.rx [MiB/s]", "1e30"),
        ("host.disk.read [MiB/s]", "1e30"),
        ("nvlink.active", "1000"),
        ("nvlink.errors", "-5"),
        ("ecc.errors.uncorrected.volatile.total", "-1"),
        ("p2p.failed", "1e6"),
        ("fabric.ready", "7"),
        ("progress.log_silent [s]", "1e30"),
    ],
)
def test_a_value_outside_its_columns_physical_bounds_is_read_as_missing(tmp_path, column, cell):
    path = tmp_path / "t.csv"
    name = column.split(" [")[0]
    path.write_text(
        f"timestamp, index, utilization.gpu [%], {column}\n1, 0, 50 %, 1\n2, 0, 50 %, {cell}\n3, 0, 50 %, 0\n"
    )
    result = replay(path)
    assert result.stats.rows == 3 and result.stats.clipped == {name: 1}
    (line,) = clipped_warnings(result.stats)
    assert line.startswith(f"{name}: 1 value(s) outside ") and line.endswith(") read as missing")


def test_replay_says_in_one_line_that_1e30_mib_of_memory_is_not_a_value(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp, index, utilization.gpu [%], memory.used [MiB]\n"
        "1, 0, 50 %, 40000 MiB\n2, 0, 50 %, 1e30 MiB\n3, 0, 50 %, 40000 MiB\n"
    )
    result = subprocess.run(
        _exporter("replay", str(path), "--json"), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["clipped_values"] == {"memory.used": 1}
    said = [line for line in result.stderr.splitlines() if "memory.used" in line]
    assert said == [
        f"gpu-bottleneck-exporter: {path}: memory.used: 1 value(s) outside 0..4,194,304 MiB (no GPU holds "
        "more: replay.bound.gpu_memory_max_bytes) read as missing"
    ]
