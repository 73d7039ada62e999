"""The logs people actually have: a CSV without a header (``--columns``), GPUs interleaved without an
index column, two runs appended in one file (time goes back). Each through the real ``replay`` command or
the reader, on a small file written here."""

from __future__ import annotations

import gzip
import itertools
import json
import subprocess
from pathlib import Path

import pytest

from exporter.offline.replay import replay
from exporter.offline.traceformats import interleave
from exporter.offline.traces import (
    MIB,
    TraceError,
    TraceReader,
    parse_columns,
    read_text,
)
from exporter.policy.thresholds import EVAL_INTERVAL, TRACE_GAP_PERIODS
from tests.conftest import REPO, run_replay

GAP_S = TRACE_GAP_PERIODS.value * EVAL_INTERVAL.value
T0 = 1772359200.0  # 2026-03-01 10:00:00 UTC
POLLER = "timestamp,utilization.gpu,power.draw,memory.used,memory.total"


def _summary(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def _one_line_error(result: subprocess.CompletedProcess, *words: str) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _smi_time(ts: float) -> str:
    ms = round((ts - T0) * 1000)
    return f"2026/03/01 10:{ms // 60000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


# ---- a CSV without a header: --columns ---------------------------------------------------------------


def _poller(path: Path, rows: int = 30) -> Path:
    """epoch,util,watts,mib_used,mib_total with no header line: what a small poller writes."""
    path.write_text("".join(f"{T0 + i + 0.25:.2f},{97 - i % 3},612.3,62000,81559\n" for i in range(rows)))
    return path


def test_a_headerless_csv_reads_with_columns(tmp_path):
    path = _poller(tmp_path / "poller.csv")
    result = run_replay(path, "--json", "--columns", POLLER)
    summary = _summary(result)
    assert summary["rows"] == 30 and summary["gpus"] == 1 and summary["skipped_rows"] == 0
    assert summary["seconds"] == 29.0 and result.stderr == ""
    rows = list(TraceReader(path, columns=POLLER.split(",")))
    point = rows[0].point  # nvidia-smi's units where the file gives none: %, W, MiB
    assert (point.util, point.power_w, point.mem_used_bytes, point.mem_total_bytes) == (
        0.97,
        612.3,
        62000 * MIB,
        81559 * MIB,
    )


def test_columns_take_units_index_nvidia_smi_times_and_skipped_columns(tmp_path):
    """Names with their unit suffix, an index column, nvidia-smi's own time format, values with units,
    and '-' for a column not to read."""
    path = tmp_path / "noheader.csv.gz"
    lines = [
        f"{_smi_time(T0 + s)}, {gpu}, GPU-x{gpu}, {90 - gpu} %, {600 + gpu:.2f} W, 1980 MHz, 45\n"
        for s in range(5)
        for gpu in (1, 0)  # the index says which GPU, whatever the order
    ]
    path.write_bytes(gzip.compress("".join(lines).encode()))
    columns = "timestamp,index,-,utilization.gpu [%],power.draw [W],clocks.sm [MHz],temperature.gpu"
    summary = _summary(run_replay(path, "--json", "--columns", columns))
    assert summary["gpus"] == 2 and summary["rows"] == 10 and summary["unknown_columns"] == []
    rows = list(TraceReader(path, columns=columns.split(",")))
    assert [(r.gpu, r.t) for r in rows[:3]] == [("1", 0.0), ("0", 0.0), ("1", 1.0)]
    assert (rows[1].point.util, rows[1].point.sm_clock_hz, rows[1].point.temp_c) == (0.9, 1.98e9, 45.0)


def test_a_headerless_csv_without_columns_is_one_line_suggesting_them(tmp_path):
    line = _one_line_error(run_replay(_poller(tmp_path / "poller.csv")), "poller.csv:1: no header line")
    assert "5 fields" in line and "--columns" in line and "name the 5 columns" in line


def test_a_header_that_is_not_data_keeps_its_own_message(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("epoch,fan,watts_now\n1,2,3\n")
    line = _one_line_error(run_replay(path), "not a log replay reads")
    assert "--columns" not in line


def test_an_unknown_column_name_is_one_line_with_close_matches(tmp_path):
    path = _poller(tmp_path / "poller.csv")
    line = _one_line_error(
        run_replay(path, "--columns", "timestamp,utilisation.gpu,power.draw,memory.used,memory.total"),
        "--columns: 'utilisation.gpu' is not a column replay reads",
    )
    assert "did you mean utilization.gpu" in line
    line = _one_line_error(run_replay(path, "--columns", "timestamp,util,power"), "'util'")
    assert "utilization.gpu, utilization.memory" in line  # the fields it abbreviates
    line = _one_line_error(run_replay(path, "--columns", "timestamp,zzz"), "'zzz'")
    assert "such as timestamp, index" in line


@pytest.mark.parametrize(
    ("columns", "said"),
    [
        ("utilization.gpu,power.draw", "no timestamp"),
        ("timestamp,index,name", "no column with a GPU's values"),
        ("timestamp,utilization.gpu,utilization.gpu [%]", "utilization.gpu is named twice"),
        ("timestamp,,utilization.gpu", "an empty name"),
        (",".join(["-"] * 600), "600 names"),
    ],
)
def test_columns_mistakes_say_what_is_wrong(columns, said):
    with pytest.raises(ValueError, match=said):
        parse_columns(columns)


def test_columns_mistakes_on_the_command_line_are_one_line(tmp_path):
    _one_line_error(
        run_replay(_poller(tmp_path / "p.csv"), "--columns", "power.draw"), "--columns: no timestamp"
    )


def test_columns_for_a_file_with_its_own_header_or_another_format_is_one_line(tmp_path):
    with_header = tmp_path / "h.csv"
    with_header.write_text("timestamp, utilization.gpu [%]\n1772359200, 50 %\n")
    _one_line_error(run_replay(with_header, "--columns", POLLER), "h.csv:1: the file has a header line")
    dmon = REPO / "tests" / "data" / "trace_formats" / "dmon_dt_h100.log"
    _one_line_error(run_replay(dmon, "--columns", POLLER), "the file is nvidia-smi dmon", "--columns is only")


def test_columns_that_do_not_fit_the_rows_say_so(tmp_path):
    path = _poller(tmp_path / "poller.csv", rows=3)
    _one_line_error(
        run_replay(path, "--columns", "timestamp,utilization.gpu,power.draw,memory.used"),
        "no readable rows",
        "5 fields where --columns names 4",
    )


# ---- GPUs interleaved without an index column --------------------------------------------------------

SMI_HEADER = "timestamp, name, utilization.gpu [%], power.draw [W], memory.total [MiB]\n"


def _interleaved(gpus: int, samples: int) -> str:
    """nvidia-smi without index at -lms 200: ``gpus`` rows per sample, each GPU stamped 3 ms after the
    one before."""
    rows = []
    for s, gpu in itertools.product(range(samples), range(gpus)):
        ts = _smi_time(T0 + s * 0.2 + gpu * 0.003)
        util, watts = (90, 600) if gpu % 2 == 0 else (10, 200)
        rows.append(f"{ts}, NVIDIA H100 80GB HBM3, {util} %, {watts} W, 81559 MiB\n")
    return SMI_HEADER + "".join(rows)


def test_a_real_trace_without_its_index_reads_as_with_it(tmp_path):
    """examples/traces/real/r05: two GPUs stamped 1-3 ms apart in each sample. Without its index column
    it reads to the same GPUs, rows and times."""
    source = REPO / "examples" / "traces" / "real" / "r05_titanx2_gloo_comm_bound.csv.gz"
    lines = gzip.decompress(source.read_bytes()).decode().splitlines()
    path = tmp_path / "noindex.csv"
    path.write_text(
        "".join(",".join(c for i, c in enumerate(line.split(",")) if i != 1) + "\n" for line in lines)
    )
    with_index, without = list(TraceReader(source)), TraceReader(path)
    rows = list(without)
    assert without.stats.gpus == ["0", "1"] and without.stats.gpus_hint is None
    assert [(r.gpu, r.t, r.point) for r in rows] == [(r.gpu, r.t, r.point) for r in with_index]


def test_interleaved_gpus_with_times_ms_apart_read_as_that_many(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(_interleaved(gpus=4, samples=20))
    result = run_replay(path, "--json")
    summary = _summary(result)
    assert summary["gpus"] == 4 and summary["rows"] == 80 and summary["skipped_rows"] == 0
    assert result.stderr == ""
    rows = read_text(path.read_text())
    assert [r.gpu for r in rows[:6]] == ["0", "1", "2", "3", "0", "1"]


def test_gpus_given_always_wins(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(_interleaved(gpus=4, samples=20))
    assert _summary(run_replay(path, "--json", "--gpus", "2"))["gpus"] == 2
    assert {r.gpu for r in read_text(path.read_text(), gpus=1)} == {"0"}


def test_group_sizes_that_vary_read_as_before_with_one_hint(tmp_path):
    """A GPU's row missing now and then: the rows look like 2 GPUs, not surely. Read as before (rows that
    share the first timestamp exactly: one), with one line saying to pass --gpus 2."""
    text = _interleaved(gpus=2, samples=30)
    lines = text.splitlines(keepends=True)
    path = tmp_path / "t.csv"
    path.write_text("".join(line for i, line in enumerate(lines) if i not in (16, 42)))  # GPU 1, twice
    result = run_replay(path, "--json")
    assert _summary(result)["gpus"] == 1
    hints = [line for line in result.stderr.splitlines() if "interleaved" in line]
    assert len(hints) == 1 and "pass --gpus 2" in hints[0] and "read as 1 GPU(s)" in hints[0]
    assert result.stderr.strip() == hints[0]  # nothing else said
    assert "interleaved" not in run_replay(path, "--json", "--gpus", "2").stderr


def test_per_gpu_cells_that_cycle_settle_ragged_times(tmp_path):
    """Times too ragged to group every sample (GPU 1 stamped 80 ms late in some), but the GPUs' names
    cycle with period 2: two GPUs."""
    rows = []
    for s in range(30):
        for gpu, name in enumerate(("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")):
            late = 80 if gpu and s % 3 == 0 else 3 * gpu
            ts = _smi_time(T0 + s * 0.2 + late / 1000)
            rows.append(f"{ts}, {name}, 50 %, 300 W, 81559 MiB\n")
    reader = TraceReader(_write(tmp_path, SMI_HEADER + "".join(rows)))
    assert {r.gpu: r.name for r in reader} == {"0": "NVIDIA H100 80GB HBM3", "1": "NVIDIA A100-SXM4-80GB"}


def test_per_gpu_cells_that_do_not_cycle_leave_the_count_in_doubt(tmp_path):
    """Two rows per timestamp, but a name that changes every two samples is no GPU's: not read as two."""
    names = ("A", "A", "B", "B")
    rows = [
        f"{_smi_time(T0 + s * 0.2 + gpu * 0.003)}, {names[(2 * s + gpu) // 2 % 4]}, 50 %, 300 W, 1 MiB\n"
        for s in range(20)
        for gpu in range(2)
    ]
    reader = TraceReader(_write(tmp_path, SMI_HEADER + "".join(rows)))
    assert {r.gpu for r in reader} == {"0"} and reader.stats.gpus_hint == 2


@pytest.mark.parametrize("period", [1.0, 0.2, 0.02])
def test_one_gpu_per_row_with_distinct_times_is_unchanged(tmp_path, period):
    """One GPU sampled every ``period`` seconds (even faster than a sample's rows may spread) is one GPU,
    every row read."""
    rows = [f"{T0 + i * period:.3f}, NVIDIA H100, 50 %, 300 W, 81559 MiB\n" for i in range(200)]
    reader = TraceReader(_write(tmp_path, SMI_HEADER + "".join(rows)))
    assert len(list(reader)) == 200 and reader.stats.gpus == ["0"] and reader.stats.gpus_hint is None


def test_an_index_column_is_unchanged(tmp_path):
    """Rows ms apart in any index order: the index says which GPU, as before."""
    header = "timestamp, index, utilization.gpu [%]\n"
    rows = [
        f"{T0 + s + (1 - gpu) * 0.003:.3f}, {gpu}, {gpu * 10} %\n" for s in range(10) for gpu in (1, 0, 2)
    ]
    reader = TraceReader(_write(tmp_path, header + "".join(rows)))
    assert [r.gpu for r in list(reader)[:4]] == ["1", "0", "2", "1"] and reader.stats.gpus_hint is None


def test_the_guess_reads_a_bounded_number_of_rows():
    """However long the log, the count is guessed from its start: an endless sample of one timestamp
    is read up to SCAN_ROWS rows, and gives no count."""
    endless = ((T0, ("x",)) for _ in itertools.count())
    assert interleave.guess(endless) == interleave.Guess()
    taken = iter(itertools.repeat((T0, ()), interleave.SCAN_ROWS + 10))
    interleave.guess(taken)
    assert len(list(taken)) == 10


# ---- two runs appended: time goes back ---------------------------------------------------------------

INDEXED = "timestamp, index, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"


def _run(start: float, seconds: int, util: str, gpus: int = 2) -> str:
    return "".join(
        f"{start + s:.1f}, {gpu}, {util}, 60000 MiB, 81559 MiB\n"
        for s in range(seconds)
        for gpu in range(gpus)
    )


def test_two_runs_appended_are_both_kept_and_said_once(tmp_path):
    """The second run, recorded earlier, is kept whole as a new segment after the first on replay's
    clock; one line says where time went back, instead of a warning per row."""
    path = tmp_path / "t.csv"
    path.write_text(INDEXED + _run(T0 + 5000, 100, "95 %") + _run(T0, 65, "96 %"))
    result = run_replay(path, "--json")
    summary = _summary(result)
    assert summary["rows"] == 330 and summary["skipped_rows"] == 0 and summary["backward_rows"] == 0
    assert summary["gap_count"] == 1 and summary["gaps"] == [{"line": 202, "seconds": -5099.0}]
    assert summary["seconds"] == 99 + GAP_S + 64  # the later run placed one gap after the first
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "time went back 1 time(s), at line 202 (5099 s back)" in lines[0]
    rows = list(TraceReader(path))
    assert [r.segment for r in rows[198:202]] == [0, 0, 1, 1]
    assert [r.t for r in rows[198:202]] == [99.0, 99.0, 99.0 + GAP_S, 99.0 + GAP_S]


def test_many_runs_appended_are_one_line(tmp_path):
    """A poller restarted 129 times, each run's clock from zero (seconds since it started)."""
    path = tmp_path / "t.csv"
    path.write_text("".join(f"{1 + s}, {50 + s} %\n" for _ in range(130) for s in range(5)))
    result = run_replay(path, "--json", "--columns", "timestamp,utilization.gpu")
    summary = _summary(result)
    assert summary["rows"] == 650 and summary["gap_count"] == 129 and summary["skipped_rows"] == 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "time went back 129 time(s), at line 6 (4 s back)" in lines[0]
    assert lines[0].count("s back)") == 5 and "and 124 more" in lines[0]


def test_a_verdict_of_the_first_run_ends_where_its_samples_end(tmp_path):
    """A GPU idle with its memory held fires idle_allocated in the first run; the step back ends the
    episode at that run's last sample, as a gap does, and the second run is analysed afresh."""
    path = tmp_path / "t.csv"
    path.write_text(INDEXED + _run(T0 + 90000, 1200, "0 %", gpus=1) + _run(T0, 60, "98 %", gpus=1))
    result = replay(path)
    episodes = [e for e in result.episodes if e.kind == "idle_allocated"]
    assert episodes and episodes[0].end == 1199.0
    assert result.stats.rows == 1260 and result.stats.back_steps == 1
    assert result.seconds == 1199.0 + GAP_S + 59


def test_a_restart_going_back_is_placed_after_the_first_run(tmp_path):
    """nvidia-smi restarted into the same file, its header again: the restart's rows follow too."""
    header = "timestamp, index, utilization.gpu [%]\n"
    path = _write(tmp_path, header + "10, 0, 50 %\n11, 0, 50 %\n" + header + "3, 0, 50 %\n4, 0, 50 %\n")
    rows = list(TraceReader(path))
    assert [(r.segment, r.t) for r in rows] == [(0, 0.0), (0, 1.0), (1, 1.0 + GAP_S), (1, 2.0 + GAP_S)]


def test_bad_input_in_an_awkward_file_is_still_one_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("1772359200," + "9" * 70000 + "\n")
    _one_line_error(run_replay(path, "--columns", "timestamp,utilization.gpu"), "a line longer than")
    with pytest.raises(TraceError, match="not a UTF-8"):
        path.write_bytes(b"\xff\xfe1,2\n")
        list(TraceReader(path, columns=["timestamp", "utilization.gpu"]))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "t.csv"
    path.write_text(text)
    return path
