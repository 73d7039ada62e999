"""``replay --report``: one self-contained HTML page, rendered by a real headless browser."""

from __future__ import annotations

import gzip
import json
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from exporter.analysis.kinds import KINDS
from exporter.analysis.ledger import STATES
from exporter.offline.replay import Episode, ReplayResult, TickStates, replay, summary
from exporter.offline.report import (
    KIND_COLOURS,
    MAX_POINTS,
    STATE_COLOURS,
    ReportData,
    alike_groups,
    gpu_ranges,
    ledger_runs,
    page_data,
    reduce_series,
    render,
)
from exporter.offline.traces import ReadStats
from exporter.policy.thresholds import REPORT_ALIKE_SHARE
from scripts.stack import HEADLESS_CHROMIUM
from tests.conftest import EXAMPLES, REPO, require_tool

STARVATION = EXAMPLES / "starvation_h100x8.csv.gz"


# ---- the pieces ---------------------------------------------------------------------------------


def test_every_state_and_kind_has_a_colour():
    assert set(STATE_COLOURS) == set(STATES)
    assert set(KIND_COLOURS) == set(KINDS)
    assert all(re.fullmatch(r"#[0-9A-Fa-f]{6}", c) for c in [*STATE_COLOURS.values(), *KIND_COLOURS.values()])
    assert len(set(STATE_COLOURS.values())) == len(STATES)  # one state, one colour


def test_short_series_are_kept_as_they_are():
    rows = [(float(t), (float(t), None)) for t in range(10)]
    xs, series = reduce_series(rows, 10.0)
    assert xs == [float(t) for t in range(10)]
    assert series == [[float(t) for t in range(10)], [None] * 10]


