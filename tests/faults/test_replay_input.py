"""replay on hostile input: every bad trace ends in one clear line on stderr and exit status 2, in bounded
time and memory; gaps start new segments instead of being replayed second by second. The reader's
invariants are checked on generated input (Hypothesis)."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import os
import subprocess
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.offline.replay import replay
from exporter.offline.traces import (
    BACK_JITTER_S,
    MAX_GPUS,
    MAX_LINE_CHARS,
    MAX_REASONS,
    TraceError,
    TraceReader,
)
from exporter.policy.thresholds import EVAL_INTERVAL, TRACE_GAP_PERIODS
from tests.conftest import REPO, run_replay

HEADER = "timestamp, index, utilization.gpu [%], clocks_event_reasons.active\n"
GAP_S = TRACE_GAP_PERIODS.value * EVAL_INTERVAL.value


def _one_line_error(result: subprocess.CompletedProcess, *words: str) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-bottleneck-exporter: ") and "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ("inf, 0, 50 %, 0x0", "timestamp 'inf' is not a time between 1970 and 9999"),
        ("nan, 0, 50 %, 0x0", "timestamp 'nan' is not a time between 1970 and 9999"),
        ("-5, 0, 50 %, 0x0", "timestamp '-5' is not a time"),
        ("1e300, 0, 50 %, 0x0", "timestamp '1e300' is not a time"),
        ("1, inf, 50 %, 0x0", "index 'inf' is not a GPU index"),
        ("1, nan, 50 %, 0x0", "index 'nan' is not a GPU index"),
        ("1, 1.5, 50 %, 0x0", "index '1.5' is not a GPU index"),
        ("1, 0, 50 %, inf", "'clocks_event_reasons.active': not a number: 'inf'"),
        ("1, 0, 50 %, 1e999", "not a finite number: '1e999'"),
        ("1, 0, 50 %, 2.5", "2.5 is not a reasons mask"),
        ("1, 0, 50 %, 0x" + "F" * 400, "not a finite number"),
        ("1, 0, " + "9" * 2000 + ", 0x0", "a field longer than 1024 characters"),
    ],
)
def test_a_trace_whose_only_row_is_bad_is_one_line_and_status_2(tmp_path, row, said):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + row + "\n")
    _one_line_error(run_replay(path), "no readable rows", said, "t.csv:2")


def test_bad_rows_among_good_ones_are_skipped_and_named(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "1, 0, 50 %, 0x0\n2, inf, 50 %, 0x0\n3, 0, 50 %, 1e999\n4, 0, 50 %, 0x0\n")
    result = run_replay(path, "--json")
    assert result.returncode == 0, result.stderr
    assert "t.csv:3: index 'inf' is not a GPU index" in result.stderr
    assert "t.csv:4: column 'clocks_event_reasons.active': not a finite number" in result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["skipped_rows"] == 2


def test_dev_zero_ends_at_the_first_line_bound():
    """/dev/zero is one endless line: reading stops at the bound instead of growing to gigabytes."""
    said = f"/dev/zero:1: a line longer than {MAX_LINE_CHARS} characters: not a trace"
    _one_line_error(run_replay("/dev/zero"), said)


def test_a_gzip_bomb_of_one_endless_line_ends_at_the_bound(tmp_path):
    path = tmp_path / "bomb.csv.gz"
    with gzip.open(path, "wb", compresslevel=9) as handle:
        chunk = b"9" * (1 << 20)
        for _ in range(64):  # 64 MiB of one line, about 64 KiB compressed
            handle.write(chunk)
    assert path.stat().st_size < 1 << 20
    _one_line_error(run_replay(path), "bomb.csv.gz:1: a line longer than")


def test_a_binary_file_is_not_utf8(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes("timestamp, utilization.gpu\n1, 50\n".encode("utf-16"))
    _one_line_error(run_replay(path), "not a UTF-8 text file")


def test_a_gzip_file_cut_short_is_replayed_up_to_its_last_complete_line(tmp_path):
    """A copy that stopped: what is there is replayed, and stderr, the JSON and the report say where the
    file ends. The cut line itself is dropped, not read with digits missing."""
    text = HEADER + "".join(f"{1000 + i}, {i % 4}, {(i * 37) % 101} %, 0x0\n" for i in range(4000))
    data = gzip.compress(text.encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    report = tmp_path / "cut.html"
    result = run_replay(path, "--json", "--report", str(report))
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "cut short" in line]
    summary = json.loads(result.stdout.splitlines()[-1])
    line = summary["cut_after_line"]
    assert 100 < line < 4001
    assert said == [
        f"gpu-bottleneck-exporter: {path}: the file is cut short (its gzip stream ends early): replayed up "
        f"to line {line}, {line - 2} s into the trace; the rest is missing"  # one row a second
    ]
    assert summary["rows"] == line - 1 and summary["skipped_rows"] == 0
    assert f"replayed up to line {line}," in report.read_text()
    # the whole file: nothing said
    path.write_bytes(data)
    result = run_replay(path, "--json")
    assert result.returncode == 0 and "cut short" not in result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["cut_after_line"] is None


def test_a_gzip_file_cut_before_its_first_line_is_one_line(tmp_path):
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(gzip.compress((HEADER + "1, 0, 50 %, 0x0\n").encode())[:30])
    _one_line_error(run_replay(path), "no readable rows (the file is cut short after line 0)")


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_a_utf8_bom_is_read_as_the_start_of_the_header(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    data = ("\ufeff" + HEADER + "1, 0, 50 %, 0x0\n2, 0, 60 %, 0x0\n").encode()
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    result = run_replay(path, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["rows"] == 2


@pytest.mark.parametrize(("second", "gap"), [(1.79e9, 1.79e9 - 3), (3 + 30 * 86400, 30 * 86400.0)])
def test_a_jump_in_time_starts_a_new_segment_and_is_reported(tmp_path, second, gap):
    """1 -> 1.79e9 took hours when every second of the gap was evaluated; now it is two segments."""
    path = tmp_path / "t.csv"
    rows = [f"{t}, 0, 97 %, 0x0\n" for t in (1, 2, 3)] + [f"{second + i}, 0, 97 %, 0x0\n" for i in range(3)]
    path.write_text(HEADER + "".join(rows))
    result = run_replay(path, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["gaps"] == [{"line": 5, "seconds": round(gap, 1)}] and summary["rows"] == 6
    assert f"1 gap(s) longer than {GAP_S:.0f} s, each starting a new segment" in result.stderr
    human = run_replay(path)
    assert "4 s of samples over" in human.stdout and "1 gap(s) in the samples" in human.stdout


def test_a_verdict_firing_before_a_gap_ends_where_the_samples_end(tmp_path):
    """A GPU idle with its memory held fires idle_allocated; the gap ends the episode at the last sample
    before it instead of leaving it open across the silence."""
    path = tmp_path / "t.csv"
    head = "timestamp, index, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
    before = [f"{t}, 0, 0 %, 60000 MiB, 81559 MiB\n" for t in range(1, 1200)]
    after = [f"{t}, 0, 98 %, 60000 MiB, 81559 MiB\n" for t in range(100001, 100031)]
    path.write_text(head + "".join(before + after))
    result = replay(path)
    episodes = [e for e in result.episodes if e.kind == "idle_allocated"]
    assert episodes and episodes[0].end == 1198.0  # t of the last row before the gap
    assert [line for line, _ in result.stats.gaps] == [len(before) + 2]


def test_timestamps_a_moment_back_are_reported_and_skipped(tmp_path):
    """Up to BACK_JITTER_S back is clock jitter: the row is skipped. (Further back is another run: a new
    segment, tests/test_trace_awkward.py.)"""
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "10, 0, 50 %, 0x0\n11, 0, 50 %, 0x0\n10.5, 0, 50 %, 0x0\n12, 0, 50 %, 0x0\n")
    result = run_replay(path, "--json")
    assert result.returncode == 0, result.stderr
    assert "t.csv:4: timestamp -0.5 s before GPU 0's previous row's (time goes back); row skipped" in (
        result.stderr
    )
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["backward_rows"] == 1 and summary["rows"] == 3


def test_a_restart_whose_clock_went_back_is_a_new_segment(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "10, 0, 50 %, 0x0\n11, 0, 50 %, 0x0\n" + HEADER + "3, 0, 50 %, 0x0\n")
    reader = TraceReader(path)
    assert [row.segment for row in reader] == [0, 0, 1]
    assert reader.stats.gaps == [(5, -8.0)] and reader.stats.backwards == 0


# ---- properties of the reader on generated input -----------------------------------------------------

CELL = st.one_of(
    st.sampled_from(["inf", "-inf", "nan", "NaN", "1e999", "-0", "[N/A]", "", "0x", "0xFFFFFFFFFFFFFFFFFF"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.text(alphabet="0123456789.eE+-x%MHzWib /[]", max_size=12),
)
ROW = st.lists(CELL, min_size=4, max_size=4).map(lambda cells: ", ".join(cells))
HOSTILE = st.lists(st.one_of(ROW, st.just(HEADER.strip()), st.text(max_size=40)), max_size=30)


def _read(text: str | bytes) -> tuple[list, TraceReader]:
    with tempfile.NamedTemporaryFile("wb", suffix=".csv", delete=False) as handle:
        handle.write(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    try:
        reader = TraceReader(handle.name)
        try:
            return list(reader), reader
        except TraceError:
            return [], reader
    finally:
        os.unlink(handle.name)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE)
def test_any_text_reads_as_rows_or_one_trace_error(lines):
    """Whatever the file holds, the reader yields sane rows or raises TraceError: never another
    exception, never a non-finite value, an impossible index or a reasons mask wider than 64 bits."""
    rows, reader = _read(HEADER + "\n".join(lines) + "\n")
    for row in rows:
        assert math.isfinite(row.t)
        assert 0 <= int(row.gpu) < MAX_GPUS
        values = [(name, getattr(row.point, name)) for name in row.point.__slots__ if name != "extra"]
        values += list(row.point.extra.items())  # the catalog's signals that have no field of their own
        for name, value in values:
            assert value is None or isinstance(value, bool) or math.isfinite(value), (name, value)
        assert row.point.reasons is None or 0 <= row.point.reasons < MAX_REASONS
    assert reader.stats.rows == len(rows)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_read_as_rows_or_one_trace_error(data):
    _read(data)  # raises anything but TraceError on a bug


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(0.0, 5.0),  # ordinary steps
            st.floats(GAP_S + 1, 1e9),  # gaps
            st.floats(-50.0, -0.001),  # time going back
        ),
        min_size=1,
        max_size=40,
    )
)
def test_time_goes_forward_within_a_segment_and_gaps_are_counted(steps):
    """Each GPU's rows go forward in time within a segment; every step longer than the gap starts a
    segment, and so does a step back of more than BACK_JITTER_S (another run, kept); a step back within it
    is a skipped row. Replay's clock goes forward across segments."""
    ts, lines, expected_gaps, expected_back, went_back = 1000.0, ["1000, 0, 50 %, 0x0"], 0, 0, 0
    for step in steps:
        candidate = ts + step
        if ts - BACK_JITTER_S <= candidate < ts:
            expected_back += 1
        else:
            went_back += candidate < ts
            expected_gaps += candidate < ts or step > GAP_S
            ts = candidate
        lines.append(f"{candidate!r}, 0, 50 %, 0x0")
    rows, reader = _read(HEADER + "\n".join(lines) + "\n")
    assert reader.stats.gap_count == expected_gaps and reader.stats.backwards == expected_back
    assert reader.stats.back_steps == went_back
    assert len(reader.stats.gaps) == min(expected_gaps, TraceReader.MAX_WARNINGS)
    assert len(rows) == len(steps) + 1 - expected_back
    for before, after in itertools.pairwise(rows):
        assert after.segment >= before.segment and after.t >= before.t
        if after.segment == before.segment:
            assert 0 <= after.t - before.t <= GAP_S


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(GAP_S + 1, 3e9), min_size=1, max_size=5))
def test_replay_evaluates_only_the_sampled_seconds(gaps):
    """However long the gaps, replay evaluates about one tick per sampled second, not per second of
    the silence between segments."""
    t, text = 1.0, HEADER
    for gap in gaps:
        text += "".join(f"{t + i}, 0, 97 %, 0x0\n" for i in range(3))
        t += 2 + gap
    text += "".join(f"{t + i}, 0, 97 %, 0x0\n" for i in range(3))
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as handle:
        handle.write(text)
    ticks: list[float] = []
    try:
        result = replay(handle.name, on_tick=lambda t, gpu, state: ticks.append(t))
    finally:
        os.unlink(handle.name)
    assert result.stats.gap_count == len(gaps)
    assert len(ticks) <= 3 * (len(gaps) + 1)


