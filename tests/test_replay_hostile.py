"""Hostile input to replay and record: every input is generated here. Each must end in bounded time (generous
bounds: the point is linear work, not speed), and each error in one line on stderr with exit status 2 (1 for
a recording that could not be written), never a traceback."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from exporter import cli
from exporter.offline import replay as replay_module
from exporter.offline import traces
from exporter.offline.replay import replay
from exporter.offline.traceformats.base import MAX_CELL_CHARS
from exporter.offline.traces import gap_seconds
from tests.conftest import REPO
from tests.timing import assert_within, pace

# a replay may take this many times a well-formed one of the same size, measured in the same run (a busy
# machine slows both alike); super-linear work took 14 s to hours, tens to thousands of times that
LINEAR_TIMES = 10
LONG = 60_000  # characters in one hostile cell: within the line bound (64 Ki), far past the cell bound
SMI_HEADER = "timestamp, index, utilization.gpu [%]\n"
SCREEN_HEAD = (
    "Tue Nov 24 10:00:00 2026\n"
    "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |\n"
    "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |\n"
)
SCREEN_VALUES = "| 30%   45C    P2    84W / 230W |   8123MiB / 24564MiB |     78%      Default |\n"


def _cli(capsys, *args: str) -> tuple[int, str, float]:
    """Run the command in-process: (status, stderr, seconds)."""
    start = time.perf_counter()
    status = cli.main(list(args))
    seconds = time.perf_counter() - start
    return status, capsys.readouterr().err, seconds


def _one_line(status: int, err: str, code: int, *words: str) -> None:
    assert status == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("gpu-bottleneck-exporter: "), err
    for word in words:
        assert word in lines[0], lines[0]


def _good_csv(rows: int = 60) -> str:
    return SMI_HEADER + "".join(f"{t}, 0, 50\n" for t in range(rows))


@pytest.fixture(scope="module")
def good_replay_s(tmp_path_factory) -> float:
    """How long replay takes here, in this process, on a well-formed trace of about a hostile file's size
    (LONG characters, an hour of one GPU): the baseline of the bounds below, large enough that a busy
    machine's pauses are small beside it."""
    path = tmp_path_factory.mktemp("baseline") / "good.csv"
    path.write_text(_good_csv(3600))
    return pace(lambda: replay(path))


def _reading_s(path: Path) -> float:
    """A pass over the file's lines, unzipped: what reading it costs here, and now."""

    def read() -> None:
        with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as f:
            for _ in f:
                pass

    return pace(read)


# ---- D2: patterns only ever see bounded cells, and none backtracks ---------------------------------------