def test_long_series_keep_each_buckets_minimum_and_maximum_in_order():
    # a starving loader's rhythm at 10 Hz for 15 minutes: 100 -> 0 -> 100
    rows = [(t / 10, (100.0 if (t // 20) % 2 == 0 else 0.0,)) for t in range(9000)]
    xs, (util,) = reduce_series(rows, 900.0, max_points=200)
    assert len(xs) == len(util) == 200
    assert xs == sorted(xs)
    assert set(util) == {0.0, 100.0}  # the rhythm survives; a mean would have flattened it
    assert util.count(0.0) > 50 and util.count(100.0) > 50


def test_ledger_runs_merge_seconds_and_reduce_long_traces():
    ticks = [(1.0, 0), (2.0, 0), (3.0, 1), (5.0, 1)]  # t=4 had no sample
    assert ledger_runs(ticks) == [[0.0, 2.0, 0], [2.0, 3.0, 1], [4.0, 5.0, 1]]
    long = [(float(t), 0 if t <= 3000 else 2) for t in range(1, 6001)]
    runs = ledger_runs(long, max_buckets=100)
    assert [r[2] for r in runs] == [0, 2]
    assert runs[0][0] == 0.0 and runs[-1][1] == pytest.approx(6000.0)


class _Ledger:
    def __init__(self) -> None:
        self.totals = dict.fromkeys(STATES, 0.0)


class _Analyzer:
    def __init__(self) -> None:
        self.ledgers = {"0": _Ledger()}

    def gpus(self) -> list[str]:
        return list(self.ledgers)

    def ledger(self, gpu: str) -> _Ledger:
        return self.ledgers[gpu]


def test_held_back_seconds_get_the_state_the_ledger_gives_them_later():
    analyzer, seen = _Analyzer(), []
    ticks = TickStates(analyzer, 1.0, lambda t, gpu, state: seen.append((t, state)))  # type: ignore[arg-type]
    totals = analyzer.ledger("0").totals
    totals["computing"] += 1.0
    ticks.after(1.0)
    for t in (2.0, 3.0, 4.0):  # a stopped run: the ledger holds its seconds back
        ticks.after(t)
    totals["checkpoint"] += 4.0  # ...then judges it, with the second of this tick
    ticks.after(5.0)
    ticks.after(6.0)  # no sample: never committed
    totals["computing"] += 1.0
    ticks.after(7.0)
    ticks.after(8.0)  # a short stopped run...
    totals["input_wait"] += 1.0  # ...committed by the flush at the end of the trace
    ticks.after(None)
    assert sorted(seen) == [
        (1.0, "computing"),
        (2.0, "checkpoint"),
        (3.0, "checkpoint"),
        (4.0, "checkpoint"),
        (5.0, "checkpoint"),
        (7.0, "computing"),
        (8.0, "input_wait"),
    ]


def test_the_report_hooks_only_observe(tmp_path: Path):
    """The first two minutes of a trace: the same summary with and without collecting a report, and one
    ledger state per GPU per evaluated second that adds up to the ledger."""
    with gzip.open(STARVATION, "rt") as f:
        lines = f.readlines()[: 1 + 8 * 5 * 120]
    trace = tmp_path / "short.csv"
    trace.write_text("".join(lines))
    plain = summary(replay(trace))
    data = ReportData()
    result = replay(trace, **data.hooks())  # type: ignore[arg-type]
    assert summary(result) == plain
    for gpu, states in result.ledger.items():
        ticks = data.gpus[gpu].ticks
        assert len({t for t, _ in ticks}) == len(ticks)
        assert len(ticks) == pytest.approx(sum(states.values()), abs=2)
        counted = {STATES[s]: sum(1 for _, i in ticks if i == s) for s in range(len(STATES))}
        for state, seconds in states.items():
            assert counted[state] == pytest.approx(seconds, abs=max(3, 0.1 * seconds))
    page = render(result, data)
    assert page.count('class="uplot"') == 0  # drawn by the script, not the server
    assert "GPU 7" in page


# ---- GPUs alike share a section ----------------------------------------------------------------


def test_gpu_ranges_read_as_a_person_writes_them():
    assert gpu_ranges(["5", "0", "1", "2", "3", "6", "7"]) == "0-3, 5-7"
    assert gpu_ranges(["0", "1", "3"]) == "0, 1, 3"
    assert gpu_ranges(["4"]) == "4"
    assert gpu_ranges(["10", "8", "9", "2"]) == "2, 8-10"


def _node(shares: dict[str, tuple[float, float]], names: dict[str, str] | None = None) -> tuple:
    """A replayed node: per GPU its (computing, comm_wait) shares of 1000 s; a report's data for each."""
    result = ReplayResult(path=Path("t.csv"), stats=ReadStats(gpus=list(shares)), seconds=1000.0)
    data = ReportData()
    for gpu, (computing, comm_wait) in shares.items():
        ledger = dict.fromkeys(STATES, 0.0)
        ledger.update(computing=1000 * computing, comm_wait=1000 * comm_wait)
        ledger["input_wait"] = 1000 - ledger["computing"] - ledger["comm_wait"]
        result.ledger[gpu] = ledger
        data._gpu(gpu).name = (names or {}).get(gpu, "NVIDIA H100 80GB HBM3")
        data._gpu(gpu).rows = [(float(t), (50.0,) * 6) for t in range(10)]
    return result, data


def test_gpus_alike_are_one_group_and_a_distinct_gpu_keeps_its_own():
    tolerance = REPORT_ALIKE_SHARE.value
    shares = {str(g): (0.66, 0.34) for g in range(8)}
    shares["1"] = (0.66 - tolerance, 0.34 + tolerance)  # at the bound: alike
    shares["3"] = (0.66, 0.0)  # the starved rank: 34 % input_wait
    shares["5"] = (0.66 + tolerance + 0.01, 0.34 - tolerance - 0.01)  # past the bound: apart
    result, data = _node(shares)
    assert alike_groups(result, data) == [["0", "1", "2", "4", "6", "7"], ["3"], ["5"]]
    # the same shares but another verdict, or another board: apart
    result, data = _node({str(g): (0.66, 0.34) for g in range(4)}, names={"2": "NVIDIA A100-SXM4-80GB"})
    result.episodes.append(Episode("1", "comm_bound", 10.0))
    assert alike_groups(result, data) == [["0", "3"], ["1"], ["2"]]
    result.episodes.append(Episode("0", "comm_bound", 20.0))  # the same kind (and cause) at another time
    assert alike_groups(result, data) == [["0", "1"], ["2"], ["3"]]
    result.episodes.append(Episode("3", "comm_bound", 20.0, cause="other"))  # another cause: apart
    assert alike_groups(result, data) == [["0", "1"], ["2"], ["3"]]


def test_the_page_has_a_chart_per_group_named_by_its_gpus():
    shares = {str(g): (0.66, 0.34) for g in range(8)}
    shares["4"] = (0.66, 0.0)
    result, data = _node(shares)
    sections = page_data(result, data)["gpus"]
    assert [(s["label"], s["gpus"]) for s in sections] == [  # type: ignore[index]
        ("GPUs 0-3, 5-7", ["0", "1", "2", "3", "5", "6", "7"]),
        ("GPU 4", ["4"]),
    ]
    assert "7 GPUs alike" in sections[0]["note"] and "the chart shows GPU 0" in sections[0]["note"]  # type: ignore[index]
    assert sections[1]["note"] == ""  # type: ignore[index]


# ---- the page, in a browser ---------------------------------------------------------------------


def _browser(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            chromium,
            *HEADLESS_CHROMIUM,
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1400,2400",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def png_summary(path: Path, every: int = 4) -> tuple[int, int, int]:
    """Width, height and the number of distinct colours (on every ``every``-th row) of an 8-bit RGB(A)
    PNG: enough to tell a rendered page from a blank one without an imaging library."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    assert header is not None
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    bpp = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(b"".join(idat)), width * bpp
    prev, colours = bytearray(stride), set()
    for y in range(height):
        start = y * (stride + 1)
        kind, row = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                row[i] = (row[i] + row[i - bpp]) & 255
        elif kind == 2:
            row = bytearray((a + b) & 255 for a, b in zip(row, prev, strict=True))
        elif kind == 3:
            for i in range(stride):
                row[i] = (row[i] + ((row[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif kind == 4:
            for i in range(stride):
                a, b = (row[i - bpp] if i >= bpp else 0), prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % every == 0:
            colours.update(bytes(row[i : i + bpp]) for i in range(0, stride, bpp))
        prev = row
    return width, height, len(colours)


@pytest.mark.slow
def test_replay_report_renders_offline_in_a_headless_browser(tmp_path: Path):
    chromium = require_tool("chromium")
    out = tmp_path / "out.html"
    run = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", str(STARVATION), "--report", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr
    assert "data_starvation" in run.stdout  # the summary is printed as without --report
    assert f"wrote {out}" in run.stderr

    page = out.read_text(encoding="utf-8")
    size = len(page.encode())
    assert 100_000 < size < 3_000_000, size  # 8 GPUs x 15 min x 5 Hz, reduced
    # self-contained: nothing fetched, the library inlined
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.I)
    assert not re.search(r"<script[^>]+src|<link[^>]+stylesheet|@import|url\(", page, re.I)
    assert "var uPlot=" in page
    assert page.count("<script") == 3  # the data, uPlot, the page script

    url = out.resolve().as_uri()
    dom = _browser(chromium, tmp_path / "profile-dom", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    html = dom.stdout
    # the seven ranks waiting for GPU 3 behave alike: one section; the starved GPU 3 one of its own
    assert 'data-rendered="2"' in html  # every section's chart drawn
    charts = re.findall(r'<div class="uplot[^"]*".*?</canvas>', html, re.S)
    assert len(charts) == 2, len(charts)
    assert html.count('class="ledger-band"') == 2
    titles = re.findall(r'<div class="gpu" id="gpu-(\d+)"><h3>([^<]*)</h3>', html)
    board = " \u2014 NVIDIA H100 80GB HBM3"
    assert titles == [("0", "GPUs 0-2, 4-7" + board), ("3", "GPU 3" + board)]
    assert "7 GPUs alike" in html
    for gpu in range(8):  # every GPU's link in the summary leads to the section that shows it
        assert html.count(f'id="gpu-{gpu}"') == 1 and f'href="#gpu-{gpu}"' in html

    shot = tmp_path / "shot.png"
    pic = _browser(chromium, tmp_path / "profile-shot", f"--screenshot={shot}", url)
    assert pic.returncode == 0, pic.stderr[-2000:]
    assert not [line for line in pic.stderr.splitlines() if "Uncaught" in line]
    assert shot.stat().st_size > 50_000
    width, height, colours = png_summary(shot)
    assert (width, height) == (1400, 2400)
    assert colours > 500, colours  # lines, bands, text: far from a blank page


def test_the_page_budget_holds_for_a_long_trace():
    """An hour at 10 Hz on 8 GPUs reduces to MAX_POINTS per series per GPU."""
    from exporter.offline.replay import ReplayResult
    from exporter.offline.traces import ReadStats

    data = ReportData()
    for gpu in range(8):
        g = data._gpu(str(gpu))
        g.rows = [(t / 10, (50.0, 40.0, 60.0, 100.0, 70.0, 95.0)) for t in range(36000)]
        g.ticks = [(float(t), 0) for t in range(1, 3601)]
    result = ReplayResult(
        path=Path("long.csv"), stats=ReadStats(rows=288000, gpus=[str(g) for g in range(8)]), seconds=3600.0
    )
    page = render(result, data)
    assert len(page.encode()) < 3_000_000
    shown = json.loads(
        re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page).group(1)
    )
    for gpu in shown["gpus"]:
        assert len(gpu["x"]) == MAX_POINTS
        assert all(len(values) == MAX_POINTS and None not in values for _, values in gpu["series"])
        assert gpu["ledger"] == [[0.0, 3600.0, 0]]


def test_the_summary_says_what_each_gpu_was_judged_as_and_why():
    data = ReportData()
    result = replay(
        REPO / "examples" / "traces" / "workloads" / "w06_a100x4_pipeline_1s.csv.gz", **data.hooks()
    )
    page = render(result, data)
    assert page.count("judged as pipeline") == 4
    assert 'title="shape: 4 GPUs take turns' in page


def test_a_class_nothing_decided_reads_undecided_in_the_summary():
    data = ReportData()
    result = replay(
        REPO / "examples" / "traces" / "real3" / "t03_a6000x2_pointnet_healthy_gpu1_free.csv.gz",
        **data.hooks(),
    )
    page = render(result, data)
    assert "training (undecided)" in page and "judged as training" not in page


@pytest.mark.slow
def test_a_gpu_name_that_opens_a_comment_and_a_script_does_not_stop_the_charts(tmp_path: Path):
    """'<!--<script>' inside the page's data would put the HTML parser in its 'double escaped' state and
    no script would run: the data holds no '<' at all."""
    chromium = require_tool("chromium")
    trace = tmp_path / "x.csv"
    rows = "".join(
        f"2026/11/24 10:{i // 60:02d}:{i % 60:02d}.000, 0, <!--<script>, 90 %, 500.00 W\n" for i in range(120)
    )
    trace.write_text("timestamp, index, name, utilization.gpu [%], power.draw [W]\n" + rows)
    out = tmp_path / "x.html"
    run = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", str(trace), "--report", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr
    page = out.read_text(encoding="utf-8")
    data = page.split("<script", 2)[1]
    assert "<!--" not in data and "<script" not in data.split(">", 1)[1]
    dom = _browser(chromium, tmp_path / "profile-dom", "--dump-dom", out.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<canvas") >= 1 and 'data-rendered="1"' in dom.stdout
    assert "&lt;!--&lt;script&gt;" in dom.stdout  # the name shown as text