def test_what_a_hostile_file_makes_the_reader_remember_is_bounded(tmp_path):
    """A gap on every row, a new unknown column in every header: counted, a few kept."""
    path = tmp_path / "t.csv"
    rows = [f"{HEADER.strip()}, junk{i}\n{1 + i * 10 * GAP_S}, 0, 50 %, 0x0, 1\n" for i in range(300)]
    path.write_text("".join(rows))
    reader = TraceReader(path)
    assert len(list(reader)) == 300
    assert reader.stats.gap_count == 299 and len(reader.stats.gaps) == TraceReader.MAX_WARNINGS
    assert len(reader.stats.unknown_columns) == 100
    result = run_replay(path, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["gap_count"] == 299
    assert "299 gap(s) longer than" in result.stderr and "and 294 more" in result.stderr


# ---- the other formats (exporter/offline/traceformats) on hostile input -------------------------------

FORMATS = REPO / "tests" / "data" / "trace_formats"
# each sample's opening lines: enough to be detected as its format
FORMAT_HEADS = {
    name: "".join((FORMATS / name).read_text().splitlines(keepends=True)[:lines])
    for name, lines in (
        ("smi_watch_h100.log", 12),
        ("dmon_dt_h100.log", 2),
        ("dmon_pucvmet_a100.log", 2),
        ("gpustat_v100.log", 2),
        ("gpustat_4090_color.log", 1),
        ("dcgmi_dmon_h100.log", 2),
        ("poller_fraction.csv", 1),
        ("poller_no_time.csv", 1),
    )
}


@pytest.mark.parametrize("name", sorted(FORMAT_HEADS))
def test_an_endless_line_after_a_format_header_ends_at_the_bound(tmp_path, name):
    path = tmp_path / "bomb.log.gz"
    with gzip.open(path, "wb", compresslevel=9) as handle:
        handle.write(FORMAT_HEADS[name].encode())
        chunk = b"9" * (1 << 20)
        for _ in range(64):
            handle.write(chunk)
    _one_line_error(run_replay(path), "a line longer than", "not a trace")


def _mutated(lines: list[str]) -> st.SearchStrategy[str]:
    """A line of the sample with a stretch replaced by text in the formats' alphabet."""
    alphabet = "0123456789.-+e%|/[]()#:, NAERR!?°'CWMiBGPUIDx\t\x1b"
    return st.tuples(
        st.sampled_from(lines),
        st.integers(0, 200),
        st.integers(0, 20),
        st.text(alphabet=alphabet, max_size=20),
    ).map(lambda t: t[0][: t[1]] + t[3] + t[0][t[1] + t[2] :])


@pytest.mark.parametrize("name", sorted(FORMAT_HEADS))
def test_any_lines_in_a_format_read_as_rows_or_one_trace_error(name):
    """Whatever follows a format's header, its reader yields sane rows (finite values and times, GPU
    indexes in bounds) or the file ends in one TraceError."""
    sample = (FORMATS / name).read_text().splitlines()
    expected = TraceReader(FORMATS / name)
    list(expected)
    lines = st.lists(st.one_of(st.sampled_from(sample), _mutated(sample), st.text(max_size=60)), max_size=40)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(lines)
    def check(body: list[str]) -> None:
        rows, reader = _read(FORMAT_HEADS[name] + "\n".join(body) + "\n")
        assert reader.stats.format in ("", expected.stats.format)  # "": not UTF-8
        for row in rows:
            assert math.isfinite(row.t) and 0 <= int(row.gpu) < MAX_GPUS
            for field in row.point.__slots__:
                value = getattr(row.point, field)
                if field != "extra":
                    assert value is None or isinstance(value, bool) or math.isfinite(value), (field, value)
        assert reader.stats.rows == len(rows)

    check()
