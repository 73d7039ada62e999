"""Trace CSV: real nvidia-smi output in its variants, our extension columns, and the writer."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys

import pytest

from exporter.analysis.points import GpuPoint, HostPoint
from exporter.offline.traces import (
    TraceError,
    TraceReader,
    TraceWriter,
    check_columns,
    clipped_warnings,
    parse_cell,
    parse_timestamp,
    read_text,
)
from tests.conftest import REPO

MIB = 2**20


@pytest.mark.parametrize(
    ("cell", "unit", "value"),
    [
        ("97 %", "%", 0.97),
        ("97", "%", 0.97),
        ("612.35 W", "W", 612.35),
        ("612.35", "W", 612.35),
        ("62000 MiB", "MiB", 62000 * MIB),
        ("1980 MHz", "MHz", 1.98e9),
        ("1980", "MHz", 1.98e9),
        ("0x0000000000000004", "", 4.0),
        ("38", "", 38.0),
        ("[N/A]", "W", None),
        ("[Not Supported]", "%", None),
        ("", "W", None),
    ],
)
def test_cells(cell, unit, value):
    assert (
        parse_cell(cell, unit) == pytest.approx(value)
        if value is not None
        else parse_cell(cell, unit) is None
    )


def test_bad_cell_says_why():
    with pytest.raises(ValueError, match="not a number"):
        parse_cell("lots", "W")
    with pytest.raises(ValueError, match="unknown unit"):
        parse_cell("3 parsecs", "")


@pytest.mark.parametrize(
    "text",
    ["2026/03/01 10:00:00.200", "2026-03-01T10:00:00.200Z", "2026-03-01T11:00:00.200+01:00", "1772359200.2"],
)
def test_timestamps(text):
    assert parse_timestamp(text) == pytest.approx(1772359200.2)


SMI = """\
timestamp, index, name, utilization.gpu [%], memory.used [MiB], power.draw [W], clocks.sm [MHz], \
clocks_event_reasons.active
2026/03/01 10:00:00.000, 0, NVIDIA H100 80GB HBM3, 97 %, 62000 MiB, 612.35 W, 1980 MHz, 0x0000000000000000
2026/03/01 10:00:00.000, 1, NVIDIA H100 80GB HBM3, 0 %, 62000 MiB, 88.00 W, 1980 MHz, 0x0000000000000001
2026/03/01 10:00:00.500, 0, NVIDIA H100 80GB HBM3, 98 %, 62000 MiB, 600.00 W, 1980 MHz, 0x0000000000000000
"""


def test_nvidia_smi_csv_with_units():
    rows = read_text(SMI)
    assert [(r.gpu, r.t) for r in rows] == [("0", 0.0), ("1", 0.0), ("0", 0.5)]
    p = rows[0].point
    assert (p.util, p.mem_used_bytes, p.power_w, p.sm_clock_hz, p.reasons) == (
        0.97,
        62000 * MIB,
        612.35,
        1.98e9,
        0,
    )
    assert rows[1].point.reasons == 1 and rows[0].name == "NVIDIA H100 80GB HBM3"


def test_nounits_and_plain_commas_parse_the_same():
    nounits = (
        SMI.replace(" %", "").replace(" MiB", "").replace(" W", "").replace(" MHz", "").replace(", ", ",")
    )
    assert [r.point for r in read_text(nounits)] == [r.point for r in read_text(SMI)]


def test_rows_without_index_go_round_robin():
    no_index = "\n".join(
        ",".join(c for i, c in enumerate(line.split(",")) if i != 1) for line in SMI.splitlines()
    )
    rows = read_text(no_index, gpus=2)
    assert [r.gpu for r in rows] == ["0", "1", "0"]
    assert [r.gpu for r in read_text(no_index)] == [
        "0",
        "1",
        "0",
    ]  # inferred: two rows share the first timestamp


def test_uuid_identifies_gpus_without_index():
    text = "timestamp, uuid, utilization.gpu [%]\n1, GPU-b, 10 %\n1, GPU-a, 20 %\n2, GPU-b, 30 %\n"
    assert [r.gpu for r in read_text(text)] == ["0", "1", "0"]


def test_repeated_header_after_a_restart():
    text = SMI + SMI.splitlines()[0] + "\n" + SMI.splitlines()[1] + "\n"
    assert len(read_text(text)) == 4


def test_bad_rows_are_skipped_with_their_line_number(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(SMI + "2026/03/01 10:00:01.000, 0, H100, lots, 1 MiB, 1 W, 1 MHz, 0x0\n2026/03/01, 0\n")
    reader = TraceReader(path)
    assert len(list(reader)) == 3
    assert reader.stats.skipped == 2
    assert any(":5:" in w and "utilization.gpu" in w for w in reader.stats.warnings)
    assert any(":6:" in w and "fields" in w for w in reader.stats.warnings)


def test_unknown_columns_are_listed_once():
    reader_rows = (
        "timestamp, utilization.gpu [%], fan.speed [%], pstate\n1, 10 %, 30 %, P0\n2, 11 %, 30 %, P0\n"
    )
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.csv"
        path.write_text(reader_rows)
        reader = TraceReader(path)
        assert len(list(reader)) == 2
        assert reader.stats.unknown_columns == ["fan.speed [%]"]


def test_nvidia_smis_other_clocks_are_known_fields_not_unknown_columns(tmp_path):
    """clocks.mem and the graphics clocks are real query fields: read past, not reported as unknown."""
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp, utilization.gpu [%], clocks.sm [MHz], clocks.mem [MHz], clocks.gr [MHz], "
        "clocks.max.memory [MHz]\n1, 10 %, 1410, 1593, 1410, 1593\n2, 11 %, 1410, 1593, 1410, 1593\n"
    )
    reader = TraceReader(path)
    assert len(list(reader)) == 2
    assert reader.stats.unknown_columns == []
    assert check_columns(["timestamp", "utilization.gpu", "clocks.mem"])[-1] == "clocks.mem"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a, b\n1, 2\n", "not a header with a timestamp"),
        ("timestamp, fan.speed [%]\n1, 2\n", "names no column"),
    ],
)
def test_unusable_files_are_errors(tmp_path, content, message):
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(TraceError, match=message):
        list(TraceReader(path))


def test_missing_and_binary_files_are_errors(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        list(TraceReader(tmp_path / "absent.csv"))
    path = tmp_path / "b.csv"
    path.write_bytes(b"\xff\xfe\x00binary\x80\x81")
    with pytest.raises(TraceError, match="UTF-8"):
        list(TraceReader(path))


def test_gzip_compressed_trace_reads_like_the_plain_one(tmp_path):
    plain = tmp_path / "t.csv"
    plain.write_bytes(SMI.replace("\n", "\r\n").encode())  # Windows line ends survive decompression too
    packed = tmp_path / "t.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    rows, packed_rows = list(TraceReader(plain)), list(TraceReader(packed))
    assert len(rows) == 3
    assert [(r.line, r.gpu, r.t, r.point, r.name) for r in packed_rows] == [
        (r.line, r.gpu, r.t, r.point, r.name) for r in rows
    ]
    no_index = "\n".join(
        ",".join(c for i, c in enumerate(line.split(",")) if i != 1) for line in SMI.splitlines()
    )
    inferred = tmp_path / "n.csv.gz"
    inferred.write_bytes(gzip.compress(no_index.encode()))
    assert [r.gpu for r in TraceReader(inferred)] == ["0", "1", "0"]  # the GPU count is read from it too


def test_bad_gzip_files_are_errors(tmp_path):
    fake = tmp_path / "fake.csv.gz"
    fake.write_text(SMI)
    with pytest.raises(TraceError, match="gzip"):
        list(TraceReader(fake))
    truncated = tmp_path / "cut.csv.gz"  # cut short: read up to its last complete line (none here)
    truncated.write_bytes(gzip.compress(SMI.encode())[:40])
    reader = TraceReader(truncated)
    assert list(reader) == [] and reader.stats.cut_after_line == 0
    binary = tmp_path / "bin.csv.gz"
    binary.write_bytes(gzip.compress(b"\xff\xfe\x00binary\x80\x81"))
    with pytest.raises(TraceError, match="UTF-8"):
        list(TraceReader(binary))


def test_writer_output_reads_back_as_the_same_points():
    stream = io.StringIO()
    writer = TraceWriter(stream)
    host = HostPoint(
        t=10.0,
        iowait=0.05,
        core_busy_max=0.9,
        shm_used_bytes=2000 * MIB,
        shm_size_bytes=65536 * MIB,
        disk_read_bps=900 * MIB,
        psi_io=0.01,
        psi_cpu=0.02,
        psi_memory=0.0,
    )
    point = GpuPoint(
        t=1790000000.25,
        util=0.97,
        mem_util=0.45,
        power_w=612.35,
        power_limit_w=700.0,
        power_default_w=700.0,
        mem_used_bytes=62000 * MIB,
        mem_total_bytes=81559 * MIB,
        temp_c=70.0,
        temp_mem_c=74.0,
        sm_clock_hz=1.98e9,
        sm_clock_max_hz=1.98e9,
        reasons=0x60,
        sm_active=0.785,
        tensor_active=0.43,
        nvlink_tx_bps=25000 * MIB,
        nvlink_rx_bps=24500 * MIB,
        pcie_tx_bps=100 * MIB,
        pcie_rx_bps=1000 * MIB,
        nvlink_active=18.0,
        nvlink_links=18.0,
        nvlink_errors=3.0,
        p2p_failed=0.0,
        fabric_ready=True,
        log_silent_s=12.5,
        requests_running=3.0,
        requests_waiting=0.0,
    )
    writer.host(host)
    writer.gpu("3", "NVIDIA H100 80GB HBM3", point)
    writer.gpu("3", "NVIDIA H100 80GB HBM3", GpuPoint(t=1790000001.0))  # everything missing: [N/A]
    rows = read_text(stream.getvalue())
    back = rows[0].point
    assert rows[0].gpu == "3" and rows[0].name == "NVIDIA H100 80GB HBM3"
    for field in point.__dataclass_fields__:
        if field == "t":
            continue
        assert getattr(back, field) == pytest.approx(getattr(point, field), rel=1e-3, abs=1e-3), field
    assert rows[0].host.iowait == pytest.approx(0.05) and rows[0].host.shm_size_bytes == 65536 * MIB
    assert rows[1].t == pytest.approx(0.75) and rows[1].point.util is None


def test_impossible_values_are_read_as_missing_and_counted_per_column():
    rows = read_text(
        "timestamp, index, utilization.gpu [%], power.draw [W], temperature.gpu, clocks.sm [MHz], "
        "memory.used [MiB]\n"
        "1, 0, 250 %, 300 W, 9999, 1980 MHz, 100 MiB\n"
        "1, 1, 50 %, -20 W, 60, 20000 MHz, -5 MiB\n"
        "2, 0, 100 %, 5000 W, -40, 0 MHz, 0 MiB\n"
    )
    first, second, third = (r.point for r in rows)
    assert first.util is None and first.temp_c is None and first.power_w == 300.0
    assert second.power_w is None and second.sm_clock_hz is None and second.mem_used_bytes is None
    assert second.util == 0.5 and second.temp_c == 60.0
    assert (third.util, third.power_w, third.temp_c, third.sm_clock_hz) == (1.0, 5000.0, -40.0, 0.0)  # bounds


def test_clipped_values_are_one_warning_per_column_and_in_the_summary(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp, index, utilization.gpu [%], temperature.gpu\n"
        + "".join(f"{i}, 0, {250 if i % 2 else 90} %, 9999\n" for i in range(6))
    )
    reader = TraceReader(path)
    assert len(list(reader)) == 6
    assert reader.stats.clipped == {"utilization.gpu": 3, "temperature.gpu": 6}
    assert clipped_warnings(reader.stats) == [  # in the order first met
        "temperature.gpu: 6 value(s) outside -40..150 C (beyond any GPU's storage and shutdown limits) "
        "read as missing",
        "utilization.gpu: 3 value(s) outside 0-100 % (a share of time or capacity) read as missing",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", str(path), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    clipped = json.loads(result.stdout.splitlines()[-1])["clipped_values"]
    assert clipped == {"utilization.gpu": 3, "temperature.gpu": 6}
    assert result.stderr.count("utilization.gpu: 3 value(s) outside 0-100 %") == 1
    assert result.stderr.count("temperature.gpu: 6 value(s) outside -40..150 C") == 1
    human = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", str(path)], cwd=REPO, capture_output=True, text=True
    )
    assert "9 impossible value(s) read as missing: temperature.gpu 6, utilization.gpu 3" in human.stdout


def test_replay_gpus_that_disagree_with_the_index_column_is_an_error(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("timestamp, index, utilization.gpu [%]\n" + "".join(f"0, {g}, 90 %\n" for g in range(8)))
    said = r"the log has 8 GPUs \(its index column says so\), not the 3 of --gpus"
    with pytest.raises(TraceError, match=said):
        list(TraceReader(path, gpus=3))
    assert len(list(TraceReader(path, gpus=8))) == 8  # agreeing is fine
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", str(path), "--gpus", "3"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert (
        result.returncode == 2 and "the log has 8 GPUs" in result.stderr and "Traceback" not in result.stderr
    )
