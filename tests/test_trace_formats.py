"""replay reads the GPU logs people have, each format chosen from the content (exporter/offline/traceformats):
every reader on samples in its tool's own layout (tests/data/trace_formats), and the same files through
the real command."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.offline import traceformats
from exporter.offline.traceformats import dcgmi, dmon, gpustat, plain_csv, smi_screen
from exporter.offline.traceformats.base import find_ctime, parse_time, strip_ansi
from exporter.offline.traces import TraceError, TraceReader, TraceRow
from tests.conftest import EXAMPLES, REPO, run_replay

DATA = REPO / "tests" / "data" / "trace_formats"
MIB = 2**20
T0 = 1795514400.0  # Tue Nov 24 10:00:00 2026 UTC


def _read(path: Path | str, **kwargs) -> tuple[list[TraceRow], TraceReader]:
    reader = TraceReader(path, **kwargs)
    return list(reader), reader


def _column(rows: list[TraceRow], gpu: str, attr: str) -> list[float | None]:
    return [getattr(r.point, attr) for r in rows if r.gpu == gpu]


# ---- nvidia-smi screens ------------------------------------------------------------------------------


def test_nvidia_smi_loop_screens_driver_470_layout():
    rows, reader = _read(DATA / "smi_loop_a5000.log")
    assert reader.stats.format == "nvidia-smi screens" and reader.stats.period is None
    assert [(r.gpu, r.t) for r in rows] == [
        ("0", 0.0),
        ("1", 0.0),
        ("0", 2.0),
        ("1", 2.0),
        ("0", 4.0),
        ("1", 4.0),
    ]
    assert reader.stats.first_timestamp == T0 and {r.name for r in rows} == {"NVIDIA RTX A5000"}
    assert _column(rows, "0", "util") == pytest.approx([0.78, 0.99, 1.0])
    assert _column(rows, "1", "power_w") == [91.0, None, 188.0]  # ERR! is missing
    assert _column(rows, "0", "power_limit_w") == [230.0] * 3
    assert _column(rows, "0", "mem_used_bytes") == [8123 * MIB, 8123 * MIB, 8125 * MIB]
    assert _column(rows, "1", "mem_total_bytes") == [24564 * MIB] * 3
    assert _column(rows, "1", "temp_c") == [47.0, 47.0, 48.0]
    assert reader.stats.skipped == 0  # the process tables are not rows


def test_watch_nvidia_smi_with_terminal_escapes_cuda12_layout():
    rows, reader = _read(DATA / "smi_watch_h100.log")
    assert reader.stats.format == "nvidia-smi screens"
    assert [(r.gpu, r.t) for r in rows] == [
        ("0", 0.0),
        ("1", 0.0),
        ("0", 2.0),
        ("1", 2.0),
        ("0", 4.0),
        ("1", 4.0),
    ]
    assert {r.name for r in rows} == {"NVIDIA H100 80GB HBM3"}  # the name the TDP table knows
    assert _column(rows, "0", "util") == pytest.approx([0.97, 0.99, 1.0])
    assert _column(rows, "1", "util") == pytest.approx([0.96, 0.0, None])  # [N/A]
    assert _column(rows, "0", "power_w") == [612.0, 633.0, 640.0]
    assert _column(rows, "1", "power_w") == [598.0, 121.0, None]  # N/A
    assert _column(rows, "1", "power_limit_w") == [700.0] * 3
    assert _column(rows, "0", "mem_total_bytes") == [81559 * MIB] * 3
    assert reader.stats.first_timestamp == T0 and reader.stats.skipped == 0


def test_a_screen_without_its_date_is_placed_by_period(tmp_path):
    lines = (DATA / "smi_loop_a5000.log").read_text().splitlines(keepends=True)
    path = tmp_path / "undated.log"
    path.write_text("".join(line for line in lines if find_ctime(line) is None))
    rows, reader = _read(path, period=5.0)
    assert [r.t for r in rows] == [0.0, 0.0, 5.0, 5.0, 10.0, 10.0] and reader.stats.period == 5.0


# ---- nvidia-smi dmon ---------------------------------------------------------------------------------


def test_dmon_with_date_and_time_columns():
    rows, reader = _read(DATA / "dmon_dt_h100.log")
    assert reader.stats.format == "nvidia-smi dmon" and reader.stats.period is None
    assert reader.stats.first_timestamp == T0 and reader.stats.rows == 8  # the repeated header is no row
    assert [r.t for r in rows if r.gpu == "0"] == [0.0, 1.0, 2.0, 3.0]
    assert _column(rows, "0", "util") == pytest.approx([0.97, 0.98, 0.99, 0.98])  # sm
    assert _column(rows, "1", "mem_util") == pytest.approx([0.44, 0.0, 0.0, 0.0])  # mem
    assert _column(rows, "1", "power_w") == [598.0, 140.0, 138.0, None]  # pwr; "-" is missing
    assert _column(rows, "0", "temp_c") == [61.0, 61.0, 62.0, 62.0]  # gtemp
    assert _column(rows, "0", "temp_mem_c") == [70.0, 70.0, 71.0, 71.0]  # mtemp
    assert _column(rows, "0", "sm_clock_hz") == [1.98e9, 1.98e9, 1.98e9, 1.965e9]  # pclk
    assert reader.stats.unknown_columns == [] and reader.stats.skipped == 0


def test_dmon_without_time_columns_all_metric_groups():
    rows, reader = _read(DATA / "dmon_pucvmet_a100.log")
    assert reader.stats.format == "nvidia-smi dmon" and reader.stats.period == 1.0  # dmon -d's default
    assert [(r.gpu, r.t) for r in rows] == [
        ("0", 0.0),
        ("1", 0.0),
        ("0", 1.0),
        ("1", 1.0),
        ("0", 2.0),
        ("1", 2.0),
    ]
    assert _column(rows, "0", "mem_used_bytes") == [61234 * MIB, 61234 * MIB, 61240 * MIB]  # fb
    assert _column(rows, "0", "pcie_rx_bps") == [412 * MIB, 398 * MIB, 405 * MIB]  # rxpci
    assert _column(rows, "1", "pcie_tx_bps") == [None, 1 * MIB, 1 * MIB]
    assert _column(rows, "0", "util") == pytest.approx([0.92, 0.95, 0.91])
    placed, _ = _read(DATA / "dmon_pucvmet_a100.log", period=2.0, start=T0)
    assert [r.t for r in placed if r.gpu == "0"] == [0.0, 2.0, 4.0]
    assert _read(DATA / "dmon_pucvmet_a100.log", period=2.0, start=T0)[1].stats.first_timestamp == T0


def test_dmon_time_only_takes_the_date_of_start_and_passes_midnight(tmp_path):
    path = tmp_path / "dmon.log"
    path.write_text(
        "#Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk\n"
        "#HH:MM:SS    Idx      W      C      C      %      %      %      %    MHz    MHz\n"
        " 23:59:59      0     80     40      -     50     10      0      0   5001   1800\n"
        " 00:00:00      0     81     40      -     51     10      0      0   5001   1800\n"
        " 00:00:01      0     82     40      -     52     10      0      0   5001   1800\n"
    )
    rows, reader = _read(path, start=T0)
    midnight = T0 - T0 % 86400
    assert reader.stats.first_timestamp == midnight + 86399 and [r.t for r in rows] == [0.0, 1.0, 2.0]
    assert rows[0].point.temp_mem_c is None and reader.stats.gap_count == 0


def test_dmon_csv_output_and_unknown_columns(tmp_path):
    path = tmp_path / "dmon.csv"
    path.write_text(
        "#gpu, pwr, gtemp, sm, mem, newcol\n#Idx, W, C, %, %, x\n"
        "0, 100, 50, 90, 30, 1\n1, 101, 51, 91, 31, 1\n"
    )
    rows, reader = _read(path)
    assert reader.stats.format == "nvidia-smi dmon" and [r.gpu for r in rows] == ["0", "1"]
    assert rows[1].point.util == pytest.approx(0.91) and reader.stats.unknown_columns == ["newcol"]


# ---- gpustat -----------------------------------------------------------------------------------------


def test_gpustat_with_header_and_power():
    rows, reader = _read(DATA / "gpustat_v100.log")
    assert reader.stats.format == "gpustat" and reader.stats.period is None
    assert [(r.gpu, r.t) for r in rows] == [
        ("0", 0.0),
        ("1", 0.0),
        ("0", 2.0),
        ("1", 2.0),
        ("0", 4.0),
        ("1", 4.0),
    ]
    assert {r.name for r in rows} == {"Tesla V100-SXM2-32GB"} and reader.stats.first_timestamp == T0
    assert _column(rows, "1", "util") == pytest.approx([0.95, 0.12, 0.0])
    assert _column(rows, "0", "power_w") == [281.0, 286.0, 290.0]
    assert _column(rows, "0", "power_limit_w") == [300.0] * 3
    assert _column(rows, "0", "temp_c") == [61.0, 62.0, 62.0]
    assert _column(rows, "0", "mem_used_bytes") == [30210 * MIB, 30212 * MIB, 30212 * MIB]
    assert _column(rows, "1", "mem_total_bytes") == [32768 * MIB] * 3


def test_gpustat_without_header_in_colour_is_placed_by_period_and_start():
    rows, reader = _read(
        DATA / "gpustat_4090_color.log", period=2.0, start=parse_time("2026-11-24T10:00:00Z")
    )
    assert reader.stats.format == "gpustat" and reader.stats.period == 2.0
    assert reader.stats.first_timestamp == T0 and len(rows) == 12 and reader.stats.skipped == 0
    assert [r.t for r in rows if r.gpu == "2"] == [0.0, 2.0, 4.0, 6.0]
    assert {r.name for r in rows} == {"NVIDIA GeForce RTX 4090"}  # the colour escapes are gone
    assert _column(rows, "2", "util") == [0.0, 0.0, None, 0.0]  # ?? is missing
    assert _column(rows, "0", "temp_c") == [45.0, 46.0, 46.0, 47.0]  # 'C
    assert _column(rows, "1", "mem_used_bytes") == [8120 * MIB, 8120 * MIB, 8122 * MIB, 8122 * MIB]
    assert rows[0].point.power_w is None  # no --show-power
    default, reader = _read(DATA / "gpustat_4090_color.log")
    assert reader.stats.period == 1.0 and [r.t for r in default if r.gpu == "0"] == [0.0, 1.0, 2.0, 3.0]


def test_gpustat_fan_codec_and_draw_only(tmp_path):
    path = tmp_path / "g.log"
    path.write_text(
        "[0] NVIDIA A10G | 51°C,  35 %,  88 % (E:   0 %  D:   0 %),  151 W | 20000 / 23028 MB | bob(19990M)\n"
        "[0] NVIDIA A10G | 52°C,  36 %,  89 % (E:   0 %  D:   0 %),  ?? W | 20000 / 23028 MB | bob(19990M)\n"
    )
    rows, _ = _read(path)
    assert rows[0].point.util == pytest.approx(0.88)  # the fan's share comes first
    assert (rows[0].point.power_w, rows[0].point.power_limit_w, rows[1].point.power_w) == (151.0, None, None)
    assert [r.t for r in rows] == [0.0, 1.0]


# ---- dcgmi dmon --------------------------------------------------------------------------------------


def test_dcgmi_dmon_fields():
    rows, reader = _read(DATA / "dcgmi_dmon_h100.log")
    assert reader.stats.format == "dcgmi dmon" and reader.stats.period == 1.0  # dcgmi -d 1000
    assert [(r.gpu, r.t) for r in rows] == [
        ("0", 0.0),
        ("1", 0.0),
        ("0", 1.0),
        ("1", 1.0),
        ("0", 2.0),
        ("1", 2.0),
    ]
    assert _column(rows, "0", "util") == pytest.approx([0.97, 0.97, 0.99])  # GPUTL
    assert _column(rows, "0", "mem_util") == pytest.approx([0.41, 0.42, 0.43])  # MCUTL
    assert _column(rows, "1", "power_w") == [598.117, 121.88, 120.445]  # POWER
    assert _column(rows, "0", "mem_used_bytes") == [61234 * MIB, 61234 * MIB, 61236 * MIB]  # FBUSD
    assert _column(rows, "0", "mem_total_bytes") == [81559 * MIB] * 3  # FBTTL
    assert _column(rows, "0", "temp_c") == [61.0, 62.0, 62.0]  # TMPTR
    assert _column(rows, "0", "sm_clock_hz") == [1.98e9, 1.98e9, 1.965e9]  # SMCLK
    assert _column(rows, "0", "sm_active") == [0.853, 0.848, 0.866]  # SMACT -> gpm.sm_active
    assert _column(rows, "1", "tensor_active") == [0.405, 0.0, 0.0]  # TENSO -> gpm.tensor_active
    assert _column(rows, "0", "pcie_tx_bps") == [104857600.0, 103809024.0, 104857600.0]  # PCITX, bytes/s
    assert _column(rows, "0", "pcie_rx_bps")[0] == 1048576000.0  # PCIRX
    assert _column(rows, "0", "nvlink_tx_bps")[0] == 26214400000.0  # NVLTX
    assert _column(rows, "1", "nvlink_rx_bps") == [25690112000.0, None, 0.0]  # NVLRX, N/A
    assert reader.stats.unknown_columns == [] and reader.stats.skipped == 0


def test_dcgmi_name_with_blanks_free_memory_graphics_activity_and_other_entities(tmp_path):
    path = tmp_path / "dcgm.log"
    path.write_text(
        "# Entity  DVNAM                  GRACT  FBUSD  FBFRE  EPLMT    DRAMA\n"
        "      Id                                              W\n"
        "    GPU 0  NVIDIA H100 80GB HBM3  0.912  60000  21559  700.000  0.4\n"
        "  GPU-I 1  N/A                    0.500  100    200    N/A      0.1\n"
        "    GPU 1  NVIDIA H100 80GB HBM3  0.101  50000  31559  650.000  0.0\n"
    )
    rows, reader = _read(path)
    assert [(r.gpu, r.name) for r in rows] == [("0", "NVIDIA H100 80GB HBM3"), ("1", "NVIDIA H100 80GB HBM3")]
    assert rows[0].point.util == 0.912  # GRACT stands for GPUTL, which is not watched
    assert rows[0].point.mem_total_bytes == 81559 * MIB  # FBUSD + FBFRE
    assert rows[1].point.power_limit_w == 650.0 and reader.stats.unknown_columns == ["DRAMA"]


# ---- a poller's CSV ----------------------------------------------------------------------------------


def test_poller_csv_with_times_and_fractions():
    rows, reader = _read(DATA / "poller_fraction.csv")
    assert reader.stats.format == plain_csv.NAME and reader.stats.period is None
    assert [(r.gpu, r.t) for r in rows] == [
        ("0", 0.0),
        ("1", 0.0),
        ("0", 5.0),
        ("1", 5.0),
        ("0", 10.0),
        ("1", 10.0),
    ]
    assert reader.stats.first_timestamp == T0 and {r.name for r in rows} == {"NVIDIA H100 80GB HBM3"}
    assert _column(rows, "0", "util") == [0.97, 0.98, 0.99]  # values 0-1 with fractions: a fraction
    assert _column(rows, "1", "power_w") == [180.2, 152.9, 121.3]
    assert _column(rows, "0", "mem_used_bytes") == [61234 * MIB, 61234 * MIB, 61236 * MIB]
    assert _column(rows, "1", "mem_total_bytes") == [81559 * MIB] * 3
    assert _column(rows, "1", "temp_c") == [48.0, 47.0, 46.0]


def test_poller_csv_without_times_semicolons_percent_and_device_names():
    rows, reader = _read(DATA / "poller_no_time.csv")
    assert reader.stats.format == plain_csv.NAME and reader.stats.period == 1.0
    assert [(r.gpu, r.t) for r in rows] == [
        ("0", 0.0),
        ("1", 0.0),
        ("0", 1.0),
        ("1", 1.0),
        ("0", 2.0),
        ("1", 2.0),
    ]
    assert _column(rows, "0", "util") == pytest.approx([0.93, 0.95, 0.96])  # "GPU Util (%)"
    assert _column(rows, "1", "power_w") == [281.0, 72.4, 70.9]
    assert _column(rows, "0", "mem_used_bytes") == [20480 * MIB, 20480 * MIB, 20482 * MIB]


@pytest.mark.parametrize(
    ("header", "values", "expected"),
    [
        ("util", ["0.5", "0.97", "1"], [0.5, 0.97, 1.0]),  # fractions
        ("util", ["50", "97", "100"], [0.5, 0.97, 1.0]),  # percent
        ("util", ["0", "1", "0"], [0.0, 0.01, 0.0]),  # whole numbers up to 1: an idle GPU's percent
        ("util_pct", ["0.5", "0.9", "1"], [0.005, 0.009, 0.01]),  # the header says percent
        ("utilization [%]", ["0.5", "0.9", "1"], [0.005, 0.009, 0.01]),
        ("util_ratio", ["1", "0", "1"], [1.0, 0.0, 1.0]),  # the header says fraction
        ("gpu_util", ["50 %", "0.5", "1"], [0.5, 0.5, 1.0]),  # a cell's own % wins
    ],
)
def test_poller_csv_utilization_percent_or_fraction(tmp_path, header, values, expected):
    path = tmp_path / "p.csv"
    path.write_text(f"ts,{header}\n" + "".join(f"{i},{v}\n" for i, v in enumerate(values)))
    rows, _ = _read(path)
    assert [r.point.util for r in rows] == pytest.approx(expected)


def test_poller_csv_unix_milliseconds_and_round_robin_without_gpu_column(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(
        "timestamp_ms,util,power\n"
        "1795514400000,90,300\n1795514400000,10,100\n1795514400500,91,301\n1795514400500,11,101\n"
    )
    rows, reader = _read(path)
    assert [(r.gpu, r.t) for r in rows] == [("0", 0.0), ("1", 0.0), ("0", 0.5), ("1", 0.5)]
    assert reader.stats.first_timestamp == T0 and rows[2].point.power_w == 301.0
    assert [r.gpu for r in _read(path, gpus=1)[0]] == ["0"] * 4  # --gpus says how many


def test_poller_csv_gpu_ids_that_are_not_indexes(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(
        "time,device,util\n"
        "2026-11-24 10:00:00,GPU-8c1d2e3f-aaaa,50\n"
        "2026-11-24 10:00:00,00000000:2A:00.0,60\n"
        "time,device,util\n"  # the poller restarted: its header again
        "2026-11-24 10:00:01,GPU-8c1d2e3f-aaaa,70\n"
        "2026-11-24 10:00:01,00000000:2A:00.0,80\n"
    )
    rows, reader = _read(path)
    assert [(r.gpu, r.t) for r in rows] == [("0", 0.0), ("1", 0.0), ("0", 1.0), ("1", 1.0)]
    assert reader.stats.skipped == 0


# ---- detection ---------------------------------------------------------------------------------------


# sample -> (its reader, the period placing its samples: None where the log has times)
SAMPLES = {
    "smi_loop_a5000.log": (smi_screen, None),
    "smi_watch_h100.log": (smi_screen, None),
    "dmon_dt_h100.log": (dmon, None),
    "dmon_pucvmet_a100.log": (dmon, 1.0),
    "gpustat_v100.log": (gpustat, None),
    "gpustat_4090_color.log": (gpustat, 1.0),
    "dcgmi_dmon_h100.log": (dcgmi, 1.0),
    "poller_fraction.csv": (plain_csv, None),
    "poller_no_time.csv": (plain_csv, 1.0),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_format_comes_from_the_content_not_the_name(tmp_path, name):
    source = DATA / name
    expected, _ = _read(source)
    renamed = tmp_path / "trace.csv"  # every sample named like nvidia-smi's CSV
    shutil.copy(source, renamed)
    packed = tmp_path / "log.gz"
    packed.write_bytes(gzip.compress(source.read_bytes()))
    for path in (renamed, packed):
        rows, reader = _read(path)
        assert reader.stats.format == SAMPLES[name][0].NAME
        assert [(r.line, r.gpu, r.t, r.point, r.name) for r in rows] == [
            (r.line, r.gpu, r.t, r.point, r.name) for r in expected
        ]


def test_nvidia_smi_csv_is_tried_first(tmp_path):
    path = tmp_path / "t.log"
    path.write_text("timestamp, index, utilization.gpu [%]\n2026/11/24 10:00:00.000, 0, 50 %\n")
    rows, reader = _read(path)
    assert reader.stats.format == traceformats.NVIDIA_SMI_CSV and rows[0].point.util == 0.5
    # without nvidia-smi's timestamp column, its column names still read as a poller's
    path.write_text("time, gpu, utilization.gpu [%]\n2026-11-24T10:00:00, 0, 50 %\n")
    rows, reader = _read(path)
    assert reader.stats.format == plain_csv.NAME and rows[0].point.util == 0.5


def test_the_examples_read_exactly_as_before():
    """A real nvidia-smi trace from examples/traces reads to the same rows as before the other formats
    (fingerprint taken with the CSV-only reader)."""
    rows, reader = _read(EXAMPLES / "real" / "r06_rtx3060ti_cpu_bound.csv.gz")

    def key(row: TraceRow) -> tuple:
        p = row.point
        return (
            row.line,
            row.gpu,
            round(row.t, 3),
            p.util,
            p.power_w,
            p.power_limit_w,
            p.mem_used_bytes,
            p.mem_total_bytes,
            p.temp_c,
            row.segment,
        )

    assert reader.stats.format == traceformats.NVIDIA_SMI_CSV and len(rows) == 4979
    assert (reader.stats.first_timestamp, reader.stats.last_timestamp) == (1767225600.5, 1767233455.1)
    assert key(rows[0]) == (2, "0", 0.0, 0.09, 71.7, 200.0, 1427111936.0, 8589934592.0, 45.0, 0)
    assert key(rows[-1]) == (4980, "0", 7854.6, 0.0, 68.1, 200.0, 1845493760.0, 8589934592.0, 46.0, 0)
    digest = hashlib.sha256(repr([key(r) for r in rows]).encode()).hexdigest()
    assert digest == "c3379b1e5c30e9482a9465f016488a97aeb1eb8ac8e841d79a81f1823a6896f8"
    assert reader.stats.skipped == 0 and reader.stats.period is None


def test_unknown_content_is_one_line_naming_the_formats(tmp_path):
    path = tmp_path / "notes.log"
    path.write_text("training started\nloss 2.31 step 10\n")
    with pytest.raises(TraceError, match="not a log replay reads"):
        list(TraceReader(path))
    result = run_replay(path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-bottleneck-exporter: ")
    for name in traceformats.names():
        assert name in lines[0]


def test_times_from_the_tools():
    assert find_ctime("Every 2.0s: nvidia-smi   host: Tue Nov 24 10:00:00 2026 in 0.1s (0)") == T0
    assert find_ctime("Tue Nov  3 09:05:07 2026") == parse_time("2026-11-03T09:05:07Z")
    assert find_ctime("Tue Feb 30 10:00:00 2026") is None
    assert parse_time("Tue Nov 24 10:00:00 2026") == parse_time("2026/11/24 10:00:00") == T0
    with pytest.raises(ValueError):
        parse_time("yesterday")
    assert strip_ansi("\x1b[1m\x1b[36m[0]\x1b(B\x1b[m x\x1b]0;title\x07y\x0f") == "[0] xy"


# ---- the command -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_replay_command_reads_each_format(name):
    result = run_replay(DATA / name, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    module, period = SAMPLES[name]
    assert summary["event"] == "summary" and summary["format"] == module.NAME
    assert summary["rows"] >= 6 and summary["gpus"] >= 2 and summary["skipped_rows"] == 0
    assert summary["period"] == period and summary["seconds"] > 0
    assert set(summary["ledger"]) == {str(g) for g in range(summary["gpus"])}
    human = run_replay(DATA / name)
    assert human.returncode == 0 and f"rows read as {module.NAME}" in human.stdout


def test_replay_period_and_start_place_a_log_without_times():
    result = run_replay(
        DATA / "dcgmi_dmon_h100.log", "--json", "--period", "2.5", "--start", "2026-11-24T10:00:00"
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["period"] == 2.5 and summary["seconds"] == 5.0
    human = run_replay(DATA / "dcgmi_dmon_h100.log", "--start", "Tue Nov 24 10:00:00 2026")
    assert "samples 1 s apart, --period), from 2026-11-24 10:00:00" in human.stdout
    timed = run_replay(DATA / "gpustat_v100.log", "--json", "--period", "7")  # a log with times ignores it
    assert json.loads(timed.stdout.splitlines()[-1])["seconds"] == 4.0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--period", "0"), "--period: must be a positive number of seconds, not '0'"),
        (("--period", "-1"), "--period: must be a positive number of seconds"),
        (("--period", "inf"), "--period: must be a finite number"),
        (("--period", "soon"), "--period: must be a number, not 'soon'"),
        (("--start", "yesterday"), "--start: 'yesterday' is not a time"),
        (("--start", "-5"), "--start: '-5' is not a time"),
        (("--gpus", "3"), "the log has 2 GPUs (its dcgmi dmon rows say so), not the 3 of --gpus"),
    ],
)
def test_replay_period_start_and_gpus_mistakes_are_one_line(args, said):
    result = run_replay(DATA / "dcgmi_dmon_h100.log", *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in result.stderr


def test_replay_help_lists_the_formats():
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0
    for name in traceformats.names():
        assert name in result.stdout
    for module in traceformats.READERS:
        assert module.COMMAND in result.stdout
    assert "--period SECONDS" in result.stdout and "--start TIME" in result.stdout
