"""replay --prometheus against a real Prometheus 2.42 (history loaded with ``promtool tsdb
create-blocks-from openmetrics``) and a real VictoriaMetrics (its /api/v1/import/prometheus), each
started once: the labelled example traces, rewritten as dcgm-exporter (both naming schemes) and
nvidia_gpu_exporter series at 15 s and 30 s, must give the verdicts the 1-second replay gives on every
kind the step can show, and no verdict the 1-second replay or the trace's labels do not."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.offline.promhistory import agreement, export, names
from exporter.offline.promhistory.client import PromClient
from exporter.offline.promhistory.history import Request, discover, replay_prometheus
from exporter.offline.promhistory.resolution import silenced
from exporter.offline.replay import replay
from exporter.offline.traces import TraceReader
from scripts.stack import free_port, start_victoria_metrics, wait_http
from tests.conftest import REPO, require_tool

TRACES = REPO / "examples" / "traces"
# (trace, scheme, step): each trace on its own node, one hour apart on the clock
CASES = (
    ("starvation_h100x8", names.DCGM_LEGACY, 15.0),
    ("hang_h100x8", names.DCGM_49, 15.0),
    ("idle_h100x8", names.NVIDIA_SMI, 30.0),
    ("thermal_h100x8", names.DCGM_LEGACY, 30.0),
    ("shm_h100x8", names.DCGM_49, 30.0),
    ("healthy_h100x8", names.DCGM_LEGACY, 15.0),
    # checkpoint stalls whose bursts of progress fall between the samples: never a hang at 15-30 s (their
    # starvation is not always seen at the step: only the false verdicts are checked, SHORT_OF_FINE)
    ("real/r02_h100x8_ckpt_stall", names.DCGM_49, 15.0),
    ("real/r03_h100x8_near_idle_stall", names.DCGM_LEGACY, 30.0),
    # dcgm-exporter's 30 s: a single starving rank of eight among its waiting peers, and eight ranks
    # starving on their host copies (STARVING)
    ("starvation_h100x8", names.DCGM_LEGACY, 30.0),
    ("offload_starvation_h100x8", names.DCGM_49, 30.0),
)
SHORT_OF_FINE = {"real/r03_h100x8_near_idle_stall"}
# at a 30 s step each starving GPU is one episode with one cause, its loss dated within three steps of
# the 1-second replay's onset (a rank's wait seen in one sample may be a pause: it is judged on the
# second, and its onset is read back from the ledger), and nothing else fires
STARVING = ("starvation_h100x8", "offload_starvation_h100x8")
ONSET_S = 90.0
# (trace, step) watched by this exporter itself: its raw readings, its ledger, verdicts and classes, on the
# nodes after CASES'. comm_bound cannot be recomputed at 30 s: read back, it is there as judged live
OWN_CASES = (("comm_bound_h100x8", 30.0), ("starvation_h100x8", 15.0), ("healthy_h100x8", 15.0))
BASE = float(int(time.time()) // 3600 * 3600 - 2 * 86400)  # two days ago, on the hour
SLOT_S = 3600.0


@dataclass
class Loaded:
    prometheus: str
    victoria: str


def _families(index: int, trace: str, scheme: str, step: float, prefix: str = "") -> list[export.Family]:
    rows = TraceReader(TRACES / f"{trace}.csv.gz")
    pod = ("ml", prefix + trace.rsplit("/", 1)[-1].replace("_", "-"))
    return export.families(rows, scheme, step, BASE + index * SLOT_S, node=f"node-{index}", pod=pod)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> Iterator[Loaded]:
    prometheus, promtool = require_tool("prometheus"), require_tool("promtool")
    victoria = require_tool("victoria-metrics")
    work = tmp_path_factory.mktemp("prom")
    fams = [f for i, case in enumerate(CASES) for f in _families(i, *case)]
    fams += [
        f for k, (trace, step) in enumerate(OWN_CASES) for f in _own_families(len(CASES) + k, trace, step)
    ]
    (work / "history.om").write_text("".join(export.openmetrics(_joined(fams))))
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(work / "history.om"), str(work / "tsdb")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    prom_port, vm_port = free_port(), free_port()
    procs = [
        subprocess.Popen(
            [
                prometheus,
                f"--storage.tsdb.path={work / 'tsdb'}",
                "--storage.tsdb.retention.time=10y",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                f"--config.file={_empty_config(work)}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(work / "prometheus.log").open("w"),
        ),
        start_victoria_metrics(victoria, work, vm_port),
    ]
    try:
        wait_http(f"http://127.0.0.1:{prom_port}/-/ready", 60, procs[0])
        wait_http(f"http://127.0.0.1:{vm_port}/health", 60, procs[1])
        body = "".join(export.prometheus_text(fams)).encode()
        urllib.request.urlopen(
            f"http://127.0.0.1:{vm_port}/api/v1/import/prometheus", body, timeout=60
        ).read()
        urllib.request.urlopen(f"http://127.0.0.1:{vm_port}/internal/force_flush", timeout=60).read()
        yield Loaded(f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{vm_port}")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


def _own_families(index: int, trace: str, step: float) -> list[export.Family]:
    pod = ("ml", "own-" + trace.replace("_", "-"))
    at, node = BASE + index * SLOT_S, f"node-{index}"
    raw = _families(index, trace, names.OWN, step, prefix="own-")
    return raw + export.own_analysis(TRACES / f"{trace}.csv.gz", step, at, node=node, pod=pod)


def _joined(fams: list[export.Family]) -> list[export.Family]:
    """One family per name (OpenMetrics wants each family's lines together)."""
    out: dict[str, export.Family] = {}
    for fam in fams:
        into = out.setdefault(fam.name, export.Family(fam.name, fam.kind))
        for labels, samples in fam.series.items():
            into.series.setdefault(labels, []).extend(samples)
    return list(out.values())


def _empty_config(work: Path) -> Path:
    path = work / "prometheus.yml"
    path.write_text("global:\n  scrape_interval: 15s\n")
    return path


def _window(index: int) -> tuple[float, float]:
    return BASE + index * SLOT_S - 60, BASE + (index + 1) * SLOT_S - 60


def _compared(trace: str, step: float, result) -> agreement.Compared:
    path = TRACES / f"{trace}.csv.gz"
    fine = agreement.kinds_of(replay(path, prices=None))
    coarse = agreement.kinds_of(result)
    return agreement.Compared(trace, step, fine, coarse, agreement.labelled(path), set(silenced(step)))


@pytest.mark.parametrize("server", ["prometheus", "victoria"])
@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{c[0]}-{c[2]:g}s" for c in CASES])
def test_the_coarse_verdicts_agree_with_the_one_second_replay(loaded, server, index):
    trace, scheme, step = CASES[index]
    start, end = _window(index)
    url = loaded.prometheus if server == "prometheus" else loaded.victoria
    # nvidia_gpu_exporter has no pod labels: its GPUs are selected by their node
    pod = trace.rsplit("/", 1)[-1].replace("_", "-")
    selector = f'instance="node-{index}:9835"' if scheme == names.NVIDIA_SMI else f'pod="{pod}"'
    result = replay_prometheus(Request(url, start, end, selector=selector), prices=None)
    assert result.stats.format == f"prometheus: {scheme}"
    compared = _compared(trace, step, result)
    if trace not in SHORT_OF_FINE:
        assert all(compared.agreed().values()), (compared.fine, compared.coarse)
    assert not compared.false(), compared.false()  # no false verdict
    assert set(silenced(step)) <= set(result.silent)
    assert sum(sum(states.values()) for states in result.ledger.values()) > 0


@pytest.mark.parametrize("trace", STARVING)
def test_a_30s_history_gives_each_starving_gpu_one_episode_one_cause_on_time(loaded, trace):
    index = CASES.index(next(c for c in CASES if c[0] == trace and c[2] == 30.0))
    start, end = _window(index)
    selector = f'pod="{trace.replace("_", "-")}"'
    result = replay_prometheus(Request(loaded.prometheus, start, end, selector=selector), prices=None)
    node = f"node-{index}"
    # the 1-second replay's episodes, one per starving GPU; the trace's clock starts at the window's
    # start plus 60 s (see _window)
    fine = {(f"{node}/{e.gpu}", e.kind): e for e in replay(TRACES / f"{trace}.csv.gz", prices=None).episodes}
    assert {kind for _, kind in fine} == {"data_starvation"}
    got: dict[tuple[str, str], list[object]] = {}
    for e in result.episodes:
        got.setdefault((e.gpu, e.kind), []).append(e)
    assert set(got) == set(fine), sorted(got)  # every starving GPU, the one rank of eight too; no other
    for key, episodes in got.items():
        assert len(episodes) == 1, (key, [(e.start, e.end, e.cause) for e in episodes])
        (e,) = episodes
        assert e.cause == fine[key].cause, (key, e.cause)
        assert abs(e.start - (fine[key].start + 60)) <= ONSET_S, (key, e.start, fine[key].start + 60)
    firing = [e for e in result.events if e.state == "firing"]
    assert len(firing) == len(fine)  # paged once per GPU: no fragment fired again


def test_the_cli_prints_the_summary_and_exits_2_on_a_selector_matching_nothing(loaded):
    start, end = _window(0)
    args = ["--from", str(start), "--to", str(end)]
    ok = _cli(["--prometheus", loaded.prometheus, *args, "--selector", 'pod="starvation-h100x8"'])
    assert ok.returncode == 0, ok.stderr
    assert "data_starvation" in ok.stdout and "job ml/starvation-h100x8" in ok.stdout
    assert "namespace ml:" in ok.stdout  # the roll-up by namespace
    none = _cli(["--prometheus", loaded.prometheus, *args, "--selector", 'namespace="nobody"'])
    assert none.returncode == 2
    assert none.stderr.count("\n") == 1 and "no GPU series" in none.stderr


def test_an_unreachable_url_and_an_http_error_are_one_line_each(loaded):
    down = _cli(["--prometheus", f"http://127.0.0.1:{free_port()}"])
    assert down.returncode == 2 and down.stderr.count("\n") == 1 and "cannot reach" in down.stderr
    missing = _cli(["--prometheus", loaded.prometheus + "/not-an-api"])
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "HTTP 404" in missing.stderr


def _cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "replay", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_victoria_metrics_export_reads_what_a_query_reads_and_prometheus_too(loaded):
    """VictoriaMetrics' /api/v1/export (raw samples as JSON lines), its query API and Prometheus' give
    one and the same history: the same rows, ledger and episodes."""
    index = 0  # the starved loader: verdicts, pods and a gap at its end
    start, end = _window(index)
    selector = 'pod="starvation-h100x8"'

    def read(url: str, export: bool | None) -> tuple[object, ...]:
        result = replay_prometheus(Request(url, start, end, selector=selector, export=export), prices=None)
        episodes = sorted((e.gpu, e.kind, e.start, e.end, e.cause) for e in result.episodes)
        read = result.fleet["read"] if result.fleet else {}
        return result.stats.rows, result.ledger, episodes, read.get("samples")

    for url, exports in ((loaded.victoria, True), (loaded.prometheus, False)):
        request = Request(url, start, end, selector=selector)
        assert discover(PromClient(url), request).export is exports
    exported = read(loaded.victoria, None)  # found by itself: VictoriaMetrics exports
    assert exported == read(loaded.victoria, False)
    # the node's rates are range queries, whose edges each server draws its own way: the samples read
    # differ by a few, what is judged does not
    assert exported[:3] == read(loaded.prometheus, None)[:3]
    assert exported[0] > 0 and exported[2]


def test_nodes_judged_in_parallel_give_what_one_process_gives_in_the_same_order(loaded):
    start, end = _window(0)[0], _window(2)[1]  # three nodes, one trace each

    def read(jobs: int) -> tuple[object, ...]:
        events: list[object] = []
        result = replay_prometheus(
            Request(loaded.prometheus, start, end, jobs=jobs), events.append, prices=None
        )
        episodes = [(e.gpu, e.kind, e.start, e.end, e.cause) for e in result.episodes]
        return events, episodes, result.ledger, result.job_ledger, result.fleet

    alone = read(1)
    assert len({gpu.split("/")[0] for gpu in alone[2]}) == 3 and alone[0]
    assert read(2) == alone


@pytest.mark.parametrize("server", ["prometheus", "victoria"])
@pytest.mark.parametrize("k", range(len(OWN_CASES)), ids=[f"{c[0]}-{c[1]:g}s" for c in OWN_CASES])
def test_this_exporters_own_ledger_and_verdicts_are_read_back_not_recomputed(loaded, server, k):
    """Where this exporter watched the GPUs, its ledger and verdicts (judged each second) are read as it
    exported them: the 1-second replay's episodes, every kind (comm_bound too, which no 30 s sample
    shows), its ledger within a scrape per series; --recompute judges the raw readings at the step."""
    trace, step = OWN_CASES[k]
    index = len(CASES) + k
    start, end = _window(index)
    url = loaded.prometheus if server == "prometheus" else loaded.victoria
    selector = f'pod="own-{trace.replace("_", "-")}"'
    result = replay_prometheus(Request(url, start, end, selector=selector), prices=None)
    assert result.fleet and result.fleet["read"]["read_back_nodes"] == 1
    ticks: dict[tuple[str, str], float] = {}  # the seconds the exported ledger counted (export.own_analysis)
    fine = replay(
        TRACES / f"{trace}.csv.gz",
        prices=None,
        on_tick=lambda t, gpu, state: ticks.__setitem__((gpu, state), ticks.get((gpu, state), 0.0) + 1),
    )
    node = f"node-{index}"
    # the trace's clock starts at the window's start plus 60 s (see _window)
    want = sorted((f"{node}/{e.gpu}", e.kind, e.cause, e.fired_at + 60, e.start + 60) for e in fine.episodes)
    got = sorted((e.gpu, e.kind, e.cause, e.fired_at, e.start) for e in result.episodes)
    assert [w[:3] for w in want] == [g[:3] for g in got]
    for w, g in zip(want, got, strict=True):  # each fires within a scrape of the live verdict...
        assert 0 <= g[3] - w[3] <= step + 1, (w, g)
        assert g[4] == pytest.approx(w[4], abs=0.01), (w, g)  # ...and begins when its live loss began
    assert not result.silent and not result.fleet["unjudged"]  # judged live: nothing unseen at the step
    for (gpu, state), seconds in ticks.items():  # the first sample of each series is its baseline
        assert result.ledger[f"{node}/{gpu}"][state] == pytest.approx(seconds, abs=step + 1), (gpu, state)
    assert {c for classes in result.classes.values() for c in classes} == {
        c for classes in fine.classes.values() for c in classes
    }
    again = replay_prometheus(Request(url, start, end, selector=selector, recompute=True), prices=None)
    assert again.fleet and again.fleet["read"]["read_back_nodes"] == 0
    assert set(silenced(step)) <= set(again.silent)


def test_the_cli_says_what_it_read_back_and_its_json_and_report_carry_it(loaded, tmp_path):
    k = 0  # comm_bound at 30 s: read back, as judged live
    start, end = _window(len(CASES) + k)
    args = ["--prometheus", loaded.victoria, "--from", str(start), "--to", str(end)]
    args += ["--selector", 'pod="own-comm-bound-h100x8"']
    text = _cli(args)
    assert text.returncode == 0, text.stderr
    assert "read back for 1 node(s)" in text.stdout and "comm_bound" in text.stdout
    assert "peak score" not in text.stdout  # not known from the verdict series
    lines = [json.loads(line) for line in _cli([*args, "--json"]).stdout.splitlines()]
    verdicts = [e for e in lines if e.get("event") == "verdict"]
    assert verdicts and all(e["score"] is None for e in verdicts)
    assert {e["kind"] for e in verdicts} == {"comm_bound"}
    (summary,) = [e for e in lines if e.get("event") == "summary"]
    assert summary["fleet"]["read"]["read_back_nodes"] == 1 and summary["silent"] == {}
    report = tmp_path / "report.html"
    assert _cli([*args, "--report", str(report)]).returncode == 0
    page = report.read_text()
    assert "comm_bound" in page and f"node-{len(CASES)}/0" in page