HOSTILE_LINES = {
    # gpustat's line (tried while sniffing any file no other reader claims): blanks around its cells
    "gpustat_blanks": "[0] " + " " * LONG + "x\n",
    "gpustat_row_blanks": "[0] A | 45'C, 50 % | 1 / 2 MB\n[0] "
    + " " * (LONG // 2)
    + "|"
    + " " * (LONG // 2)
    + "|\n",
    "gpustat_memory": "[0] A | 45'C, 50 % | 1 / 2 MB\n[0] A | 45'C, 50 % | " + "1/" * (LONG // 2) + " MB\n",
    # the shared number patterns, in every reader that uses them
    "dmon_digits": "# gpu sm pwr\n0 50 100\n0 " + "1" * LONG + "x 100\n",
    "dcgmi_digits": "#Entity GPUTL POWER\nID\nGPU 0 50 100\nGPU 0 " + "1" * LONG + "x 100\n",
    "poller_time_digits": "time,gpu,util\n0,0,50\n1," + "1" * LONG + "x,50\n",
    "poller_util_digits": "time,gpu,util\n0,0,50\n1,0," + "1" * LONG + "x\n",
    # the poller's GPU column: digits not at the end
    "poller_gpu_digits": "time,gpu,util\n0,0,50\n1,x" + "1" * LONG + "x,50\n",
    "poller_header_brackets": "time,gpu,util," + "[" * 8000 + "\n0,0,50,1\n",
    # nvidia-smi screens: a GPU's name of blanks, a power cell without blanks
    "screen_name_blanks": SCREEN_HEAD
    + "|   0  A"
    + " " * LONG
    + "B  Off  | 00000000:01:00.0 Off |                  Off |\n"
    + SCREEN_VALUES,
    "screen_pair": SCREEN_HEAD
    + "|   0  A100  Off  | 00000000:01:00.0 Off |                  Off |\n"
    + "| 30% 45C "
    + "x" * LONG
    + " | 1MiB / 2MiB | 78% Default |\n",
    # nvidia-smi's CSV: a header cell of blanks, a number cell of digits
    "smi_header_blanks": "timestamp, utilization.gpu [%], a" + " " * LONG + "b\n1, 50, 1\n",
    "smi_digits": SMI_HEADER + "0, 0, 50\n1, 0, " + "1" * 1000 + "x\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_LINES))
def test_a_long_hostile_line_is_read_in_linear_time(tmp_path, capsys, name, good_replay_s):
    path = tmp_path / f"{name}.log"
    path.write_text(HOSTILE_LINES[name])
    status, err, seconds = _cli(capsys, "replay", str(path))
    assert_within(seconds, good_replay_s, LINEAR_TIMES, name)
    assert status in (0, 2) and "Traceback" not in err, err


def test_a_cell_past_the_bound_is_named_and_skipped(tmp_path, capsys):
    path = tmp_path / "d.log"
    path.write_text("# gpu sm pwr\n0 50 100\n0 " + "1" * (MAX_CELL_CHARS + 1) + " 100\n1 50 100\n")
    status, err, _ = _cli(capsys, "replay", str(path))
    assert status == 0
    assert f"a field longer than {MAX_CELL_CHARS} characters; row skipped" in err


def test_readers_still_read_their_formats_after_the_rewrite(tmp_path, capsys):
    """The patterns split by hand read what the patterns read: gpustat's and the screens' lines."""
    gpustat = tmp_path / "g.log"
    gpustat.write_text(
        "host  Tue Nov 24 10:00:00 2026  550.54.15\n"
        "[0] NVIDIA RTX A5000 | 45°C,  78 % |  8123 / 24564 MB | alice(8000M)\n"
        "[1] Tesla V100 | 45'C,  78 %,  84 / 300 W |  8123 / 32510 MB\n"
    )
    rows = list(traces.TraceReader(gpustat))
    assert [(r.gpu, r.name, r.point.util, r.point.power_w) for r in rows] == [
        ("0", "NVIDIA RTX A5000", 0.78, None),
        ("1", "Tesla V100", 0.78, 84.0),
    ]
    screen = tmp_path / "s.log"
    screen.write_text(
        SCREEN_HEAD + "|   0  NVIDIA H100 80GB HBM3   On  | 00000000:01:00.0 Off |   0 |\n" + SCREEN_VALUES
    )
    (row,) = traces.TraceReader(screen)
    assert (row.name, row.point.power_w, row.point.power_limit_w, row.point.util) == (
        "NVIDIA H100 80GB HBM3",
        84.0,
        230.0,
        0.78,
    )


# ---- D3: the work follows the rows, not the GPUs seen times the seconds spanned --------------------------


def _crowd_then_one(path: Path, gpus: int, steps: int, every: float = 200.0) -> None:
    """``gpus`` GPUs send one row at 0 s; then GPU 0 alone sends one every ``every`` seconds (under the gap
    that would end the segment, so the segment lasts)."""
    rows = "".join(f"0,{i},50\n" for i in range(gpus))
    rows += "".join(f"{every * k:.0f},0,50\n" for k in range(1, steps + 1))
    path.write_text("time,gpu,util\n" + rows)


def test_a_gpu_that_stops_sending_stops_being_evaluated(tmp_path):
    path = tmp_path / "crowd.csv"
    gpus, steps, every = 60, 40, 200.0
    _crowd_then_one(path, gpus, steps, every)
    result = replay(path)
    # each GPU is evaluated from its row to a gap after it; GPU 0 to the end: never GPUs x span
    bound = gpus * (gap_seconds() + 2) + steps * every
    assert result.gpu_seconds <= bound < gpus * steps * every / 4
    assert result.stats.gap_count == 0 and len(result.stats.gpus) == gpus
    # the work is the GPU-seconds evaluated, bounded above (about 20 k; it was 480 k); its speed is bench/'s


def test_a_gpu_back_after_a_silence_is_evaluated_again(tmp_path):
    """GPU 1 is silent longer than the gap while GPU 0 keeps the segment going, then sends again: its
    seconds after the silence count in its ledger, and the silence does not."""
    rows = [f"{t},0,95\n" for t in range(0, 900)]
    rows += [f"{t},1,95\n" for t in range(0, 60)] + [f"{t},1,95\n" for t in range(700, 760)]
    path = tmp_path / "back.csv"
    path.write_text("time,gpu,util\n" + "".join(sorted(rows, key=lambda r: int(r.split(",")[0]))))
    result = replay(path)
    held = sum(result.ledger["1"].values())
    assert 100 <= held <= 140, result.ledger["1"]
    # GPU 0 throughout; GPU 1 to a gap after its first rows, and from its return to the end: not 2 x 900
    assert result.gpu_seconds <= 900 + (60 + gap_seconds()) + (900 - 700) + 2


def test_rows_too_far_apart_for_their_gpus_are_refused_in_one_line(
    tmp_path, capsys, monkeypatch, good_replay_s
):
    """Many GPUs kept alive by a row every few minutes: the analysis of their seconds is not what the file
    holds, and past a bound the file is refused (the bound is lowered here to keep the test short)."""
    monkeypatch.setattr(replay_module, "GPU_SECONDS_FREE", 5_000.0)
    path = tmp_path / "sparse.csv"
    path.write_text("time,gpu,util\n" + "".join(f"{299 * k},{i},50\n" for k in range(4) for i in range(100)))
    status, err, seconds = _cli(capsys, "replay", str(path))
    _one_line(status, err, 2, "sparse.csv", "GPU-seconds")
    assert_within(seconds, good_replay_s, LINEAR_TIMES, "refused for its GPU-seconds")


# ---- D4: gzip bombs of short lines -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"x\n" * 400_000, ("no readable row in", "from the start")),
        (b"\n" * 400_000, ("blank lines in a row",)),
        ((b"y" * 600 + b"\n") * 40_000, ("expands more than", "times")),
    ],
    ids=["unreadable", "blank", "ratio"],
)
def test_a_gzip_of_many_short_lines_ends_early_in_one_line(tmp_path, capsys, payload, words, good_replay_s):
    path = tmp_path / "b.csv.gz"
    path.write_bytes(gzip.compress(SMI_HEADER.encode() + payload, 9))
    status, err, seconds = _cli(capsys, "replay", str(path))
    _one_line(status, err, 2, *words)
    reading = _reading_s(path) + good_replay_s
    assert_within(seconds, reading, LINEAR_TIMES, "a gzip of short lines, against a pass over its lines")


def test_a_trace_with_scattered_unreadable_lines_still_reads(tmp_path, capsys):
    """The bound is on lines in a row without a row: unreadable lines between rows are skipped as before."""
    path = tmp_path / "t.csv"
    path.write_text(SMI_HEADER + "".join(f"{t}, 0, 50\nx\n\n" for t in range(200)))
    status, err, _ = _cli(capsys, "replay", str(path))
    assert status == 0 and "200 more rows skipped" not in err and "180 more rows skipped" in err


# ---- D5: one line, not a traceback -----------------------------------------------------------------------


def test_a_corrupt_gzip_body_is_one_line(tmp_path, capsys):
    path = tmp_path / "c.csv.gz"
    path.write_bytes(gzip.compress(SMI_HEADER.encode())[:10] + b"\xff" * 400)
    _one_line(*_cli(capsys, "replay", str(path))[:2], 2, "c.csv.gz", "not a readable gzip file")


@pytest.mark.parametrize(
    "stamp", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00Z", "1900/01/01 00:00:00", "10000-01-01"]
)
def test_a_time_outside_1970_to_9999_is_a_skipped_row(tmp_path, capsys, stamp):
    path = tmp_path / "y.csv"
    path.write_text(f"{SMI_HEADER}{stamp}, 0, 50\n")
    _one_line(*_cli(capsys, "replay", str(path))[:2], 2, "no readable rows")
    path.write_text(f"{SMI_HEADER}{stamp}, 0, 50\n" + "".join(f"{t}, 0, 50\n" for t in range(1, 30)))
    status, err, _ = _cli(capsys, "replay", str(path))
    assert status == 0 and "Traceback" not in err


@pytest.mark.parametrize(
    "start", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59-14:00", "-1", "1e12", "Tue Nov 24 10:00:00 1900"]
)
def test_a_start_outside_1970_to_9999_is_a_usage_error(tmp_path, capsys, start):
    path = tmp_path / "d.log"
    path.write_text("# gpu sm\n0 50\n")
    _one_line(*_cli(capsys, "replay", str(path), "--start", start)[:2], 2, "--start")


# ---- D6: pipes, FIFOs and stdin --------------------------------------------------------------------------


def _json(capsys, *args: str) -> str:
    """replay --json's summary line, with the trace's name taken out (it differs by how it was given)."""
    status = cli.main(["replay", *args, "--json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary.pop("trace") == args[0]
    return json.dumps(summary)


def test_a_pipe_given_as_a_path_reads_like_the_file(tmp_path, capsys):
    path = tmp_path / "good.csv"
    path.write_text(_good_csv())
    expected = _json(capsys, str(path))
    read, write = os.pipe()
    threading.Thread(target=_feed, args=(write, path.read_bytes()), daemon=True).start()
    try:
        assert _json(capsys, f"/dev/fd/{read}") == expected  # what `replay <(cat good.csv)` names
    finally:
        os.close(read)


def test_dash_reads_stdin_plain_or_gzip(tmp_path, capsys, monkeypatch):
    path = tmp_path / "good.csv"
    path.write_text(_good_csv())
    expected = _json(capsys, str(path))
    for data in (path.read_bytes(), gzip.compress(path.read_bytes())):
        read, write = os.pipe()
        threading.Thread(target=_feed, args=(write, data), daemon=True).start()
        with os.fdopen(read, "r") as stdin:
            monkeypatch.setattr(sys, "stdin", stdin)
            assert _json(capsys, "-") == expected


def test_a_fifo_no_one_writes_to_is_one_line_after_a_wait(tmp_path, capsys, monkeypatch, good_replay_s):
    monkeypatch.setattr(traces, "STREAM_WAIT_S", 0.3)
    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    status, err, seconds = _cli(capsys, "replay", str(fifo))
    _one_line(status, err, 2, "f.csv", "no program opened this FIFO for writing within 0.3 s")
    # one wait, not a wait per read (nor forever)
    assert_within(seconds, 0.3 + good_replay_s, 3, "a FIFO no one writes to")


def test_a_fifo_whose_writer_says_nothing_is_one_line_after_a_wait(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(traces, "STREAM_WAIT_S", 0.3)
    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # a writer that holds it open and writes nothing
    try:
        _one_line(*_cli(capsys, "replay", str(fifo))[:2], 2, "f.csv", "nothing to read for 0.3 s")
    finally:
        os.close(writer)


def test_a_report_path_that_is_a_fifo_or_a_device_is_refused_at_once(tmp_path, capsys):
    """A report is a file: a FIFO would hold the write until a reader came, /dev/full fail it, and the
    rename that writes a report whole would replace the device itself."""
    trace = tmp_path / "good.csv"
    trace.write_text(_good_csv())
    fifo = tmp_path / "r.html"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/full"), Path("/dev/null")):
        status, err, seconds = _cli(capsys, "replay", str(trace), "--report", str(path))
        _one_line(status, err, 2, f"--report: cannot write {path} (not a regular file)")
        assert seconds < 10, seconds
    assert stat.S_ISFIFO(fifo.stat().st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_processes_log_that_is_a_fifo_is_refused_at_once(tmp_path, capsys):
    trace = tmp_path / "good.csv"
    trace.write_text(_good_csv())
    fifo = tmp_path / "apps.csv"
    os.mkfifo(fifo)
    status, err, seconds = _cli(capsys, "replay", str(trace), "--processes", str(fifo))
    _one_line(status, err, 2, "apps.csv: not a regular file")
    assert seconds < 5, seconds


def _replay_with_file_size_limit(trace: Path, report: Path, limit: int) -> subprocess.CompletedProcess:
    """replay --report in a child whose files may not grow past ``limit`` bytes (RLIMIT_FSIZE): a write
    past it fails at the OS as on a full disk (EFBIG where a full one says ENOSPC)."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "exporter", "replay", str(trace), "--report", str(report)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
    )


def test_a_report_that_cannot_be_written_whole_leaves_the_previous_one(tmp_path):
    trace = tmp_path / "good.csv"
    trace.write_text(_good_csv())
    report = tmp_path / "r.html"
    report.write_text("the previous report\n")
    report.chmod(0o640)
    result = _replay_with_file_size_limit(trace, report, 16 * 1024)  # a page is hundreds of KB
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"gpu-bottleneck-exporter: --report: cannot write {report} (File too large)"), last
    assert last.endswith("(the previous file is kept)") and "Traceback" not in result.stderr, last
    assert report.read_text() == "the previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.csv", "r.html"]  # no temporary file left
    # with room, the same command replaces it whole, keeping its mode; a link to it stays a link
    link = tmp_path / "latest.html"
    link.symlink_to(report.name)
    result = _replay_with_file_size_limit(trace, link, 1 << 30)
    assert result.returncode == 0, result.stderr
    assert report.read_text().rstrip().endswith("</html>") and stat.S_IMODE(report.stat().st_mode) == 0o640
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == [
        "good.csv",
        "latest.html",
        "r.html",
    ]


def test_a_fifo_with_a_writer_reads_like_the_file(tmp_path, capsys):
    path = tmp_path / "good.csv"
    path.write_text(_good_csv())
    expected = _json(capsys, str(path))
    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(path.read_bytes()), daemon=True)
    writer.start()
    assert _json(capsys, str(fifo)) == expected
    writer.join(timeout=5)
    assert stat.S_ISFIFO(fifo.stat().st_mode) and not list(tmp_path.glob("replay-*"))


def test_a_stream_past_its_bound_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(traces, "MAX_STREAM_BYTES", 1 << 16)
    read, write = os.pipe()
    threading.Thread(target=_feed, args=(write, _good_csv(20_000).encode()), daemon=True).start()
    try:
        _one_line(*_cli(capsys, "replay", f"/dev/fd/{read}")[:2], 2, "save it to a file")
    finally:
        os.close(read)


def test_devices_end_in_one_line(capsys):
    _one_line(*_cli(capsys, "replay", "/dev/zero")[:2], 2, "a line longer than")
    _one_line(*_cli(capsys, "replay", "/dev/null")[:2], 2, "no readable rows")


def _feed(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as out, contextlib.suppress(BrokenPipeError):  # the reader stopped at its bound
        out.write(data)


# ---- D12 and D14: record and the simulator's parameters --------------------------------------------------


@pytest.mark.parametrize("duration", ["1e308", "inf", "40000000"])
def test_record_refuses_a_duration_past_a_year(tmp_path, capsys, duration):
    args = ("record", "--simulate", "healthy", "-o", str(tmp_path / "r.csv"), "--duration", duration)
    _one_line(*_cli(capsys, *args)[:2], 2, "--duration")
    assert not (tmp_path / "r.csv").exists()


@pytest.mark.parametrize(
    "scenario",
    [
        "power_cap:cap=-1",
        "power_cap:cap=0",
        "power_cap:cap=nan",
        "healthy:onset=nan",
        "healthy:onset=1e309",
        "healthy:onset=-5",
        "shm_exhaustion:shm_gib=inf",
        "shm_exhaustion:shm_gib=1e400",
        "shm_exhaustion:fill=nan",
    ],
)
def test_simulator_parameters_out_of_range_are_one_line(tmp_path, capsys, scenario):
    args = ("record", "--simulate", scenario, "-o", str(tmp_path / "r.csv"), "--duration", "1")
    _one_line(*_cli(capsys, *args)[:2], 2, "--simulate", scenario.split(":")[1].split("=")[0])


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_record_to_a_full_device_is_one_line():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter",
            "record",
            "--simulate",
            "healthy",
            "-o",
            "/dev/full",
            "--duration",
            "2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("gpu-bottleneck-exporter: cannot write /dev/full (No space left on device)"), last


def test_a_log_placed_by_a_long_period_is_not_refused(tmp_path, capsys, monkeypatch):
    """--period places a log's samples as far apart as its tool took them: that spacing is the user's."""
    monkeypatch.setattr(replay_module, "GPU_SECONDS_FREE", 5_000.0)
    path = tmp_path / "dmon.log"
    path.write_text("# gpu sm\n" + "".join(f"{i} 50\n" for _ in range(4) for i in range(20)))
    status, err, _ = _cli(capsys, "replay", str(path), "--period", "200")
    assert status == 0, err
    path.write_text("time,gpu,util\n" + "".join(f"{200 * k},{i},50\n" for k in range(4) for i in range(20)))
    _one_line(*_cli(capsys, "replay", str(path))[:2], 2, "GPU-seconds")  # the same spacing, as times
