"""replay --prometheus over the week a platform engineer reads on their first day, against a real
Prometheus (history loaded with ``promtool tsdb create-blocks-from openmetrics``):

- dcgm-exporter scraped the GPU Operator way (a ServiceMonitor with ``honorLabels: false``): every
  series' ``namespace``/``pod``/``container`` name the dcgm-exporter pod, the workload's arrive as
  ``exported_namespace``/``exported_pod``/``exported_container``;
- history with holes: nothing at the week's start or end (the pool is at zero now), a node gone two days
  before, an exporter down for minutes, a day-old job's four runs hours apart;
- read with ``--from -7d`` and no ``--step``.

The week must be read at its 15 s scrape interval, charged to the workload's namespace (never to
gpu-operator), its starved loader found, every episode line dated, the GPU's four episodes one line
after the roll-up, and the JSON and the report must say which labels named the workload."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from exporter.offline.promhistory import export, names
from exporter.offline.traces import TraceReader
from scripts.stack import free_port, wait_http
from tests.conftest import REPO, require_tool

TRACES = REPO / "examples" / "traces"
DAY = 86400.0
NOW = float(int(time.time()) // 60 * 60)
# the starved job ran four times, two hours apart, ending a day ago; the healthy node is gone since
# three days ago, and its exporter was down for ten minutes of its quarter hour
RUNS = [NOW - DAY - k * 7200.0 for k in (3, 2, 1, 0)]
GONE_AT = NOW - 3 * DAY
DOWN = (GONE_AT + 300.0, GONE_AT + 900.0)
OPERATOR = "gpu-operator"
DATE_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def _scraped_by_the_operator(fams: list[export.Family], node: str) -> list[export.Family]:
    """The series as a ServiceMonitor with honorLabels: false stores them: the target's labels win, the
    exporter's own namespace/pod/container are kept as exported_*."""
    target = {
        "namespace": OPERATOR,
        "pod": f"nvidia-dcgm-exporter-{node[-1]}x7k2p",
        "container": "nvidia-dcgm-exporter",
        "service": "nvidia-dcgm-exporter",
        "endpoint": "gpu-metrics",
        "job": "nvidia-dcgm-exporter",
    }
    out = []
    for fam in fams:
        if not fam.name.startswith("DCGM_"):
            out.append(fam)  # node_exporter's: scraped as it is
            continue
        renamed = export.Family(fam.name, fam.kind)
        for labels, samples in fam.series.items():
            own = dict(labels)
            moved = {f"exported_{k}": own.pop(k) for k in ("namespace", "pod", "container") if k in own}
            key = tuple(sorted({**own, **moved, **target}.items()))
            renamed.series.setdefault(key, []).extend(samples)
        out.append(renamed)
    return out


def _history() -> list[export.Family]:
    fams: list[export.Family] = []
    for at in RUNS:  # node-a: the starved loader's runs, in namespace ml
        rows = TraceReader(TRACES / "starvation_h100x8.csv.gz")
        made = export.families(rows, names.DCGM_LEGACY, 15.0, at, node="node-a", pod=("ml", "train-llm"))
        fams += _scraped_by_the_operator(made, "node-a")
    rows = TraceReader(TRACES / "healthy_h100x8.csv.gz")
    made = export.families(rows, names.DCGM_LEGACY, 15.0, GONE_AT, node="node-b")  # no pod held them
    for fam in made:  # its exporter down for ten minutes
        for labels, samples in fam.series.items():
            fam.series[labels] = [(t, v) for t, v in samples if not DOWN[0] <= t < DOWN[1]]
    return fams + _scraped_by_the_operator(made, "node-b")


def _joined(fams: list[export.Family]) -> list[export.Family]:
    out: dict[str, export.Family] = {}
    for fam in fams:
        into = out.setdefault(fam.name, export.Family(fam.name, fam.kind))
        for labels, samples in fam.series.items():
            into.series.setdefault(labels, []).extend(samples)
    return list(out.values())


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[str]:
    server, promtool = require_tool("prometheus"), require_tool("promtool")
    work = tmp_path_factory.mktemp("operator")
    (work / "history.om").write_text("".join(export.openmetrics(_joined(_history()))))
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(work / "history.om"), str(work / "tsdb")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (work / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            server,
            f"--storage.tsdb.path={work / 'tsdb'}",
            "--storage.tsdb.retention.time=10y",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--config.file={work / 'prometheus.yml'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(work / "prometheus.log").open("w"),
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/-/ready", 60, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "replay", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_week_scraped_the_gpu_operator_way_is_read_without_step_charged_and_dated(prometheus, tmp_path):
    report = tmp_path / "week.html"
    run = _replay("--prometheus", prometheus, "--from", "-7d", "--report", str(report))
    assert run.returncode == 0, run.stderr
    text = run.stdout
    assert "read at a 15 s step" in text  # no --step: found where the samples are
    assert f"{names.BY_EXPORTED}, on 8 series" in text  # node-a's GPUs; node-b's held no pod
    # the workload's namespace is charged; the exporter's pod is nobody's job
    assert "namespace ml:" in text and "job train-llm:" in text
    assert OPERATOR not in text.replace(names.BY_EXPORTED, "") and "x7k2p" not in text
    assert "namespace (no pod):" in text and "job node-b (no pod):" in text
    # the loss is found: the starved rank's four runs, one line with the count and the longest
    episodes = [line for line in text.splitlines() if "data_starvation" in line and line.startswith("  GPU ")]
    assert episodes, text
    assert any(re.search(r"GPU node-a/\S+: 4 data_starvation episodes from ", line) for line in episodes), (
        text
    )
    for line in episodes:  # every episode line is dated, no second count of the week
        assert DATE_TIME.search(line) and not re.search(r"\d+ s \(\d\d:", line), line
    # the roll-up comes before the GPUs' lines
    assert text.index("by namespace") < text.index(episodes[0])
    # the gaps, by date: the runs hours apart and the exporter down
    assert re.search(
        r"4 gap\(s\) .*: 600 s before \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, 1 h 45 min before ", text
    ), text
    assert not [line for line in text.splitlines() if "node-b/0:" in line and "episode" in line]
    page = report.read_text()
    assert "exported_namespace/exported_pod" in page and "all 4 episodes" in page
    assert '"dated":true' in page and page.index('id="namespaces"') < page.index("<h2>Per GPU</h2>")


def test_its_json_keeps_every_episode_dated_and_says_which_labels_named_the_workload(prometheus):
    run = _replay("--prometheus", prometheus, "--from", "-7d", "--json")
    assert run.returncode == 0, run.stderr
    (summary,) = [doc for doc in map(json.loads, run.stdout.splitlines()) if doc.get("event") == "summary"]
    assert summary["fleet"]["read"]["step_s"] == 15.0
    assert summary["fleet"]["read"]["workload_labels"] == {names.BY_EXPORTED: 8}
    assert set(summary["fleet"]["namespaces"]) == {"ml", "(no pod)"}
    starved = [v for v in summary["verdicts"] if v["kind"] == "data_starvation" and "node-a" in v["gpu"]]
    per_gpu: dict[str, int] = {}
    for v in starved:
        per_gpu[v["gpu"]] = per_gpu.get(v["gpu"], 0) + 1
        assert v["start_time"] and v["start_time"] > time.strftime("%Y-%m-%dT", time.gmtime(NOW - 2 * DAY))
    assert per_gpu and set(per_gpu.values()) == {4}, per_gpu  # each run's episode, kept one by one
    assert all(g["time"] for g in summary["gaps"])  # a history's gaps are told by time
